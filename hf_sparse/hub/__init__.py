"""Sharing models on the Hugging Face Hub, one module per job:

* :mod:`.cards`: :func:`render_model_card` / :func:`save_model_card` (model cards from the Jinja
  templates in ``model_cards/``; the only module that imports jinja2);
* :mod:`.bundle` (with :mod:`.flatten`): :func:`export_remote_code`, the flat, self-contained
  remote-code bundle ``save_pretrained`` writes next to the weights;
* :mod:`.push`: :func:`push_to_hub`, a thin wrapper on ``HfApi.create_repo`` / ``upload_folder``
  (allow-list, secret checks, "nothing local is lost, push later with ..."), and its command line
  ``python -m hf_sparse.hub FOLDER REPO_ID [--private] [--token-env NAME]``.

The names below are importable from ``hf_sparse.hub``; each loads its module on first use, so that
saving a model (which needs only :mod:`.bundle`) does not import the card or push code.
"""

from importlib import import_module

_EXPORTS = {
    "BUNDLE_MANIFEST": "bundle",
    "BundleError": "bundle",
    "export_remote_code": "bundle",
    "flat_module_name": "bundle",
    "CITATIONS": "cards",
    "SPARSE_TRANSFORMER_CARD": "cards",
    "TEMPLATE_DIR": "cards",
    "render_model_card": "cards",
    "save_model_card": "cards",
    "PUSH_COMMAND": "push",
    "HubAuthError": "push",
    "HubError": "push",
    "HubUnavailableError": "push",
    "main": "push",
    "parse_args": "push",
    "push_to_hub": "push",
    "stale_patterns": "push",
    "upload_file_list": "push",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted(_EXPORTS)
