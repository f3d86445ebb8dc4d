"""Give existing checkpoints sparse attention.

* :func:`from_bert` turns a BERT/RoBERTa-family checkpoint (BERT, RoBERTa, XLM-R, CamemBERT, ...)
  into a SparseTransformer with any pattern and a longer context: weights copied one to one, position
  embeddings copied and tiled to the new length as in the Longformer recipe (Beltagy et al. 2020,
  "convert_model_to_long").
* :func:`from_longformer` loads a ``LongformerModel`` checkpoint (its per-layer windows and its
  separate global query/key/value projections) into SparseTransformer, so Longformer users get the
  hf-sparse kernels with the same outputs (its heads' global tokens too, when no ``global_attention_mask`` is
  passed).

Both accept a model instance or anything ``from_pretrained`` accepts (a folder or a Hub id, e.g.
``from_longformer("allenai/longformer-base-4096", head="masked_lm")``), with ``from_pretrained``'s loading
arguments (:data:`LOADING_ARGS`: ``dtype=``, ``revision=``, ``token=``, ...), and a ``tokenizer=`` whose
``model_max_length`` they set to the converted model's length; their other keyword arguments override fields of
the converted config.
"""

from __future__ import annotations

import difflib

import torch
from transformers import AutoModel, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging

from .models.sparse_transformer import (
    SparseTransformerConfig,
    SparseTransformerForMaskedLM,
    SparseTransformerForMultipleChoice,
    SparseTransformerForQuestionAnswering,
    SparseTransformerForSequenceClassification,
    SparseTransformerForTokenClassification,
    SparseTransformerModel,
)
from .models.sparse_transformer.configuration_sparse_transformer import config_arguments
from .patterns import Longformer, Pattern, from_dict

logger = logging.get_logger(__name__)

HEADS = {
    "base": SparseTransformerModel,
    "masked_lm": SparseTransformerForMaskedLM,
    "sequence_classification": SparseTransformerForSequenceClassification,
    "token_classification": SparseTransformerForTokenClassification,
    "multiple_choice": SparseTransformerForMultipleChoice,
    "question_answering": SparseTransformerForQuestionAnswering,
}
# transformers class-name suffix -> head
_SUFFIX = {
    "ForMaskedLM": "masked_lm",
    "ForSequenceClassification": "sequence_classification",
    "ForTokenClassification": "token_classification",
    "ForMultipleChoice": "multiple_choice",
    "ForQuestionAnswering": "question_answering",
    # BERT's pre-training heads: the masked-LM head converts; next-sentence prediction has no counterpart
    "ForPreTraining": "masked_lm",
    "Model": "base",
}
ROBERTA_STYLE = ("roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text")
BERT_STYLE = ("bert",)
# model types that look convertible but are not, and why
_REFUSED = {
    "longformer": "use from_longformer",
    "xmod": "X-MOD's per-language adapter layers have no SparseTransformer counterpart",
}
#: keyword arguments that go to ``from_pretrained`` (loading a path or Hub id), not to the converted config
LOADING_ARGS = (
    "dtype",
    "torch_dtype",
    "revision",
    "token",
    "cache_dir",
    "force_download",
    "local_files_only",
    "subfolder",
    "proxies",
    "trust_remote_code",
    "variant",
    "use_safetensors",
    "device_map",
    "low_cpu_mem_usage",
)
# generic config fields (not architecture) carried from the source config when it has them
_CARRIED = (
    "output_hidden_states",
    "output_attentions",
    "return_dict",
    "chunk_size_feed_forward",
    "add_cross_attention",
    "tokenizer_class",
    "prefix",
    "sep_token_id",
    "decoder_start_token_id",
    "finetuning_task",
    "task_specific_params",
)
# the source's labels, replaced as a whole by any of them given as an override
_LABELS = ("num_labels", "id2label", "label2id")
# config fields the copied weights fix
_SHAPES = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "type_vocab_size",
)
# Longformer heads that pick global tokens around the first sep_token_id (no global_attention_mask given)
_LONGFORMER_SEP_GLOBALS = {"question_answering": "before", "multiple_choice": "after"}


def _split_kwargs(kwargs: dict) -> tuple[dict, dict]:
    """``kwargs`` -> (``from_pretrained`` loading arguments, config overrides). A key that is neither (a typo
    such as ``hidden_dropout``) is a ``ValueError``: the config would keep it as an attribute that does nothing."""
    known = config_arguments()
    for key in kwargs:
        if key not in LOADING_ARGS and key not in known:
            close = difflib.get_close_matches(key, [*known, *LOADING_ARGS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{key}={kwargs[key]!r} is neither a SparseTransformerConfig field nor a from_pretrained loading "
                f"argument (LOADING_ARGS){hint}"
            )
    loading = {k: v for k, v in kwargs.items() if k in LOADING_ARGS}
    return loading, {k: v for k, v in kwargs.items() if k not in LOADING_ARGS}


def _labels(overrides: dict) -> dict:
    """The label fields of ``overrides`` made whole (any one of them replaces the source's labels): ``id2label``
    from a ``label2id`` given alone, ``label2id`` from ``id2label``, ``num_labels`` from either; ``ValueError``
    where those given disagree."""
    given = {k: overrides[k] for k in _LABELS if k in overrides}
    id2label, label2id = given.get("id2label"), given.get("label2id")
    if id2label is not None:
        id2label = {int(i): name for i, name in id2label.items()}
    if label2id is not None:
        from_label2id = {int(i): name for name, i in label2id.items()}
        if id2label is not None and id2label != from_label2id:
            raise ValueError(f"label2id={label2id!r} does not invert id2label={given['id2label']!r}")
        id2label = from_label2id
    if id2label is None:
        return given  # num_labels alone: transformers' LABEL_i names
    n = given.get("num_labels", len(id2label))
    if n != len(id2label) or sorted(id2label) != list(range(n)):
        raise ValueError(f"num_labels={n} does not fit the labels {id2label!r} (ids 0..num_labels-1)")
    return {"num_labels": n, "id2label": id2label, "label2id": {name: i for i, name in id2label.items()}}


def _load(model_or_path, head: str | None, loading: dict) -> PreTrainedModel:
    if isinstance(model_or_path, PreTrainedModel):
        if loading:
            raise ValueError(
                f"{sorted(loading)} are from_pretrained arguments, for a path or Hub id; model_or_path is a loaded "
                f"{type(model_or_path).__name__} (for another dtype, convert model.to(dtype))"
            )
        return model_or_path
    if not isinstance(model_or_path, str):
        raise TypeError(
            f"model_or_path must be a PreTrainedModel or a path/Hub id, got {type(model_or_path).__name__}"
        )
    from transformers import (
        AutoModelForMaskedLM,
        AutoModelForMultipleChoice,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    auto = {
        "base": AutoModel,
        "masked_lm": AutoModelForMaskedLM,
        "sequence_classification": AutoModelForSequenceClassification,
        "token_classification": AutoModelForTokenClassification,
        "multiple_choice": AutoModelForMultipleChoice,
        "question_answering": AutoModelForQuestionAnswering,
    }[head or _saved_head(model_or_path, loading)]
    return auto.from_pretrained(model_or_path, **loading)


def _saved_head(path: str, loading: dict) -> str:
    """The head of a saved checkpoint, from its config's ``architectures`` (``BertForMaskedLM`` ->
    ``masked_lm``, ``BertModel`` -> ``base``), as :func:`_source_head` finds it for a model instance; ``base``
    when the config names no architecture. A head we do not convert (``BertLMHeadModel``, ``...ForCausalLM``,
    ``...ForNextSentencePrediction``) is the instance's ``ValueError``."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    where = {k: v for k, v in loading.items() if k not in ("dtype", "torch_dtype")}
    config = AutoConfig.from_pretrained(path, **where)
    architectures = getattr(config, "architectures", None) or []
    if not architectures or config.model_type not in ROBERTA_STYLE + BERT_STYLE:
        return "base"  # no head named, or a model type the caller refuses with its own message
    name = architectures[0]
    if name == MODEL_MAPPING_NAMES.get(config.model_type):
        return "base"
    for suffix, h in _SUFFIX.items():
        if h != "base" and name.endswith(suffix):
            return h
    raise _unsupported_head(name)


def _source_head(model: PreTrainedModel) -> str | None:
    """The head of a model instance (``BertForMaskedLM`` -> ``masked_lm``, a bare encoder -> ``base``); None for
    heads we do not convert (``BertLMHeadModel``, ``BertForPreTraining``, ...)."""
    if model.base_model is model:  # no head around the encoder
        return "base"
    name = type(model).__name__
    for suffix, h in _SUFFIX.items():
        if h != "base" and name.endswith(suffix):
            return h
    return None


def _unsupported_head(name: str) -> ValueError:
    return ValueError(
        f"unsupported head: {name} has none of the heads from_bert converts; pass head=... (one of "
        f"{sorted(HEADS)}) to convert its encoder under a new head"
    )


def _head_of(model: PreTrainedModel, head: str | None) -> str:
    if head is not None:
        if head not in HEADS:
            raise ValueError(f"head must be one of {sorted(HEADS)}, got {head!r}")
        return head
    found = _source_head(model)
    if found is None:
        raise _unsupported_head(type(model).__name__)
    return found


def _base_prefix(model) -> str:
    return (
        ""
        if not model.base_model_prefix or not hasattr(model, model.base_model_prefix)
        else model.base_model_prefix + "."
    )


def _rename(state: dict, model, head: str, kind: str) -> tuple[dict, dict, dict]:
    """Source parameter names -> SparseTransformer names, split into the encoder's weights (its pooler included
    where ``head`` has one) and the source head's weights; and the head weights' source names."""
    prefix = _base_prefix(model)
    body, own_head, origin, nsp = {}, {}, {}, []
    for name, t in state.items():
        if kind == "bert" and name.startswith("cls.seq_relationship."):
            # BertForPreTraining's next-sentence-prediction head: no SparseTransformer counterpart
            nsp.append(name)
        elif prefix and name.startswith(prefix):
            body["sparse_transformer." + name[len(prefix) :]] = t
        elif not prefix:
            body["sparse_transformer." + name] = t
        elif kind == "bert" and name.startswith("cls.predictions."):
            rest = name[len("cls.predictions.") :]
            rest = rest.replace("transform.dense", "dense").replace("transform.LayerNorm", "layer_norm")
            own_head["lm_head." + rest], origin["lm_head." + rest] = t, name
        elif kind == "bert" and head == "sequence_classification" and name.startswith("classifier."):
            rest = name[len("classifier.") :]
            own_head["classifier.out_proj." + rest], origin["classifier.out_proj." + rest] = t, name
        else:
            own_head[name], origin[name] = t, name
    if kind == "bert" and head == "sequence_classification":  # BERT pools with its pooler: same maths
        for p in ("weight", "bias"):
            key = f"sparse_transformer.pooler.dense.{p}"
            if key in body:
                body[f"classifier.dense.{p}"] = body.pop(key)
    if head not in ("multiple_choice", "base"):  # only these heads have a pooler
        body = {k: v for k, v in body.items() if not k.startswith("sparse_transformer.pooler.")}
    if nsp:
        pooler = "" if head in ("multiple_choice", "base") else " and the pooler it reads"
        logger.warning(
            f"Some weights of {type(model).__name__} are not converted: its next-sentence-prediction head {nsp}"
            f"{pooler} (no SparseTransformer counterpart)"
        )
    if head == "base":
        body = {k.removeprefix("sparse_transformer."): v for k, v in body.items()}
    return body, own_head, origin


def _tile_positions(table: torch.Tensor, new_len: int, offset: int) -> torch.Tensor:
    """Longformer's recipe: keep the first ``offset`` rows, repeat the learned rows to ``new_len``."""
    old = table.shape[0]
    if new_len <= old:
        return table[:new_len].clone()
    out = table.new_empty(new_len, table.shape[1])
    out[:offset] = table[:offset]
    body = table[offset:]
    k, step = offset, body.shape[0]
    while k < new_len:
        n = min(step, new_len - k)
        out[k : k + n] = body[:n]
        k += n
    return out


def _is_new_head(name: str, head: str) -> bool:
    """Whether target parameter ``name`` belongs to the head or the pooler (not to the encoder)."""
    if head == "base":
        return name.startswith("pooler.")
    return not name.startswith("sparse_transformer.") or name.startswith("sparse_transformer.pooler.")


def _load_into(
    target, state: dict, own_head: dict, origin: dict, head: str, same_head: bool, source_name: str
):
    """Copy ``state`` (the encoder's weights) and ``own_head`` (the source head's, ``origin`` their source names)
    into ``target``. Every encoder weight must map. With ``same_head`` the head's weights must map too; otherwise
    (and for a pooler the source lacks) the new head keeps its fresh initialisation and the source head's weights
    that fit by name and shape are kept, as ``from_pretrained`` does; both lists are logged."""
    unused = []
    if not same_head:
        shapes = {k: v.shape for k, v in target.state_dict().items()}
        dropped = [k for k, v in own_head.items() if shapes.get(k) != v.shape]
        own_head = {k: v for k, v in own_head.items() if k not in dropped}
        unused = [origin[k] for k in dropped]
    missing, unexpected = target.load_state_dict({**state, **own_head}, strict=False)
    tied = target.config.tie_word_embeddings
    missing = [m for m in missing if not m.endswith("position_ids") and not (tied and "lm_head.decoder" in m)]
    unexpected = [u for u in unexpected if not u.endswith("position_ids")]
    new = [m for m in missing if _is_new_head(m, head) and (not same_head or "pooler." in m)]
    missing = [m for m in missing if m not in new]
    if missing or unexpected:
        raise ValueError(
            f"converting {source_name}: parameters that did not map — missing {missing[:8]}, unexpected {unexpected[:8]}"
        )
    name = type(target).__name__
    if new:
        logger.warning(
            f"Some weights of {name} were not initialized from {source_name} and are newly initialized: {new}\n"
            "You should probably TRAIN this model on a down-stream task to be able to use it for predictions and inference."
        )
    if unused:
        logger.warning(f"Some weights of {source_name} were not used by {name}: {unused}")
    if hasattr(target, "tie_weights"):
        target.tie_weights()


def _convert(source, pattern, new_len: int, head: str, roberta: bool, overrides: dict):
    """Build the SparseTransformer head and copy the weights (BERT/RoBERTa module layout). The masked-LM head
    keeps the source's tying (an untied decoder keeps its own weight) and activation (BERT's head transform
    uses ``hidden_act``, RoBERTa's gelu)."""
    cfg = source.config
    derived = dict(
        tie_word_embeddings=getattr(cfg, "tie_word_embeddings", True),
        lm_head_act="gelu" if roberta else cfg.hidden_act,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        hidden_act=cfg.hidden_act,
        hidden_dropout_prob=cfg.hidden_dropout_prob,
        attention_probs_dropout_prob=cfg.attention_probs_dropout_prob,
        max_position_embeddings=new_len,
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps,
        position_ids_style="roberta" if roberta else "bert",
        pad_token_id=cfg.pad_token_id,
        bos_token_id=getattr(cfg, "bos_token_id", None),
        eos_token_id=getattr(cfg, "eos_token_id", None),
        attention_pattern=pattern,
        num_labels=cfg.num_labels,
        id2label=cfg.id2label,
        label2id=cfg.label2id,
        problem_type=cfg.problem_type,
        classifier_dropout=getattr(cfg, "classifier_dropout", None),
        # the heads that read [CLS] make it global when no global_attention_mask is given, as SparseTransformer's
        # do: the same maths as BERT's wherever the pattern already lets [CLS] and every token see each other
        global_first_token=True,
        **{k: getattr(cfg, k) for k in _CARRIED if hasattr(cfg, k)},
    )
    for k in _SHAPES:
        if k in overrides and overrides[k] != derived[k]:
            raise ValueError(
                f"{k}={overrides[k]!r} cannot be overridden: the converted weights fix it ({k}={derived[k]!r})"
            )
    if any(k in overrides for k in _LABELS):  # new labels: none of the source's
        derived = {k: v for k, v in derived.items() if k not in _LABELS}
        overrides = {**overrides, **_labels(overrides)}
    new_cfg = SparseTransformerConfig(**{**derived, **overrides})
    target = HEADS[head](new_cfg).to(source.dtype)  # the new head's weights too
    target.config.dtype = source.dtype
    state, own_head, origin = _rename(source.state_dict(), source, head, "roberta" if roberta else "bert")
    key = ("" if head == "base" else "sparse_transformer.") + "embeddings.position_embeddings.weight"
    state[key] = _tile_positions(state[key], new_len, offset=cfg.pad_token_id + 1 if roberta else 0)
    same_head = _source_head(source) == head
    if head in ("sequence_classification", "token_classification") and new_cfg.num_labels != cfg.num_labels:
        same_head = False  # the classifier's output layer does not fit: a new one, as for another head
    _load_into(target, state, own_head, origin, head, same_head, type(source).__name__)
    return target.train(source.training)


def _check_tokenizer(tokenizer) -> None:
    if tokenizer is not None and not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"tokenizer must be a transformers tokenizer or None, got {type(tokenizer).__name__}")


def _fit_tokenizer(tokenizer, model) -> None:
    """Set ``tokenizer.model_max_length`` to the number of tokens ``model`` takes: ``max_position_embeddings``,
    less RoBERTa-style models' ``pad_token_id + 1`` offset rows."""
    if tokenizer is None:
        return
    cfg = model.config
    offset = cfg.pad_token_id + 1 if cfg.position_ids_style == "roberta" else 0
    tokenizer.model_max_length = cfg.max_position_embeddings - offset


def _specs(pattern):
    if isinstance(pattern, (list, tuple)):
        return [p.to_dict() if isinstance(p, Pattern) else from_dict(p).to_dict() for p in pattern]
    return pattern.to_dict() if isinstance(pattern, Pattern) else from_dict(pattern).to_dict()


def from_bert(
    model_or_path,
    attention_pattern,
    max_position_embeddings: int | None = None,
    head: str | None = None,
    *,
    tokenizer=None,
    **config_overrides,
):
    """A BERT/RoBERTa-family checkpoint as a SparseTransformer with ``attention_pattern``.

    Args:
        model_or_path: a transformers BERT/RoBERTa-family model (any supported head) or a path/Hub id.
        attention_pattern: pattern (or one per layer) for the converted model.
        max_position_embeddings: new size of the position-embedding table; position embeddings are
            tiled to it (default: keep the original size). Like ``config.max_position_embeddings`` it
            counts RoBERTa-style models' ``pad_token_id + 1`` offset rows (their position ids start
            after them), so such a model then takes ``max_position_embeddings - pad_token_id - 1``
            tokens: 4098 for 4096 tokens from ``roberta-base``, as Longformer did; BERT takes all N.
        head: which head to build (default: the source model's head; for a path or Hub id, the head
            its config's ``architectures`` names, e.g. ``BertForMaskedLM`` -> ``masked_lm``). Another
            head than the source's keeps the source's encoder and initialises the new head (and a
            pooler the source lacks), as ``from_pretrained`` does; the new and the unused weights are
            logged as warnings. Every encoder weight must map. A ``...ForPreTraining`` source converts to
            ``masked_lm`` (its next-sentence-prediction head, and the pooler only it reads, have no counterpart:
            they are logged and dropped); a head with no counterpart here (``BertLMHeadModel``, ``...ForCausalLM``,
            ``...ForNextSentencePrediction``) raises ``ValueError``, for a model as for a path: pass ``head=``
            to convert its encoder under one of these.
        tokenizer: the source's tokenizer, if you have it loaded: its ``model_max_length`` is set (in place) to
            the number of tokens the converted model takes (``max_position_embeddings``, less RoBERTa-style
            models' ``pad_token_id + 1`` rows), so that ``tokenizer(..., truncation=True)`` and pipelines cut at
            the new length, not at the source's; save it next to the model (``tokenizer.save_pretrained``).
        **config_overrides: ``from_pretrained`` loading arguments for a path or Hub id (:data:`LOADING_ARGS`:
            ``dtype``, ``revision``, ``token``, ``cache_dir``, ...), and any other SparseTransformerConfig field
            (e.g. ``attention_backend``, ``num_labels``, ``id2label``, ``hidden_dropout_prob``), which replaces the
            value taken from the source (labels as a whole: ``num_labels`` alone gives new ``LABEL_i`` labels,
            ``label2id`` or ``id2label`` alone names them and gives their number; labels that disagree raise). A
            classification head with another ``num_labels`` keeps the source's other head weights and initialises
            its output layer, as for another head. Fields the copied weights fix (``hidden_size``, ...) raise, and
            so does a key that is neither a config field nor a loading argument (a typo).

    Returns: the SparseTransformer model, in the source's dtype. Its sequence-classification,
    question-answering and multiple-choice heads make the first token ([CLS]) global when no
    ``global_attention_mask`` is passed (``global_first_token=True``, SparseTransformer's default; pass
    ``global_first_token=False`` for none), so the ``Global()`` part of e.g. ``patterns.Longformer`` applies to
    Trainer batches and pipelines too. With a pattern that covers the whole
    input and the original length it reproduces the source model's outputs at every non-padding
    position, and so every loss that ignores padding. At padding positions the outputs differ:
    SparseTransformer gives padding queries a zero attention output (the Longformer convention) where
    BERT lets them attend to the real tokens, so the hidden states and per-token logits there differ.
    The question-answering loss, a softmax over all positions (padding included, in both models),
    differs with them; to compare it, mask padding logits (e.g. fill them with ``-inf``) in both.
    BERT's sequence-classification pooler (dense, tanh) becomes the converted head's ``classifier.dense``,
    so the outputs match in evaluation; in training the converted head (RoBERTa's: dropout, dense, tanh,
    dropout, output layer) also applies ``classifier_dropout`` (else ``hidden_dropout_prob``) to [CLS] before
    that dense layer, which BERT's pooler does not: fine-tuning trains with one more dropout.
    """
    _check_tokenizer(tokenizer)
    loading, config_overrides = _split_kwargs(config_overrides)
    source = _load(model_or_path, head, loading)
    cfg = source.config
    if cfg.model_type not in ROBERTA_STYLE + BERT_STYLE or cfg.model_type in _REFUSED:
        raise ValueError(
            f"from_bert converts BERT/RoBERTa-family models, got model_type={cfg.model_type!r}"
            + (f"; {_REFUSED[cfg.model_type]}" if cfg.model_type in _REFUSED else "")
        )
    if getattr(cfg, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise ValueError(
            f"only absolute position embeddings convert, got position_embedding_type={cfg.position_embedding_type!r}"
        )
    new_len = max_position_embeddings or cfg.max_position_embeddings
    model = _convert(
        source,
        _specs(attention_pattern),
        new_len,
        _head_of(source, head),
        cfg.model_type in ROBERTA_STYLE,
        config_overrides,
    )
    _fit_tokenizer(tokenizer, model)
    return model


def from_longformer(
    model_or_path,
    head: str | None = None,
    attention_pattern=None,
    max_position_embeddings: int | None = None,
    *,
    tokenizer=None,
    **config_overrides,
):
    """A ``Longformer*`` checkpoint as a SparseTransformer running hf-sparse kernels.

    Each layer's ``attention_window`` becomes ``patterns.Longformer(window=w)`` (unless
    ``attention_pattern`` is given) and the global query/key/value projections are kept
    (``global_projections=True``): hidden states match ``LongformerModel`` with and without global
    tokens. Pass the same ``global_attention_mask`` you would give Longformer. Without one, the
    sequence-classification head makes the first token global, as Longformer's does
    (``global_first_token=True``), and the question-answering and multiple-choice heads make the tokens
    before / after each row's first ``sep_token_id`` global, as Longformer's do (``global_tokens_from_sep``
    ``"before"`` / ``"after"``; they need ``input_ids``: with ``inputs_embeds``, pass the mask).

    ``max_position_embeddings`` tiles the position embeddings to a longer table, as in :func:`from_bert`
    (counting the ``pad_token_id + 1`` offset rows); ``tokenizer`` and ``**config_overrides`` are as in
    :func:`from_bert`.
    """
    _check_tokenizer(tokenizer)
    loading, config_overrides = _split_kwargs(config_overrides)
    source = _load(model_or_path, head, loading)
    cfg = source.config
    if cfg.model_type != "longformer":
        raise ValueError(f"from_longformer needs a Longformer model, got model_type={cfg.model_type!r}")
    if attention_pattern is None:
        w = cfg.attention_window
        windows = list(w) if isinstance(w, (list, tuple)) else [w] * cfg.num_hidden_layers
        attention_pattern = (
            [Longformer(window=int(x)) for x in windows]
            if len(set(windows)) > 1
            else Longformer(window=int(windows[0]))
        )
    head = _head_of(source, head)
    # Longformer's sequence-classification head makes [CLS] global by itself, its question-answering and
    # multiple-choice heads the tokens around the first sep_token_id; its token-classification head none
    overrides = {
        "global_projections": True,
        "global_first_token": head == "sequence_classification",
        "global_tokens_from_sep": _LONGFORMER_SEP_GLOBALS.get(head),
        **config_overrides,
    }
    model = _convert(
        source,
        _specs(attention_pattern),
        max_position_embeddings or cfg.max_position_embeddings,
        head,
        True,
        overrides,
    )
    _fit_tokenizer(tokenizer, model)
    return model


__all__ = ["HEADS", "LOADING_ARGS", "from_bert", "from_longformer"]
