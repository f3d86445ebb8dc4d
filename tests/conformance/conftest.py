"""The conformance suite: registers the pytest markers transformers' common tests use (``--strict-markers``) and
applies ``not_applicable.py``."""

import os

import pytest

from .not_applicable import OPEN_DEFECTS, reason_for

# markers of transformers' test_modeling_common / testing_utils (its own conftest registers them)
TRANSFORMERS_MARKERS = (
    "accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test", "torch_compile_test",
    "is_agent_test", "is_expert_parallel_test", "is_fsdp_test", "is_pipeline_test", "is_staging_test",
    "is_tensor_parallel_test", "is_training_test", "order", "generate", "bitsandbytes", "torch_export_test",
)  # fmt: skip


def pytest_configure(config):
    for name in TRANSFORMERS_MARKERS:
        config.addinivalue_line("markers", f"{name}: used by transformers' common model tests")


#: parametrized tests whose full grid runs only in `make test-conformance` / `make test-slow`: in `make test`
#: only their float32 rows run (the float16/bfloat16 rows cost most of the suite's time on CPU)
GRID_TESTS = ("test_eager_matches_sdpa_inference", "test_eager_matches_batched_and_grouped_inference")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    strict = os.environ.get("HF_SPARSE_CHECK_NOT_APPLICABLE") == "1"
    here = os.path.dirname(__file__)
    for item in items:
        if item.cls is None or not str(item.path).startswith(here):
            continue
        if item.name.startswith(GRID_TESTS) and "fp32" not in item.name:
            item.add_marker(pytest.mark.slow)
        defect = reason_for(item.cls.__name__, item.name, OPEN_DEFECTS)
        if defect is not None:
            item.add_marker(pytest.mark.xfail(reason=f"open defect: {defect}", strict=True))
            continue
        reason = reason_for(item.cls.__name__, item.name)
        if reason is None:
            continue
        if strict:
            item.add_marker(pytest.mark.xfail(reason=f"not applicable: {reason}", strict=True))
        else:
            item.add_marker(pytest.mark.skip(reason=f"not applicable: {reason}"))
