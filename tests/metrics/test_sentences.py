"""The rule-based sentence splitter: abbreviations, numbers, initials, quotes, ellipses, newlines."""

import pytest

from hf_sparse.tasks.summarization.sentences import sentence_spans, split_sentences

CASES = {
    "basic": ("Dr. Smith left. He ran! Did he?", ["Dr. Smith left.", "He ran!", "Did he?"]),
    "latin_and_figures": (
        "See Fig. 3 for details. Results (i.e. scores) improved, e.g. on Eq. 2. Done.",
        ["See Fig. 3 for details.", "Results (i.e. scores) improved, e.g. on Eq. 2.", "Done."],
    ),
    "et_al": (
        "Smith et al. (2019) showed this. It was found by Smith et al. We agree.",
        ["Smith et al. (2019) showed this.", "It was found by Smith et al.", "We agree."],
    ),
    "acronyms": (
        "The U.S. Army came. He lives in the U.S. The end.",
        ["The U.S. Army came.", "He lives in the U.S.", "The end."],
    ),
    "numbers": ("It was 3.5 km away. Pi is 3.14. Next.", ["It was 3.5 km away.", "Pi is 3.14.", "Next."]),
    "initials": (
        "J. R. R. Tolkien wrote it. Mr. and Mrs. Jones read it.",
        ["J. R. R. Tolkien wrote it.", "Mr. and Mrs. Jones read it."],
    ),
    "quotes_brackets": (
        'He said "Stop." Then he left. "Why?" she asked. (It was late.) Nobody knew.',
        ['He said "Stop."', "Then he left.", '"Why?" she asked.', "(It was late.)", "Nobody knew."],
    ),
    "ellipses": (
        "Wait... What happened? I think... maybe nothing!? Okay… Fine.",
        ["Wait...", "What happened?", "I think... maybe nothing!?", "Okay…", "Fine."],
    ),
    "transcript": (
        "Grad C: Nice .\nGrad D: OK .\nGrad A: to {disfmarker} to handle\nGrad B: Could I do that ? on the Robert ?",
        [
            "Grad C: Nice .",
            "Grad D: OK .",
            "Grad A: to {disfmarker} to handle",
            "Grad B: Could I do that ? on the Robert ?",
        ],
    ),
    "lowercase_speakers": ("user: hi there\nsystem: hello", ["user: hi there", "system: hello"]),
    "heading_line": (
        "1 Introduction\nThe statistical renaissance has produced tech. Taggers are used.",
        ["1 Introduction", "The statistical renaissance has produced tech.", "Taggers are used."],
    ),
    "hard_wrapped": (
        "A mass of fused rock and gray\nvolcanic dust.\n \n  Small is the moon.",
        ["A mass of fused rock and gray\nvolcanic dust.", "Small is the moon."],
    ),
    "blank_lines": (
        "title\n\n\nparagraph one   \n\n  paragraph two",
        ["title", "paragraph one", "paragraph two"],
    ),
    "list_markers": (
        "1. Introduction to things. 2. Methods are here.",
        ["1. Introduction to things.", "2. Methods are here."],
    ),
    "ambiguous_abbrev": (
        "Apple Inc. The company grew. Apples, pears, etc. are fruit. See No. 5 and pp. 3-9. I said no. Then left.",
        [
            "Apple Inc.",
            "The company grew.",
            "Apples, pears, etc. are fruit.",
            "See No. 5 and pp. 3-9.",
            "I said no.",
            "Then left.",
        ],
    ),
    "no_space_after_period": (
        "Email a@b.com or see U.S.-based sites. Thanks.",
        ["Email a@b.com or see U.S.-based sites.", "Thanks."],
    ),
    "lowercase_after_question": (
        '"Why?" he asked. "Now!" she said.',
        ['"Why?" he asked.', '"Now!" she said.'],
    ),
    "empty": ("", []),
    "whitespace": ("  \n\t ", []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_split_sentences(name):
    text, expected = CASES[name]
    assert split_sentences(text) == expected


@pytest.mark.parametrize("name", list(CASES))
def test_spans_are_offsets_of_the_sentences(name):
    text, expected = CASES[name]
    spans = sentence_spans(text)
    assert [text[s:e] for s, e in spans] == expected
    for (s0, e0), (s1, _) in zip(spans, spans[1:]):
        assert s0 < e0 <= s1
    assert all(not text[s].isspace() and not text[e - 1].isspace() for s, e in spans)


def test_rejects_non_string():
    with pytest.raises(TypeError, match="text must be a str"):
        split_sentences(["a list"])


def test_linear_on_a_long_transcript():
    import time

    text = "\n".join(f"Speaker {i % 4}: utterance number {i} . And more ?" for i in range(5000))
    start = time.perf_counter()
    sents = split_sentences(text)
    assert time.perf_counter() - start < 2.0
    assert len(sents) == 10000


LOWERCASED = {
    "terminal_before_lowercase": (
        "the cat sat. the dog ran! why? no.\nnew line",
        ["the cat sat.", "the dog ran!", "why?", "no.", "new line"],
    ),
    "abbreviations_stay": (
        "see e.g. the park and fig. 3 etc. the end. smith et al. (2019) agree.",
        ["see e.g. the park and fig. 3 etc.", "the end.", "smith et al. (2019) agree."],
    ),
    "ellipsis_and_decimals": ("wait... then 3.5 km. ok", ["wait...", "then 3.5 km.", "ok"]),
    "cased_text_unchanged_where_case_agrees": ("Dr. Smith left. He ran!", ["Dr. Smith left.", "He ran!"]),
}


@pytest.mark.parametrize("name", list(LOWERCASED))
def test_split_sentences_of_lowercased_text(name):
    text, expected = LOWERCASED[name]
    assert split_sentences(text, case_sensitive=False) == expected
    assert [text[s:e] for s, e in sentence_spans(text, case_sensitive=False)] == expected


def test_case_sensitive_default_keeps_lowercase_continuations():
    assert split_sentences("the cat sat. the dog ran.") == ["the cat sat. the dog ran."]
    with pytest.raises(TypeError, match="case_sensitive must be a bool"):
        split_sentences("a. b.", case_sensitive="no")
