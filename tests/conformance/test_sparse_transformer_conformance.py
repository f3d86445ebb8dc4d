"""transformers' ``ModelTesterMixin`` and ``ConfigTester`` over every SparseTransformer head.

One test class per variant (:data:`VARIANTS`): encoder and decoder, a sliding window shorter than the test
sequence and the default pattern, on the ``auto`` and ``blocked`` backends. Tests that cannot apply are listed,
with the reason, in ``not_applicable.py`` (and skipped by this folder's ``conftest.py``).
"""

from __future__ import annotations

import unittest

import pytest
import torch

from hf_sparse.models.sparse_transformer import (
    SparseTransformerConfig,
    SparseTransformerForCausalLM,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)

from .harness import NameTablesMixin, add_config_tests, common_tests, ids_tensor

COMMON = common_tests()
ModelTesterMixin = COMMON.modeling.ModelTesterMixin
ConfigTester = COMMON.configuration.ConfigTester

MODEL_TYPE = SparseTransformerConfig.model_type
ENCODER_CLASSES = (
    SparseTransformerModel,
    SparseTransformerForMaskedLM,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
)
DECODER_CLASSES = (SparseTransformerModel, SparseTransformerForCausalLM)
NAME_TABLES = {
    "MODEL_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerModel"},
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerForMaskedLM"},
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerForCausalLM"},
    "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES": {
        MODEL_TYPE: "SparseTransformerForSequenceClassification"
    },
    "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerForTokenClassification"},
    "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerForMultipleChoice"},
    "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES": {MODEL_TYPE: "SparseTransformerForQuestionAnswering"},
}

SEQ_LENGTH = 13  # not a multiple of any block size
WINDOW = 4  # encoder: |i - j| <= 2; decoder: 0 <= i - j < 4 -- both much shorter than SEQ_LENGTH


class SparseTransformerModelTester:
    """Tiny configs and random inputs (the interface ``ModelTesterMixin`` reads)."""

    def __init__(self, parent, *, is_decoder: bool, pattern, backend: str, batch_size: int = 3, extra=None):
        self.parent = parent
        self.extra = dict(extra or {})  # further config keys (the mixture-of-experts variants)
        self.is_decoder = is_decoder
        self.pattern = pattern
        self.backend = backend
        self.batch_size = batch_size
        self.seq_length = SEQ_LENGTH
        self.is_training = True
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.intermediate_size = 37
        self.type_vocab_size = 2
        # the default pattern (a 512 window) must fit the position table
        self.max_position_embeddings = 64 if pattern is not None else 512
        self.num_labels = 3
        self.num_choices = 2
        self.pad_token_id = 0

    def get_config(self, **overrides):
        kw = dict(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act="gelu",
            hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            is_decoder=self.is_decoder,
            attention_backend=self.backend,
            num_labels=self.num_labels,
            pad_token_id=self.pad_token_id,
        )
        if self.pattern is not None:
            kw["attention_pattern"] = self.pattern
        kw.update(self.extra)
        kw.update(overrides)
        return SparseTransformerConfig(**kw)

    def prepare_config_and_inputs_for_common(self):
        g = torch.Generator().manual_seed(0)
        input_ids = ids_tensor((self.batch_size, self.seq_length), self.vocab_size, g)
        input_ids[:, 0] = 1  # padding id 0 nowhere in the rows
        input_ids = input_ids.clamp(min=1)
        attention_mask = torch.ones(self.batch_size, self.seq_length, dtype=torch.long)
        if not self.is_decoder:
            attention_mask[0, -3:] = 0  # one right-padded row
        token_type_ids = ids_tensor((self.batch_size, self.seq_length), self.type_vocab_size, g)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        return self.get_config(), inputs


def config_inputs(tester):
    return dict(
        vocab_size=tester.vocab_size,
        hidden_size=tester.hidden_size,
        num_hidden_layers=tester.num_hidden_layers,
        num_attention_heads=tester.num_attention_heads,
        intermediate_size=tester.intermediate_size,
    )


def make_test_class(name: str, *, is_decoder: bool, pattern, backend: str, slow: bool = False, extra=None):
    classes = DECODER_CLASSES if is_decoder else ENCODER_CLASSES

    class Test(NameTablesMixin, ModelTesterMixin, unittest.TestCase):
        all_model_classes = classes
        name_table_entries = NAME_TABLES
        test_resize_position_embeddings = False
        # generation: transformers' GenerationTesterMixin is not in its sdist (see common_tests.py); the
        # project's own generation-conformance tests cover SparseTransformerForCausalLM.generate
        all_generative_model_classes = ()

        def setUp(self):
            super().setUp()
            self.model_tester = SparseTransformerModelTester(
                self, is_decoder=is_decoder, pattern=pattern, backend=backend, extra=extra
            )

        def test_model(self):
            """Every head runs on the tester's inputs and returns outputs of the documented shapes."""
            config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
            B, n = inputs["input_ids"].shape
            for model_class in self.all_model_classes:
                model = model_class(config).eval()
                with torch.no_grad():
                    out = model(**self._prepare_for_class(inputs, model_class))
                first = out[0]
                self.assertEqual(first.shape[0], B)
                self.assertTrue(torch.isfinite(first).all(), model_class.__name__)

    add_config_tests(
        Test,
        ConfigTester,
        lambda self: ConfigTester(
            self, config_class=SparseTransformerConfig, **config_inputs(self.model_tester)
        ),
    )
    if slow:
        Test.pytestmark = [pytest.mark.slow]
    Test.__name__ = Test.__qualname__ = name
    return Test


#: name -> (is_decoder, pattern (None: the config's default), backend[, extra config keys]). The DEFAULT_RUN ones
#: run in `make test` (an encoder and a decoder, a window shorter than the sequence, both backends, dense and
#: mixture-of-experts feed-forward); `make test-conformance` runs all.
WINDOW_ENCODER = {"type": "sliding_window", "window": WINDOW}
WINDOW_DECODER = {"type": "sliding_window", "window": WINDOW, "causal": True}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 40}
VARIANTS = {
    "TestEncoderWindowAuto": (False, WINDOW_ENCODER, "auto"),
    "TestDecoderWindowBlocked": (True, WINDOW_DECODER, "blocked"),
    "TestEncoderWindowBlocked": (False, WINDOW_ENCODER, "blocked"),
    "TestEncoderDefaultAuto": (False, None, "auto"),
    "TestDecoderWindowAuto": (True, WINDOW_DECODER, "auto"),
    "TestDecoderDefaultAuto": (True, None, "auto"),
    # mixture-of-experts feed-forward: 4 experts, top-2, in every layer (encoder) / the second layer (decoder);
    # experts 40 wide (torch's CPU grouped_mm, one of the experts implementations tested, needs rows of a
    # multiple of 16 bytes)
    "TestMoeEncoderWindowAuto": (False, WINDOW_ENCODER, "auto", MOE),
    "TestMoeDecoderWindowBlocked": (True, WINDOW_DECODER, "blocked", {**MOE, "moe_layer_frequency": 2}),
}
DEFAULT_RUN = (
    "TestEncoderWindowAuto",
    "TestDecoderWindowBlocked",
    "TestMoeEncoderWindowAuto",
    "TestMoeDecoderWindowBlocked",
)

for _name, (_dec, _pattern, _backend, *_extra) in VARIANTS.items():
    globals()[_name] = make_test_class(
        _name, is_decoder=_dec, pattern=_pattern, backend=_backend, slow=_name not in DEFAULT_RUN,
        extra=_extra[0] if _extra else None,
    )  # fmt: skip
del _name, _dec, _pattern, _backend, _extra
