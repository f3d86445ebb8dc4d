"""LongformerForMotifDetection: both backbones, every head, global attention defaults, save/load,
Auto classes, and the trust_remote_code load of a saved folder where hf_sparse cannot be imported."""

import itertools
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer

import hf_sparse  # noqa: F401  (registers the Auto classes)
from hf_sparse.tasks.motif.configuration_motif import LongformerMotifConfig
from hf_sparse.tasks.motif.modeling_motif import LongformerForMotifDetection
from hf_sparse.tokenization_dna import DNATokenizer
from tests.models.motif_tiny import MOTIFS, backbone, motif_config, motif_model

BACKBONES = ["sparse_transformer", "longformer"]
HEADS = {
    "tags+presence": dict(sequence_task="motif_presence"),
    "tags+class": dict(sequence_task="classification", sequence_label_names=["neg", "pos"]),
    "tags only": dict(sequence_task=None),
    "class only": dict(motif_names=[], sequence_task="classification", sequence_label_names=["a", "b", "c"]),
}


BASE_IDS = DNATokenizer().convert_tokens_to_ids(list("ACGT"))


def _batch(n=2, length=70, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 9, (n, length), generator=g)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS] ... [SEP]
    mask = torch.ones_like(ids)
    ids[1, 50:], mask[1, 50:] = 0, 0  # second sequence padded
    return ids, mask


@pytest.mark.parametrize("kind", BACKBONES)
@pytest.mark.parametrize("head", list(HEADS))
def test_every_head_on_both_backbones_trains(kind, head):
    model = motif_model(kind, **HEADS[head]).train()
    cfg = model.config
    ids, mask = _batch()
    labels = torch.randint(0, 1 + 2 * len(cfg.motif_names), ids.shape) if cfg.motif_names else None
    if labels is not None:
        labels[mask == 0] = -100
    seq_labels = None
    if cfg.sequence_task == "motif_presence":
        seq_labels = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    elif cfg.sequence_task == "classification":
        seq_labels = torch.tensor([0, len(cfg.sequence_label_names) - 1])
    out = model(input_ids=ids, attention_mask=mask, labels=labels, sequence_labels=seq_labels)
    if cfg.motif_names:
        assert out.logits.shape == (2, 70, 1 + 2 * len(cfg.motif_names))
    else:
        assert out.logits is None and model.token_classifier is None
    if cfg.sequence_task:
        assert out.sequence_logits.shape == (2, cfg.num_sequence_outputs)
    else:
        assert out.sequence_logits is None and model.sequence_head is None
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None for g in grads[:3])  # embeddings reached


def test_losses_are_the_documented_sum():
    model = motif_model(sequence_loss_weight=0.5)
    ids, mask = _batch()
    labels = torch.randint(0, 5, ids.shape)
    labels[mask == 0] = -100
    seq = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels, sequence_labels=seq)
    tag = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 5), labels.reshape(-1), ignore_index=-100)
    pres = torch.nn.functional.binary_cross_entropy_with_logits(out.sequence_logits, seq)
    torch.testing.assert_close(out.loss, tag + 0.5 * pres)
    assert model(input_ids=ids, attention_mask=mask).loss is None


@pytest.mark.parametrize(
    "head, labels, sequence_labels",
    [
        ("tags only", torch.full((2, 70), -100), None),
        ("class only", None, torch.tensor([-100, -100])),
        ("tags+presence", torch.full((2, 70), -100), torch.tensor([[1.0, 0.0], [0.0, 1.0]])),
        ("tags+class", torch.zeros(2, 70, dtype=torch.long), torch.tensor([-100, -100])),
    ],
)
def test_a_head_with_nothing_labelled_adds_a_zero(head, labels, sequence_labels):
    """Before: the empty mean of a head whose labels are all -100 was NaN, and the sum with the other head's loss
    too (a NaN step)."""
    model = motif_model(**HEADS[head]).train()
    ids, mask = _batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels, sequence_labels=sequence_labels)
    expected = torch.tensor(0.0)
    if labels is not None and (labels != -100).any():
        expected = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 5), labels.reshape(-1))
    if sequence_labels is not None and (sequence_labels != -100).any():
        expected = torch.nn.functional.binary_cross_entropy_with_logits(out.sequence_logits, sequence_labels)
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()  # the graph is kept


def test_presence_entries_labelled_minus_100_take_no_loss():
    """Before: -100 was a BCE target (a loss of about 100 times the logit)."""
    model = motif_model(sequence_task="motif_presence", motif_names=MOTIFS)
    ids, mask = _batch()
    seq = torch.tensor([[1.0, -100.0], [0.0, 1.0]])
    out = model(input_ids=ids, attention_mask=mask, sequence_labels=seq)
    keep = seq != -100
    expected = torch.nn.functional.binary_cross_entropy_with_logits(out.sequence_logits[keep], seq[keep])
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize(
    "head, labels, match",
    [
        (
            "class only",
            {"labels": torch.tensor([0, 1])},
            r"no tag head \(motif_names=\[\]\).*sequence_labels",
        ),
        ("tags only", {"sequence_labels": torch.tensor([[1.0, 0.0], [0.0, 1.0]])}, "no sequence head"),
        (
            "tags only",
            {
                "labels": torch.zeros(2, 70, dtype=torch.long),
                "sequence_labels": torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
            },
            "no sequence head",
        ),
    ],
)
def test_labels_for_a_missing_head_are_refused(head, labels, match):
    model = motif_model(**HEADS[head])
    ids, mask = _batch()
    with pytest.raises(ValueError, match=match):
        model(input_ids=ids, attention_mask=mask, **labels)


@pytest.mark.parametrize("kind", BACKBONES)
def test_default_global_attention_is_first_token_and_every_kth(kind):
    model = motif_model(kind, global_every=25)
    ids, mask = _batch()
    g = model.default_global_attention_mask(ids, mask)
    assert g[0].nonzero().flatten().tolist() == [0, 25, 50]
    assert g[1].nonzero().flatten().tolist() == [0, 25]  # position 50 is padding in the second sequence
    with torch.no_grad():
        auto = model(input_ids=ids, attention_mask=mask).logits
        explicit = model(input_ids=ids, attention_mask=mask, global_attention_mask=g).logits
        only_first = model(input_ids=ids, attention_mask=mask, global_attention_mask=(g * 0).index_fill(1, torch.tensor([0]), 1)).logits  # fmt: skip
    torch.testing.assert_close(auto, explicit)
    assert not torch.allclose(auto, only_first)  # the every-k globals change the output
    assert LongformerMotifConfig(backbone=backbone(), motif_names=MOTIFS).global_every == 100  # the default


def test_global_every_none_keeps_only_the_first_token():
    model = motif_model(global_every=None)
    ids, mask = _batch()
    assert model.default_global_attention_mask(ids, mask).sum(1).tolist() == [1, 1]
    model.config.global_first_token = False
    assert model.default_global_attention_mask(ids, mask).sum().item() == 0


@pytest.mark.parametrize("kind", BACKBONES)
def test_padding_does_not_change_real_tokens(kind):
    """With the embedding convolution and k-mer embeddings too: a sequence alone equals it padded in a batch."""
    model = motif_model(kind, conv_kernel_size=5, pooling="mean", kmer_embedding=3, base_token_ids=BASE_IDS)
    ids, mask = _batch()
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask)
        alone = model(input_ids=ids[1:, :50], attention_mask=mask[1:, :50])
    torch.testing.assert_close(batched.logits[1, :50], alone.logits[0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(batched.sequence_logits[1], alone.sequence_logits[0], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(motif_names=["A", "A"]), "unique"),
        (dict(motif_names=["B-X"]), "must not contain"),
        (dict(sequence_task="regression"), "sequence_task"),
        (dict(sequence_task="classification"), "sequence_label_names"),
        (dict(motif_names=[], sequence_task="motif_presence"), "needs motif_names"),
        (dict(motif_names=[], sequence_task=None), "needs a head"),
        (dict(global_every=-1), "global_every"),
        (dict(global_every=2.5), "global_every"),
        (dict(conv_kernel_size=4), "conv_kernel_size"),
        (dict(pooling="max"), "pooling"),
        (dict(kmer=0), "kmer"),
        (dict(kmer_embedding=9, base_token_ids=[5, 6, 7, 8]), "kmer_embedding must be an int in"),
        (dict(kmer_embedding=3, kmer=2, base_token_ids=[5, 6, 7, 8]), "needs kmer=1"),
        (dict(kmer_embedding=3), "needs base_token_ids"),
        (dict(kmer_spectrum=7, base_token_ids=[5, 6, 7, 8]), "kmer_spectrum must be an int in"),
        (dict(kmer_spectrum=3, kmer=2, base_token_ids=[5, 6, 7, 8]), "needs kmer=1"),
        (dict(kmer_spectrum=3), "needs kmer=1 \\(got 1\\) and base_token_ids"),
        (dict(kmer_spectrum=3, sequence_task=None, base_token_ids=[5, 6, 7, 8]), "sequence_task is None"),
        (dict(base_token_ids=[5, 6, 7, 7]), "base_token_ids"),
        (dict(classifier_dropout=1.5), "classifier_dropout"),
        (dict(sequence_loss_weight=-1), "sequence_loss_weight"),
        (dict(motifs={"NOPE": [[1], [0], [0], [0]]}), "not one of motif_names"),
        (dict(motifs={"CTCF": [[1, 2], [0], [0], [0]]}), "equal"),
        (dict(backbone={"model_type": "bert"}), "backbone model_type"),
    ],
)
def test_config_errors_name_the_argument(kwargs, match):
    args = {"backbone": backbone(), "motif_names": MOTIFS, **kwargs}
    with pytest.raises(ValueError, match=match):
        LongformerMotifConfig(**args)


@pytest.mark.parametrize("k", [1, 4, 5])
def test_kmer_ids_match_a_reference_over_the_bases(k):
    """The id of the k-mer centred on each base (bases i-(k-1)//2 .. i+k//2, A C G T = 0..3, most
    significant first); incomplete where the window leaves the bases (specials, N, padding, edges)."""
    model = motif_model(motif_names=[], sequence_task="classification", sequence_label_names=["a", "b"],
                        kmer_embedding=k, base_token_ids=BASE_IDS)  # fmt: skip
    tok = DNATokenizer()
    seqs = ["ACGTNNACGGTCA", "TTGCA", "GATTACAGATTACA"]
    enc = tok(seqs, padding=True, return_tensors="pt")
    got = model.kmer_ids(enc["input_ids"])
    for row, ids in zip(got, enc["input_ids"].tolist()):
        bases = [BASE_IDS.index(t) if t in BASE_IDS else None for t in ids]
        for i, value in enumerate(row.tolist()):
            window = [
                bases[j] if 0 <= j < len(bases) else None for j in range(i - (k - 1) // 2, i + k // 2 + 1)
            ]
            expected = 4**k if None in window else sum(b * 4 ** (k - 1 - m) for m, b in enumerate(window))
            assert value == expected, (ids, i)
    assert model.kmer_embeddings.weight.shape == (4**k + 1, 32)
    assert not model.kmer_embeddings.weight[4**k].any()  # incomplete k-mers add nothing


def test_kmer_spectrum_is_log_counts_against_the_uniform_expectation():
    model = motif_model(kmer_spectrum=3, base_token_ids=BASE_IDS)
    seqs = ["ACGTNNACGGTCAACG", "TTGCA"]
    enc = DNATokenizer()(seqs, padding=True, return_tensors="pt")
    got = model.kmer_spectrum(enc["input_ids"])
    assert got.shape == (2, 4 + 16 + 64)
    for row, seq in zip(got, seqs):
        expected = []
        for k in (1, 2, 3):
            kmers = [seq[i : i + k] for i in range(len(seq) - k + 1) if "N" not in seq[i : i + k]]
            for kmer in map("".join, itertools.product("ACGT", repeat=k)):
                expected.append(math.log1p(kmers.count(kmer)) - math.log1p(len(kmers) / 4**k))
        torch.testing.assert_close(row, torch.tensor(expected))
    ids, mask = _batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask)
        pooled = torch.cat([model.backbone(input_ids=ids, attention_mask=mask, global_attention_mask=model.default_global_attention_mask(ids, mask)).last_hidden_state[:, 0], model.spectrum(model.kmer_spectrum(ids))], -1)  # fmt: skip
    torch.testing.assert_close(out.sequence_logits, model.sequence_head(pooled))
    with pytest.raises(ValueError, match="kmer_spectrum=3 read the bases: pass input_ids"):
        model(inputs_embeds=torch.zeros(1, 5, 32))


def test_kmer_embeddings_reach_the_output_and_need_input_ids():
    model = motif_model(kmer_embedding=3, base_token_ids=BASE_IDS)
    ids, mask = _batch()
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask).sequence_logits
        kmer = model.kmer_ids(ids)[0, 10]  # one k-mer of the first sequence
        model.kmer_embeddings.weight[kmer] += torch.randn(32, generator=torch.Generator().manual_seed(0))
        after = model(input_ids=ids, attention_mask=mask).sequence_logits
    assert not torch.allclose(before[0], after[0])
    if kmer not in model.kmer_ids(ids)[1][mask[1].bool()]:
        torch.testing.assert_close(before[1], after[1])  # a sequence without that k-mer is unchanged
    with pytest.raises(ValueError, match="kmer_embedding=3 / kmer_spectrum=0 read the bases: pass input_ids"):
        model(inputs_embeds=torch.zeros(1, 5, 32))


@pytest.mark.parametrize("pooling", ["cls", "mean", "cls+mean"])
def test_sequence_head_reads_the_documented_pooling(pooling):
    model = motif_model(pooling=pooling)
    ids, mask = _batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        h = out.hidden_states[-1]
        m = mask[..., None].float()
        mean = (h * m).sum(1) / m.sum(1)
        pooled = {"cls": h[:, 0], "mean": mean, "cls+mean": torch.cat([h[:, 0], mean], -1)}[pooling]
        torch.testing.assert_close(out.sequence_logits, model.sequence_head(pooled))


def test_config_labels_and_dict_round_trip():
    cfg = motif_config(motifs={"CTCF": [[1, 0], [0, 1], [0, 0], [0, 0]]})
    assert cfg.id2label == {0: "O", 1: "B-CTCF", 2: "I-CTCF", 3: "B-SP1", 4: "I-SP1"}
    again = LongformerMotifConfig.from_dict(cfg.to_dict())
    assert again.id2label == cfg.id2label and again.motifs == cfg.motifs and again.backbone == cfg.backbone
    assert AutoConfig.for_model("longformer_motif", backbone=backbone(), motif_names=["X"]).model_type == (
        "longformer_motif"
    )


@pytest.mark.parametrize("kind", BACKBONES)
def test_save_and_load_through_the_auto_classes(kind, tmp_path):
    model = motif_model(kind, conv_kernel_size=3, kmer_embedding=2, kmer_spectrum=2, base_token_ids=BASE_IDS)
    ids, mask = _batch()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask)
    model.save_pretrained(tmp_path)
    DNATokenizer().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "longformer_motif"
    assert (
        config["auto_map"]["AutoModelForTokenClassification"] == "modeling_motif.LongformerForMotifDetection"
    )
    assert config["auto_map"]["AutoConfig"].endswith(".LongformerMotifConfig")
    assert (
        config["custom_pipelines"]["dna-motif-detection"]["impl"]
        == "tasks_motif_pipeline.DNAMotifDetectionPipeline"
    )
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "modeling_motif.py").is_file()
    for auto in (AutoModel, AutoModelForTokenClassification):
        loaded = auto.from_pretrained(tmp_path).eval()
        assert type(loaded) is LongformerForMotifDetection
        with torch.no_grad():
            out = loaded(input_ids=ids, attention_mask=mask)
        # same weights; reloaded tensors may be unaligned, which changes the CPU kernels' rounding
        torch.testing.assert_close(out.logits, expected.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out.sequence_logits, expected.sequence_logits, atol=1e-4, rtol=1e-4)
    assert isinstance(AutoTokenizer.from_pretrained(tmp_path), DNATokenizer)


REMOTE = """
import sys
sys.modules['hf_sparse'] = None
sys.dont_write_bytecode = True
import json, torch, transformers
from transformers import AutoModel, AutoTokenizer, pipeline
try:
    import hf_sparse
except ImportError:
    print("hf_sparse unavailable")
folder = {folder!r}
model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
ids = tok({seq!r}, return_tensors="pt")
with torch.no_grad():
    out = model(**ids)
torch.save(out.logits, {result!r})
pipe = pipeline(model=folder, trust_remote_code=True)
res = pipe({seq!r} * 6, window=100, stride=60)
print(json.dumps({{"model": type(model).__module__, "tokenizer": type(tok).__module__, "task": pipe.task,
                  "pipeline": type(pipe).__module__, "windows": res["windows"]}}))
"""


def test_saved_folder_loads_without_the_package(tmp_path):
    """Model, tokenizer and pipeline from the folder alone (``trust_remote_code``), hf_sparse blocked."""
    model = motif_model(
        "sparse_transformer", conv_kernel_size=3, kmer_embedding=4, kmer_spectrum=3, base_token_ids=BASE_IDS
    )
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    DNATokenizer().save_pretrained(folder)
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config["auto_map"]["AutoTokenizer"][0] == "tokenization_dna.DNATokenizer"
    assert (folder / "tokenization_dna.py").is_file()
    seq = "ACGTTGCAAGGCTTAACGGATCCA"
    with torch.no_grad():
        expected = model(**DNATokenizer()(seq, return_tensors="pt")).logits
    script = REMOTE.format(folder=str(folder), seq=seq, result=str(tmp_path / "out.pt"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / "modules")
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "hf_sparse unavailable" in res.stdout
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert all("transformers_modules" in info[k] for k in ("model", "tokenizer", "pipeline")), info
    assert info["task"] == "dna-motif-detection" and info["windows"] == 2  # 144 bases: windows at 0 and 44
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected, rtol=1e-4, atol=1e-4)


def test_rotary_frequencies_are_recomputed_when_loading(tmp_path):
    """``inv_freq`` is a non-persistent buffer: from_pretrained must rebuild it (it once came back as
    uninitialised memory, which silently broke every reloaded rotary model)."""
    from hf_sparse import SparseTransformerConfig, SparseTransformerForMaskedLM
    from hf_sparse.models.sparse_transformer.modeling_sparse_transformer import RotaryEmbedding

    lm = SparseTransformerForMaskedLM(
        SparseTransformerConfig(vocab_size=20, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=64, position_embedding_type="rotary",
                                attention_pattern={"type": "sliding_window", "window": 8})
    )  # fmt: skip
    for model, auto in ((motif_model("sparse_transformer"), AutoModel), (lm, None)):
        folder = tmp_path / type(model).__name__
        model.save_pretrained(folder)
        loaded = (auto or type(model)).from_pretrained(folder)
        rotaries = [m for m in loaded.modules() if isinstance(m, RotaryEmbedding)]
        assert rotaries and all(torch.equal(m.inv_freq, m.compute_inv_freq()) for m in rotaries)


def test_changing_motif_names_at_load_derives_the_tags_again(tmp_path):
    """``from_pretrained(path, motif_names=[...], ignore_mismatched_sizes=True)``: before, id2label and the tagger kept
    the old 5 tags while the presence head had 3 outputs."""
    motif_model("sparse_transformer").save_pretrained(tmp_path / "old")
    names = ["CTCF", "SP1", "REST"]
    model = AutoModelForTokenClassification.from_pretrained(
        tmp_path / "old", motif_names=names, ignore_mismatched_sizes=True
    )
    tags = ["O", "B-CTCF", "I-CTCF", "B-SP1", "I-SP1", "B-REST", "I-REST"]
    assert list(model.config.id2label.values()) == tags
    assert model.config.label2id == {t: i for i, t in enumerate(tags)}
    assert model.token_classifier.out_features == 7 and model.sequence_head[-1].out_features == 3
    model.save_pretrained(tmp_path / "new")
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "new")
    assert reloaded.config.motif_names == names and reloaded.token_classifier.out_features == 7
    assert "_motif_tags" not in json.loads((tmp_path / "new" / "config.json").read_text())


@pytest.mark.parametrize(
    "kwargs", [{"num_labels": 7}, {"id2label": {0: "O", 1: "B-X", 2: "I-X"}}], ids=["num_labels", "id2label"]
)
def test_labels_that_motif_names_do_not_give_are_refused(kwargs, tmp_path):
    """Before: loaded with 7 / 3 tags while motif_names stayed [CTCF, SP1], and the saved folder failed to reload
    ("You set `ignore_mismatched_sizes` to `False`") because the config derives id2label from motif_names."""
    motif_model("sparse_transformer").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"does not match motif_names=\['CTCF', 'SP1'\].*change motif_names"):
        AutoModelForTokenClassification.from_pretrained(tmp_path, ignore_mismatched_sizes=True, **kwargs)
    config = motif_config()
    config.id2label = {0: "O", 1: "B-X", 2: "I-X"}
    with pytest.raises(ValueError, match="does not match motif_names"):
        LongformerForMotifDetection(config)
    assert AutoModelForTokenClassification.from_pretrained(tmp_path, num_labels=5).config.num_labels == 5


@pytest.mark.parametrize("kw", [{"kmer_spectrum": 2, "pooling": "mean"}, {"kmer_embedding": 3}])
def test_kmer_features_do_not_read_padding(kw):
    """Padding holding base ids (a collator's choice) is no base: before, it changed the spectrum (sequence logits)
    and the k-mer embedding of the last bases of a row without [SEP] (token logits by 0.17)."""
    torch.manual_seed(0)
    model = motif_model("sparse_transformer", base_token_ids=BASE_IDS, **kw)
    bases = [BASE_IDS[i] for i in (0, 1, 2, 3, 0, 0, 1, 3, 2, 2)]
    real = torch.tensor([[2] + bases])  # [CLS] 10 bases, no [SEP]
    padded = torch.cat([real, torch.full((1, 6), BASE_IDS[0])], 1)  # padding slots hold A
    mask = torch.tensor([[1] * 11 + [0] * 6])
    with torch.no_grad():
        alone, with_padding = model(real), model(padded, attention_mask=mask)
    torch.testing.assert_close(with_padding.logits[:, :11], alone.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(with_padding.sequence_logits, alone.sequence_logits, atol=1e-5, rtol=1e-5)
    if "kmer_spectrum" in kw:
        torch.testing.assert_close(model.kmer_spectrum(padded, mask), model.kmer_spectrum(real))


def test_an_adaptive_span_backbone_adds_its_penalty_in_training_and_has_no_global_tokens():
    """Before: the default global mask ([CLS]) met the backbone's ``adaptive_span layers have no global tokens``
    at the first forward, and the training loss left the span penalty out (the spans trained nothing)."""
    span = {"adaptive_span": {"max_span": 12, "ramp": 4, "init": 5, "loss_coef": 0.5}}
    with pytest.raises(
        ValueError, match="adaptive_span layers have no global tokens: set global_first_token=False"
    ):
        motif_config(backbone_overrides=span)
    torch.manual_seed(0)
    model = motif_model(global_first_token=False, global_every=None, pooling="mean", backbone_overrides=span)
    ids, mask = _batch()
    labels = torch.randint(0, 5, ids.shape, generator=torch.Generator().manual_seed(1))
    inputs = dict(input_ids=ids, attention_mask=mask, labels=labels, sequence_labels=torch.eye(2))
    with torch.no_grad():
        evaluation = model(**inputs).loss  # evaluation losses stay the task's
    loss = model.train()(**inputs).loss
    torch.testing.assert_close(loss, evaluation + model.backbone.adaptive_span_loss())
    loss.backward()
    spans = [p.grad for n, p in model.named_parameters() if "adaptive_span" in n]
    assert spans and all(g is not None and g.abs().sum() > 0 for g in spans)
