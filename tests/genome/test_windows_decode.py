"""Segments (N runs skipped), window placement, and the streaming merge/decoder against one pass over the
whole sequence."""

import random
import re

import numpy as np
import pytest

from hf_sparse.genome.decode import SpanDecoder, WindowMerger
from hf_sparse.genome.fasta_index import MemoryFasta
from hf_sparse.genome.windows import (
    _Cursor,
    find_segments,
    iter_windows,
    n_runs,
    plan_windows,
    segments,
    window_starts,
)
from hf_sparse.tasks.motif.pipeline import decode_spans
from tests.models.motif_tiny import motif_config


@pytest.mark.parametrize("seed", range(5))
def test_n_runs_across_chunk_boundaries(seed):
    rng = random.Random(seed)
    for _ in range(200):
        recs = [
            (f"r{k}", "".join(rng.choice("ACGTNNNNn") for _ in range(rng.randint(0, 60)))) for k in range(3)
        ]
        size, min_run = rng.randint(1, 10), rng.randint(1, 4)
        chunks = [(n, i, s[i : i + size]) for n, s in recs for i in range(0, len(s), size)]
        got = n_runs(chunks, min_run)
        for name, seq in recs:
            expected = [m.span() for m in re.finditer("[Nn]+", seq) if len(m.group()) >= min_run]
            assert got.get(name, []) == expected


def test_segments_and_window_starts():
    assert segments(100, [(0, 10), (40, 50), (90, 100)]) == [(10, 40), (50, 90)]
    assert segments(5, []) == [(0, 5)]
    assert window_starts(10, 4, 3) == [0, 3, 6]
    assert window_starts(11, 4, 3) == [0, 3, 6, 7]  # the last window is aligned to the end
    assert window_starts(3, 4, 3) == [0]


def test_windows_cover_each_segment_and_settle_each_base_once():
    seq = "ACGT" * 30 + "N" * 20 + "ACG" * 40 + "NN" + "T" * 17
    fa = MemoryFasta([("a", seq), ("b", "AC" * 50), ("c", "N" * 30)])
    segs = find_segments(fa, skip_n=5)
    assert segs == [("a", 0, 120), ("a", 140, 279), ("b", 0, 100)]
    settled = []
    for w, bases in iter_windows(fa, window=32, stride=24, skip_n=5, chunk=7):
        assert bases == {"a": seq, "b": "AC" * 50}[w.record][w.start : w.end]
        assert w.seg_start <= w.start < w.final <= w.end <= w.seg_end
        settled += [(w.record, p) for p in range(w.start, w.final)]
    expected = [(r, p) for r, a, b in segs for p in range(a, b)]
    assert settled == expected


def test_the_cursor_holds_one_window_and_one_chunk_across_a_skipped_n_run():
    seq = "ACGT" * 25 + "N" * 5_000 + "ACGT" * 25
    fa = MemoryFasta([("a", seq), ("gap", "N" * 300), ("b", "ACG" * 40)])
    held = []

    def chunks():
        for chunk in fa.iter_chunks(7):
            held.append(len(cursor._buf))  # what the cursor holds when it asks for one more chunk
            yield chunk

    cursor = _Cursor(chunks())
    windows = list(plan_windows(find_segments(fa, skip_n=100), window=32, stride=24))
    for w in windows:
        assert (
            cursor.read(w.record, w.start, w.end)
            == dict([("a", seq), ("b", "ACG" * 40)])[w.record][w.start : w.end]
        )
    assert len(windows) == 13 and len(held) > 700
    assert max(held) < 32 + 7


def test_bad_window_arguments():
    with pytest.raises(ValueError, match="stride must be <= window"):
        list(plan_windows([("a", 0, 10)], 4, 5))
    with pytest.raises(ValueError, match="window must be an int >= 1"):
        list(plan_windows([("a", 0, 10)], 0, 1))


def planted_probs(n, config, rng, spans):
    """Noisy per-base tag probabilities with strong B/I tags on ``spans`` (motif, start)."""
    probs = rng.dirichlet(np.ones(config.num_labels) * 0.7, size=n)
    probs[:, 0] += 1.0
    for motif, s in spans:
        length = config.motif_lengths[motif] if config.span_decoding == "fixed_length" else rng.integers(1, 9)
        probs[s, config.label2id[f"B-{motif}"]] += 6
        probs[s + 1 : s + length, config.label2id[f"I-{motif}"]] += 6
    return probs / probs.sum(1, keepdims=True)


@pytest.mark.parametrize("how", ["bio", "fixed_length"])
@pytest.mark.parametrize("seed", range(4))
def test_streaming_decoder_equals_one_pass(how, seed):
    from hf_sparse.tasks.motif.data import builtin_motifs

    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    cfg = motif_config(motifs=motifs, span_decoding=how)
    rng = np.random.default_rng(seed)
    n = 3000
    spans = [
        ("CTCF" if k % 2 else "SP1", int(s))
        for k, s in enumerate(sorted(rng.choice(n - 40, 60, replace=False)))
    ]
    probs = planted_probs(n, cfg, rng, spans)
    bases = "".join(rng.choice(list("ACGT"), n))
    expected = decode_spans(probs, cfg, how)
    assert len(expected) > 20
    dec, got, pos = SpanDecoder(cfg, start=1000), [], 0
    while pos < n:
        k = int(rng.integers(1, 200))
        got += dec.push(1000 + pos, probs[pos : pos + k], bases[pos : pos + k])
        pos += k
    got += dec.finish()
    assert [(s["motif"], s["start"] - 1000, s["end"] - 1000) for s in got] == expected
    assert dec.pending < 200 + 30  # memory stays bounded, whatever the sequence length


@pytest.mark.parametrize("how", ["bio", "fixed_length"])
def test_a_long_region_the_model_keeps_tagging_decodes_as_one_pass(how):
    """A region that stays open for many pushes (a repeat the model tags throughout: the decoder's buffer
    grows and is trimmed many times) gives the spans, scores and strands of one pass over the sequence."""
    from hf_sparse.tasks.motif.data import builtin_motifs
    from hf_sparse.tasks.motif.pipeline import span_tags, strand_of

    motifs = {m.name: m.counts.tolist() for m in builtin_motifs(["CTCF", "SP1"])}
    cfg = motif_config(motifs=motifs, span_decoding=how)
    rng = np.random.default_rng(0)
    n, run = 6000, range(700, 5300)  # a 4.6 kb run of CTCF tags: one candidate region in both decodings
    probs = rng.dirichlet(np.ones(cfg.num_labels), size=n) * 0.2
    probs[:, 0] += 1.0
    b, i = cfg.label2id["B-CTCF"], cfg.label2id["I-CTCF"]
    probs[run.start : run.stop, i] += 2.0 if how == "bio" else 1.5
    probs[run.start : run.stop, b] += 0.0 if how == "bio" else 1.5
    probs[run.start : run.stop : 97, b] += 3.0  # bio: B tags cut the run into spans
    probs /= probs.sum(1, keepdims=True)
    bases = "".join(rng.choice(list("ACGT"), n))
    expected = []
    for motif, s, e in decode_spans(probs, cfg, how):
        score = float(probs[np.arange(s, e), span_tags(probs, cfg, how, motif, s, e)].mean())
        strand = strand_of(bases[s:e].upper(), motifs[motif])
        expected.append({"motif": motif, "start": s, "end": e, "strand": strand, "score": round(score, 4)})
    assert len(expected) > 20
    dec, got, pos = SpanDecoder(cfg, start=0), [], 0
    held = 0
    while pos < n:
        k = int(rng.integers(1, 120))
        got += dec.push(pos, probs[pos : pos + k], bases[pos : pos + k])
        held = max(held, dec.pending)
        pos += k
    got += dec.finish()
    assert got == expected
    assert held > 0.9 * len(run)  # the region was held open to (about) its end


def test_merger_takes_the_window_farthest_from_an_edge():
    from hf_sparse.genome.windows import Window

    m = WindowMerger(0, 1)
    w1, w2 = (
        Window(
            "a",
            0,
            14,
            0,
            10,
            6,
        ),
        Window("a", 0, 14, 6, 14, 14),
    )
    first = m.add(w1, np.full((10, 1), 1.0), "A" * 10)
    assert first[0] == 0 and first[1].ravel().tolist() == [1.0] * 6
    start, probs, _ = m.add(w2, np.full((8, 1), 2.0), "C" * 8)
    # bases 6..9: margin in w1 is 3,2,1,0 and in w2 0,1,2,3 -> w1 keeps 6 (tie: earlier) and 7; w2 takes 8, 9
    assert start == 6 and probs.ravel().tolist() == [1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
