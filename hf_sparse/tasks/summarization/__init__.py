"""Long-document summarization: the abstractive LED and extractive Longformer models
(``configuration_summarization``, ``modeling_summarization``), document preparation (``data``), the
sentence splitter (``sentences``), ROUGE (``rouge``), oracles and baselines (``metrics``), the
``long-document-summarization`` pipeline (``pipeline``) and the recipes' tasks (``task``)."""
