"""Model cards: :func:`render_model_card` fills a Jinja template of ``model_cards/`` (one per task,
named by the task's :class:`~hf_sparse.tasks.CardInfo`) into a :class:`huggingface_hub.ModelCard` with
``ModelCardData`` metadata (eval results, datasets, license, pipeline tag, base model);
:func:`save_model_card` writes ``README.md`` atomically. Only this module imports jinja2."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..tasks.registry import CardInfo
from .common import _atomic_write, _check_repo_id, _version

logger = logging.getLogger(__name__)


def _template_dir() -> Path:
    """The card templates: package data ``hf_sparse.model_cards`` (the repository's top-level
    ``model_cards/``, mapped into the package by setup.py in wheel and editable installs), else, when
    the package is imported from a source tree that is not installed, that folder itself."""
    try:
        from importlib import resources

        folder = Path(str(resources.files("hf_sparse.model_cards")))
    except ModuleNotFoundError:
        folder = Path(__file__).resolve().parents[2] / "model_cards"
    if not (folder / "_base.jinja").is_file():
        raise FileNotFoundError(f"the model card templates are missing: no _base.jinja in {folder}")
    return folder


TEMPLATE_DIR = _template_dir()


#: the card of a SparseTransformer model trained outside a registered task (``task="sparse_transformer"``)
SPARSE_TRANSFORMER_CARD = CardInfo(
    template="sparse-transformer.jinja",
    title="Sparse-attention transformer",
    description=(
        "A transformer whose self-attention is restricted to a sparse pattern from hf-sparse, "
        "so memory and compute grow with the number of allowed (query, key) pairs instead of "
        "the square of the sequence length."
    ),
)

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


def _resolve_task(task) -> tuple[CardInfo, str | None, str]:
    """(card, pipeline task, Auto class) of a registered task (by name or descriptor), or of the
    SparseTransformer family (``"sparse_transformer"``)."""
    from ..tasks import TaskDescriptor, registry

    if task == "sparse_transformer":
        return SPARSE_TRANSFORMER_CARD, None, "AutoModel"
    if isinstance(task, str):
        try:
            task = registry.get(task)
        except KeyError as e:
            raise ValueError(
                f"task must be 'sparse_transformer' or a registered task, got {task!r}: {e.args[0]}"
            ) from None
    if not isinstance(task, TaskDescriptor):
        raise TypeError(f"task must be a task name or a TaskDescriptor, got {type(task).__name__}")
    return task.card, task.pipeline, task.auto_class


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


# metric name prefix -> the split it was measured on (the Trainer's ``eval_`` is the validation split)
_SPLIT_PREFIXES = (("eval_", "validation"), ("validation_", "validation"), ("test_", "test"))


def _metric_split(name: str) -> tuple[str, str | None]:
    """(metric type, split) of a metric name: ``eval_loss`` -> ``("loss", "validation")``; a name without a split
    prefix -> ``(name, None)``."""
    for prefix, split in _SPLIT_PREFIXES:
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :], split
    return name, None


def _split_note(names: Iterable[str], dataset_split: str | None) -> str | None:
    """Which split the metrics table's rows were measured on: ``eval_* on the validation split, test_* on the test
    split``."""
    notes = []
    for prefix, split in _SPLIT_PREFIXES:
        if any(n.startswith(prefix) and len(n) > len(prefix) for n in names):
            notes.append(f"`{prefix}*` on the {split} split")
    if dataset_split and any(_metric_split(n)[1] is None for n in names):
        notes.append(f"{'the others' if notes else 'all'} on the {dataset_split} split")
    return ", ".join(notes) or None


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


def _load_template(info: CardInfo, template: str | os.PathLike | None = None) -> jinja2.Template:
    """The parsed template of a card: ``template`` if given, else ``info.template``, an absolute path (a task
    outside hf_sparse brings its own template) or a file name in :data:`TEMPLATE_DIR` (the package's tasks).

    Raises:
        FileNotFoundError: an absolute (or given) ``template`` that does not exist.
        ValueError: a relative ``info.template`` that is not in :data:`TEMPLATE_DIR` (it is never looked up
            anywhere else), or a template jinja2 cannot parse.
    """
    if template is None and Path(info.template).is_absolute():
        template = info.template
    try:
        if template is not None:
            path = Path(template)
            if not path.is_file():
                raise FileNotFoundError(f"card template {str(path)!r} does not exist")
            return _environment([path.resolve().parent]).get_template(path.name)
        if not (TEMPLATE_DIR / info.template).is_file():
            raise ValueError(
                f"card template {info.template!r} is not in hf_sparse's model_cards/ ({TEMPLATE_DIR}), where a "
                "relative CardInfo.template is looked up; a task outside hf_sparse gives the absolute path of its "
                "own template, e.g. template=str(Path(__file__).parent / 'card.jinja')"
            )
        return _environment().get_template(info.template)
    except jinja2.TemplateError as e:
        raise ValueError(f"card template {str(template or info.template)!r}: {type(e).__name__}: {e}") from e


def check_template(task, template: str | os.PathLike | None = None) -> None:
    """Check, before a run trains, that the card template of ``task`` (a registered task's name or
    :class:`~hf_sparse.tasks.TaskDescriptor`, or ``"sparse_transformer"``) or ``template`` exists and parses;
    the errors of :func:`render_model_card`'s template lookup (``FileNotFoundError``, ``ValueError``)."""
    _load_template(_resolve_task(task)[0], template)


def _build_pattern(pattern, where: str):
    from .. import patterns

    try:
        return patterns.from_dict(pattern)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where} {pattern!r} is not an hf_sparse pattern or spec: {e}") from e


def _layer_runs(summaries: list[str]) -> str:
    """``layers 0-2: a · layer 3: b``: the per-layer summaries, consecutive equal layers merged."""
    runs: list[list] = []  # [first, last, summary]
    for layer, summary in enumerate(summaries):
        if runs and runs[-1][2] == summary:
            runs[-1][1] = layer
        else:
            runs.append([layer, layer, summary])
    return " · ".join(f"layer {a}: {s}" if a == b else f"layers {a}-{b}: {s}" for a, b, s in runs)


def _pattern_facts(pattern, pattern_density, density_length, training_config):
    """(repr, spec JSON, one-line summary, spec types, density, length, note) of the pattern, or of a
    per-layer list of patterns (``config.attention_pattern`` with one entry per layer): then the repr
    lists the layers with their densities, and the density is their mean (the fraction of all layers'
    pairs that is computed)."""
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
    per_layer = isinstance(pattern, (list, tuple))
    if per_layer and not pattern:
        raise ValueError("pattern must hold one pattern per layer, got an empty list")
    built = (
        [_build_pattern(q, f"pattern[{i}]") for i, q in enumerate(pattern)]
        if per_layer
        else [_build_pattern(pattern, "pattern")]
    )
    specs = [p.to_dict() for p in built]
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
    if density is None or per_layer:
        densities = [None if p.content_based else float(p.density(density_length)) for p in built]
        content = [i for i, d in enumerate(densities) if d is None]
        if density is None and content:
            where = f" (layer {', '.join(map(str, content))})" if per_layer else ""
            note = (
                f"content-based pattern{where}: the kept pairs depend on the input, so there is no fixed "
                "density."
            )
        elif density is None:
            density = sum(densities) / len(densities)  # per layer: the fraction of all layers' pairs computed
    types = _spec_types(specs)
    if not per_layer:
        spec = specs[0]
        return (
            repr(built[0]),
            json.dumps(spec, indent=2),
            _spec_summary(spec),
            types,
            density,
            density_length,
            note,
        )
    mean = "; the density below is their mean" if density is not None and pattern_density is None else ""
    lines = [f"[  # attention_pattern: one pattern per layer, {len(built)} layers{mean}"]
    for i, (p, d) in enumerate(zip(built, densities)):
        kept = "content-based" if d is None else f"{100 * d:.2f}% of the pairs at {density_length} tokens"
        lines.append(f"    {p!r},  # layer {i}: {kept}")
    lines.append("]")
    summary = "per layer: " + _layer_runs([_spec_summary(sp) for sp in specs])
    return "\n".join(lines), json.dumps(specs, indent=2), summary, types, density, density_length, note


def render_model_card(
    task: str,
    *,
    model_name: str,
    base_model: str | None = None,
    datasets: str | Iterable[str] = (),
    license: str = "apache-2.0",
    pipeline_tag: str | None = None,
    metrics: Mapping[str, float] | None = None,
    counts: Mapping[str, float] | None = None,
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
    requirements: str | Iterable[str] | None = None,
    template: str | os.PathLike | None = None,
    adapter_only: bool = False,
) -> ModelCard:
    """A model card for an hf-sparse model, from the task's template in ``hf_sparse/model_cards/``.

    Args:
        task: a registered task's name (``"dna-motif-detection"``, ...) or
            :class:`~hf_sparse.tasks.TaskDescriptor`, or ``"sparse_transformer"`` (the SparseTransformer
            family's card); the task's :class:`~hf_sparse.tasks.CardInfo` gives the template and texts.
        model_name: the card's title and the ``model-index`` name.
        base_model: Hub id of the checkpoint this model was fine-tuned from (of an adapter: the model it loads on).
        datasets: Hub dataset ids used for training (card metadata ``datasets``).
        license: license id (card metadata ``license``).
        pipeline_tag: Hub pipeline tag; defaults to the task's (``token-classification``,
            ``summarization``, ``text-ranking``, none for ``sparse_transformer``).
        metrics: ``{name: value}``; each becomes an ``EvalResult`` and a row of the metrics table. The
            name's prefix gives the split (``eval_``/``validation_``: validation, ``test_``: test; none:
            ``dataset_split``) and is dropped from the metric type: each split is a ``model-index`` result of
            its own, with ``dataset.split`` set. Needs ``dataset_name`` or ``datasets`` to say what was
            evaluated.
        counts: ``{name: value}`` reported with the metrics that count things rather than score the model
            (``eval_n_intent_seen``: turns evaluated); a table of their own, not in the ``model-index``.
        dataset_name: readable name of the evaluation data; its type is ``datasets[0]`` if given.
        pattern: an hf_sparse pattern, spec dict or registered name, or a list of them, one per layer
            (a per-layer ``config.attention_pattern``); the card shows its ``repr``, its spec and its
            density (per layer: each layer's pattern and density, and their mean).
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
        dataset_split: split of the metrics whose name has no split prefix.
        requirements: the packages the repository's remote code imports (the ``requirements`` of its
            ``hf_sparse_bundle.json``). Where they include ``hf_sparse`` (the code of a task outside hf-sparse
            whose model uses ``ExportCodeMixin``), the card says to install hf-sparse before loading; otherwise
            (or None) that the code loads without it.
        template: path to your own Jinja template (it may ``{% extends "_base.jinja" %}``).
        adapter_only: the repository holds a PEFT adapter alone (``adapter_config.json``,
            ``adapter_model.safetensors``; no ``config.json``, no modelling code): metadata
            ``library_name: peft`` (``base_model``: the adapter's base, where it is a Hub id), and the loading
            snippet loads the base model (``auto_class``), then the adapter with ``PeftModel.from_pretrained``.

    Returns:
        A :class:`huggingface_hub.ModelCard`; ``card.data`` is its :class:`ModelCardData`.

    Example:

    ```python
    >>> from hf_sparse import patterns
    >>> card = render_model_card("dna-motif-detection", model_name="motif-tiny", dataset_name="synthetic motifs",
    ...                          metrics={"span_f1": 0.91}, pattern=patterns.SlidingWindow(window=64))
    >>> card.data.eval_results[0].metric_value
    0.91
    ```
    """
    info, pipeline_task, default_auto_class = _resolve_task(task)
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
    requirements = _str_list("requirements", requirements)
    pipeline_tag = pipeline_tag if pipeline_tag is not None else info.hub_pipeline_tag
    auto_class = auto_class or default_auto_class
    if not auto_class.isidentifier():
        raise ValueError(f"auto_class must be a class name such as 'AutoModel', got {auto_class!r}")
    if training_config is not None and not isinstance(training_config, Mapping):
        raise TypeError(f"training_config must be a dict, got {type(training_config).__name__}")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a dict, got {type(extra).__name__}")
    extra = dict(extra or {})
    if not isinstance(adapter_only, bool):
        raise TypeError(f"adapter_only must be a bool, got {type(adapter_only).__name__}")

    # -- metrics -> EvalResult ---------------------------------------------------------------
    for name, values in (("metrics", metrics), ("counts", counts)):
        if values is not None and not isinstance(values, Mapping):
            raise TypeError(f"{name} must be a dict of name -> number, got {type(values).__name__}")
    count_rows = []
    for key, value in (counts or {}).items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"count names must be non-empty strings, got {key!r}")
        if key in (metrics or {}):
            raise ValueError(f"{key!r} is in both metrics and counts; give it in one")
        count_rows.append((key, _fmt(_number(f"counts[{key!r}]", value))))
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
            metric_type, split = _metric_split(key)
            eval_results.append(
                EvalResult(
                    task_type=pipeline_tag or "other",
                    task_name=info.title,
                    dataset_type=ds_type,
                    dataset_name=ds_name,
                    dataset_split=split or dataset_split,
                    metric_type=metric_type,
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
        library_name="peft" if adapter_only else "transformers",
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
        pipeline_task=pipeline_task,
        needs_hf_sparse="hf_sparse" in requirements,
        adapter_only=adapter_only,
        hf_sparse_version=_version(),
        pattern_name=p_summary or "not recorded",
        pattern_repr=p_repr,
        pattern_spec=p_spec,
        density=density,
        density_pct=None if density is None else f"{100 * density:.2f}%",
        density_length=length,
        density_note=note,
        metrics=metric_rows,
        metric_splits=_split_note([k for k, _ in metric_rows], dataset_split),
        counts=count_rows,
        training=_flatten(training_config or {}),
        extra_limitations=[str(x) for x in limitations],
        extra_rows=[(k, _fmt(v)) for k, v in extra.items() if k not in _EXTRA_KEYS],
        citations=citations,
    )
    tmpl = _load_template(info, template)
    try:
        body = tmpl.render(**variables)
    except jinja2.TemplateError as e:  # e.g. a variable the template names that no card has
        raise ValueError(f"card template {tmpl.filename!r}: {type(e).__name__}: {e}") from e
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


__all__ = [
    "CITATIONS",
    "SPARSE_TRANSFORMER_CARD",
    "TEMPLATE_DIR",
    "check_template",
    "render_model_card",
    "save_model_card",
]
