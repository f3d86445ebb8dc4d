"""Sharing models on the Hugging Face Hub: model cards, push, remote-code export.

Three jobs, one section each:

* :func:`render_model_card` fills a Jinja template from ``hf_sparse/model_cards/`` (one per task)
  into a :class:`huggingface_hub.ModelCard` with ``ModelCardData`` metadata (eval results,
  datasets, license, pipeline tag, base model); :func:`save_model_card` writes ``README.md``
  atomically.
* :func:`push_to_hub` creates the repo and uploads a folder. Without a network it raises one
  :class:`HubUnavailableError` saying that the local folder is intact and which command pushes it
  later; rejected credentials raise :class:`HubAuthError`. The token is never printed or logged.
* :func:`export_remote_code` writes a *flat, self-contained bundle* of the package modules a model
  needs next to its weights and sets ``auto_map``, so ``AutoModel.from_pretrained(repo,
  trust_remote_code=True)`` works where hf-sparse is not installed. ``save_pretrained`` cannot do
  this itself: it copies only the model's module and its ``from .x import`` siblings, and a deeper
  relative import (``from ...attention import x``) makes it raise ``FileNotFoundError``.

Command line: ``python -m hf_sparse.hub FOLDER REPO_ID [--private] [--token-env NAME]`` (also
``scripts/push_to_hub.py``).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import math
import os
import re
import shlex
import shutil
import socket
import sys
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .utils.io import atomic_write as _atomic_write

logger = logging.getLogger(__name__)

TEMPLATE_DIR = Path(__file__).resolve().parent / "model_cards"
BUNDLE_MANIFEST = "hf_sparse_bundle.json"
PUSH_COMMAND = "python -m hf_sparse.hub"


def _version() -> str:
    from . import __version__

    return __version__


# =================================================================================================
# Model cards
# =================================================================================================


@dataclass(frozen=True)
class CardTask:
    """What a model card says about one task: its template, Hub pipeline tag, hf-sparse pipeline
    task name (``pipeline(task, ...)``), the Auto class that loads it, tags and citations."""

    template: str
    title: str
    pipeline_tag: str | None
    pipeline_task: str | None
    auto_class: str
    description: str
    tags: tuple[str, ...] = ()
    citations: tuple[str, ...] = ()


CARD_TASKS: dict[str, CardTask] = {
    "motif": CardTask(
        template="motif.jinja",
        title="DNA motif detection",
        pipeline_tag="token-classification",
        pipeline_task="dna-motif-detection",
        auto_class="AutoModelForTokenClassification",
        description=(
            "A sparse-attention model that labels each nucleotide of a long DNA sequence as inside "
            "or outside a sequence motif (e.g. a transcription-factor binding site), reading "
            "thousands of bases in one window."
        ),
        tags=("genomics", "dna", "token-classification"),
    ),
    "summarization": CardTask(
        template="summarization.jinja",
        title="Long-document summarization",
        pipeline_tag="summarization",
        pipeline_task="long-document-summarization",
        auto_class="AutoModelForSeq2SeqLM",
        description=(
            "An encoder-decoder with sparse encoder attention that writes an abstractive summary of "
            "a long document (papers, meeting transcripts, stories) read in one pass."
        ),
        tags=("summarization", "long-document"),
        citations=("longformer",),
    ),
    "dialogue": CardTask(
        template="dialogue.jinja",
        title="Dialogue response selection",
        pipeline_tag="text-ranking",
        pipeline_task="dialogue-response-selection",
        auto_class="AutoModelForSequenceClassification",
        description=(
            "A sparse-attention encoder that scores candidate responses given a long dialogue "
            "history, so the whole conversation fits in one window."
        ),
        tags=("dialogue", "response-selection"),
    ),
    "dialogue_tracking": CardTask(
        template="dialogue_tracking.jinja",
        title="Dialogue state tracking",
        pipeline_tag="token-classification",
        pipeline_task="dialogue-state-tracking",
        auto_class="AutoModel",
        description=(
            "A sparse-attention encoder that reads a whole dialogue and predicts the dialogue acts of every "
            "turn and the active intent of every user turn."
        ),
        tags=("dialogue", "dialogue-state-tracking"),
    ),
    "sparse_transformer": CardTask(
        template="sparse_transformer.jinja",
        title="Sparse-attention transformer",
        pipeline_tag=None,
        pipeline_task=None,
        auto_class="AutoModel",
        description=(
            "A transformer whose self-attention is restricted to a sparse pattern from hf-sparse, "
            "so memory and compute grow with the number of allowed (query, key) pairs instead of "
            "the square of the sequence length."
        ),
    ),
}

_TASK_ALIASES = {
    "dna-motif-detection": "motif",
    "long-document-summarization": "summarization",
    "dialogue-response-selection": "dialogue",
    "dialogue-state-tracking": "dialogue_tracking",
    "sparse-transformer": "sparse_transformer",
    "generic": "sparse_transformer",
}

CITATIONS: dict[str, tuple[str, str]] = {
    "longformer": (
        "Longformer (Beltagy et al., 2020): sliding-window, dilated and global attention; LED",
        "@article{beltagy2020longformer,\n"
        "  title={Longformer: The Long-Document Transformer},\n"
        "  author={Beltagy, Iz and Peters, Matthew E. and Cohan, Arman},\n"
        "  journal={arXiv:2004.05150},\n"
        "  year={2020}\n"
        "}",
    ),
    "bigbird": (
        "BigBird (Zaheer et al., 2020): window, random and global blocks",
        "@inproceedings{zaheer2020bigbird,\n"
        "  title={Big Bird: Transformers for Longer Sequences},\n"
        "  author={Zaheer, Manzil and Guruganesh, Guru and Dubey, Kumar Avinava and Ainslie, Joshua and "
        "Alberti, Chris and Ontanon, Santiago and Pham, Philip and Ravula, Anirudh and Wang, Qifan and "
        "Yang, Li and Ahmed, Amr},\n"
        "  booktitle={Advances in Neural Information Processing Systems},\n"
        "  volume={33},\n"
        "  year={2020}\n"
        "}",
    ),
    "child": (
        "Sparse Transformers (Child et al., 2019): strided and fixed factorized attention",
        "@article{child2019sparse,\n"
        "  title={Generating Long Sequences with Sparse Transformers},\n"
        "  author={Child, Rewon and Gray, Scott and Radford, Alec and Sutskever, Ilya},\n"
        "  journal={arXiv:1904.10509},\n"
        "  year={2019}\n"
        "}",
    ),
    "reformer": (
        "Reformer (Kitaev et al., 2020): LSH attention",
        "@inproceedings{kitaev2020reformer,\n"
        "  title={Reformer: The Efficient Transformer},\n"
        "  author={Kitaev, Nikita and Kaiser, {\\L}ukasz and Levskaya, Anselm},\n"
        "  booktitle={International Conference on Learning Representations},\n"
        "  year={2020}\n"
        "}",
    ),
}

# pattern spec "type" -> the paper it comes from
_PATTERN_CITATIONS = {
    "sliding_window": "longformer",
    "dilated": "longformer",
    "global": "longformer",
    "longformer": "longformer",
    "bigbird": "bigbird",
    "random": "bigbird",
    "strided": "child",
    "fixed": "child",
    "lsh": "reformer",
}

# keys of ``extra`` the templates use; any other key goes to an "Additional information" table
_EXTRA_KEYS = ("description", "intended_use", "limitations")

# keys of a training config that give the sequence length the density is reported at
_LENGTH_KEYS = ("max_length", "max_seq_length", "max_source_length", "max_position_embeddings", "block_size")


def _resolve_task(task: str) -> tuple[str, CardTask]:
    if not isinstance(task, str):
        raise TypeError(f"task must be a str, got {type(task).__name__}")
    key = _TASK_ALIASES.get(task, task).replace("-", "_")
    if key not in CARD_TASKS:
        raise ValueError(
            f"task must be one of {sorted(CARD_TASKS)} (or {sorted(_TASK_ALIASES)}), got {task!r}"
        )
    return key, CARD_TASKS[key]


def _str_list(name: str, value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{name} must be a str or a list of str, got {type(value).__name__}") from None
    for v in items:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{name} must hold non-empty strings, got {v!r}")
    return list(dict.fromkeys(items))


def _number(name: str, value) -> float | int:
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, int):
        return value
    try:
        f = float(value)  # numpy / torch scalars
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return f


def _fmt(value) -> str:
    """A table cell: floats with 4 significant digits, containers as JSON."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _md_cell(value) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", "").replace("\n", "<br>")


def _flatten(config: Mapping, prefix: str = "") -> list[tuple[str, str]]:
    rows = []
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            rows.extend(_flatten(v, key + "."))
        else:
            rows.append((key, _fmt(v)))
    return rows


def _spec_types(spec) -> list[str]:
    """Every ``"type"`` in a (nested) pattern spec, in order."""
    out = []
    if isinstance(spec, Mapping):
        if isinstance(spec.get("type"), str):
            out.append(spec["type"])
        for v in spec.values():
            out.extend(_spec_types(v))
    elif isinstance(spec, (list, tuple)):
        for v in spec:
            out.extend(_spec_types(v))
    return out


def _spec_summary(spec) -> str:
    """``sliding_window(window=64) | global(indices=[0])``: a one-line name for a pattern spec."""
    if not isinstance(spec, Mapping):
        return str(spec)
    kind = spec.get("type", "?")
    parts = spec.get("parts") or spec.get("patterns")
    if isinstance(parts, list) and kind in ("union", "intersection"):
        op = " | " if kind == "union" else " & "
        return op.join(
            f"({_spec_summary(q)})" if isinstance(q, Mapping) and "parts" in q else _spec_summary(q)
            for q in parts
        )
    if isinstance(parts, list):
        return f"{kind}[{', '.join(_spec_summary(q) for q in parts)}]"
    args = ", ".join(f"{k}={json.dumps(v)}" for k, v in spec.items() if k != "type")
    return f"{kind}({args})"


def _metric_type(name: str) -> str:
    for prefix in ("eval_", "test_", "validation_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "custom"


def _environment(extra_dirs: Iterable[Path] = ()) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([*map(str, extra_dirs), str(TEMPLATE_DIR)]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # Markdown, not HTML
    )
    env.filters["md"] = _md_cell
    return env


def _pattern_facts(pattern, pattern_density, density_length, training_config):
    """(repr, spec JSON, one-line summary, spec types, density, length, note) of the pattern."""
    if pattern_density is not None:
        pattern_density = _number("pattern_density", pattern_density)
        if not 0.0 <= pattern_density <= 1.0:
            raise ValueError(f"pattern_density must be a fraction in [0, 1], got {pattern_density!r}")
    if density_length is not None and (
        isinstance(density_length, bool) or not isinstance(density_length, int) or density_length <= 0
    ):
        raise ValueError(f"density_length must be a positive int, got {density_length!r}")
    if pattern is None:
        return None, None, None, [], pattern_density, density_length, None
    from . import patterns

    try:
        p = patterns.from_dict(pattern)
    except (TypeError, ValueError) as e:
        raise ValueError(f"pattern {pattern!r} is not an hf_sparse pattern or spec: {e}") from e
    spec = p.to_dict()
    note = None
    if density_length is None:
        for key in _LENGTH_KEYS:
            v = (training_config or {}).get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                density_length = v
                break
        else:
            density_length = 4096
    density = pattern_density
    if density is None:
        if p.content_based:
            note = "content-based pattern: the kept pairs depend on the input, so there is no fixed density."
        else:
            density = float(p.density(density_length))
    summary = _spec_summary(spec)
    return repr(p), json.dumps(spec, indent=2), summary, _spec_types(spec), density, density_length, note


def render_model_card(
    task: str,
    *,
    model_name: str,
    base_model: str | None = None,
    datasets: str | Iterable[str] = (),
    license: str = "apache-2.0",
    pipeline_tag: str | None = None,
    metrics: Mapping[str, float] | None = None,
    dataset_name: str | None = None,
    pattern=None,
    pattern_density: float | None = None,
    training_config: Mapping | None = None,
    extra: Mapping | None = None,
    language: str | Iterable[str] | None = None,
    tags: str | Iterable[str] = (),
    repo_id: str | None = None,
    auto_class: str | None = None,
    density_length: int | None = None,
    dataset_split: str | None = None,
    template: str | os.PathLike | None = None,
) -> ModelCard:
    """A model card for an hf-sparse model, from the task's template in ``hf_sparse/model_cards/``.

    Args:
        task: ``"motif"``, ``"summarization"``, ``"dialogue"`` or ``"sparse_transformer"`` (the
            hf-sparse pipeline task names ``"dna-motif-detection"`` etc. work too).
        model_name: the card's title and the ``model-index`` name.
        base_model: Hub id of the checkpoint this model was fine-tuned from.
        datasets: Hub dataset ids used for training (card metadata ``datasets``).
        license: license id (card metadata ``license``).
        pipeline_tag: Hub pipeline tag; defaults to the task's (``token-classification``,
            ``summarization``, ``text-ranking``, none for ``sparse_transformer``).
        metrics: ``{name: value}``; each becomes an ``EvalResult`` (``eval_``/``test_`` prefixes are
            dropped from the metric type) and a row of the metrics table. Needs ``dataset_name`` or
            ``datasets`` to say what was evaluated.
        dataset_name: readable name of the evaluation data; its type is ``datasets[0]`` if given.
        pattern: an hf_sparse pattern, spec dict or registered name; the card shows its ``repr``,
            its spec and its density.
        pattern_density: a precomputed density (fraction of pairs kept) used instead of
            ``pattern.density(density_length)``.
        training_config: settings for the training table (nested dicts are flattened with dots).
        extra: ``description`` (replaces the task's paragraph), ``intended_use``, ``limitations``
            (list of extra bullet points); other keys are listed under "Additional information".
        language: language code(s) for the metadata.
        tags: extra tags; ``hf-sparse`` and ``sparse-attention`` are always present.
        repo_id: the Hub repo used in the loading snippets (default: ``model_name``).
        auto_class: the Auto class in the loading snippet (default: the task's).
        density_length: sequence length the density is computed at (default: ``max_length``-like
            keys of ``training_config``, else 4096).
        dataset_split: split of the evaluation data.
        template: path to your own Jinja template (it may ``{% extends "_base.jinja" %}``).

    Returns:
        A :class:`huggingface_hub.ModelCard`; ``card.data`` is its :class:`ModelCardData`.

    Example:

    ```python
    >>> from hf_sparse import patterns
    >>> card = render_model_card("motif", model_name="motif-tiny", dataset_name="synthetic motifs",
    ...                          metrics={"span_f1": 0.91}, pattern=patterns.SlidingWindow(window=64))
    >>> card.data.eval_results[0].metric_value
    0.91
    ```
    """
    task_key, info = _resolve_task(task)
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a non-empty str, got {model_name!r}")
    if repo_id is not None:
        _check_repo_id(repo_id)
    if base_model is not None and (not isinstance(base_model, str) or not base_model.strip()):
        raise ValueError(f"base_model must be a Hub model id, got {base_model!r}")
    if not isinstance(license, str) or not license.strip():
        raise ValueError(f"license must be a non-empty str, got {license!r}")
    for name, value in (("dataset_name", dataset_name), ("dataset_split", dataset_split)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    datasets = _str_list("datasets", datasets)
    languages = _str_list("language", language)
    pipeline_tag = pipeline_tag if pipeline_tag is not None else info.pipeline_tag
    auto_class = auto_class or info.auto_class
    if not auto_class.isidentifier():
        raise ValueError(f"auto_class must be a class name such as 'AutoModel', got {auto_class!r}")
    if training_config is not None and not isinstance(training_config, Mapping):
        raise TypeError(f"training_config must be a dict, got {type(training_config).__name__}")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a dict, got {type(extra).__name__}")
    extra = dict(extra or {})

    # -- metrics -> EvalResult ---------------------------------------------------------------
    if metrics is not None and not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a dict of name -> number, got {type(metrics).__name__}")
    metric_rows, eval_results = [], []
    if metrics:
        if dataset_name is None and not datasets:
            raise ValueError(
                f"metrics {sorted(metrics)} need dataset_name (or datasets) to say what they were measured on"
            )
        ds_type = datasets[0] if datasets else _slug(dataset_name)
        ds_name = dataset_name or datasets[0]
        for key, value in metrics.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"metric names must be non-empty strings, got {key!r}")
            value = _number(f"metrics[{key!r}]", value)
            metric_rows.append((key, _fmt(value)))
            eval_results.append(
                EvalResult(
                    task_type=pipeline_tag or "other",
                    task_name=info.title,
                    dataset_type=ds_type,
                    dataset_name=ds_name,
                    dataset_split=dataset_split,
                    metric_type=_metric_type(key),
                    metric_name=key,
                    metric_value=value,
                )
            )

    # -- pattern ---------------------------------------------------------------------------------
    p_repr, p_spec, p_summary, p_types, density, length, note = _pattern_facts(
        pattern, pattern_density, density_length, training_config
    )
    cite = list(info.citations) + [_PATTERN_CITATIONS[t] for t in p_types if t in _PATTERN_CITATIONS]
    citations = [{"title": CITATIONS[c][0], "bibtex": CITATIONS[c][1]} for c in dict.fromkeys(cite)]

    all_tags = ["hf-sparse", "sparse-attention", *info.tags, *_str_list("tags", tags)]
    card_data = ModelCardData(
        model_name=model_name,
        base_model=base_model,
        datasets=datasets or None,
        eval_results=eval_results or None,
        language=languages or None,
        library_name="transformers",
        license=license,
        metrics=list(dict.fromkeys(r.metric_type for r in eval_results)) or None,
        pipeline_tag=pipeline_tag,
        tags=all_tags,
    )

    limitations = extra.get("limitations") or []
    if isinstance(limitations, str):
        limitations = [limitations]
    variables = dict(
        model_name=model_name,
        repo_id=repo_id or model_name,
        description=extra.get("description") or info.description,
        intended_use=extra.get("intended_use"),
        task_title=info.title,
        base_model=base_model,
        datasets=datasets,
        dataset_name=dataset_name,
        dataset_split=dataset_split,
        language=languages,
        license=license,
        auto_class=auto_class,
        pipeline_task=info.pipeline_task,
        hf_sparse_version=_version(),
        pattern_name=p_summary or "not recorded",
        pattern_repr=p_repr,
        pattern_spec=p_spec,
        density=density,
        density_pct=None if density is None else f"{100 * density:.2f}%",
        density_length=length,
        density_note=note,
        metrics=metric_rows,
        training=_flatten(training_config or {}),
        extra_limitations=[str(x) for x in limitations],
        extra_rows=[(k, _fmt(v)) for k, v in extra.items() if k not in _EXTRA_KEYS],
        citations=citations,
    )
    if template is not None:
        path = Path(template)
        if not path.is_file():
            raise FileNotFoundError(f"template {str(path)!r} does not exist")
        tmpl = _environment([path.resolve().parent]).get_template(path.name)
    else:
        tmpl = _environment().get_template(info.template)
    body = tmpl.render(**variables)
    body = re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n{body}")


def save_model_card(card: ModelCard, folder: str | os.PathLike, filename: str = "README.md") -> Path:
    """Write ``card`` to ``folder/README.md`` atomically (temporary file + ``os.replace``)."""
    if not isinstance(card, ModelCard):
        raise TypeError(f"card must be a huggingface_hub.ModelCard, got {type(card).__name__}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} is not a directory")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / filename
    _atomic_write(path, str(card))
    return path


# =================================================================================================
# Push
# =================================================================================================


class HubError(RuntimeError):
    """Pushing to the Hub failed; the local folder is untouched."""


class HubUnavailableError(HubError):
    """The Hub could not be reached (offline mode, no network, DNS failure, timeout, 5xx)."""


class HubAuthError(HubError):
    """The Hub rejected the credentials (no token, invalid or expired token, no write access)."""


_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRUE = {"1", "on", "yes", "true"}

# What an upload sends: an ALLOW-list (a model folder also holds checkpoints with pickled optimizer
# states and training arguments, TensorBoard runs, logs; none of them belongs on the Hub).
_UPLOAD_NAMES = frozenset(
    {
        # model
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        # tokenizer / processor
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.txt",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
        "spiece.model",
        "sentencepiece.bpe.model",
        "chat_template.jinja",
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
        # card, remote-code manifest, results (the runner writes them without secrets)
        "README.md",
        BUNDLE_MANIFEST,
        "all_results.json",
        "log_history.json",
    }
)
_UPLOAD_PATTERNS = (re.compile(r"^model-\d+-of-\d+\.safetensors$"), re.compile(r"^[\w.-]+\.png$"))
_UPLOAD_ADAPTER = frozenset({"adapter_config.json", "adapter_model.safetensors", "README.md"})
_BINARY_SUFFIXES = (".safetensors", ".png", ".model")


def _remote_code_files(folder: Path) -> set[str]:
    """The ``.py`` files of the remote-code bundle (from its manifest) and those ``auto_map`` names."""
    names: set[str] = set()
    try:
        manifest = json.loads((folder / BUNDLE_MANIFEST).read_text(encoding="utf-8"))
        names.update(n for n in manifest.get("files", {}) if isinstance(n, str))
    except (OSError, ValueError, AttributeError):
        pass
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        refs = list((config.get("auto_map") or {}).values())
    except (OSError, ValueError, AttributeError):
        refs = []
    for ref in refs:
        for item in ref if isinstance(ref, list) else [ref]:
            if isinstance(item, str) and "." in item:
                names.add(item.split("--")[-1].rsplit(".", 1)[0] + ".py")
    return {n for n in names if "/" not in n and n.endswith(".py")}


def upload_file_list(folder: str | os.PathLike) -> list[str]:
    """The files :func:`push_to_hub` sends from ``folder`` (paths relative to it, sorted).

    An allow-list: the model (``config.json``, safetensors weights), tokenizer and processor files,
    the card ``README.md``, the remote-code bundle (the ``.py`` files its manifest or ``auto_map``
    names, and the manifest), results (``all_results.json``, ``log_history.json``, ``*.png``) and a
    LoRA adapter in ``adapter/``. Everything else stays local: ``checkpoint-*/``, ``runs/``,
    ``training_args.bin`` and any other pickle, temporary and hidden files.
    """
    folder = Path(folder)
    code = _remote_code_files(folder)
    files = []
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if not entry.is_file() or name.startswith("."):
            continue
        if name in _UPLOAD_NAMES or name in code or any(p.match(name) for p in _UPLOAD_PATTERNS):
            files.append(name)
    adapter = folder / "adapter"
    if adapter.is_dir():
        files += [f"adapter/{n}" for n in sorted(_UPLOAD_ADAPTER) if (adapter / n).is_file()]
    return files


def _check_no_secrets(folder: Path, files: list[str], token: str | None) -> None:
    """Refuse to upload a file that holds the token (or any ``hf_...`` token or secret env value)."""
    from .training.secrets import find_secrets

    for name in files:
        if name.endswith(_BINARY_SUFFIXES):
            continue
        if find_secrets((folder / name).read_bytes(), [token] if token else []):
            raise HubError(
                f"Refusing to push {folder}: {name} contains a token or secret; remove it from the "
                "file (or leave the file out of the folder) and push again. Nothing was uploaded."
            )


def _check_repo_id(repo_id) -> str:
    if not isinstance(repo_id, str):
        raise ValueError(f"repo_id must be a 'user/name' string, got {repo_id!r}")
    name = repo_id.split("/")[-1]
    if (
        not _REPO_ID.match(repo_id)
        or "--" in repo_id
        or ".." in repo_id
        or name.endswith((".", "-"))
        or len(name) > 96
    ):
        raise ValueError(
            f"repo_id must look like 'user/name' (letters, digits, '-', '_', '.'; no '--' or '..'; "
            f"name up to 96 characters), got {repo_id!r}"
        )
    return repo_id


def _check_folder(folder) -> Path:
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"folder {str(folder)!r} has no config.json; save the model there first")
    return path


def _push_command(folder, repo_id, private, revision, token_env) -> str:
    cmd = f"{PUSH_COMMAND} {shlex.quote(str(folder))} {shlex.quote(repo_id)}"
    if private:
        cmd += " --private"
    if revision:
        cmd += f" --revision {shlex.quote(revision)}"
    if token_env != "HF_TOKEN":
        cmd += f" --token-env {shlex.quote(token_env)}"
    return cmd


def _scrub(text: str, token: str | None) -> str:
    """One line of at most 300 characters with the token (and any ``hf_...`` token) masked."""
    if token:
        text = text.replace(token, "***")
    text = re.sub(r"\bhf_[A-Za-z0-9]{8,}", "hf_***", text)
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _network_error_types() -> tuple[type, ...]:
    from huggingface_hub.errors import OfflineModeIsEnabled

    types: list[type] = [OfflineModeIsEnabled, ConnectionError, TimeoutError, socket.gaierror]
    for module, names in (
        ("httpx2", ("TransportError",)),  # huggingface_hub >= 2
        ("httpx", ("TransportError",)),  # huggingface_hub 1.x
        ("requests.exceptions", ("ConnectionError", "Timeout")),  # huggingface_hub < 1
    ):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        types.extend(getattr(mod, n) for n in names if isinstance(getattr(mod, n, None), type))
    return tuple(types)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _offline_reason() -> str | None:
    from huggingface_hub import constants

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return f"offline mode is on: {var}={os.environ[var]}"
    if constants.HF_HUB_OFFLINE:
        return "offline mode is on (HF_HUB_OFFLINE was set when huggingface_hub was imported)"
    return None


def push_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload hf-sparse model",
    revision: str | None = None,
    token_env: str = "HF_TOKEN",
    endpoint: str | None = None,
) -> str:
    """Create ``repo_id`` (if needed) and upload ``folder`` to it; return the repo URL.

    Args:
        folder: a saved model folder (must contain ``config.json``); it is only read.
        repo_id: ``"user/name"`` or ``"org/name"``.
        token: a Hub token with write access. Default: the environment variable ``token_env``,
            then huggingface_hub's own lookup (``HF_TOKEN``, the token saved by ``hf auth login``).
            The token is never printed, logged or put in an error message.
        private: create the repo private (ignored if it already exists).
        commit_message: message of the upload commit.
        revision: branch to push to (created from the default branch if missing).
        token_env: environment variable to read the token from.
        endpoint: Hub URL (default: ``HF_ENDPOINT`` or https://huggingface.co).

    Raises:
        ValueError: a malformed ``repo_id``, or a ``folder`` that is missing or has no config.json.
        HubUnavailableError: the Hub cannot be reached (``HF_HUB_OFFLINE=1``, no network, DNS
            failure, timeout, 5xx); the message names the intact local folder and the command that
            pushes it later.
        HubAuthError: no token, or the Hub answered 401/403.
        HubError: any other refusal by the Hub.
    """
    repo_id = _check_repo_id(repo_id)
    path = _check_folder(folder)
    if revision is not None and (not isinstance(revision, str) or not revision.strip()):
        raise ValueError(f"revision must be a branch name, got {revision!r}")
    if not isinstance(token_env, str) or not token_env:
        raise ValueError(f"token_env must name an environment variable, got {token_env!r}")
    if token is not None and (not isinstance(token, str) or not token):
        raise ValueError("token must be a non-empty str")  # never echo a token, even a bad one
    token = token or os.environ.get(token_env) or None
    command = _push_command(path, repo_id, private, revision, token_env)
    intact = f"the local output at {path} is intact; push it later with: {command}"

    def unavailable(reason: str) -> HubUnavailableError:
        return HubUnavailableError(
            f"Could not reach the Hugging Face Hub to push to {repo_id} ({_scrub(reason, token)}); {intact}"
        )

    reason = _offline_reason()
    if reason is not None:
        raise unavailable(reason)

    from huggingface_hub import HfApi, get_token
    from huggingface_hub.errors import HfHubHTTPError

    if token is None and get_token() is None:
        raise HubAuthError(
            f"No Hugging Face token found to push to {repo_id}: pass token=..., set {token_env}, "
            f"or run `hf auth login`; {intact}"
        )

    files = upload_file_list(path)
    _check_no_secrets(path, files, token)
    api = HfApi(endpoint=endpoint, token=token)
    network_errors = _network_error_types()
    try:
        api.create_repo(repo_id, exist_ok=True, private=private, token=token)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True, token=token)
        info = api.upload_folder(
            folder_path=str(path),
            repo_id=repo_id,
            commit_message=commit_message,
            revision=revision,
            token=token,
            allow_patterns=files,  # exact relative paths: the allow-list, nothing else
        )
    except Exception as e:  # classify; never let the token or a multi-line trace through
        http = next((x for x in _chain(e) if isinstance(x, HfHubHTTPError)), None)
        status = getattr(getattr(http, "response", None), "status_code", None)
        if status in (401, 403):
            hint = (
                "the token is missing, invalid or expired"
                if status == 401
                else "the token has no write access to this namespace"
            )
            raise HubAuthError(
                f"The Hugging Face Hub rejected the credentials for {repo_id} (HTTP {status}: {hint}; "
                f"use a write token in {token_env} or token=...); {intact}"
            ) from None
        if status is not None and (status >= 500 or status in (408, 429)):
            raise unavailable(f"the Hub answered HTTP {status}") from None
        net = next((x for x in _chain(e) if isinstance(x, network_errors)), None)
        if net is not None and http is None:
            raise unavailable(f"{type(net).__name__}: {net}") from None
        if http is not None:
            raise HubError(
                f"The Hugging Face Hub refused the upload to {repo_id} (HTTP {status}: "
                f"{_scrub(str(http), token)}); {intact}"
            ) from None
        if token and token in str(e):
            raise HubError(f"Pushing to {repo_id} failed: {_scrub(str(e), token)}; {intact}") from None
        raise
    url = str(getattr(info, "repo_url", "") or f"{api.endpoint}/{repo_id}")
    logger.info("pushed %d files of %s to %s: %s", len(files), path, url, ", ".join(files))
    return url


def parse_args(argv=None) -> argparse.Namespace:
    """Arguments of ``python -m hf_sparse.hub`` / ``scripts/push_to_hub.py``."""
    parser = argparse.ArgumentParser(
        prog="push_to_hub",
        description="Upload a saved hf-sparse model folder to the Hugging Face Hub.",
    )
    parser.add_argument("folder", help="saved model folder (with config.json); it is only read")
    parser.add_argument("repo_id", help="target repository, 'user/name' or 'org/name'")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument(
        "--token-env",
        default="HF_TOKEN",
        metavar="NAME",
        help="environment variable holding the Hub token (default: HF_TOKEN, then the token saved "
        "by `hf auth login`); the token is never printed",
    )
    parser.add_argument("--revision", default=None, help="branch to push to (created if missing)")
    parser.add_argument(
        "--commit-message", default="Upload hf-sparse model", help="message of the upload commit"
    )
    parser.add_argument("--endpoint", default=None, help="Hub URL (default: HF_ENDPOINT or huggingface.co)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    """Push a folder; print its URL. A one-line ``error:`` message and exit code 2 for invalid
    arguments (folder, repo id, an unset ``--token-env``), 1 when the Hub is unreachable or refuses."""
    args = parse_args(argv)
    if args.token_env != "HF_TOKEN" and not os.environ.get(args.token_env):
        print(f"error: environment variable {args.token_env} (--token-env) is not set", file=sys.stderr)
        return 2
    try:
        url = push_to_hub(
            args.folder,
            args.repo_id,
            private=args.private,
            commit_message=args.commit_message,
            revision=args.revision,
            token_env=args.token_env,
            endpoint=args.endpoint,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(url)
    return 0


# =================================================================================================
# Remote-code export
# =================================================================================================

# transformers' own file-name conventions: such modules keep their name in the bundle
_KEEP_NAME_PREFIXES = (
    "modeling_",
    "configuration_",
    "tokenization_",
    "processing_",
    "image_processing_",
    "feature_extraction_",
    "video_processing_",
)


class BundleError(ValueError):
    """The modules cannot be flattened into a remote-code bundle (the message says where and why)."""


def flat_module_name(module: str, package: str = "hf_sparse") -> str:
    """The file name (without ``.py``) a module of ``package`` gets in a flat bundle.

    ``hf_sparse.patterns.base`` -> ``patterns_base``; a package's ``__init__`` is named after the
    package (``hf_sparse.patterns`` -> ``patterns``, ``hf_sparse`` -> ``hf_sparse``); modules
    named like transformers files (``modeling_*``, ``configuration_*``, ``tokenization_*``, ...)
    keep their name, so ``auto_map`` entries read ``"modeling_x.XModel"``.
    """
    if not isinstance(module, str) or not (module == package or module.startswith(package + ".")):
        raise ValueError(f"module must be {package!r} or one of its submodules, got {module!r}")
    if module == package:
        return package
    parts = module[len(package) + 1 :].split(".")
    return parts[-1] if parts[-1].startswith(_KEEP_NAME_PREFIXES) else "_".join(parts)


@dataclass
class _Module:
    name: str
    path: Path | None  # None: a namespace package (a folder without __init__.py)
    is_package: bool
    source: str
    tree: ast.Module


@dataclass
class _Import:
    node: ast.stmt
    guarded: bool  # inside a function body or a try block: may fail at run time without harm
    type_checking: bool  # inside `if TYPE_CHECKING:`


class _ImportFinder(ast.NodeVisitor):
    """Every import statement of a module, with the context it runs in."""

    def __init__(self):
        self.found: list[_Import] = []
        self._guard = 0
        self._typing = 0

    def _visit_guarded(self, node):
        self._guard += 1
        self.generic_visit(node)
        self._guard -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _visit_guarded

    def visit_Try(self, node):
        self._guard += 1
        for stmt in node.body:
            self.visit(stmt)
        self._guard -= 1
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def visit_If(self, node):
        test = node.test
        is_tc = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.visit(test)
        self._typing += is_tc
        for stmt in node.body:
            self.visit(stmt)
        self._typing -= is_tc
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Import(self, node):
        self.found.append(_Import(node, self._guard > 0, self._typing > 0))

    visit_ImportFrom = visit_Import


def _module_level(stmts):
    """Statements that run at import time, descending into if/try/with blocks."""
    for stmt in stmts:
        if isinstance(stmt, ast.If):
            yield from _module_level(stmt.body)
            yield from _module_level(stmt.orelse)
        elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            yield from _module_level(stmt.body)
            for h in stmt.handlers:
                yield from _module_level(h.body)
            yield from _module_level(stmt.orelse)
            yield from _module_level(stmt.finalbody)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from _module_level(stmt.body)
        else:
            yield stmt


def _target_names(target) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _target_names(t)]
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return []


def _defined_names(stmt) -> list[str]:
    """Names a non-import statement binds at module level."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n for t in stmt.targets for n in _target_names(t)]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
        return _target_names(stmt.target)
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        return _target_names(stmt.target)
    return []


def _import_names(stmt) -> list[str]:
    if isinstance(stmt, ast.ImportFrom):
        return [a.asname or a.name for a in stmt.names if a.name != "*"]
    if isinstance(stmt, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in stmt.names]
    return []


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in _module_level(tree.body):
        names.update(_defined_names(stmt))
        names.update(_import_names(stmt))
    return names


class _Bundler:
    """Finds the modules a set of entry modules needs and rewrites their imports to flat siblings."""

    def __init__(self, package: str, package_dir: Path, exclude: Iterable[str]):
        self.package = package
        self.root = package_dir
        self.exclude = tuple(exclude)
        self._cache: dict[str, _Module] = {}

    # -- locating and reading modules ----------------------------------------------------------
    def in_package(self, name: str) -> bool:
        return name == self.package or name.startswith(self.package + ".")

    def excluded(self, name: str) -> bool:
        return any(name == e or name.startswith(e + ".") for e in self.exclude)

    def locate(self, name: str) -> tuple[Path | None, bool] | None:
        """(file, is_package) of a module of the package, or None if there is no such module."""
        rel = name.split(".")[1:]
        base = self.root.joinpath(*rel)
        if (base / "__init__.py").is_file():
            return base / "__init__.py", True
        if rel and base.with_suffix(".py").is_file():
            return base.with_suffix(".py"), False
        if rel and base.is_dir() and not base.with_suffix(".py").exists():
            return None, True  # namespace package
        return None

    def exists(self, name: str) -> bool:
        return self.in_package(name) and self.locate(name) is not None

    def load(self, name: str) -> _Module:
        if name not in self._cache:
            found = self.locate(name)
            if found is None:
                raise BundleError(f"{name} is not a module of {self.package} (looked under {self.root})")
            path, is_package = found
            source = path.read_text(encoding="utf-8") if path is not None else ""
            try:
                tree = ast.parse(source, filename=str(path or name))
            except SyntaxError as e:
                raise BundleError(f"cannot parse {path}: {e}") from e
            self._cache[name] = _Module(name, path, is_package, source, tree)
        return self._cache[name]

    def where(self, mod: _Module, node) -> str:
        return f"{mod.path or mod.name}:{getattr(node, 'lineno', '?')}"

    def flat(self, name: str) -> str:
        return flat_module_name(name, self.package)

    # -- resolving imports ---------------------------------------------------------------------
    def absolute(self, mod: _Module, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        pkg = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        up = node.level - 1
        if up >= len(pkg):
            raise BundleError(f"{self.where(mod, node)}: relative import goes above the top-level package")
        base = pkg[: len(pkg) - up]
        return ".".join(base + ([node.module] if node.module else []))

    def resolve_name(self, pkg: str, name: str, seen=()) -> tuple:
        """What ``from <pkg> import <name>`` binds, following the package's re-exports:
        ``("module", M)``, ``("name", M, attr)``, ``("const", value)`` or ``("external", M, attr)``."""
        if (pkg, name) in seen:
            raise BundleError(f"circular re-export of {name!r} through package {pkg}")
        seen = (*seen, (pkg, name))
        mod = self.load(pkg)
        binding, stars = None, []
        for stmt in _module_level(mod.tree.body):
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        stars.append(stmt)
                    elif (alias.asname or alias.name) == name:
                        binding = ("from", stmt, alias)
            elif isinstance(stmt, ast.Import):
                if name in _import_names(stmt):
                    binding = ("import", stmt, None)
            elif name in _defined_names(stmt):
                binding = ("def", stmt, None)
        if binding is None:
            for stmt in stars:
                target = self.absolute(mod, stmt)
                if self.exists(target) and name in self.public_names(target):
                    return self._resolve_in(target, name, seen)
            if self.exists(f"{pkg}.{name}"):
                return ("module", f"{pkg}.{name}")
            self.check_flattenable(mod)  # a lazy __getattr__ explains the missing name
            raise BundleError(f"cannot find {name!r} in package {pkg} ({mod.path or 'namespace package'})")
        kind, stmt, alias = binding
        if kind == "from":
            target = self.absolute(mod, stmt)
            if not self.in_package(target):
                return ("external", target, alias.name)
            return self._resolve_in(target, alias.name, seen)
        if kind == "def" and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(
                value.value, (str, int, float, bool, type(None))
            ):
                return ("const", value.value)
        return ("name", pkg, name)

    def _resolve_in(self, target: str, name: str, seen) -> tuple:
        if self.exists(f"{target}.{name}"):
            return ("module", f"{target}.{name}")
        if not self.exists(target):
            raise BundleError(f"{target} is not a module of {self.package}")
        if self.load(target).is_package:
            return self.resolve_name(target, name, seen)
        return ("name", target, name)

    def public_names(self, name: str) -> set[str]:
        tree = self.load(name).tree
        for stmt in _module_level(tree.body):
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets
            ):
                try:
                    return set(ast.literal_eval(stmt.value))
                except ValueError:
                    break
        return {n for n in _top_level_names(tree) if not n.startswith("_")}

    # -- rewriting -----------------------------------------------------------------------------
    @staticmethod
    def bind_module(flat: str, bound: str) -> list[str]:
        """Bind a sibling module object. ``from . import x`` alone is invisible to transformers'
        relative-import scan (it wants ``from .x import``), which would leave x.py behind."""
        return [
            f"from .{flat} import __name__ as _bundled_{flat}  # lets transformers find {flat}.py",
            f"from . import {flat}" + ("" if bound == flat else f" as {bound}"),
        ]

    def plan(self, mod: _Module, imp: _Import, deps: set[str]) -> list[str] | None:
        """Replacement lines for one import statement (None: it does not import the package)."""
        node = imp.node
        if isinstance(node, ast.Import):
            keep, lines, touched = [], [], []
            for alias in node.names:
                if not self.in_package(alias.name):
                    keep.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
                    continue
                if not self.exists(alias.name):
                    raise BundleError(
                        f"{self.where(mod, node)}: {alias.name} is not a module of {self.package}"
                    )
                touched.append(alias.name)
                if alias.asname:
                    lines += self.bind_module(self.flat(alias.name), alias.asname)
                else:  # `import pkg.a.b` binds `pkg`; pkg.a and pkg.a.b must be its attributes
                    parts = alias.name.split(".")
                    touched += [".".join(parts[:i]) for i in range(1, len(parts))]
                    lines += self.bind_module(self.flat(self.package), self.package)
            if not touched:
                return None
            return self._finish(
                mod, imp, touched, deps, ([f"import {', '.join(keep)}"] if keep else []) + lines
            )

        target = self.absolute(mod, node)
        if not self.in_package(target):
            return None
        if not self.exists(target):
            raise BundleError(
                f"{self.where(mod, node)}: imports {target}, which is not a module of {self.package}"
            )
        entries: list = []  # str lines, or [flat, [names]] groups kept in order
        groups: dict[str, list[str]] = {}
        touched = []
        for alias in node.names:
            bound = alias.asname or alias.name
            if alias.name == "*":
                touched.append(target)
                entries.append(f"from .{self.flat(target)} import *")
                continue
            kind = self._resolve_in(target, alias.name, ())
            if kind[0] == "module":
                touched.append(kind[1])
                entries += self.bind_module(self.flat(kind[1]), bound)
            elif kind[0] == "name":
                touched.append(kind[1])
                flat = self.flat(kind[1])
                if flat not in groups:
                    groups[flat] = []
                    entries.append([flat, groups[flat]])
                groups[flat].append(alias.name if kind[2] == bound else f"{kind[2]} as {bound}")
            elif kind[0] == "const":
                entries.append(f"{bound} = {kind[1]!r}")
            else:  # re-exported from a third-party module
                entries.append(
                    f"from {kind[1]} import {kind[2]}" + ("" if kind[2] == bound else f" as {bound}")
                )
        lines = [e if isinstance(e, str) else f"from .{e[0]} import {', '.join(e[1])}" for e in entries]
        return self._finish(mod, imp, touched, deps, lines, target=target)

    def _finish(self, mod, imp, touched, deps, lines, target=None):
        if imp.type_checking:
            return ["pass  # typing-only import of a bundled package module, dropped"]
        parents = self.parents_first(mod, ([target] if target else []) + touched)
        excluded = [m for m in [*parents, *touched] if self.excluded(m)]
        if excluded:
            if not imp.guarded:
                raise BundleError(
                    f"{self.where(mod, imp.node)}: {excluded[0]} is excluded but imported when the module "
                    f"loads; exclude only modules imported inside functions or try blocks"
                )
            msg = (
                f"{excluded[0]} is not part of this remote-code bundle; pip install {self.package} to use it"
            )
            return [f"raise ImportError({msg!r})"]
        deps.update(touched)
        deps.update(parents)
        first = [
            f"from .{self.flat(p)} import __name__ as _bundled_{self.flat(p)}  # runs package {p} first"
            for p in parents
        ]
        return first + lines or ["pass"]

    def trivial(self, name: str) -> bool:
        """A package whose ``__init__`` holds nothing but a docstring (or does not exist)."""
        body = self.load(name).tree.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
        ):
            body = body[1:]
        return not body

    def parents_first(self, mod: _Module, modules: list[str]) -> list[str]:
        """Packages Python initialises before it hands out ``modules`` (their ``__init__`` runs
        first: pattern registries, for one), outermost first. Left out: the root package (its
        ``__init__`` registers the installed package with transformers, which a bundle must not
        do), packages the importing module is itself inside (already initialising), and packages
        with an empty ``__init__``."""
        own_parts = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
        own = {".".join(own_parts[:i]) for i in range(1, len(own_parts) + 1)}
        out: list[str] = []
        for name in modules:
            parts = name.split(".")
            for i in range(2, len(parts) + 1):
                pkg = ".".join(parts[:i])
                if pkg in own or pkg in out or not self.exists(pkg):
                    continue
                if self.load(pkg).is_package and not self.trivial(pkg):
                    out.append(pkg)
        return out

    def check_flattenable(self, mod: _Module):
        """A package ``__init__`` that builds its namespace lazily cannot become a flat module."""
        for node in ast.walk(mod.tree):
            lazy = (
                (isinstance(node, ast.FunctionDef) and node.name in ("__getattr__", "__dir__"))
                or (isinstance(node, ast.Name) and node.id in ("__path__", "_LazyModule"))
                or (isinstance(node, ast.Attribute) and node.attr == "_LazyModule")
            )
            if lazy:
                raise BundleError(
                    f"package {mod.name} ({mod.path}:{node.lineno}) builds its namespace lazily "
                    f"(__getattr__/__path__/_LazyModule) and cannot be flattened; import the names "
                    f"from the modules that define them"
                )

    def rewrite(self, mod: _Module, deps: set[str]) -> str:
        """The module's source with every import of the package made a flat sibling import."""
        finder = _ImportFinder()
        finder.visit(mod.tree)
        raw = mod.source.encode("utf-8")
        starts = [0]
        for line in raw.splitlines(keepends=True):
            starts.append(starts[-1] + len(line))
        edits = []
        for imp in finder.found:
            lines = self.plan(mod, imp, deps)
            if lines is None:
                continue
            node = imp.node
            line_start = starts[node.lineno - 1]
            begin = line_start + node.col_offset
            end = starts[node.end_lineno - 1] + node.end_col_offset
            indent = raw[line_start:begin]
            if indent.strip():
                raise BundleError(
                    f"{self.where(mod, node)}: an import that shares its line with other code cannot be "
                    f"rewritten; put it on a line of its own"
                )
            text = ("\n" + indent.decode()).join(lines)
            edits.append((begin, end, text.encode("utf-8")))
        for begin, end, text in sorted(edits, reverse=True):
            raw = raw[:begin] + text + raw[end:]
        return raw.decode("utf-8")

    def _binds_child(self, pkg: str, child: str) -> bool:
        """Whether ``pkg.<leaf>`` would be the submodule after a normal import (not a name the
        package's ``__init__`` rebinds to something else)."""
        try:
            return self.resolve_name(pkg, child.rpartition(".")[2]) == ("module", child)
        except BundleError:
            return True

    def closure(self, entries: list[str]) -> dict[str, str]:
        """``{module: rewritten source}`` for the entries and everything they import, transitively
        (imports inside functions included)."""
        out: dict[str, str] = {}
        queue = list(entries)
        while queue:
            name = queue.pop(0)
            if name in out:
                continue
            if self.excluded(name):
                raise BundleError(f"{name} is needed by the bundle but excluded")
            mod = self.load(name)
            if mod.is_package:
                self.check_flattenable(mod)
            deps: set[str] = set()
            out[name] = self.rewrite(mod, deps)
            queue.extend(sorted(deps - set(out)))
        # a package module binds its bundled submodules as attributes (`P.base.check_block`)
        for name in list(out):
            mod = self.load(name)
            if not mod.is_package:
                continue
            children = [c for c in sorted(out) if c.rpartition(".")[0] == name and self._binds_child(name, c)]
            if children:
                lines = [
                    "",
                    "",
                    "# Submodules bound as package attributes, as after a normal import (hf-sparse bundle)",
                ]
                for child in children:
                    lines += self.bind_module(self.flat(child), child.rpartition(".")[2])
                out[name] = out[name].rstrip("\n") + "\n" + "\n".join(lines) + "\n"
        return out


def _with_header(source: str, module: str, version: str) -> str:
    header = (
        f"# Generated by hf_sparse.hub.export_remote_code from {module} (hf-sparse {version}):\n"
        f"# imports of package modules were rewritten to flat siblings. Edit the original, not this copy.\n"
    )
    lines = source.splitlines(keepends=True)
    keep = 0
    while keep < min(2, len(lines)) and (
        lines[keep].startswith("#!") or re.match(r"^[ \t\f]*#.*?coding[:=]", lines[keep])
    ):
        keep += 1
    return "".join(lines[:keep]) + header + "".join(lines[keep:])


def _check_auto_map(auto_map, bundle: dict[str, str]) -> dict:
    """Keys must be transformers Auto classes; values ``"flat_module.Class"`` in the bundle."""
    if not isinstance(auto_map, Mapping) or not auto_map:
        raise ValueError(
            f"auto_map must be a non-empty dict such as {{'AutoModel': 'modeling_x.XModel'}}, got {auto_map!r}"
        )
    import transformers.models.auto as auto_module

    for key, value in auto_map.items():
        if not isinstance(key, str) or not hasattr(auto_module, key):
            raise ValueError(f"auto_map key {key!r} is not a transformers Auto class (e.g. 'AutoModel')")
        refs = value if isinstance(value, (list, tuple)) else [value]
        for ref in refs:
            if ref is None and isinstance(value, (list, tuple)):
                continue  # tokenizers: [slow, fast] with one of them absent
            if not isinstance(ref, str) or ref.count(".") != 1 and "--" not in ref:
                raise ValueError(f"auto_map[{key!r}] must be 'module.ClassName', got {value!r}")
            if "--" in ref:
                continue  # code that lives in another repo
            module, cls = ref.split(".")
            if module not in bundle:
                raise ValueError(
                    f"auto_map[{key!r}] = {ref!r} names module {module!r}, which is not in the bundle "
                    f"(bundle modules: {', '.join(sorted(bundle))})"
                )
            if cls not in _top_level_names(ast.parse(bundle[module])):
                raise ValueError(f"auto_map[{key!r}] = {ref!r}: {module}.py defines no {cls!r}")
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in auto_map.items()}


def _auto_refs(auto_map: dict):
    """(key, position, "module.Class") of every in-bundle class reference of an auto_map."""
    for key, value in auto_map.items():
        refs = value if isinstance(value, list) else [value]
        for i, ref in enumerate(refs):
            if isinstance(ref, str) and "--" not in ref:
                yield key, (i if isinstance(value, list) else None), ref


def _one_loader_module(auto_map: dict, bundle: dict[str, str], entries: list[str]) -> dict:
    """Point every ``auto_map`` entry at one module of the bundle.

    transformers loads each module named in ``auto_map`` of a *local folder* into a package named
    after a hash of that file and the files it reaches, and the hash always differs between two
    files (it counts the file itself once more). So ``AutoConfig`` from ``configuration_x`` and
    ``AutoModel`` from ``modeling_x`` get two packages, each with its own copy of every shared
    module: the config's pattern objects are then not instances of the model's ``Pattern``. One
    loader module (the ``modeling_*`` one, else the first named) that binds every class avoids it;
    the classes it lacks are imported at its end.
    """
    refs = list(_auto_refs(auto_map))
    modules = list(dict.fromkeys(ref.split(".")[0] for _, _, ref in refs))
    if len(modules) <= 1:
        return auto_map
    names: dict[str, str] = {}
    for _, _, ref in refs:
        module, cls = ref.split(".")
        if names.setdefault(cls, module) != module:
            raise ValueError(
                f"auto_map names two classes called {cls!r} ({names[cls]}.{cls} and {ref}); they cannot "
                f"share one loader module"
            )
    candidates = (
        [m for m in modules if m.startswith("modeling_")] or [m for m in entries if m in modules] or modules
    )
    loader = candidates[0]
    tree = ast.parse(bundle[loader])
    bound = {}  # name -> sibling module it is imported from
    for stmt in _module_level(tree.body):
        if isinstance(stmt, ast.ImportFrom) and stmt.level == 1 and stmt.module:
            for alias in stmt.names:
                bound[alias.asname or alias.name] = (stmt.module, alias.name)
    defined = _top_level_names(tree) - set(bound)
    missing = []
    for cls, module in names.items():
        if module == loader or bound.get(cls) == (module, cls):
            continue
        if cls in defined or cls in bound:
            raise ValueError(
                f"auto_map: {loader}.py binds {cls!r} to something other than {module}.{cls}; "
                f"cannot make it the one loader module"
            )
        missing.append(f"from .{module} import {cls}")
    if missing:
        bundle[loader] = (
            bundle[loader].rstrip("\n")
            + "\n\n\n# auto_map loads every class through this module (one package, one copy of each module)\n"
            + "\n".join(missing)
            + "\n"
        )
    out = {}
    for key, value in auto_map.items():
        if isinstance(value, list):
            out[key] = [
                v if not isinstance(v, str) or "--" in v else f"{loader}.{v.split('.')[1]}" for v in value
            ]
        else:
            out[key] = value if "--" in value else f"{loader}.{value.split('.')[1]}"
    return out


def export_remote_code(
    folder: str | os.PathLike,
    modules: str | Iterable[str],
    auto_map: Mapping[str, str | list] | None,
    config_file: str | None = "config.json",
    *,
    package: str = "hf_sparse",
    package_dir: str | os.PathLike | None = None,
    exclude: Iterable[str] = (),
    config_updates: Mapping | None = None,
) -> dict:
    """Write a flat, self-contained bundle of ``package`` modules into ``folder`` and set
    ``auto_map`` in its config, so ``trust_remote_code=True`` loads the model without the package.

    Each needed module is copied to ``folder/<flat name>.py`` (:func:`flat_module_name`:
    ``hf_sparse.patterns.base`` -> ``patterns_base.py``, ``...modeling_x`` -> ``modeling_x.py``) with
    every import of the package rewritten, using ``ast`` positions, to a sibling import:
    ``from hf_sparse.a.b import x``, ``from ..a.b import x`` -> ``from .a_b import x``; names a
    package ``__init__`` re-exports are imported from the module that defines them; a module
    object (``from .. import patterns as P``, ``import hf_sparse.a as m``) is bound with
    ``from . import patterns as P`` after a ``from .patterns import __name__`` line that
    transformers' relative-import scan can see; ``from .x import *`` stays a star import. Needed
    modules are found transitively, imports inside functions included, so passing the model
    module is enough. Package ``__init__`` files that are needed become flat modules too (and bind
    their bundled submodules as attributes); lazy ones (``__getattr__``) raise :class:`BundleError`.

    Third-party imports are left alone. transformers' ``check_imports`` requires every one it can
    see to be installed where the model is loaded, except those in ``try`` blocks: keep optional
    dependencies (matplotlib, jinja2) inside functions *and* ``try`` blocks, as ``hf_sparse.viz``
    does, or ``exclude`` the modules that use them (an import of an excluded module inside a
    function or try block becomes ``raise ImportError(...)``). The manifest lists the
    ``requirements`` that ``check_imports`` will ask for.

    Args:
        folder: the saved model folder (call after ``save_pretrained``: it rewrites config.json).
        modules: dotted names of the entry modules (e.g. the modeling and configuration modules).
        auto_map: ``{"AutoConfig": "configuration_x.XConfig", "AutoModel": "modeling_x.XModel"}``;
            merged into the existing ``auto_map`` of ``config_file``. Entries naming different
            modules are all pointed at one of them (``modeling_x.XConfig``; the classes it does not
            import yet are imported at its end): transformers loads each auto_map module of a local
            folder into its own package, which would give the config and the model two copies of
            every shared module. The manifest keeps the requested map too. Empty or None: write
            the bundle only.
        config_file: config file to update inside ``folder`` (None: leave configs alone).
        package: the root package whose modules are flattened.
        package_dir: its folder (default: found with ``importlib.util.find_spec``, not imported).
        exclude: dotted modules (and their submodules) to leave out.
        config_updates: other top-level keys to set in ``config_file`` (e.g. ``custom_pipelines``).

    Returns:
        The manifest written to ``folder/hf_sparse_bundle.json``: files, hf-sparse version,
        entry modules, requirements, auto_map.

    Raises:
        BundleError (a ValueError): a module that cannot be flattened (the message names the file
            and line); ValueError: a bad argument or auto_map; FileNotFoundError: no config file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder {str(folder)!r} does not exist or is not a directory")
    if not isinstance(package, str) or not package.isidentifier():
        raise ValueError(f"package must be a top-level package name, got {package!r}")
    if package_dir is None:
        import importlib.util

        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(f"package {package!r} cannot be found; pass package_dir")
        package_dir = list(spec.submodule_search_locations)[0]
    package_dir = Path(package_dir)
    if not package_dir.is_dir():
        raise ValueError(f"package_dir {str(package_dir)!r} is not a directory")
    entries = [modules] if isinstance(modules, str) else list(modules)
    if not entries:
        raise ValueError("modules must name at least one module")
    exclude = [exclude] if isinstance(exclude, str) else list(exclude)
    bundler = _Bundler(package, package_dir, exclude)
    for name in [*entries, *exclude]:
        if not isinstance(name, str) or not bundler.in_package(name):
            raise ValueError(f"modules and exclude must be modules of {package!r}, got {name!r}")
    for name in entries:
        if not bundler.exists(name):
            raise ValueError(f"module {name!r} does not exist under {package_dir}")
    config_path = None
    if (auto_map or config_updates) and config_file is not None:
        config_path = folder / config_file
        if not config_path.is_file():
            raise FileNotFoundError(
                f"config_file {str(config_path)!r} does not exist; call save_pretrained(folder) first"
            )

    # -- closure and rewritten sources, checked before anything is written ---------------------
    sources = bundler.closure(entries)
    bundle: dict[str, str] = {}
    origin: dict[str, str] = {}
    for name, source in sources.items():
        flat = bundler.flat(name)
        if not flat.isidentifier() or flat in ("__init__",):
            raise BundleError(f"{name} would be bundled as {flat}.py, which is not a valid module name")
        if flat in origin:
            raise BundleError(f"{origin[flat]} and {name} would both be bundled as {flat}.py; rename one")
        origin[flat] = name
        bundle[flat] = source
    auto_map = _check_auto_map(auto_map, bundle) if auto_map else {}
    requested_auto_map = auto_map
    auto_map = _one_loader_module(auto_map, bundle, [bundler.flat(m) for m in entries])
    used_file = sorted(n for n, s in sources.items() if "__file__" in s or "importlib.resources" in s)
    if used_file:
        warnings.warn(
            f"{', '.join(used_file)} use __file__ or importlib.resources: data files next to them are "
            f"not part of the bundle",
            stacklevel=2,
        )

    # -- stage, validate with transformers' own loader helpers, then move into place ------------
    from transformers.dynamic_module_utils import get_imports, get_relative_imports

    version = _version()
    stage = Path(tempfile.mkdtemp(dir=folder, prefix=".hf_sparse_bundle_"))
    try:
        requirements = set()
        for flat, source in bundle.items():
            (stage / f"{flat}.py").write_text(_with_header(source, origin[flat], version), encoding="utf-8")
        for flat in bundle:
            file = stage / f"{flat}.py"
            missing = sorted(set(get_relative_imports(file)) - set(bundle))
            if missing:
                raise BundleError(
                    f"{origin[flat]}: transformers would look for {', '.join(m + '.py' for m in missing)} "
                    f"(a line reading `from .{missing[0]} import ...`, perhaps in a docstring)"
                )
            imports = set(get_imports(file))
            if package in imports:
                raise BundleError(f"{origin[flat]}: an import of {package} was left unrewritten")
            requirements |= imports
        requirements -= set(sys.stdlib_module_names) | {"__future__"}
        manifest = {
            "format": 1,
            "package": package,
            "hf_sparse_version": version,
            "entry_modules": entries,
            "files": {f"{flat}.py": origin[flat] for flat in sorted(bundle)},
            "excluded": exclude,
            "requirements": sorted(requirements),
            "auto_map": auto_map,
            "auto_map_requested": requested_auto_map,
        }
        # files of a previous export that this one no longer needs
        old = folder / BUNDLE_MANIFEST
        if old.is_file():
            try:
                previous = json.loads(old.read_text(encoding="utf-8")).get("files", {})
            except (ValueError, AttributeError):
                previous = {}
            for stale in set(previous) - set(manifest["files"]):
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", stale) and (folder / stale).is_file():
                    (folder / stale).unlink()
        for flat in bundle:
            os.replace(stage / f"{flat}.py", folder / f"{flat}.py")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    _atomic_write(folder / BUNDLE_MANIFEST, json.dumps(manifest, indent=2) + "\n")
    if config_path is not None:
        config = json.loads(config_path.read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError(f"config_file {str(config_path)!r} does not hold a JSON object")
        config["auto_map"] = {**(config.get("auto_map") or {}), **auto_map}
        config.update(config_updates or {})
        _atomic_write(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    return manifest


__all__ = [
    "BUNDLE_MANIFEST",
    "CARD_TASKS",
    "BundleError",
    "CardTask",
    "HubAuthError",
    "HubError",
    "HubUnavailableError",
    "export_remote_code",
    "flat_module_name",
    "main",
    "parse_args",
    "push_to_hub",
    "render_model_card",
    "save_model_card",
    "upload_file_list",
]


if __name__ == "__main__":
    sys.exit(main())
