"""dna-motif-detection pipeline: windowing and merging of long sequences, span output, k-mer models,
sequence scores, batching and errors.

A *rule model* (a tiny real model whose forward is replaced by a rule on the input tokens) makes the
expected spans exact: every G base is tagged as motif CTCF (B- on the first G of a run, I- after),
so the spans are the G runs of the input, wherever the windows cut them.
"""

import numpy as np
import pytest
import torch
from transformers import pipeline

import hf_sparse  # noqa: F401  (registers the pipeline)
from hf_sparse.tasks.motif.pipeline import (
    DNAMotifDetectionPipeline,
    fixed_length_spans,
    strand_of,
)
from hf_sparse.tokenization_dna import DNATokenizer
from hf_sparse.utils.labels import spans_from_bio
from tests.models.motif_tiny import motif_model
from tests.pipelines.outputs import assert_same_outputs

G = 7  # token id of G in DNATokenizer(kmer=1)


def g_runs(seq: str) -> list[tuple[int, int]]:
    runs, i = [], 0
    while i < len(seq):
        if seq[i] == "G":
            j = i
            while j < len(seq) and seq[j] == "G":
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def rule_model(max_tokens=66, kmer=1, tokenizer=None, **kw):
    """Tags G bases (or k-mer tokens containing G) as CTCF; counts the windows it sees."""
    model = motif_model(max_tokens=max_tokens, motif_names=["CTCF", "SP1"], kmer=kmer, **kw)
    model.calls = []

    def forward(input_ids=None, attention_mask=None, **_):
        model.calls.append(input_ids.shape)
        if kmer == 1:
            is_g = input_ids == G
        else:
            toks = [tokenizer.convert_ids_to_tokens(row.tolist()) for row in input_ids]
            is_g = torch.tensor([[t.startswith("G") and "[" not in t for t in row] for row in toks])
        prev = torch.cat([torch.zeros_like(is_g[:, :1]), is_g[:, :-1]], 1)
        logits = torch.full((*input_ids.shape, 5), -5.0)
        logits[..., 0] = 5.0
        logits[is_g & ~prev] = torch.tensor([-5.0, 5.0, -5.0, -5.0, -5.0])  # B-CTCF
        logits[is_g & prev] = torch.tensor([-5.0, -5.0, 5.0, -5.0, -5.0])  # I-CTCF
        seq_logits = torch.tensor([[2.0, -2.0]]).expand(input_ids.shape[0], 2)
        return type("Out", (), {"logits": logits, "sequence_logits": seq_logits})()

    model.forward = forward
    return model


def make_pipe(model, tokenizer=None):
    return pipeline("dna-motif-detection", model=model, tokenizer=tokenizer or DNATokenizer())


def random_seq(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return "".join("ACT"[i] for i in torch.randint(0, 3, (n,), generator=g).tolist())


def test_long_sequence_is_windowed_and_runs_across_window_edges_are_found_whole():
    model = rule_model(max_tokens=66)  # 64 bases per window
    pipe = make_pipe(model)
    assert isinstance(pipe, DNAMotifDetectionPipeline) and pipe.max_bases() == 64
    seq = list(random_seq(300))
    for start, length in [(10, 5), (45, 8), (60, 9), (95, 4), (150, 12), (290, 10)]:  # 60..69 crosses 64
        seq[start : start + length] = "G" * length
    seq = "".join(seq)
    out = pipe(seq)
    assert out["windows"] == len(model.calls) > 1
    assert all(shape[1] <= 66 for shape in model.calls)  # nothing longer than the model allows
    assert [(s["start"], s["end"]) for s in out["spans"]] == g_runs(seq)
    assert {s["motif"] for s in out["spans"]} == {"CTCF"}
    assert all(s["score"] > 0.99 for s in out["spans"])
    # lower-case, ambiguity codes and whitespace follow the tokenizer's rules; positions skip whitespace
    messy = seq[:100].lower() + "\n" + seq[100:]
    assert pipe(messy)["spans"] == out["spans"]


@pytest.mark.parametrize("window,stride", [(64, 16), (40, 38), (33, 7), (64, 62)])
def test_every_window_and_stride_gives_the_same_spans(window, stride):
    """Overlapping windows (stride < window): every base is predicted with context on both sides."""
    seq = "".join(("G" * (i % 7 + 1)) + random_seq(13, seed=i) for i in range(20))
    out = make_pipe(rule_model())(seq, window=window, stride=stride)
    assert [(s["start"], s["end"]) for s in out["spans"]] == g_runs(seq)


def test_short_sequence_is_one_window_and_batched_calls_agree():
    model = rule_model()
    pipe = make_pipe(model)
    seqs = ["ACGGGTA", random_seq(200, 1) + "GGG", "TTTT"]
    single = [pipe(s) for s in seqs]
    assert single[0]["windows"] == 1 and single[0]["spans"][0]["start"] == 2
    assert pipe(seqs) == single
    assert pipe(seqs, batch_size=3) == single


@pytest.mark.parametrize("kind", ["sparse_transformer", "longformer"])
@pytest.mark.parametrize("sequence_task", [None, "motif_presence"])
def test_batched_equals_unbatched(kind, sequence_task):
    """Windows of sequences of different lengths (one to several windows each) share forward passes."""
    torch.manual_seed(0)
    model = motif_model(kind, max_tokens=66, motif_names=["CTCF", "SP1"], sequence_task=sequence_task)
    with torch.no_grad():  # a spread-out tag head, so that an untrained model predicts spans
        for p in model.token_classifier.parameters():
            p.normal_(0.0, 2.0)
    tokenizer = DNATokenizer()
    seqs = [random_seq(n, seed=n) for n in (7, 64, 150, 33, 301)]
    one = make_pipe(model, tokenizer)(seqs, batch_size=1, min_score=0.0)
    assert [o["windows"] for o in one] == [1, 1, 3, 1, 6]
    assert any(o["spans"] for o in one)
    assert_same_outputs(make_pipe(model, tokenizer)(seqs, batch_size=3, min_score=0.0), one)
    built = pipeline("dna-motif-detection", model=model, tokenizer=tokenizer, batch_size=3)
    assert_same_outputs(built(seqs), one)
    assert_same_outputs(built(seqs[4]), one[4])  # one sequence's windows are batched too


def test_left_padding_tokenizer_gives_the_same_outputs():
    """Batched windows are padded on the right whatever the tokenizer's padding side (each window's bases are
    read from the start of its row), and the user's tokenizer keeps its setting."""
    torch.manual_seed(0)
    model = motif_model(max_tokens=66, motif_names=["CTCF", "SP1"], sequence_task="motif_presence")
    with torch.no_grad():
        for p in model.token_classifier.parameters():
            p.normal_(0.0, 2.0)
    seqs = [random_seq(n, seed=n) for n in (7, 64, 150, 33)]
    one = make_pipe(model, DNATokenizer())(seqs, batch_size=1, min_score=0.0)
    left = DNATokenizer(padding_side="left")
    assert_same_outputs(make_pipe(model, left)(seqs, batch_size=4, min_score=0.0), one)
    assert left.padding_side == "left"


def test_sequence_scores_and_strand():
    model = rule_model()
    pipe = make_pipe(model)
    out = pipe("ACGT" * 40)
    assert set(out["sequence_scores"]) == {"CTCF", "SP1"}
    assert out["sequence_scores"]["CTCF"] == pytest.approx(torch.sigmoid(torch.tensor(2.0)).item(), abs=1e-4)
    # strand: a site equal to the motif's consensus is '+', its reverse complement '-'
    counts = [[10, 0, 0, 0], [0, 10, 0, 0], [0, 0, 10, 10], [0, 0, 0, 0]]  # consensus ACGG
    assert strand_of("ACGG", counts) == "+" and strand_of("CCGT", counts) == "-"
    assert strand_of("ACG", counts) is None


def test_classification_head_gives_a_label():
    model = motif_model(max_tokens=66, motif_names=[], sequence_task="classification",
                        sequence_label_names=["non_promoter", "promoter"])  # fmt: skip
    out = make_pipe(model)("ACGT" * 50)
    assert out["spans"] == [] and out["label"] in ("non_promoter", "promoter")
    assert sum(out["sequence_scores"].values()) == pytest.approx(1.0, abs=1e-3)
    assert out["windows"] == 4  # 200 bases, windows of 64 every 48


def test_kmer_model_spans_are_in_bases():
    tok3 = DNATokenizer(kmer=3)
    model = rule_model(max_tokens=34, kmer=3, tokenizer=tok3, backbone_overrides={"vocab_size": len(tok3)})
    pipe = make_pipe(model, tok3)
    assert pipe.max_bases() == 96
    seq = "ACT" * 10 + "GAA" + "GCT" + "ACT" * 40 + "GTT"  # k-mer tokens starting with G
    out = pipe(seq)
    assert [(s["start"], s["end"]) for s in out["spans"]] == [(30, 36), (156, 159)]
    assert out["windows"] == 2


def test_fixed_length_decoding_takes_the_best_motif_length_spans():
    id2label = {0: "O", 1: "B-X", 2: "I-X", 3: "B-Y", 4: "I-Y"}
    rng = np.random.default_rng(0)
    for _ in range(20):  # agrees with brute force over all labellings of 9 bases
        logp = np.log(rng.dirichlet(np.ones(5), size=9))
        got = fixed_length_spans(logp, id2label, {"X": 3, "Y": 2})
        assert got == brute_force(logp, id2label, {"X": 3, "Y": 2})
    # argmax would give a 4-base X (B I I I); motif X is 3 long, so the best 3-base span is taken
    probs = np.full((8, 5), 0.01)
    probs[:, 0] = 0.9
    probs[2] = [0.05, 0.9, 0.02, 0.02, 0.01]
    probs[3:6, 2], probs[3:6, 0] = 0.9, 0.05
    probs[5, 2], probs[5, 0] = 0.5, 0.45
    assert spans_from_bio([id2label[i] for i in probs.argmax(-1)]) == [("X", 2, 6)]
    assert fixed_length_spans(np.log(probs), id2label, {"X": 3, "Y": 2}) == [("X", 2, 5)]
    assert fixed_length_spans(np.log(probs), id2label, {"X": 30, "Y": 20}) == []  # longer than the sequence
    with pytest.raises(ValueError, match="missing"):
        fixed_length_spans(np.log(probs), id2label, {"X": 3})


def brute_force(logp, id2label, lengths):
    """Best labelling by enumerating every set of non-overlapping fixed-length spans."""
    col = {t: i for i, t in id2label.items()}
    n, best = len(logp), (-np.inf, [])

    def rec(i, score, spans):
        nonlocal best
        if i == n:
            best = max(best, (score, list(spans)), key=lambda x: x[0])
            return
        rec(i + 1, score + logp[i, col["O"]], spans)
        for name, length in lengths.items():
            if i + length <= n:
                s = logp[i, col[f"B-{name}"]] + sum(
                    logp[j, col[f"I-{name}"]] for j in range(i + 1, i + length)
                )
                rec(i + length, score + s, [*spans, (name, i, i + length)])

    rec(0, 0.0, [])
    return best[1]


def test_pipeline_fixed_length_decoding_from_the_config():
    model = rule_model(motifs={"CTCF": [[1, 1, 1]] * 4, "SP1": [[1, 1]] * 4}, span_decoding="fixed_length")
    pipe = make_pipe(model)
    out = pipe("AAGGGGGGGAA")  # a 7-G run: argmax gives one 7-base span, CTCF is 3 bases long
    assert [(s["start"], s["end"]) for s in out["spans"]] == [(2, 5), (5, 8)]
    assert [(s["start"], s["end"]) for s in pipe("AAGGGGGGGAA", span_decoding="bio")["spans"]] == [(2, 9)]
    with pytest.raises(ValueError, match="span_decoding"):
        pipe("ACGT", span_decoding="greedy")


def test_fixed_length_without_motif_lengths_fails_before_any_window_runs():
    model = rule_model()  # no motif counts, so no motif lengths
    pipe = make_pipe(model)
    with pytest.raises(
        ValueError, match=r"fixed-length decoding needs the length of every motif; missing \['CTCF', 'SP1'\]"
    ):
        pipe("ACGT" * 100, span_decoding="fixed_length")
    assert model.calls == []


@pytest.mark.parametrize(
    "inputs,kwargs,error,match",
    [
        ("", {}, ValueError, "empty"),
        ("  \n", {}, ValueError, "empty"),
        ("ACGTXACGT", {}, ValueError, "'X' at position 4"),
        ("ACGU", {}, ValueError, "'U' at position 3"),
        (12345, {}, TypeError, "must be a str"),
        (b"ACGT", {}, TypeError, "must be a str"),
        ("ACGT", {"window": 65}, ValueError, r"window must be an int in \[1, 64\]"),
        ("ACGT", {"window": 0}, ValueError, "window"),
        ("ACGT", {"stride": 0}, ValueError, "stride"),
        ("ACGT", {"window": 10, "stride": 11}, ValueError, "stride"),
        ("ACGT", {"min_score": 2}, ValueError, "min_score"),
    ],
)
def test_bad_input_is_a_clear_error(inputs, kwargs, error, match):
    pipe = make_pipe(rule_model())
    with pytest.raises(error, match=match):
        pipe(inputs, **kwargs)


def test_min_score_drops_weak_spans():
    model = rule_model()
    pipe = make_pipe(model)
    assert pipe("AAGGGAA")["spans"] and not pipe("AAGGGAA", min_score=1.0)["spans"]


def test_empty_list_and_unknown_options_are_clear_errors():
    pipe = make_pipe(rule_model())
    with pytest.raises(ValueError, match="no sequences"):
        pipe([])
    with pytest.raises(TypeError, match=r"unknown argument\(s\) \['windw'\].*'batch_size', 'num_workers'\]"):
        pipe("ACGT", windw=10)
    with pytest.raises(ValueError, match="progress must be"):
        pipe("ACGT", progress="yes")


def test_progress_bar_over_many_windows_and_inputs(capsys):
    pipe = make_pipe(rule_model())
    seq = random_seq(2000)  # 64-base windows: ~40 windows
    quiet = pipe(seq, progress=False)
    assert "dna-motif-detection" not in capsys.readouterr().err
    shown = pipe(seq)  # automatic: many windows
    err = capsys.readouterr().err
    assert "dna-motif-detection (2,000 bases)" in err and quiet == shown
    assert pipe("ACGG") and "dna-motif-detection" not in capsys.readouterr().err  # one window: no bar
    many = pipe([random_seq(50, seed=i) for i in range(20)])
    assert len(many) == 20 and "dna-motif-detection" in capsys.readouterr().err
    assert pipe([random_seq(50, seed=i) for i in range(20)], progress=False) == many
    assert "dna-motif-detection" not in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["sparse_transformer", "longformer"])
def test_kmer_sequence_just_short_of_a_window_fits_the_model(kind):
    """kmer=3, 32 tokens per window: 95 bases in one window would be 31 k-mers + 2 single bases = 33 tokens;
    they are read in two overlapping windows of whole k-mers instead (absolute positions: any extra token
    is out of range)."""
    tok3 = DNATokenizer(kmer=3)
    extra = {"position_embedding_type": "absolute"} if kind == "sparse_transformer" else {}
    model = motif_model(kind, max_tokens=34, kmer=3, backbone_overrides={"vocab_size": len(tok3), **extra})
    pipe = make_pipe(model, tok3)
    assert pipe.max_bases() == 96
    for n, windows in [(92, 1), (94, 1), (95, 2), (96, 1), (97, 2)]:
        assert pipe(random_seq(n, seed=n))["windows"] == windows, n


def test_kmer_windows_of_a_sequence_just_short_of_a_window_give_spans_in_bases():
    tok3 = DNATokenizer(kmer=3)
    model = rule_model(max_tokens=34, kmer=3, tokenizer=tok3, backbone_overrides={"vocab_size": len(tok3)})
    # 95 bases: windows 0..93 and 2..95; GGG at 30 is a k-mer of the first, GGG at 71 one of the second
    seq = "ACT" * 10 + "GGG" + "ACT" * 12 + "AC" + "GGG" + "ACT" * 7
    out = make_pipe(model, tok3)(seq)
    assert len(seq) == 95 and out["windows"] == 2
    assert max(shape[1] for shape in model.calls) <= 34  # [CLS] + 32 tokens + [SEP]
    assert [(s["start"], s["end"]) for s in out["spans"]] == [(30, 33), (71, 74)]


def test_window_shorter_than_a_kmer_is_a_clear_error():
    tok3 = DNATokenizer(kmer=3)
    pipe = make_pipe(rule_model(max_tokens=34, kmer=3, tokenizer=tok3,
                                backbone_overrides={"vocab_size": len(tok3)}), tok3)  # fmt: skip
    with pytest.raises(ValueError, match=r"window must be at least one k-mer \(3 bases\).* got 2"):
        pipe("ACGTACGTA", window=2)
    assert pipe("ACGTACGTA", window=3, stride=3)["windows"] == 3


def test_span_started_by_an_i_tag_is_scored_with_the_i_tag():
    """Every G is I-CTCF with probability ~1 (no B- anywhere): the spans are the G runs, each scored by the
    tags decoded on it, not by P(B-CTCF) on its first base."""
    model = motif_model(max_tokens=66, motif_names=["CTCF", "SP1"])

    def forward(input_ids=None, attention_mask=None, **_):
        logits = torch.full((*input_ids.shape, 5), -9.0)
        logits[..., 0] = 9.0
        logits[input_ids == G] = torch.tensor([-9.0, -9.0, 9.0, -9.0, -9.0])  # I-CTCF
        return type("Out", (), {"logits": logits, "sequence_logits": torch.zeros(input_ids.shape[0], 2)})()

    model.forward = forward
    pipe = make_pipe(model)
    out = pipe("AAGAAGGAA")
    assert [(s["start"], s["end"], s["score"]) for s in out["spans"]] == [(2, 3, 1.0), (5, 7, 1.0)]
    assert len(pipe("AAGAAGGAA", min_score=0.6)["spans"]) == 2
    # a span started by B- keeps its score: the mean of P(B-CTCF) and P(I-CTCF) on its bases
    (span,) = make_pipe(rule_model())("AAGGGAA")["spans"]
    assert span["score"] == round(float(torch.softmax(torch.tensor([-5.0, 5, -5, -5, -5]), 0)[1]), 4)


@pytest.mark.parametrize("kwargs", [{}, {"progress": False}, {"batch_size": 4}])
def test_a_tuple_of_sequences_is_read_as_a_list(kwargs):
    pipe = make_pipe(rule_model())
    seqs = ("ACGGT", "GG", "TTAGGCA")
    assert pipe(seqs, **kwargs) == pipe(list(seqs), **kwargs)


def test_unknown_constructor_option_is_a_type_error():
    """A misspelled constructor option must not be dropped (it was, until the first call's options met it)."""
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['min_scroe'\]"):
        pipeline("dna-motif-detection", model=rule_model(), tokenizer=DNATokenizer(), min_scroe=0.9)
    strict = pipeline("dna-motif-detection", model=rule_model(), tokenizer=DNATokenizer(), min_score=1.0)
    assert not strict("AAGGGAA")["spans"]  # a known one is the default of every call


def test_model_in_training_mode_is_put_in_eval_mode():
    torch.manual_seed(0)
    model = motif_model(
        backbone_overrides={"hidden_dropout_prob": 0.3, "attention_probs_dropout_prob": 0.3},
        classifier_dropout=0.3,
    ).train()
    pipe = make_pipe(model)
    assert not model.training
    seq = "ACGTTAGCCACCAGGGGGCGCTAT" * 4
    assert pipe(seq) == pipe(seq)


def test_constructor_progress_is_the_default_of_every_call(capsys):
    seqs = [random_seq(50, seed=i) for i in range(20)]
    quiet = pipeline("dna-motif-detection", model=rule_model(), tokenizer=DNATokenizer(), progress=False)
    capsys.readouterr()
    assert len(quiet(seqs)) == 20 and "dna-motif-detection" not in capsys.readouterr().err
    assert quiet(seqs[:2], progress=True)  # the call's progress wins
    assert "dna-motif-detection" in capsys.readouterr().err


@pytest.mark.parametrize(
    "pattern,rows",
    [
        ({"type": "bigbird", "block": 8, "seed": 0}, [1, 1, 1]),
        ({"type": "sliding_window", "window": 16}, [3]),
    ],
    ids=["bigbird", "sliding_window"],
)
def test_random_blocks_give_the_same_outputs_whatever_the_batch_size(pattern, rows):
    """BigBird draws its random blocks for the padded length: a padded row attended other keys than alone, so
    such a model runs one row per forward pass; other patterns keep sharing passes."""
    from hf_sparse.pipelines.batching import length_dependent_attention

    torch.manual_seed(0)
    model = motif_model(backbone_overrides={"attention_pattern": pattern, "initializer_range": 0.5})
    assert length_dependent_attention(model) == (pattern["type"] == "bigbird")
    seqs = [random_seq(n, seed=n) for n in (40, 128, 70)]
    pipe = make_pipe(model)
    one = [pipe(s) for s in seqs]
    seen = []
    model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].shape[0]), with_kwargs=True)
    assert_same_outputs(pipe(seqs, batch_size=3), one)
    assert seen == rows
