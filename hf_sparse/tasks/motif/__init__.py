"""DNA motif detection: a Longformer/SparseTransformer that tags motif instances per base and scores the
sequence (``configuration_motif``, ``modeling_motif``), TF motifs and synthetic data (``data``), the
BIO collator (``collator``), span F1 (``metrics``), the ``dna-motif-detection`` pipeline
(``pipeline``) and the recipes' ``motif-detection`` task (``task``)."""
