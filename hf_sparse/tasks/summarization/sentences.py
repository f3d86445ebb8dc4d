"""A rule-based sentence splitter that needs no downloads (nltk's punkt is not available offline).

``sentence_spans(text)`` returns ``(start, end)`` character offsets, ``split_sentences(text)`` the
substrings ``text[start:end]``. Sentences are returned verbatim (inner line breaks are kept), stripped
of surrounding whitespace; empty and whitespace-only pieces are dropped.

Rules, applied left to right. A *boundary candidate* is either a run of whitespace containing a line
break, or terminal punctuation (``.``, ``!``, ``?``, ``…``, or a run of them) followed by optional
closing quotes/brackets (``" ' ” ’ ) ] } »``) and then whitespace or the end of the text. The *next
word* is the first non-space token after the candidate; it "starts lowercase" when its first
character after opening quotes/brackets is a lowercase letter.

Line breaks
  1. Two or more line breaks (a blank or whitespace-only line) always end a sentence.
  2. A single line break ends a sentence unless the next line starts lowercase (a hard-wrapped
     sentence continues). A next line that looks like a transcript turn (``Speaker A: text``, at
     most three words before the colon) always ends the sentence, whatever its case. So headings and
     one-utterance-per-line transcripts split; hard-wrapped prose continuing with a capitalised word
     splits too (the price of not guessing from line lengths).

Terminal punctuation (never a boundary when the next word starts lowercase, and never without
whitespace after it: ``3.5``, ``e.g.,``, ``U.S.-based``, ``example.com`` are untouched)
  3. ``?`` and ``!`` (alone, repeated or mixed, e.g. ``?!``) end a sentence.
  4. An ellipsis (``...``, ``..``, ``…``) ends a sentence only when the next word starts with an
     uppercase letter or a digit.
  5. A period ends a sentence, except after
     a. a *title or reference abbreviation* that does not end sentences: ``Mr. Mrs. Ms. Dr. Prof.
        e.g. i.e. cf. vs. viz. Fig. Figs. Eq. Eqs. Sec. Ch. Tab. Vol. approx.`` ... (see
        ``NEVER_FINAL``), and ``No. p. pp. Art.`` when a digit follows (``No. 5``, ``pp. 3-9``);
     b. an *ambiguous abbreviation* (``et al. etc. Inc. Ltd. Co. Corp. Jr. Sr. St.``, months, a
        single-letter initial ``J.``, a dotted acronym ``U.S.``): it ends a sentence only when the next
        word is a common sentence opener (``The``, ``This``, ``We``, ``It``, ``However``, ... see
        ``SENTENCE_OPENERS``): ``J. Smith``, ``U.S. Army``, ``et al. (2019)`` do not split,
        ``Apple Inc. The company`` and ``Smith et al. We`` do;
     c. a list marker that is the first token of a sentence (``1.``, ``iv.``, ``A.``).

Lowercased text (``case_sensitive=False``, e.g. a lowercasing tokenizer's decoded summaries, which ROUGE
scores): a lowercase next word carries no information there, so every next word is read as if it were
capitalised: terminal punctuation followed by whitespace ends a sentence whatever the next word's case, and
so does a single line break. The abbreviation rules (5a-c) still apply: ``e.g. the`` does not split,
``etc. the`` does (``the`` read as ``The``, a sentence opener).
"""

from __future__ import annotations

import re

# Abbreviations (lowercase, without the final period) after which a period never ends a sentence.
NEVER_FINAL = frozenset(
    """mr mrs ms mx dr prof rev hon gov sen rep gen col lt sgt capt cmdr adm maj messrs mme mlle
    e.g i.e cf vs viz approx ca fig figs eq eqs sec secs ch chap tab ref refs vol vols ed eds
    dept univ est resp esp ibid op cit""".split()
)
# Abbreviations that never end a sentence when a digit follows (they are also ordinary words).
NEVER_FINAL_BEFORE_DIGIT = frozenset("no nos p pp art arts nr".split())
# Abbreviations that may end a sentence: they split only before a common sentence opener.
AMBIGUOUS = frozenset(
    """al etc inc ltd co corp jr sr st mt bros plc llc ave blvd rd
    jan feb mar apr jun jul aug sep sept oct nov dec""".split()
)
# Capitalised words that commonly open a sentence (used after ambiguous abbreviations only).
SENTENCE_OPENERS = frozenset(
    """The This That These Those It Its He She We They I You There Here In On At For But And Or So
    A An As If When While However Thus Therefore Moreover Furthermore Finally First Second Third
    Then After Before Our My His Her Their Your What Which Who How Why Where To With By From One
    Some All Each Most Many Such Both Although Though Since Because Also Yet No Not Nevertheless
    Instead Hence Indeed Further Similarly Unlike Despite During Using Let Given Note""".split()
)

_OPENERS = "\"'“‘([{«"
_CLOSERS = "\"'”’)]}»"
_TERMINAL_RE = re.compile(r"[.!?…]+[" + re.escape(_CLOSERS) + r"]*(?=\s|$)")
_NEWLINE_RUN_RE = re.compile(r"[ \t\f\v\r]*\n\s*")
_SPEAKER_RE = re.compile(r"[^\W\d_][\w'.\-]*(?:[ \t]+[\w'.\-]+){0,2}[ \t]*:[ \t]")
_ACRONYM_RE = re.compile(r"(?:[^\W\d_]\.){2,}")
_LIST_MARKER_RE = re.compile(r"(?:\d{1,3}|[ivxlcdm]{1,5}|[IVXLCDM]{1,5}|[^\W\d_])\.")


_WORD_RE = re.compile(r"\S+")


def _next_word(text: str, pos: int) -> str:
    """The whitespace-delimited token starting at the first non-space character at or after ``pos``."""
    m = _WORD_RE.search(text, pos)
    return m.group(0) if m else ""


def _token_start(text: str, pos: int) -> int:
    """Start of the whitespace-delimited token that contains position ``pos``."""
    while pos > 0 and not text[pos - 1].isspace():
        pos -= 1
    return pos


def _starts_lowercase(word: str) -> bool:
    stripped = word.lstrip(_OPENERS)
    return bool(stripped) and stripped[0].islower()


def _capitalised(word: str) -> str:
    """``word`` with its first letter (after opening quotes/brackets) in uppercase."""
    stripped = word.lstrip(_OPENERS)
    return word[: len(word) - len(stripped)] + stripped[:1].upper() + stripped[1:]


def _period_ends_sentence(token: str, next_word: str, first_token: bool) -> bool:
    """Rule 5: does the period closing ``token`` (e.g. ``"(Fig."``) end a sentence before ``next_word``?"""
    core = token.lstrip(_OPENERS)
    if first_token and _LIST_MARKER_RE.fullmatch(core):
        return False  # 5c: "1. Introduction"
    word = core[:-1].lower()  # without the final period
    if word in NEVER_FINAL:
        return False  # 5a
    bare_next = next_word.lstrip(_OPENERS)
    if word in NEVER_FINAL_BEFORE_DIGIT and bare_next[:1].isdigit():
        return False  # 5a: "No. 5"
    is_initial = len(word) == 1 and word.isalpha() and core[0].isupper()
    if word in AMBIGUOUS or is_initial or _ACRONYM_RE.fullmatch(core):
        return next_word.rstrip(",;:.!?") in SENTENCE_OPENERS  # 5b
    return True


def sentence_spans(text: str, case_sensitive: bool = True) -> list[tuple[int, int]]:
    """Character offsets ``(start, end)`` of the sentences of ``text`` (end exclusive).

    ``text[start:end]`` is a sentence stripped of surrounding whitespace; spans are in order,
    non-overlapping and non-empty. The rules are in this module's docstring; ``case_sensitive=False``
    reads ``text`` as lowercased (every next word as if capitalised).

    Example:
        >>> sentence_spans("Dr. Smith left. He ran!")
        [(0, 15), (16, 23)]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(case_sensitive, bool):
        raise TypeError(f"case_sensitive must be a bool, got {type(case_sensitive).__name__}")
    cuts = []  # positions where a sentence ends (the following text starts a new one)
    candidates = []
    for m in _NEWLINE_RUN_RE.finditer(text):
        candidates.append((m.start(), m.end(), "newline", m.group(0).count("\n")))
    for m in _TERMINAL_RE.finditer(text):
        candidates.append((m.start(), m.end(), "terminal", m.group(0)))
    candidates.sort(key=lambda c: (c[0], c[2]))

    sentence_start = 0
    for start, end, kind, info in candidates:
        if kind == "newline":
            line_end = text.find("\n", end)
            next_line = text[end : line_end if line_end >= 0 else len(text)]
            if not case_sensitive:
                next_line = _capitalised(next_line)
            is_cut = info >= 2 or not _starts_lowercase(next_line) or bool(_SPEAKER_RE.match(next_line))
            cut_at = start
        else:
            nxt = _next_word(text, end)
            if not case_sensitive:
                nxt = _capitalised(nxt)
            punct = info.rstrip(_CLOSERS)
            cut_at = end
            if nxt and _starts_lowercase(nxt):
                is_cut = False
            elif "!" in punct or "?" in punct:
                is_cut = True  # rule 3
            elif "…" in punct or len(punct) >= 2:
                bare = nxt.lstrip(_OPENERS)
                is_cut = not nxt or bare[:1].isupper() or bare[:1].isdigit()  # rule 4
            else:
                token_start = _token_start(text, start)
                token = text[token_start : start + 1]
                first_token = not text[sentence_start:token_start].strip()
                is_cut = not nxt or _period_ends_sentence(token, nxt, first_token)
        if is_cut:
            cuts.append(cut_at)
            sentence_start = cut_at

    spans = []
    prev = 0
    for cut in [*cuts, len(text)]:
        if cut <= prev:
            continue
        piece = text[prev:cut]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece.rstrip())
        if trail > lead:
            spans.append((prev + lead, prev + trail))
        prev = cut
    return spans


def split_sentences(text: str, case_sensitive: bool = True) -> list[str]:
    """The sentences of ``text`` (``text[start:end]`` for each span of :func:`sentence_spans`;
    ``case_sensitive=False`` for lowercased text, see the module docstring).

    Example:
        >>> split_sentences("See Fig. 3 for details. Results (i.e. scores) improved... Why?")
        ['See Fig. 3 for details.', 'Results (i.e. scores) improved...', 'Why?']
    """
    return [text[s:e] for s, e in sentence_spans(text, case_sensitive)]


__all__ = ["sentence_spans", "split_sentences"]
