"""Offline metrics for the three task slices: summarization, DNA motifs, dialogue.

Everything runs without network access: ROUGE uses the ``rouge_score`` package directly (not
``evaluate.load``), sentences are split by a rule-based splitter (not nltk's punkt).
"""

from .classification import accuracy, auroc, multilabel_f1, per_class_f1, precision_recall_f1
from .dialogue import dialogue_act_f1, intent_accuracy
from .ranking import mrr, ranking_metrics, ranks, recall_at_k
from .rouge import ROUGE_TYPES, lsum_text, rouge, rouge_per_example, rouge_tokenize
from .sentences import sentence_spans, split_sentences
from .spans import per_base_f1, span_f1, span_overlap_f1, spans_from_bio
from .summarization import greedy_oracle, lead_k, oracle_labels, random_k, select_in_order

__all__ = [
    "ROUGE_TYPES",
    "accuracy",
    "auroc",
    "dialogue_act_f1",
    "greedy_oracle",
    "intent_accuracy",
    "lead_k",
    "lsum_text",
    "mrr",
    "multilabel_f1",
    "oracle_labels",
    "per_base_f1",
    "per_class_f1",
    "precision_recall_f1",
    "random_k",
    "ranking_metrics",
    "ranks",
    "recall_at_k",
    "rouge",
    "rouge_per_example",
    "rouge_tokenize",
    "select_in_order",
    "sentence_spans",
    "span_f1",
    "span_overlap_f1",
    "spans_from_bio",
    "split_sentences",
]
