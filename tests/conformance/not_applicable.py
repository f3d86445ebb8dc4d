"""The ONE list of transformers common tests that cannot apply to a model of this project, with the reason.

Keys: ``(test class, test name)``; the class may be ``"*"`` (every class in this folder) or a prefix ending in
``"*"`` (``"TestDecoder*"``). ``conftest.py`` skips each listed test with ``not applicable: <reason>``;
``HF_SPARSE_CHECK_NOT_APPLICABLE=1`` runs them instead as strict xfails, so an entry whose test has started to
pass is reported (and must be removed). A reason says why the test's assumption does not hold for the model,
never only that it fails. Failures caused by bugs are not listed here: they are fixed.
"""

from __future__ import annotations

_NO_HEAD = (
    "a motif model needs motif_names or a sequence_task (with neither it has no head); its config raises a "
    "ValueError naming them, and this test builds the config without them"
)
_LONGFORMER_WEIGHTS = (
    "Longformer's self-attention (also LED's encoder) returns local weights of shape (batch, heads, n, window + 1 "
    "+ globals), not (batch, heads, n, n), computed off the output's autograd path; transformers' own "
    "Longformer and LED tests override or skip this test for that reason"
)
_SPARSE_LED_WEIGHTS = (
    "with encoder_attention_pattern the LED encoder runs hf-sparse kernels, which never materialise attention "
    "weights: output_attentions=True raises a ValueError saying so (instead of returning weights it did not use)"
)
_NESTED_JSON = (
    "the backbone is stored as a nested dict; JSON turns the int keys of its id2label into strings (restored when "
    "the backbone config is rebuilt), so this test's raw-JSON equality on `backbone` cannot hold"
)

_HF_SPARSE_DEFAULT = (
    "the test asserts that a model saved and reloaded without attn_implementation runs 'sdpa'; SparseTransformer's "
    "default is 'hf_sparse' by design (the exact sparse kernels; 'sdpa' materialises an n x n mask). Dispatch to "
    "'sdpa' and 'eager' when asked is tested in tests/models/test_attention_implementations.py"
)

_DENSE_NO_EXPERTS = (
    "the test runs when the model's module uses @use_experts_implementation (a class-level check) and asserts "
    "that the experts functions are called; these variants' configs have num_experts=0 (dense feed-forward), so "
    "there are no experts to call. The TestMoe* variants run it"
)

NOT_APPLICABLE: dict[tuple[str, str], str] = {
    ("TestEncoder*", "test_sdpa_can_dispatch_non_composite_models"): _HF_SPARSE_DEFAULT,
    ("TestDecoder*", "test_sdpa_can_dispatch_non_composite_models"): _HF_SPARSE_DEFAULT,
    ("TestMoe*", "test_sdpa_can_dispatch_non_composite_models"): _HF_SPARSE_DEFAULT,
    ("TestEncoder*", "test_eager_matches_batched_and_grouped_inference_0_fp16"): _DENSE_NO_EXPERTS,
    ("TestEncoder*", "test_eager_matches_batched_and_grouped_inference_1_fp32"): _DENSE_NO_EXPERTS,
    ("TestEncoder*", "test_eager_matches_batched_and_grouped_inference_2_bf16"): _DENSE_NO_EXPERTS,
    ("TestDecoder*", "test_eager_matches_batched_and_grouped_inference_0_fp16"): _DENSE_NO_EXPERTS,
    ("TestDecoder*", "test_eager_matches_batched_and_grouped_inference_1_fp32"): _DENSE_NO_EXPERTS,
    ("TestDecoder*", "test_eager_matches_batched_and_grouped_inference_2_bf16"): _DENSE_NO_EXPERTS,
    ("TestMotif*", "test_config_can_be_init_without_params"): _NO_HEAD,
    ("TestMotif*", "test_config_arguments_init"): _NO_HEAD,
    ("TestMotif*", "test_correct_missing_keys"): _NO_HEAD
    + " (it loads the model from its bare backbone's checkpoint, which holds no motif arguments)",
    ("TestMotif*", "test_config_to_json_string"): _NESTED_JSON,
    ("TestDialogueSparse", "test_config_to_json_string"): _NESTED_JSON,
    ("TestExtractiveSparse", "test_config_to_json_string"): _NESTED_JSON,
    ("TestExtractiveSparse", "test_resize_tokens_embeddings"): (
        "the test shrinks the vocabulary to 4 ids and builds a model from that config, below the sentence marker "
        "id (5) that the extractive config requires inside the vocabulary: the config's checks, run again when a "
        "model is built, raise a ValueError naming sentence_token_id (such a config.json would not reload)"
    ),
    ("TestMotifLongformer", "test_attention_outputs"): _LONGFORMER_WEIGHTS,
    ("TestMotifLongformer", "test_retain_grad_hidden_states_attentions"): _LONGFORMER_WEIGHTS,
    ("TestLEDSummarization", "test_attention_outputs"): _LONGFORMER_WEIGHTS,
    ("TestLEDSummarization", "test_retain_grad_hidden_states_attentions"): _LONGFORMER_WEIGHTS,
    ("TestLEDSummarizationSparseEncoder", "test_attention_outputs"): _SPARSE_LED_WEIGHTS,
    ("TestLEDSummarizationSparseEncoder", "test_retain_grad_hidden_states_attentions"): _SPARSE_LED_WEIGHTS,
    ("TestLEDSummarizationSparseEncoder", "test_model_outputs_equivalence"): _SPARSE_LED_WEIGHTS,
}


#: Tests that DO apply and fail because of a defect not fixed yet: run as strict xfails (a fix makes them
#: fail until the entry is removed). Each names the defect; this list is meant to be empty.
OPEN_DEFECTS: dict[tuple[str, str], str] = {}


def reason_for(cls_name: str, test_name: str, table: dict | None = None) -> str | None:
    """The reason ``test_name`` of ``cls_name`` is listed in ``table`` (default: not applicable), or None."""
    base = test_name.split("[", 1)[0]
    for (cls_key, name), reason in (NOT_APPLICABLE if table is None else table).items():
        if name not in (test_name, base):
            continue
        if (
            cls_key == "*"
            or cls_key == cls_name
            or (cls_key.endswith("*") and cls_name.startswith(cls_key[:-1]))
        ):
            return reason
    return None
