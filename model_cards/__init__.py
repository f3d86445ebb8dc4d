"""The model card templates (``*.jinja``), installed as the package ``hf_sparse.model_cards`` (see setup.py)."""
