"""scripts/compare_kernel_paths.py: its default paths run (tiny size, the matmul probe stubbed)."""

import pytest

from hf_sparse.attention import blocked, dispatch
from tests.script_loader import load_script


def test_default_paths_run_on_a_tiny_size(monkeypatch, capsys):
    """The default --paths (new, tables): the 'tables' path wraps blocked._fused_kind, which the kernel calls
    with all of its arguments."""
    compare = load_script("compare_kernel_paths")
    for module, name in ((blocked, "_fused_kind"), (dispatch, "blocked_attention")):
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after the test
    monkeypatch.setenv("HF_SPARSE_FUSED", "auto")
    monkeypatch.setattr(compare, "matmul_gflops", lambda: 100.0)
    compare.main(["--patterns", "sliding_window", "--sizes", "1024", "--reps", "1"])
    out = capsys.readouterr().out
    assert "sliding_window  n=  1024 fwd+bwd  new " in out and " tables " in out and "new/tables = " in out
    assert blocked._fused_kind.__name__ == "_fused_kind"  # main put the dispatch back


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--threads", "0"]])
def test_bad_counts_are_refused(argv):
    compare = load_script("compare_kernel_paths")
    with pytest.raises(ValueError, match="must be >= 1, got 0"):
        compare.main(argv)
