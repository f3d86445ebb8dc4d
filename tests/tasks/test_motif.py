"""The dna-motif-detection recipe task: the tiny recipe end to end (saved folder, card, plots, offline
push), the classification and scan data sources, metrics, augmentation and argument errors."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import pipeline

from hf_sparse.tasks.motif.data import builtin_motifs, label_sequence
from hf_sparse.tasks.motif.task import (
    MotifArguments,
    MotifTask,
    attention_matrices,
    mirror_spans,
    sequence_metrics,
    tag_metrics,
)
from hf_sparse.training import HubPushError, load_recipe, run
from tests.models.motif_tiny import motif_model

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "pipelines" / "motif"

#: overrides that make the tiny recipe run in seconds (same code path, less data and compute)
FAST = [
    "num_train=48",
    "num_validation=16",
    "num_test=16",
    "hidden_size=32",
    "intermediate_size=64",
    "num_attention_heads=2",
    "num_train_epochs=1",
    "per_device_train_batch_size=16",
    "report_to=none",
    "disable_tqdm=true",
]


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tiny_recipe_trains_saves_a_complete_folder_and_pushes_offline(tmp_path):
    out = tmp_path / "motif-tiny"
    overrides = [*FAST, f"output_dir={out}", "push_to_hub=true", "hub_model_id=someone/motif-tiny"]
    with pytest.raises(HubPushError) as err:  # HF_HUB_OFFLINE=1 (tests/conftest.py)
        run(RECIPES / "tiny.yaml", overrides)
    assert "someone/motif-tiny" in str(err.value) and "intact" in str(err.value)

    # everything local was written before the push was tried, and nothing was removed
    results = json.loads((out / "all_results.json").read_text())
    assert results["global_step"] == 3 and results["task"] == "dna-motif-detection"
    for split in ("eval", "test"):
        for key in ("span_f1", "span_precision", "span_recall", "per_base_f1", "accuracy", "auroc",
                    "span_f1_CTCF", "span_f1_REST", "span_f1_TP53"):  # fmt: skip
            assert 0.0 <= results[f"{split}_{key}"] <= 1.0, key
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "longformer_motif" and config["motif_names"] == ["CTCF", "REST", "TP53"]
    assert config["auto_map"]["AutoModel"] == "modeling_motif.LongformerForMotifDetection"
    assert config["custom_pipelines"]["dna-motif-detection"]["pt"] == ["AutoModelForTokenClassification"]
    assert (out / "model.safetensors").is_file() and (out / "modeling_motif.py").is_file()
    tok = json.loads((out / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "DNATokenizer" and (out / "vocab.txt").is_file()
    assert tok["auto_map"]["AutoTokenizer"][0] == "tokenization_dna.DNATokenizer"
    for png in ("loss.png", "motif_f1.png", "attention.png"):
        assert (out / png).stat().st_size > 1000, png
    assert set(results["extras"]["span_f1_per_motif"]) == {"CTCF", "REST", "TP53"}

    # the model card: metadata and the metrics table
    card = (out / "README.md").read_text()
    meta = card.split("---")[1]
    assert "pipeline_tag: token-classification" in meta and "hf-sparse" in meta
    assert "span_f1" in meta and f"{results['test_span_f1']}"[:5] in card
    assert "sliding_window" in card and "dna-motif-detection" in card

    # the saved folder is usable through pipeline() (task from the saved config)
    pipe = pipeline(model=str(out), trust_remote_code=True)
    res = pipe("ACGT" * 300)  # 1,200 bases: longer than the 510 of one window
    assert res["windows"] == 3 and set(res["sequence_scores"]) == {"CTCF", "REST", "TP53"}


def write_classification(folder: Path, n=(40, 12, 12)) -> Path:
    """GC-rich 'promoters' (label 1) vs AT-rich others, 60 bases, as in the Genomic Benchmarks jsonl."""
    rng = np.random.default_rng(0)
    folder.mkdir()
    for split, count in zip(("train", "validation", "test"), n):
        with open(folder / f"{split}.jsonl", "w") as f:
            for i in range(count):
                label = i % 2
                p = [0.15, 0.35, 0.35, 0.15] if label else [0.35, 0.15, 0.15, 0.35]
                seq = "".join(rng.choice(list("ACGT"), size=60, p=p))
                name = "promoter" if label else "non_promoter"
                f.write(json.dumps({"sequence": seq, "label": label, "label_name": name}) + "\n")
    return folder


@pytest.mark.parametrize("tokens", [dict(kmer=3), dict(kmer=1, kmer_embedding=3, kmer_spectrum=3)])
def test_classification_data_trains_a_sequence_classifier(tmp_path, tokens):
    data = write_classification(tmp_path / "data")
    recipe = {
        "task": "dna-motif-detection", "data": "classification", "data_dir": str(data), **tokens,
        "output_dir": str(tmp_path / "out"), "hidden_size": 32, "intermediate_size": 64,
        "num_attention_heads": 2, "max_length": 64, "pooling": "mean", "num_train_epochs": 3,
        "learning_rate": 3e-3, "per_device_train_batch_size": 8, "report_to": "none", "save_strategy": "no",
        "disable_tqdm": True, "plots": False, "model_card": False,
    }  # fmt: skip
    results = run(recipe)
    assert results["test_accuracy"] >= 0.9 and results["test_auroc"] >= 0.9  # an easy GC-content task
    assert not any(k.startswith("test_span") for k in results)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["sequence_label_names"] == ["non_promoter", "promoter"] and config["motif_names"] == []
    assert config["kmer"] == tokens["kmer"] and config["kmer_embedding"] == tokens.get("kmer_embedding", 0)
    assert config["kmer_spectrum"] == tokens.get("kmer_spectrum", 0)
    out = pipeline(model=str(tmp_path / "out"), trust_remote_code=True)(
        "GCGCGGCCGCGCGGCGCCGCGCGCGGCGCGCCGCG" * 4
    )
    assert out["label"] in ("promoter", "non_promoter") and out["spans"] == []


def write_scan_inputs(folder: Path):
    """A FASTA with CTCF consensus sites planted on both strands, and a JASPAR file with CTCF."""
    from hf_sparse.tokenization_dna import reverse_complement

    ctcf = builtin_motifs(["CTCF"])[0]
    rng = np.random.default_rng(1)
    folder.mkdir()
    with open(folder / "peaks.fa", "w") as f:
        for i in range(20):
            seq = list("".join(rng.choice(list("ACGT"), size=80)))
            site = ctcf.consensus if i % 2 else reverse_complement(ctcf.consensus)
            seq[30 : 30 + len(site)] = site
            f.write(f">peak{i}\n{''.join(seq[:40]).lower()}\n{''.join(seq[40:])}\n")
    rows = "\n".join(f"{b} [ {' '.join(str(int(c)) for c in ctcf.counts[k])} ]" for k, b in enumerate("ACGT"))
    (folder / "motifs.jaspar").write_text(f">MA0139.2 CTCF\n{rows}\n")
    return folder / "peaks.fa", folder / "motifs.jaspar"


def test_scan_data_labels_by_scanning_and_adds_shuffled_negatives(tmp_path):
    fasta, motif_file = write_scan_inputs(tmp_path / "data")
    args = MotifArguments(data="scan", fasta=str(fasta), motif_file=str(motif_file), motif_ids=["MA0139"],
                          scan_threshold=0.85, validation_fraction=0.2, test_fraction=0.2)  # fmt: skip
    task = MotifTask()
    raw = task.raw(args)
    assert {k: len(v) for k, v in raw.items()} == {"train": 24, "validation": 8, "test": 8}  # 2 per peak
    ctcf = task.motifs(args)
    assert [m.name for m in ctcf] == ["CTCF"]
    for row in raw["train"]:
        assert row["tags"] == label_sequence(row["sequence"], ctcf, 0.85)  # the labels are the scan
    peaks = [r for r in raw["train"] if r["label"] == 1]
    assert all("B-CTCF" in r["tags"] for r in peaks)  # the planted site is found on either strand
    shuffled = [r for r in raw["train"] if r["label"] == 0]
    for p, s in zip(peaks, shuffled):
        assert p["name"] == s["name"] and sorted(p["sequence"]) == sorted(s["sequence"])
    tok = task.build_tokenizer(args)
    model = task.build_model(args, tok)
    assert model.config.sequence_label_names == ["shuffled", "peak"] and model.config.motif_names == ["CTCF"]
    ds = task.build_datasets(args, tok)
    batch = task.data_collator(args, tok)([ds["train"][0], ds["train"][1]])
    assert batch["labels"].shape == batch["input_ids"].shape and batch["sequence_labels"].tolist() == [1, 0]
    with pytest.raises(ValueError, match="MA9999"):
        MotifTask().motifs(MotifArguments(data="scan", fasta=str(fasta), motif_file=str(motif_file),
                                          motif_ids=["MA9999.1"]))  # fmt: skip


def test_shared_ctcf_recipe_data(shared_data):
    """ctcf.yaml's files exist and give CTCF sites in most peaks (MA0139.2 from JASPAR 2024)."""
    recipe_args, task_args, _ = load_recipe(RECIPES / "ctcf.yaml", ["report_to=none"])
    task = MotifTask()
    assert [m.matrix_id for m in task.motifs(task_args)] == ["MA0139.2"]
    raw = task.raw(task_args)
    peaks = [r for split in raw.values() for r in split if r["label"] == 1]
    assert len(peaks) == 500 and np.mean(["B-CTCF" in r["tags"] for r in peaks]) > 0.5


@pytest.mark.parametrize("name", ["tiny", "promoters", "ctcf", "base"])
def test_recipes_parse(name):
    overrides = ["report_to=none"]
    if name == "base" and not torch.cuda.is_available():
        overrides.append("bf16=false")  # TrainingArguments refuses bf16 without a GPU
    recipe_args, task_args, training_args = load_recipe(RECIPES / f"{name}.yaml", overrides)
    assert recipe_args.task == "dna-motif-detection" and isinstance(task_args, MotifArguments)
    if name == "tiny":
        assert task_args.data == "synthetic" and task_args.background_fasta is None  # no external data
    if name in ("promoters", "ctcf"):
        path = task_args.data_dir if name == "promoters" else task_args.fasta
        assert Path(path).is_absolute() and "shared/data/genomics" in path


def test_reverse_complement_augmentation_mirrors_tags():
    args = MotifArguments(motifs=["REST"], sequence_length=60, num_train=4, num_validation=2, num_test=0,
                          reverse_complement_augment=True, max_length=64)  # fmt: skip
    task = MotifTask()
    tok = task.build_tokenizer(args)
    task.build_model(args, tok)
    ds = task.build_datasets(args, tok)
    assert len(ds["train"]) == 8 and len(ds["validation"]) == 2
    for k in range(4):
        fwd, rc = ds["train"][2 * k], ds["train"][2 * k + 1]
        labels = task.config.id2label
        tags_f = [labels[i] for i in fwd["labels"][1:-1]]
        tags_r = [labels[i] for i in rc["labels"][1:-1]]
        assert [t[2:] for t in tags_f[::-1]] == [t[2:] for t in tags_r]  # same motif positions, mirrored
        assert tags_f.count("B-REST") == tags_r.count("B-REST")
    assert mirror_spans([{"motif": "X", "start": 2, "end": 5, "strand": "+"}], 10) == [
        {"motif": "X", "start": 5, "end": 8, "strand": "-"}
    ]


def test_metrics():
    from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
    from tests.models.motif_tiny import backbone

    bio = LongformerMotifConfig(backbone=backbone(), motif_names=["A"])
    fixed = LongformerMotifConfig(backbone=backbone(), motif_names=["A"], motifs={"A": [[1, 1]] * 4},
                                  span_decoding="fixed_length")  # fmt: skip
    labels = np.array([[-100, 0, 1, 2, 0, 0, -100, -100], [-100, 1, 2, 0, 1, 2, 0, -100]])
    perfect = 5 * np.eye(3)[np.where(labels < 0, 0, labels)]  # logits
    for config in (bio, fixed):
        m = tag_metrics(perfect, labels, config)
        assert m["span_f1"] == m["per_base_f1"] == m["span_f1_A"] == 1.0
    shifted = perfect.copy()
    shifted[0, 3] = [0.0, 0.0, 0.1]  # the first span's I is barely the argmax
    shifted[0, 4] = [0.0, 0.0, 0.1]  # and so is an I after it: by argmax the span is one base too long
    m = tag_metrics(shifted, labels, bio)
    assert m["span_f1"] == pytest.approx(2 / 3) and m["span_overlap_f1"] == 1.0
    m = tag_metrics(shifted, labels, fixed)  # spans of length 2 only: the argmax error is repaired
    assert m["span_f1"] == 1.0 and m["span_f1_bio"] == pytest.approx(2 / 3)
    s = sequence_metrics(
        np.array([[2.0, -1.0], [-1.0, 3.0], [0.5, 0.0]]), np.array([0, 1, 1]), "classification"
    )
    assert s["accuracy"] == pytest.approx(2 / 3) and s["auroc"] == 1.0
    s = sequence_metrics(np.array([[3.0, -3.0], [-3.0, 3.0]]), np.array([[1, 0], [0, 1]]), "motif_presence")
    assert s["accuracy"] == 1.0 and s["auroc"] == 1.0 and s["f1"] == 1.0


@pytest.mark.parametrize("kind", ["sparse_transformer", "longformer"])
def test_attention_matrices_are_dense_softmax_rows_within_the_pattern(kind):
    model = motif_model(kind, global_every=20, conv_kernel_size=3)
    ids = torch.randint(5, 9, (1, 48))
    w = attention_matrices(model, ids)  # (2 layers, heads, 48, 48)
    assert w.shape == (2, 2, 48, 48)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 48), atol=1e-4, rtol=0)
    i, j = torch.meshgrid(torch.arange(48), torch.arange(48), indexing="ij")
    outside = ((i - j).abs() > 8) & (i % 20 != 0) & (j % 20 != 0)  # window 16 -> |i - j| <= 8
    assert w[:, :, outside].abs().max() == 0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(data="csv"), "data must be one of"),
        (dict(backbone="bert"), "backbone"),
        (dict(data="classification"), "data_dir"),
        (dict(data="scan", fasta="x.fa"), "motif_file"),
        (dict(data="scan", fasta="x.fa", motif_file="m.txt"), "motif_ids"),
        (dict(kmer=3), "kmer=3"),
        (dict(kmer_embedding=9), "kmer_embedding must be an int in"),
        (dict(kmer_spectrum=7), "kmer_spectrum must be an int in"),
        (dict(data="classification", data_dir="x", kmer=3, kmer_spectrum=4), "kmer_spectrum=4 needs kmer: 1"),
        (
            dict(data="classification", data_dir="x", kmer=3, kmer_embedding=4),
            "kmer_embedding=4 needs kmer: 1",
        ),
        (dict(validation_fraction=0.5, test_fraction=0.5), "test_fraction"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(pooling="max"), "pooling"),
        (dict(attention_dropout=1.0), "attention_dropout must be a probability in"),
        (dict(hidden_dropout_prob=-0.1), "hidden_dropout_prob must be a probability in"),
        (dict(backbone="led"), "backbone must be one of"),
        (dict(backbone="longformer", attention_window=63), "attention_window must be even for longformer"),
        (dict(attention_backend="fast"), "attention_backend must be one of"),
    ],
)
def test_argument_errors_name_the_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MotifArguments(**kwargs)


def test_too_long_sequences_are_an_error_not_truncated():
    args = MotifArguments(motifs=["CTCF"], sequence_length=100, num_train=2, num_validation=1, num_test=0,
                          max_length=64)  # fmt: skip
    task = MotifTask()
    tok = task.build_tokenizer(args)
    task.build_model(args, tok)
    with pytest.raises(ValueError, match="longer than max_length=64"):
        task.build_datasets(args, tok)


def test_lora_trains_adapters_and_the_new_modules_and_saves_a_merged_model(tmp_path):
    out = tmp_path / "lora"
    results = run(RECIPES / "tiny.yaml", [*FAST, f"output_dir={out}", "lora=true", "save_strategy=no",
                                          "plots=false", "model_card=false", "attention_plot=false"])  # fmt: skip
    assert results["num_trainable_parameters"] < results["num_parameters"]
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["target_modules"] and set(adapter["modules_to_save"]) == {
        "token_classifier", "sequence_head", "embedding_conv.0", "embedding_conv.1"
    }  # fmt: skip
    from transformers import AutoModel

    merged = AutoModel.from_pretrained(out)  # a plain model: adapters merged into the weights
    assert not any("lora" in name for name, _ in merged.named_parameters())


def test_card_info_passes_a_per_layer_pattern_through():
    """A backbone with one attention pattern per layer: the card gets the list (it describes each layer), not
    None ("no attention pattern was recorded")."""
    from tests.models.motif_tiny import motif_config

    layers = [{"type": "sliding_window", "window": 16}, {"type": "strided", "stride": 4}]
    task = MotifTask()
    task.config = motif_config(backbone_overrides={"attention_pattern": layers})
    info = task.card_info(MotifArguments(), {})
    assert [p["type"] for p in info["pattern"]] == ["sliding_window", "strided"]
