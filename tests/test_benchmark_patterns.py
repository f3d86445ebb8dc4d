"""scripts/benchmark_patterns.py: a time as a multiple of its FLOP bound."""

import pytest

from tests.script_loader import load_script


@pytest.mark.parametrize("mode, times", [("fwd", 1), ("fwd+bwd", 3)])
def test_bound_counts_the_pairs_per_pass_and_the_hashing_once(mode, times):
    bench = load_script("benchmark_patterns")
    pairs, hashing, rate = 1000, 5e6, 1e9
    rec = bench._with_ratios({"time_s": 1.0, "pairs": pairs, "extra_flops": hashing}, mode, rate)
    attention = 4 * pairs * bench.D * times / rate
    assert rec["x_bound"] == pytest.approx(1.0 / attention)
    assert rec["x_bound_with_selection"] == pytest.approx(1.0 / (attention + hashing / rate))
    assert "x_bound_with_selection" not in bench._with_ratios(
        {"time_s": 1.0, "pairs": 1, "extra_flops": 0}, mode, rate
    )
