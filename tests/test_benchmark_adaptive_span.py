"""scripts/benchmark_adaptive_span.py: the timing table and the learned-spans plot, on tiny inputs."""

import json
import shlex

import pytest
import torch

from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
from tests.models.tiny import tiny_decoder_config
from tests.script_loader import load_script


def test_timing_table_and_spans_plot(tmp_path):
    bench = load_script("benchmark_adaptive_span")
    cfg = tiny_decoder_config({"type": "causal"}, adaptive_span={"max_span": 16, "ramp": 4, "init": 3})
    model = SparseTransformerForCausalLM(cfg)
    with torch.no_grad():
        model.sparse_transformer.encoder.layer[1].attention.self.adaptive_span.span.fill_(0.5)
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "bench" / "adaptive_span"
    bench.main(["--seq-len", "256", "--heads", "2", "--head-dim", "8", "--spans", "0,64", "--repeats", "1",
                "--block-size", "32", "--model", str(tmp_path / "model"), "--out", str(out)])  # fmt: skip
    result = json.loads(out.with_suffix(".json").read_text())
    rows = result["timing"]["rows"]
    assert [r["span"] for r in rows] == [0, 64] and rows[1]["time_ratio"] == 1.0
    assert rows[0]["computed_pairs"] < rows[1]["computed_pairs"]
    assert result["learned_spans"]["spans"] == [[3.0, 3.0, 3.0, 3.0], [8.0, 8.0, 8.0, 8.0]]
    assert (tmp_path / "bench" / "adaptive_span_spans.png").stat().st_size > 0
    assert "| 64 | 96 |" in out.with_suffix(".md").read_text()  # reach = span + the default ramp 32


def test_bad_arguments_are_refused():
    bench = load_script("benchmark_adaptive_span")
    with pytest.raises(ValueError, match="--spans must be >= 0"):
        bench.parse_args(["--spans", "-1"])
    with pytest.raises(ValueError, match="--skip-timing without --model"):
        bench.parse_args(["--skip-timing"])
    with pytest.raises(ValueError, match="--threads must be positive, got 0"):
        bench.parse_args(["--threads", "0"])
    with pytest.raises(ValueError, match="--spans must be comma-separated ints, got '1,,2'"):
        bench.parse_args(["--spans", "1,,2"])


def test_model_without_adaptive_span_is_refused_before_the_timing(tmp_path):
    bench = load_script("benchmark_adaptive_span")
    SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"})).save_pretrained(tmp_path / "model")
    out = tmp_path / "bench" / "adaptive_span"
    with pytest.raises(ValueError, match="the model has no adaptive span"):
        bench.main(["--seq-len", "64", "--spans", "0", "--repeats", "1", "--model", str(tmp_path / "model"),
                    "--out", str(out)])  # fmt: skip
    assert not (tmp_path / "bench").exists()  # nothing timed, nothing written


def test_a_dotted_out_prefix_keeps_its_whole_name(tmp_path):
    """--out is a prefix: run_v1.5 gives run_v1.5.json / .md (a suffix replaced would write run_v1.json)."""
    bench = load_script("benchmark_adaptive_span")
    bench.main(["--seq-len", "64", "--heads", "1", "--head-dim", "8", "--spans", "0,16", "--repeats", "1",
                "--block-size", "32", "--out", str(tmp_path / "run_v1.5")])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run_v1.5.json", "run_v1.5.md"]
    assert [r["span"] for r in json.loads((tmp_path / "run_v1.5.json").read_text())["timing"]["rows"]] == [
        0,
        16,
    ]


def test_an_interrupted_write_replaces_nothing(tmp_path, monkeypatch):
    bench = load_script("benchmark_adaptive_span")
    out = tmp_path / "adaptive_span"
    argv = ["--seq-len", "64", "--heads", "1", "--head-dim", "8", "--spans", "0", "--repeats", "1",
            "--block-size", "32", "--out", str(out)]  # fmt: skip
    bench.main(argv)
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def rename_fails(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr("os.replace", rename_fails)
    with pytest.raises(OSError, match="no space left"):
        bench.main(argv)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == written


def test_spans_of_an_encoder_with_its_note_and_command(tmp_path):
    """Any SparseTransformer trained with adaptive_span (here a masked-LM encoder, loaded with the head it was saved
    with), not only a causal LM; --skip-timing keeps the timing table, and the spans part says where the model comes
    from and how it was plotted."""
    from hf_sparse.models.sparse_transformer import SparseTransformerForMaskedLM
    from tests.models.tiny import tiny_config

    bench = load_script("benchmark_adaptive_span")
    cfg = tiny_config(attention_pattern={"type": "sliding_window", "window": 64},
                      adaptive_span={"max_span": 16, "ramp": 4, "init": 5})  # fmt: skip
    SparseTransformerForMaskedLM(cfg).save_pretrained(tmp_path / "encoder")
    out = tmp_path / "adaptive_span"
    bench.main(["--seq-len", "64", "--heads", "1", "--head-dim", "8", "--spans", "0", "--repeats", "1",
                "--block-size", "32", "--out", str(out)])  # fmt: skip
    argv = [
        "--model",
        str(tmp_path / "encoder"),
        "--skip-timing",
        "--note",
        "A tiny encoder.",
        "--out",
        str(out),
    ]
    bench.main(argv)
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["learned_spans"]["spans"] == [[5.0] * 4, [5.0] * 4] and "timing" in result
    text = out.with_suffix(".md").read_text()
    assert "| span | reach (keys) |" in text and "A tiny encoder.\n\nModel: " in text
    assert f"Command: `python scripts/benchmark_adaptive_span.py {shlex.join(argv)}`" in text


def test_a_model_that_is_not_a_sparse_transformer_is_refused(tmp_path):
    from transformers import BertConfig, BertModel

    bench = load_script("benchmark_adaptive_span")
    BertModel(BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                         vocab_size=10)).save_pretrained(tmp_path / "bert")  # fmt: skip
    with pytest.raises(ValueError, match="a 'bert' model, not a SparseTransformer: it has no adaptive span"):
        bench.main(["--model", str(tmp_path / "bert"), "--skip-timing", "--out", str(tmp_path / "b")])


def test_the_committed_spans_are_those_of_the_committed_learned_sparsity_run():
    """benchmarks/adaptive_span.md plots the adaptive_span model that benchmarks/learned_sparsity.md saved (not an
    older run's, whose folder is gone)."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    spans = json.loads((root / "adaptive_span.json").read_text())["learned_spans"]
    run = json.loads((root / "learned_sparsity.json").read_text())
    argv = shlex.split(run["meta"]["command"])
    save_dir = argv[argv.index("--save-dir") + 1]
    assert spans["model"] == f"{save_dir}/adaptive_span"
    (row,) = [r for r in run["rows"] if r["variant"] == "adaptive_span"]
    per_layer = re.findall(r"L\d+: ([\d/]+)", row["learned_spans"])
    assert [[int(s) for s in layer.split("/")] for layer in per_layer] == [
        [round(s) for s in layer] for layer in spans["spans"]
    ]
    text = (root / "adaptive_span.md").read_text()
    assert save_dir in spans["note"] and spans["note"] in text and "learned_sparsity_models/" not in text
