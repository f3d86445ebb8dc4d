"""transformers' ``ModelTesterMixin`` and ``ConfigTester`` over every task model: DNA motif detection, dialogue,
extractive summarization (each over a SparseTransformer backbone with a window shorter than the test sequence,
the motif model over a Longformer backbone too) and the LED abstractive summarizer (LED's attention, and
hf-sparse encoder kernels). Tests that cannot apply are in ``not_applicable.py``."""

from __future__ import annotations

import copy
import unittest

import pytest
import torch

from hf_sparse.models.longformer_tasks import backbone_config
from hf_sparse.tasks.dialogue.configuration_dialogue import LongformerDialogueConfig, _check_formatter
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue
from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
from hf_sparse.tasks.motif.modeling_motif import LongformerForMotifDetection
from hf_sparse.tasks.summarization.configuration_summarization import (
    LEDSummarizationConfig,
    LongformerExtractiveSummarizationConfig,
)
from hf_sparse.tasks.summarization.modeling_summarization import (
    LEDForSummarization,
    LongformerForExtractiveSummarization,
)

from .harness import NameTablesMixin, add_config_tests, common_tests, ids_tensor

COMMON = common_tests()
ModelTesterMixin = COMMON.modeling.ModelTesterMixin
ConfigTester = COMMON.configuration.ConfigTester

SEQ_LENGTH = 24
WINDOW = 8  # |i - j| <= 4: shorter than the sequence
VOCAB = 40
SENT = 5  # sentence marker of the extractive summarizer
TURNS = (0, 7, 15)  # turn separators of the dialogue inputs


def sparse_backbone(**overrides) -> dict:
    bb = dict(
        model_type="sparse_transformer", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=64, pad_token_id=0,
        attention_pattern={"type": "longformer", "window": WINDOW},
    )  # fmt: skip
    bb.update(overrides)
    return backbone_config(bb).to_dict()  # as the task config stores it (defaults filled in)


def longformer_backbone() -> dict:
    return backbone_config(dict(
        model_type="longformer", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=66, pad_token_id=1, attention_window=WINDOW,
    )).to_dict()  # fmt: skip


class TaskModelTester:
    """Tiny config and random inputs of one task model (the interface ``ModelTesterMixin`` reads)."""

    batch_size = 3
    seq_length = SEQ_LENGTH
    is_training = True
    hidden_size = 32
    num_hidden_layers = 2
    num_attention_heads = 4
    vocab_size = VOCAB

    def __init__(self, parent, make_config, extra_inputs=None, labels=None):
        self.parent = parent
        self._make_config = make_config
        self._extra_inputs = extra_inputs or (lambda inputs: inputs)
        self._labels = labels or (lambda B: {})

    def get_config(self):
        return self._make_config()

    def inputs(self, generator):
        B, n = self.batch_size, self.seq_length
        input_ids = ids_tensor((B, n), VOCAB, generator).clamp(min=6)  # no special ids but the ones placed
        input_ids[:, 0] = 2
        attention_mask = torch.ones(B, n, dtype=torch.long)
        attention_mask[0, -4:] = 0  # one right-padded row
        return self._extra_inputs({"input_ids": input_ids, "attention_mask": attention_mask})

    def prepare_config_and_inputs_for_common(self):
        return self.get_config(), self.inputs(torch.Generator().manual_seed(0))

    def labels(self):
        return self._labels(self.batch_size)


def _motif_config(backbone):
    return LongformerMotifConfig, dict(
        backbone=backbone, motif_names=["CTCF", "SP1"], sequence_task="motif_presence", global_every=10
    )


def _motif_labels(B):
    return {"labels": torch.zeros(B, SEQ_LENGTH, dtype=torch.long), "sequence_labels": torch.ones(B, 2)}


def _dialogue_config():
    # as the config stores it (defaults filled in)
    formatter = _check_formatter({"max_length": 64, "speaker_tokens": {"USER": "[USR]", "SYSTEM": "[SYS]"}})
    return LongformerDialogueConfig, dict(
        backbone=sparse_backbone(), formatter=formatter, act_labels=["INFORM", "REQUEST", "OFFER"],
        intent_labels=["NONE", "FindRestaurants"], selection_head=False,
    )  # fmt: skip


def _dialogue_inputs(inputs):
    B = inputs["input_ids"].shape[0]
    return {**inputs, "turn_positions": torch.tensor([TURNS] * B)}


def _dialogue_labels(B):
    return {
        "act_labels": torch.zeros(B, len(TURNS), 3, dtype=torch.long),
        "intent_labels": torch.zeros(B, len(TURNS), dtype=torch.long),
    }


def _extractive_config(backbone):
    return LongformerExtractiveSummarizationConfig, dict(
        backbone=backbone, sentence_token_id=SENT, head_hidden_size=16
    )


def _extractive_inputs(inputs):
    inputs["input_ids"][:, [1, 8, 16]] = SENT  # three sentences per row
    return inputs


def _extractive_labels(B):
    return {"labels": torch.tensor([[1.0, 0.0, 0.0]] * B)}


def _led_config(**overrides):
    kw = dict(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, attention_window=WINDOW,
            max_encoder_position_embeddings=64, max_decoder_position_embeddings=64, pad_token_id=1,
            bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        )  # fmt: skip
    kw.update(overrides)
    return LEDSummarizationConfig, kw


class TaskModelTest(NameTablesMixin, ModelTesterMixin, unittest.TestCase):
    """Base of the task-model test classes (not collected itself: no ``Test`` prefix)."""

    __test__ = False
    make_config = None
    extra_inputs = None
    make_labels = None
    # generation (LEDForSummarization): transformers' GenerationTesterMixin is not in its sdist; the
    # summarization tests cover generate()
    all_generative_model_classes = ()
    test_resize_embeddings = True

    def setUp(self):
        super().setUp()
        cls = type(self)
        self.model_tester = TaskModelTester(self, cls.make_config, cls.extra_inputs, cls.make_labels)

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs = super()._prepare_for_class(inputs_dict, model_class, return_labels=False)
        if return_labels:
            inputs.update(self.model_tester.labels())
        return inputs


def _task_class(name, model_class, config, extra_inputs=None, make_labels=None, slow=False, **attrs):
    """A test class for ``model_class``; ``config`` is ``(config class, its arguments)``."""
    config_class, config_kwargs = config

    def make_config():
        return config_class(**copy.deepcopy(config_kwargs))

    cls = type(
        name,
        (TaskModelTest,),
        {
            "__test__": True,
            "all_model_classes": (model_class,),
            "make_config": staticmethod(make_config),
            "extra_inputs": staticmethod(extra_inputs) if extra_inputs else None,
            "make_labels": staticmethod(make_labels) if make_labels else None,
            **attrs,
        },
    )
    if slow:  # only in `make test-conformance` / `make test-slow`
        cls.pytestmark = [pytest.mark.slow]
    add_config_tests(
        cls,
        ConfigTester,
        lambda self: ConfigTester(self, config_class=config_class, **copy.deepcopy(config_kwargs)),
    )
    return cls


TestMotifSparse = _task_class(
    "TestMotifSparse", LongformerForMotifDetection, _motif_config(sparse_backbone()), None, _motif_labels
)
TestMotifLongformer = _task_class(
    "TestMotifLongformer",
    LongformerForMotifDetection,
    _motif_config(longformer_backbone()),
    None,
    _motif_labels,
    slow=True,
)
TestDialogueSparse = _task_class(
    "TestDialogueSparse", LongformerForDialogue, _dialogue_config(), _dialogue_inputs, _dialogue_labels
)
TestExtractiveSparse = _task_class(
    "TestExtractiveSparse",
    LongformerForExtractiveSummarization,
    _extractive_config(sparse_backbone()),
    _extractive_inputs,
    _extractive_labels,
)


def _led_labels(B):
    return {"labels": torch.full((B, SEQ_LENGTH), 7, dtype=torch.long)}


def _led_inputs(inputs):  # decoder inputs as long as the encoder's (the common tests assume one seq_length)
    return {**inputs, "decoder_input_ids": torch.full_like(inputs["input_ids"], 7)}


TestLEDSummarization = _task_class(
    "TestLEDSummarization",
    LEDForSummarization,
    _led_config(),
    _led_inputs,
    _led_labels,
    slow=True,
    is_encoder_decoder=True,
)
TestLEDSummarizationSparseEncoder = _task_class(
    "TestLEDSummarizationSparseEncoder",
    LEDForSummarization,
    _led_config(encoder_attention_pattern={"type": "longformer", "window": WINDOW}),
    _led_inputs,
    _led_labels,
    slow=True,
    is_encoder_decoder=True,
)
