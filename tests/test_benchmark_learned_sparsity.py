"""scripts/benchmark_learned_sparsity.py on a tiny data folder: argument errors and the timed steps."""

import importlib.util
import json
import random
import sys

import pytest

from tests.script_loader import SCRIPTS

WORDS = "the model attention sparse token window expert router layer span block data text train loss".split()


@pytest.fixture
def bench(monkeypatch):
    """The script as a module, in ``sys.modules`` while the test runs (its dataclasses look their module up)."""
    spec = importlib.util.spec_from_file_location(
        "benchmark_learned_sparsity", SCRIPTS / "benchmark_learned_sparsity.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def data_dir(tmp_path):
    """Two training documents (about 4 blocks of 128 tokens) and one validation document (2 blocks)."""
    rng = random.Random(0)
    folder = tmp_path / "data"
    folder.mkdir()
    for split, n in (("train", 2), ("validation", 1)):
        rows = [{"document": " ".join(rng.choice(WORDS) for _ in range(300))} for _ in range(n)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def small_args(bench, data_dir, tmp_path, *extra):
    return bench.parse_args([
        "--data-dir", str(data_dir), "--train-documents", "2", "--eval-documents", "1", "--eval-blocks", "2",
        "--steps", "2", "--warmup-steps", "0", "--timing-rounds", "1", "--out", str(tmp_path / "ls"), *extra,
    ])  # fmt: skip


def test_batch_size_above_the_training_blocks_is_an_error_not_a_hang(bench, data_dir, tmp_path, capsys):
    """A training loader of drop_last batches holds no batch: the training loop would spin forever."""
    args = small_args(bench, data_dir, tmp_path, "--batch-size", "512")
    with pytest.raises(ValueError, match=r"--batch-size 512 is more than the 4 training blocks"):
        bench.build_data(args)
    argv = ["--data-dir", str(data_dir), "--train-documents", "2", "--batch-size", "512", "--steps", "2",
            "--warmup-steps", "0", "--out", str(tmp_path / "ls")]  # fmt: skip
    assert bench.main(argv) == 2
    assert "error: --batch-size 512 is more than the 4 training blocks" in capsys.readouterr().err
    assert not (tmp_path / "ls.json").exists()


def test_timed_steps_run_in_training_mode(bench, data_dir, tmp_path, monkeypatch):
    """The step-time column times training steps (span penalty, dropout, expert capacity), also after the
    validation loss put the model in eval mode."""
    args = small_args(bench, data_dir, tmp_path, "--batch-size", "2", "--timing-rounds", "2")
    tokenizer, train, val = bench.build_data(args)
    row, timing = bench.run_variant(
        "adaptive_span", bench.VARIANTS["adaptive_span"], args, tokenizer, train, val
    )
    from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM

    modes, forward = [], SparseTransformerForCausalLM.forward

    def spy(self, *a, **k):
        modes.append(self.training)
        return forward(self, *a, **k)

    monkeypatch.setattr(SparseTransformerForCausalLM, "forward", spy)
    bench.interleaved_step_times([row], [timing], 2)
    assert modes == [True, True] and row["step_time_s"] > 0


def test_a_dotted_out_prefix_keeps_its_whole_name(bench, data_dir, tmp_path):
    """--out is a prefix: ls_v1.5 gives ls_v1.5.json / .md (a suffix replaced would write ls_v1.json)."""
    argv = ["--data-dir", str(data_dir), "--train-documents", "2", "--eval-documents", "1", "--eval-blocks", "2",
            "--steps", "2", "--warmup-steps", "0", "--timing-rounds", "1", "--batch-size", "2", "--variants", "dense",
            "--out", str(tmp_path / "out" / "ls_v1.5")]  # fmt: skip
    assert bench.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ls_v1.5.json", "ls_v1.5.md"]
    assert [r["variant"] for r in json.loads((tmp_path / "out" / "ls_v1.5.json").read_text())["rows"]] == [
        "dense"
    ]


def test_an_interrupted_write_replaces_nothing(bench, data_dir, tmp_path, monkeypatch):
    argv = ["--data-dir", str(data_dir), "--train-documents", "2", "--eval-documents", "1", "--eval-blocks", "2",
            "--steps", "2", "--warmup-steps", "0", "--timing-rounds", "1", "--batch-size", "2", "--variants", "dense",
            "--out", str(tmp_path / "out" / "ls")]  # fmt: skip
    (tmp_path / "out").mkdir()
    for name in ("ls.json", "ls.md"):
        (tmp_path / "out" / name).write_text("old")

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    with pytest.raises(OSError, match="no space left"):
        bench.main(argv)
    assert {p.name: p.read_text() for p in (tmp_path / "out").iterdir()} == {"ls.json": "old", "ls.md": "old"}


def test_the_committed_table_says_its_losses_come_from_one_seed(bench):
    """benchmarks/learned_sparsity.md is what the script writes from its JSON, with the single-seed caveat: at this
    size seed 1 reverses the dense/window ranking of seed 0 (5.309 vs 5.306, against 5.484 vs 6.168)."""
    root = SCRIPTS.parent / "benchmarks"
    result = json.loads((root / "learned_sparsity.json").read_text())
    text = bench.markdown(result["rows"], result["meta"])
    assert text == (root / "learned_sparsity.md").read_text()
    assert f"One training run per variant, seed {result['meta']['seed']}: " in text
    assert "differences under ~0.7 nats are within the seed spread" in text
