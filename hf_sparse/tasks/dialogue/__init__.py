"""Dialogue response selection and state tracking: the model (``configuration_dialogue``,
``modeling_dialogue``), Schema-Guided Dialogue preparation and collators (``data``), per-turn act F1
and intent accuracy (``metrics``), R@k / MRR (``ranking``), the inference pipelines (``pipeline``) and
the recipes' tasks (``task``)."""
