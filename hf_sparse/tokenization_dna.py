"""DNA tokenizer: single nucleotides or non-overlapping k-mers, as a transformers ``PreTrainedTokenizer``.

Input rules (exact; the same for every entry point: ``tokenizer(...)``, ``encode``, ``tokenize``):

- ``A C G T N`` in either case are nucleotides; lowercase is uppercased (soft-masked repeats become plain bases).
- The IUPAC ambiguity codes ``R Y S W K M B D H V`` (either case) become ``N``.
- ASCII whitespace (space, tab, newline, carriage return, form feed, vertical tab) is ignored, so a FASTA body
  with line breaks can be passed as is. Positions in error messages count it.
- ``U`` (RNA) is **not** accepted: replace it with ``T`` explicitly. Any other character (digits, ``-``, ``.``,
  ``*``, non-ASCII, ...) raises ``ValueError`` naming the character and its 0-based position in the input string.
- Special-token strings (``[CLS]``, ``[MASK]``, ...) inside the text are matched verbatim and kept as single tokens.
- The empty string gives no sequence tokens (``tokenizer("")`` is ``[CLS] [SEP]``).
- Anything that is not text (``int``, ``None``, ``bytes``, ...) raises ``TypeError`` naming the type.
- ``return_offsets_mapping=True`` raises ``NotImplementedError`` (a Python tokenizer has no offsets).

Vocabulary (ids are fixed by ``kmer``; the specials' strings may be renamed through the init arguments):

- ids 0-4: ``[PAD] [UNK] [CLS] [SEP] [MASK]``; ids 5-9: ``A C G T N``;
- ``kmer > 1``: then all ``4**kmer`` ACGT k-mers in lexicographic order, then one token ``"N" * kmer`` that every
  k-mer containing at least one ``N`` maps to (it decodes to ``kmer`` N's, so decoding keeps the length but loses
  the A/C/G/T bases of such a k-mer).

Tokenization with ``kmer=k``: after normalisation the sequence is cut into non-overlapping k-mers from its first
base; a trailing remainder shorter than ``k`` is emitted as single-nucleotide tokens (never padded), so
``"ACGTACG"`` with ``k=3`` is ``["ACG", "TAC", "G"]``. Text between special tokens is cut separately.

Decoding joins token strings without spaces; it returns the normalised sequence (uppercase, ambiguity codes as
``N``, no whitespace), not the original text.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

from transformers import PreTrainedTokenizer

VOCAB_FILES_NAMES = {"vocab_file": "vocab.txt"}

NUCLEOTIDES = "ACGT"
AMBIGUITY_CODES = "RYSWKMBDHV"  # IUPAC codes for two or three bases; "N" (any base) is kept as itself
IUPAC_CODES = NUCLEOTIDES + "N" + AMBIGUITY_CODES
WHITESPACE = " \t\n\r\f\v"
MAX_KMER = 8

# Complement of every IUPAC code: R(AG)<->Y(CT), S(CG)<->S, W(AT)<->W, K(GT)<->M(AC), B(CGT)<->V(ACG),
# D(AGT)<->H(ACT), N<->N. Case is preserved.
_COMPLEMENT = str.maketrans(
    "ACGTNRYSWKMBDHV" + "acgtnryswkmbdhv",
    "TGCANYRSWMKVHDB" + "tgcanyrswmkvhdb",
)
_NOT_IUPAC = re.compile(f"[^{IUPAC_CODES}{IUPAC_CODES.lower()}]")
_NOT_TOKENIZABLE = re.compile(f"[^{IUPAC_CODES}{IUPAC_CODES.lower()}{re.escape(WHITESPACE)}]")
# Normalisation for the tokenizer: uppercase, ambiguity codes -> N, whitespace deleted.
_NORMALIZE = str.maketrans(
    "acgtn" + AMBIGUITY_CODES + AMBIGUITY_CODES.lower(),
    "ACGTN" + "N" * (2 * len(AMBIGUITY_CODES)),
    WHITESPACE,
)


# ---------------------------------------------------------------- helpers


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}: {value!r:.60}")
    return value


def _invalid_character_error(text: str, match: re.Match, offset: int, what: str) -> ValueError:
    char = match.group()
    hint = " (RNA uracil: replace U with T first)" if char in "Uu" else ""
    return ValueError(
        f"invalid character {char!r} at position {offset + match.start()} of the input; {what}{hint}"
    )


def reverse_complement(seq: str) -> str:
    """Reverse complement of a DNA sequence, IUPAC-aware and case-preserving.

    Every character must be an IUPAC nucleotide code (``A C G T N R Y S W K M B D H V``, either case); each is
    replaced by its complement (``R<->Y``, ``K<->M``, ``B<->V``, ``D<->H``; ``S``, ``W`` and ``N`` are their own
    complements) keeping its case, and the result is reversed. Whitespace, ``U`` and anything else raise
    ``ValueError`` naming the character and its 0-based position. ``reverse_complement(reverse_complement(s)) == s``
    for every valid ``s``; ``reverse_complement("") == ""``.
    """
    _check_str(seq, "seq")
    bad = _NOT_IUPAC.search(seq)
    if bad is not None:
        raise _invalid_character_error(
            seq, bad, 0, f"expected IUPAC nucleotide codes {IUPAC_CODES} (either case)"
        )
    return seq.translate(_COMPLEMENT)[::-1]


def normalize_sequence(text: str, offset: int = 0) -> str:
    """Apply the tokenizer's input rules to ``text``: uppercase, ambiguity codes -> ``N``, whitespace removed.

    ``offset`` is added to positions in error messages (the position of ``text`` inside a larger input).
    """
    _check_str(text, "text")
    bad = _NOT_TOKENIZABLE.search(text)
    if bad is not None:
        raise _invalid_character_error(
            text, bad, offset, f"expected IUPAC nucleotide codes {IUPAC_CODES} (either case) or whitespace"
        )
    return text.translate(_NORMALIZE)


def _check_kmer(kmer: Any) -> int:
    if isinstance(kmer, bool) or not isinstance(kmer, int) or not 1 <= kmer <= MAX_KMER:
        raise ValueError(f"kmer must be an int in [1, {MAX_KMER}], got {kmer!r}")
    return kmer


def build_vocab(kmer: int, special_tokens: list[str]) -> list[str]:
    """The base vocabulary in id order: the specials, ``A C G T N``, then (``kmer > 1``) the k-mers and ``N * kmer``."""
    kmer = _check_kmer(kmer)
    tokens = list(special_tokens) + list(NUCLEOTIDES + "N")
    if kmer > 1:
        tokens += ["".join(p) for p in itertools.product(NUCLEOTIDES, repeat=kmer)] + ["N" * kmer]
    if len(set(tokens)) != len(tokens):
        raise ValueError(
            f"special tokens {special_tokens} must be distinct and differ from the nucleotide tokens"
        )
    return tokens


def _is_text_input(value: Any) -> bool:
    """What ``_encode_plus`` accepts: a str, or a list/tuple of str, int, or nested lists/tuples (batches, pairs)."""
    if isinstance(value, str):
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, (str, int, list, tuple)) and not isinstance(v, bool) for v in value)
    return False


# ---------------------------------------------------------------- tokenizer


class DNATokenizer(PreTrainedTokenizer):
    r"""
    Tokenizer for DNA: single nucleotides (``kmer=1``) or non-overlapping k-mers, with BERT-style specials.

    The input rules, vocabulary layout and k-mer rules are in the module docstring. Sequences are built as
    ``[CLS] X [SEP]`` and pairs as ``[CLS] A [SEP] B [SEP]`` (token type ids 0 for ``[CLS] A [SEP]``, 1 for
    ``B [SEP]``).

    Args:
        vocab_file (`str`, *optional*):
            A ``vocab.txt`` written by ``save_vocabulary`` (one token per line, in id order). The vocabulary is fully
            determined by ``kmer`` and the special tokens; the file is only checked against it (``ValueError`` on
            any difference), so a folder saved with another ``kmer`` cannot be loaded inconsistently.
        kmer (`int`, *optional*, defaults to 1):
            Length of the non-overlapping k-mers, 1 to 8. Saved in ``tokenizer_config.json``.
        pad_token, unk_token, cls_token, sep_token, mask_token (`str`, *optional*):
            Strings of the special tokens with ids 0 to 4 (defaults ``[PAD] [UNK] [CLS] [SEP] [MASK]``).

    Example:

    ```python
    >>> from hf_sparse.tokenization_dna import DNATokenizer
    >>> tok = DNATokenizer()
    >>> tok("acgtR")["input_ids"]
    [2, 5, 6, 7, 8, 9, 3]
    >>> DNATokenizer(kmer=3).tokenize("ACGTACG")
    ['ACG', 'TAC', 'G']
    ```
    """

    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        vocab_file: str | None = None,
        kmer: int = 1,
        pad_token: str = "[PAD]",
        unk_token: str = "[UNK]",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        mask_token: str = "[MASK]",
        **kwargs,
    ):
        self.kmer = _check_kmer(kmer)
        specials = [str(t) for t in (pad_token, unk_token, cls_token, sep_token, mask_token)]
        self._id_to_token = build_vocab(self.kmer, specials)
        self._token_to_id = {tok: i for i, tok in enumerate(self._id_to_token)}
        if vocab_file is not None:
            self._check_vocab_file(vocab_file)
        super().__init__(
            kmer=self.kmer,
            pad_token=pad_token,
            unk_token=unk_token,
            cls_token=cls_token,
            sep_token=sep_token,
            mask_token=mask_token,
            **kwargs,
        )

    def _check_vocab_file(self, vocab_file: str) -> None:
        with open(vocab_file, encoding="utf-8") as f:
            saved = f.read().splitlines()
        for line, (got, want) in enumerate(itertools.zip_longest(saved, self._id_to_token), start=1):
            if got != want:
                raise ValueError(
                    f"{vocab_file}:{line}: vocabulary differs from the one of kmer={self.kmer} "
                    f"(file has {got!r}, expected {want!r})"
                )

    # ------------------------------------------------------------ vocabulary

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def get_vocab(self) -> dict[str, int]:
        vocab = dict(self._token_to_id)
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _convert_token_to_id(self, token: str) -> int:
        """Id of ``token``; tokens outside the vocabulary get the ``[UNK]`` id (transformers convention)."""
        return self._token_to_id.get(token, self._token_to_id[str(self.unk_token)])

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < len(self._id_to_token):
            raise ValueError(f"token id {index} is outside the vocabulary [0, {len(self._id_to_token)})")
        return self._id_to_token[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        """Write ``vocab.txt`` (one token per line, in id order) into ``save_directory``; returns its path."""
        if not os.path.isdir(save_directory):
            raise ValueError(f"save_directory must be an existing directory, got {save_directory!r}")
        name = (filename_prefix + "-" if filename_prefix else "") + VOCAB_FILES_NAMES["vocab_file"]
        path = os.path.join(save_directory, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(self._id_to_token) + "\n")
        return (path,)

    # ------------------------------------------------------------ tokenization

    def __call__(self, text=None, *args, **kwargs):
        if text is None and not args and kwargs.get("text_target") is None:
            raise TypeError("text must be a str or a list of str, got NoneType")
        return super().__call__(text, *args, **kwargs)

    def _encode_plus(self, text, text_pair=None, **kwargs):
        for name, value in (("text", text), ("text_pair", text_pair)):
            if (value is not None or name == "text") and not _is_text_input(value):
                raise TypeError(f"{name} must be a str or a list of str, got {type(value).__name__}")
        if kwargs.get("return_offsets_mapping"):  # the Python tokenizer base would drop it without a word
            raise NotImplementedError(
                "return_offsets_mapping=True is not supported by DNATokenizer (a Python tokenizer): without "
                "whitespace or special tokens in the text, the k-mer after [CLS] numbered i (from 0) covers "
                "characters [i * kmer, (i + 1) * kmer)"
            )
        return super()._encode_plus(text, text_pair, **kwargs)

    def tokenize(self, text: str, **kwargs) -> list[str]:
        """Split ``text`` into tokens by the module's rules, keeping special-token strings whole."""
        _check_str(text, "text")
        split_special_tokens = kwargs.pop("split_special_tokens", self.split_special_tokens)
        text, kwargs = self.prepare_for_tokenization(text, **kwargs)
        if split_special_tokens:
            return self._tokenize_at(text, 0)
        tokens: list[str] = []
        offset = 0
        for piece in self.tokens_trie.split(text):  # the pieces concatenate to `text`
            if piece in self._added_tokens_encoder:
                tokens.append(piece)
            else:
                tokens.extend(self._tokenize_at(piece, offset))
            offset += len(piece)
        return tokens

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return self._tokenize_at(text, 0)

    def _tokenize_at(self, text: str, offset: int) -> list[str]:
        """Tokens of one special-free piece of text that starts at ``offset`` of the input."""
        seq = normalize_sequence(text, offset)
        k = self.kmer
        if k == 1:
            return list(seq)
        full = len(seq) - len(seq) % k
        kmers = [seq[i : i + k] for i in range(0, full, k)]
        n_kmer = "N" * k
        return [n_kmer if "N" in km else km for km in kmers] + list(seq[full:])

    # ------------------------------------------------------------ special tokens

    def build_inputs_with_special_tokens(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        """``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``."""
        cls, sep = [self.cls_token_id], [self.sep_token_id]
        if token_ids_1 is None:
            return cls + list(token_ids_0) + sep
        return cls + list(token_ids_0) + sep + list(token_ids_1) + sep

    def get_special_tokens_mask(
        self,
        token_ids_0: list[int],
        token_ids_1: list[int] | None = None,
        already_has_special_tokens: bool = False,
    ) -> list[int]:
        """1 for special tokens, 0 for sequence tokens, for the layout of ``build_inputs_with_special_tokens``.

        With ``already_has_special_tokens=True`` the ids are marked by membership in ``all_special_ids``.
        """
        if already_has_special_tokens:
            if token_ids_1 is not None:
                raise ValueError("token_ids_1 must be None when already_has_special_tokens=True")
            special = set(self.all_special_ids)
            return [1 if i in special else 0 for i in token_ids_0]
        mask = [1] + [0] * len(token_ids_0) + [1]
        if token_ids_1 is not None:
            mask += [0] * len(token_ids_1) + [1]
        return mask

    def create_token_type_ids_from_sequences(
        self, token_ids_0: list[int], token_ids_1: list[int] | None = None
    ) -> list[int]:
        """0 for ``[CLS] A [SEP]``, 1 for ``B [SEP]``."""
        first = [0] * (len(token_ids_0) + 2)
        if token_ids_1 is None:
            return first
        return first + [1] * (len(token_ids_1) + 1)

    # ------------------------------------------------------------ sequence helpers

    def reverse_complement(self, sequence: str) -> str:
        """Same as the module-level :func:`reverse_complement`."""
        return reverse_complement(sequence)


__all__ = [
    "AMBIGUITY_CODES",
    "DNATokenizer",
    "IUPAC_CODES",
    "NUCLEOTIDES",
    "build_vocab",
    "normalize_sequence",
    "reverse_complement",
]
