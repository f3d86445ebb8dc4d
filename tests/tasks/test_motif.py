"""The dna-motif-detection recipe task: the tiny recipe end to end (saved folder, card, plots, offline
push), the classification and scan data sources, metrics, augmentation and argument errors."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import pipeline

from hf_sparse.tasks.motif.data import builtin_motifs, check_classification_row, label_sequence
from hf_sparse.tasks.motif.task import (
    MotifArguments,
    MotifTask,
    attention_matrices,
    encode_rows,
    mirror_spans,
    sequence_metrics,
    tag_metrics,
)
from hf_sparse.training import HubPushError, RecipeError, load_recipe, run
from hf_sparse.utils.labels import spans_from_bio
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


def test_sequence_metrics_macro_f1_leaves_out_a_class_absent_from_the_split():
    """A class with no true and no predicted example has no F1 (not 0): a perfect classifier scores 1."""
    logits = np.array([[3.0, 0, 0], [0, 3.0, 0], [3.0, 0, 0], [0, 3.0, 0]])  # class 2 never occurs
    s = sequence_metrics(logits, np.array([0, 1, 0, 1]), "classification")
    assert s == {"accuracy": 1.0, "auroc": 1.0, "f1": 1.0}
    # a class predicted but never true still counts, with F1 0
    logits = np.concatenate([logits, [[0, 0, 3.0]]])  # class 2 predicted for a class 0 example
    s = sequence_metrics(logits, np.array([0, 1, 0, 1, 0]), "classification")
    assert s["f1"] == pytest.approx((2 * 2 / (3 + 2) + 1 + 0) / 3)


@pytest.mark.parametrize("decoding", ["bio", "fixed_length"])
def test_span_f1_per_motif_leaves_out_a_motif_absent_from_the_split(decoding):
    """Motif B has no true and no predicted span: before, ``span_f1_B`` was 0.0 (and a 0 bar in motif_f1.png) for a
    perfect tagger; a motif predicted but never true still counts, with F1 0."""
    from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
    from tests.models.motif_tiny import backbone

    config = LongformerMotifConfig(backbone=backbone(), motif_names=["A", "B"], span_decoding=decoding,
                                   motifs={"A": [[1, 1]] * 4, "B": [[1, 1]] * 4})  # fmt: skip
    labels = np.array([[-100, 0, 1, 2, 0, 0, 0, -100]])  # one A span; no B
    perfect = 5 * np.eye(5)[np.where(labels < 0, 0, labels)]
    m = tag_metrics(perfect, labels, config)
    assert m["span_f1_A"] == m["span_f1"] == 1.0 and "span_f1_B" not in m
    predicted_b = perfect.copy()
    predicted_b[0, 4:6] = 5 * np.eye(5)[[3, 4]]  # a B span where there is none
    m = tag_metrics(predicted_b, labels, config)
    assert m["span_f1_A"] == 1.0 and m["span_f1_B"] == 0.0


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
        (dict(num_train=0), "num_train must be at least 1 for data: synthetic"),
        (dict(dataset_seed=-1), r"^dataset_seed must be an int >= 0, got -1$"),
        (dict(dataset_seed=1.5), r"^dataset_seed must be an int >= 0, got 1.5$"),
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
    with pytest.raises(ValueError, match="longer than max_length=64.*lower sequence_length=100"):
        task.build_model(args, tok)  # before any tokenization (the runner reports it as one error line)


@pytest.mark.parametrize("bases, tokens", [(30, 12), (28, 12), (29, 13), (31, 13)])
def test_kmer_leftover_bases_are_one_token_each(bases, tokens):
    """With kmer: 3 the bases after the last whole 3-mer are one token each: 29 bases are 9 + 2 + 2 tokens,
    more than max_length=12 although fewer bases than 10 whole 3-mers."""
    from hf_sparse.tokenization_dna import DNATokenizer

    tok = DNATokenizer(kmer=3, model_max_length=12)
    seq = ("ACGT" * 10)[:bases]
    assert len(tok(seq)["input_ids"]) == tokens
    batch = {"sequence": [seq], "label": [1]}
    kwargs = dict(
        tokenizer=tok, max_length=12, kmer=3, label2id=None, sequence_task="classification", augment=False
    )
    if tokens <= 12:
        assert len(encode_rows(batch, **kwargs)["input_ids"][0]) == tokens
    else:
        with pytest.raises(ValueError, match=f"{bases} bases is {tokens} tokens .* max_length=12"):
            encode_rows(batch, **kwargs)


def test_kmer_overflow_is_a_recipe_error_before_training(tmp_path):
    """65 bases fit (24 - 2) * 3 = 66 bases, but are 21 3-mers + 2 single bases: 25 tokens > max_length=24."""
    data = write_classification(tmp_path / "data", n=(4, 2, 2))  # 60 bases: 22 tokens
    with open(data / "train.jsonl", "a") as f:
        f.write(json.dumps({"sequence": "ACGT" * 16 + "A", "label": 0}) + "\n")
    recipe = {"task": "dna-motif-detection", "data": "classification", "data_dir": str(data), "kmer": 3,
              "max_length": 24, "attention_window": 16, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
              "output_dir": str(tmp_path / "out"), "report_to": "none"}  # fmt: skip
    with pytest.raises(
        RecipeError, match="train split: a sequence of 65 bases is 25 tokens .* max_length=24"
    ):
        run(recipe)
    assert not (tmp_path / "out" / "config.json").exists()


def test_attention_plot_reads_whole_kmers(tmp_path):
    """attention.png reads the first 256 bases at most, cut at a whole 6-mer: 256 bases would be 42 6-mers and 4
    single bases, 48 tokens, past max_length=45 (a Longformer's position table)."""
    from types import SimpleNamespace

    data = write_classification(tmp_path / "data", n=(2, 2, 2))
    (data / "test.jsonl").write_text(json.dumps({"sequence": "ACGTGC" * 43, "label": 1}) + "\n")  # 258 bases
    args = MotifArguments(data="classification", data_dir=str(data), kmer=6, max_length=45, backbone="longformer",
                          attention_window=16, hidden_size=16, intermediate_size=32, num_attention_heads=2)  # fmt: skip
    task = MotifTask()
    tok = task.build_tokenizer(args)
    model = task.build_model(args, tok)
    trainer = SimpleNamespace(is_world_process_zero=lambda: True, model=model, processing_class=tok)
    extras = task.after_training(trainer, args, str(tmp_path))
    assert Path(extras["attention_png"]).is_file()


def test_synthetic_sequences_longer_than_max_length_are_a_recipe_error(tmp_path):
    with pytest.raises(
        RecipeError, match="sequence of 600 bases is 602 tokens.*max_length=512.*sequence_length=600"
    ):
        run(RECIPES / "tiny.yaml", [*FAST, f"output_dir={tmp_path}", "sequence_length=600", "max_length=512"])
    assert not (tmp_path / "config.json").exists()


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
    assert [p["parts"][0]["type"] for p in info["pattern"]] == ["sliding_window", "strided"]
    assert all(p["parts"][1] == {"type": "global", "every": 100} for p in info["pattern"])


@pytest.mark.parametrize(
    "kind, config, globals_",
    [
        ("sparse_transformer", {}, [0, 100, 200, 300, 400, 500]),  # global_every=100: [CLS] and every 100th
        ("sparse_transformer", {"global_every": None}, [0]),  # [CLS] only
        ("longformer", {"global_every": 50}, list(range(0, 512, 50))),
    ],
)
def test_card_density_counts_the_global_tokens(kind, config, globals_):
    """The card's pattern (and so its density and Attention row) is what the model computes: the backbone's
    pattern and the tokens the model makes global."""
    from hf_sparse import patterns
    from hf_sparse.hub import render_model_card
    from tests.models.motif_tiny import motif_config

    task = MotifTask()
    task.config = motif_config(kind, **config)
    info = task.card_info(MotifArguments(max_length=512), {})
    density = float(patterns.from_dict(info["pattern"]).density(512))
    model = patterns.SlidingWindow(window=16) | patterns.Global(indices=globals_)
    assert density == pytest.approx(float(model.density(512)))
    assert density > float(patterns.SlidingWindow(window=16).density(512))
    card = str(
        render_model_card("dna-motif-detection", model_name="m", pattern=info["pattern"], density_length=512)
    )
    assert f"**{100 * density:.2f}%**" in card and "global(" in card


def test_lora_trains_the_kmer_embeddings_and_the_spectrum_in_full():
    """New modules besides the heads (random at start): k-mer embeddings, the spectrum's projection, the
    embedding convolutions; LoRA must not leave them frozen."""
    from peft import LoraConfig, get_peft_model

    model = motif_model(kmer_embedding=3, kmer_spectrum=2, base_token_ids=[5, 6, 7, 8], conv_kernel_size=3)
    task = MotifTask()
    config = LoraConfig(
        r=4, target_modules=["query", "value"], modules_to_save=task.lora_modules_to_save(model)
    )
    peft_model = get_peft_model(model, config)
    for key in ("kmer_embeddings", "spectrum", "embedding_conv", "sequence_head", "token_classifier"):
        trainable = [p.requires_grad for n, p in peft_model.named_parameters() if f".{key}." in n]
        assert any(trainable), key


def test_scan_motif_names_may_hold_a_dash(tmp_path):
    """JASPAR names such as NKX2-5 or EWSR1-FLI1: tags B-NKX2-5 / I-NKX2-5, split at the first '-'."""
    fasta, motif_file = write_scan_inputs(tmp_path / "data")
    motif_file.write_text(motif_file.read_text().replace("MA0139.2 CTCF", "MA0063.3 NKX2-5"))
    args = MotifArguments(data="scan", fasta=str(fasta), motif_file=str(motif_file), motif_ids=["MA0063.3"],
                          validation_fraction=0.2, test_fraction=0.2, max_length=130)  # fmt: skip
    task = MotifTask()
    tok = task.build_tokenizer(args)
    model = task.build_model(args, tok)
    assert model.config.id2label == {0: "O", 1: "B-NKX2-5", 2: "I-NKX2-5"}
    ds = task.build_datasets(args, tok)
    tags = [model.config.id2label[i] for i in ds["train"][0]["labels"][1:-1]]  # a peak: sites found
    assert {(m, end - start) for m, start, end in spans_from_bio(tags)} == {("NKX2-5", 15)}


def test_classification_labels_widened_to_float_are_read_and_a_fraction_is_named(tmp_path):
    """A float in one row makes datasets read the whole label column as float: whole values are class ids,
    the first fractional one is the error (its row, its value)."""
    from hf_sparse.data.loading import load_jsonl

    data = tmp_path / "data"
    data.mkdir()
    for split, labels in (("train", [1, 0, 1.0, 0]), ("validation", [0, 1])):
        with open(data / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps({"sequence": "ACGT", "label": x}) + "\n" for x in labels)
    args = MotifArguments(data="classification", data_dir=str(data))
    assert MotifTask().sequence_label_names(args) == ["0", "1"]
    (data / "bad.jsonl").write_text(
        "".join(json.dumps({"sequence": "ACGT", "label": x}) + "\n" for x in (1, 0, 1.5))
    )
    with pytest.raises(ValueError, match="row 3: field 'label' must be an int class id, got 1.5"):
        load_jsonl(data / "bad.jsonl", check_classification_row)


def test_classification_data_dir_may_hold_gzipped_splits(tmp_path):
    import gzip

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "validation"):
        with gzip.open(data / f"{split}.jsonl.gz", "wt") as f:
            f.write(json.dumps({"sequence": "ACGT", "label": 0}) + "\n")
    args = MotifArguments(data="classification", data_dir=str(data))
    MotifTask().check_arguments(args)  # the files the loader reads
    (data / "validation.jsonl.gz").unlink()
    with pytest.raises(FileNotFoundError, match="has no validation.jsonl"):
        MotifTask().check_arguments(args)


def test_config_docstring_example_runs():
    import doctest

    from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig

    examples = doctest.DocTestParser().get_examples(LongformerMotifConfig.__doc__)
    namespace = {}
    for example in examples[:-1]:
        exec(example.source, namespace)
    assert repr(eval(examples[-1].source, namespace)) == examples[-1].want.splitlines()[0]


def test_a_recipes_card_describes_the_models_heads():
    """The card a run writes (``card_info`` into ``render_model_card``) takes its tag, Auto class and description
    from the model's heads: a classification-only model is no token classifier."""
    from hf_sparse.hub import render_model_card
    from tests.models.motif_tiny import motif_config

    task = MotifTask()
    task.config = motif_config(
        motif_names=[], sequence_task="classification", sequence_label_names=["neg", "pos"]
    )
    card = render_model_card("dna-motif-detection", model_name="m", **task.card_info(MotifArguments(), {}))
    assert card.data.pipeline_tag == "text-classification"
    assert "AutoModel.from_pretrained" in card.text and "classifies a DNA sequence as neg / pos" in card.text
    assert "token-classification" not in str(card)
