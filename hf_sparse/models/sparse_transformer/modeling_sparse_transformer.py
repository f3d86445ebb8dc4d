"""SparseTransformer: a BERT/RoBERTa-style transformer whose self-attention is any hf-sparse pattern.

Module names follow BERT/RoBERTa/Longformer (``embeddings``, ``encoder.layer.N.attention.self.query``,
...), so their checkpoints convert by renaming a prefix (``hf_sparse.conversion``). Attention goes
through transformers' attention interface (``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]``)
as in ``models/mistral``: ``"hf_sparse"`` (the default: :func:`hf_sparse.sparse_attention`, exact,
block-sparse, O(n) memory), ``"sdpa"`` (torch's SDPA with the pattern's mask materialised) or
``"eager"`` (the dense reference). Each layer's mask is a :class:`PatternMask` handed to the mask
interface of the same name. Decoders cache only the keys their pattern can still attend
(:class:`SparsePatternCache`) and read the cache under either name transformers passes it
(``cache``, or ``past_key_values`` in older transformers 5 releases).
"""

import copy
import dataclasses
import inspect
import json
import os

import torch
from torch import nn
from torch.nn import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation.configuration_utils import GenerationMode
from transformers.integrations.moe import use_experts_implementation
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    CausalLMOutputWithCrossAttentions,
)
from transformers.utils import logging
from transformers.utils.output_capturing import OutputRecorder

from ...attention.adaptive_span import AdaptiveSpan
from ...attention.dense import all_true
from ...attention.integration import ATTN_IMPLEMENTATION, PatternMask, register_attention
from ...utils.generation import fit_max_length
from .attention_sparse_transformer import SparseTransformerAttention, build_mask, left_padding
from .cache_sparse_transformer import SparsePatternCache, holds_pattern_layers
from .configuration_sparse_transformer import SparseTransformerConfig
from .embeddings_sparse_transformer import (
    RotaryEmbedding,
    SparseTransformerEmbeddings,
    first_token_global,
    make_position_ids,
)
from .moe_sparse_transformer import (
    SparseTransformerCausalLMOutput,
    SparseTransformerExpertsBase,
    SparseTransformerMaskedLMOutput,
    SparseTransformerModelOutput,
    SparseTransformerMoeFeedForward,
    SparseTransformerMultipleChoiceOutput,
    SparseTransformerQuestionAnsweringOutput,
    SparseTransformerRouter,
    SparseTransformerSequenceClassifierOutput,
    SparseTransformerTokenClassifierOutput,
    add_router_losses,
    init_experts,
    router_fields,
    router_losses,
    wants_router_logits,
)

logger = logging.get_logger(__name__)

register_attention()  # "hf_sparse" in AttentionInterface/AttentionMaskInterface (also in a remote-code copy)

# transformers 5 renamed `past_key_values` to `cache` (outputs and forward arguments) in a minor release
CACHE_FIELD = (
    "cache"
    if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithCrossAttentions)}
    else "past_key_values"
)

# ----------------------------------------------------------------------------- helpers


def _pick_cache(cache, past_key_values):
    """The cache under whichever name the installed transformers passed it."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("give the cache as `cache` or `past_key_values`, not both")
    return cache if cache is not None else past_key_values


def _refuse_cross_attention_inputs(kwargs):
    """BERT-style decoders take ``encoder_hidden_states`` / ``encoder_attention_mask`` for cross-attention, which
    SparseTransformer layers do not have: given (not None), they would vanish into ``**kwargs`` unread."""
    given = [
        name for name in ("encoder_hidden_states", "encoder_attention_mask") if kwargs.get(name) is not None
    ]
    if given:
        raise ValueError(
            f"{' and '.join(given)} given, but SparseTransformer has no cross-attention (a decoder-only model, "
            "config.add_cross_attention=False) and would ignore them: leave them out, or use an encoder-decoder "
            "model such as LEDForSummarization"
        )


class SparseTransformerIntermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACT2FN[config.hidden_act]

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class SparseTransformerOutput(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


@use_experts_implementation(has_gate=False, has_bias=True)
class SparseTransformerExperts(SparseTransformerExpertsBase):
    """The experts of a MoE layer (``moe_sparse_transformer``), dispatched on ``config._experts_implementation``."""


class SparseTransformerLayer(GradientCheckpointingLayer):
    """Post-layer-norm block: sparse self-attention, feed-forward (dense, or a mixture of experts in the
    layers ``config.is_moe_layer`` names). Returns (hidden states, attention weights, router logits or None)."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.attention = SparseTransformerAttention(config, layer_idx)
        if config.is_moe_layer(layer_idx):
            self.moe = SparseTransformerMoeFeedForward(config, SparseTransformerExperts(config))
        else:
            self.intermediate = SparseTransformerIntermediate(config)
            self.output = SparseTransformerOutput(config)

    def forward(self, hidden_states, **kwargs):
        attn, weights = self.attention(hidden_states, **kwargs)
        if hasattr(self, "moe"):
            out, router_logits = self.moe(attn, kwargs.get("query_mask"))
            return out, weights, router_logits
        return self.output(self.intermediate(attn), attn), weights, None


class SparseTransformerEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList(
            [SparseTransformerLayer(config, i) for i in range(config.num_hidden_layers)]
        )

    def running_layers(self):
        """The layers a forward runs: the first ``config.num_hidden_layers`` (as Llama's ``layers[:n]``), all of them
        unless the config was lowered after the model was built, as self-speculative decoding
        (``generate(assistant_early_exit=k)``) does while its draft runs, with a cache of ``k`` layers."""
        return self.layer[: self.config.num_hidden_layers]

    def forward(
        self, hidden_states, layer_masks, output_hidden_states=False, output_attentions=False, **kwargs
    ):
        all_hidden, all_attn, all_router_logits = [], [], []
        for layer, mask in zip(self.running_layers(), layer_masks, strict=True):
            if output_hidden_states:
                all_hidden.append(hidden_states)
            hidden_states, weights, router_logits = layer(
                hidden_states, attention_mask=mask, output_attentions=output_attentions, **kwargs
            )
            if output_attentions:
                all_attn.append(weights)
            if router_logits is not None:
                all_router_logits.append(router_logits)
        if output_hidden_states:
            all_hidden.append(hidden_states)
        return (
            hidden_states,
            (tuple(all_hidden) if output_hidden_states else None),
            (tuple(all_attn) if output_attentions else None),
            tuple(all_router_logits),
        )


class SparseTransformerPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


class SparseTransformerLMHead(nn.Module):
    """dense -> ``config.lm_head_act`` -> layer norm -> vocabulary projection (RoBERTa's head with gelu, BERT's
    with its ``hidden_act``). The projection has one bias, tied or not: ``decoder.bias`` is ``lm_head.bias``
    (saved as ``lm_head.bias``; see :class:`_LMHeadMixin`). With ``tie_word_embeddings`` the projection's weight
    is the input embedding matrix; untied, ``decoder.weight`` is a parameter of its own, saved and loaded as such."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT2FN[config.lm_head_act]
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))  # decoder.bias once tied (post_init)

    def forward(self, features):
        return self.decoder(self.layer_norm(self.act(self.dense(features))))


class SparseTransformerClassificationHead(nn.Module):
    """RoBERTa's sentence head on the first token (a decoder's model hands it each row's last one:
    ``pooled_token``): dense -> tanh -> projection."""

    def __init__(self, config):
        super().__init__()
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(rate)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, features):
        x = self.dropout(features[:, 0])
        x = self.dropout(torch.tanh(self.dense(x)))
        return self.out_proj(x)


# ----------------------------------------------------------------------------- pretrained base


class ExportCodeMixin:
    """Put before ``PreTrainedModel`` in a model's bases: ``save_pretrained`` also writes the remote code.

    ``hf_sparse.models.register_auto`` sets ``export_code_hook`` on the registered classes; after the normal
    ``save_pretrained`` it writes the self-contained, flat copy of the modelling (and pipeline) code, the
    ``auto_map`` and ``custom_pipelines`` into the folder, so ``trust_remote_code=True`` loads it where
    hf-sparse is not installed (unset in that copy itself, and on unregistered classes: they save as usual).
    The hook's ``check`` runs first: a bundle that cannot be made raises before the weights are written.

    With ``push_to_hub=True`` the folder is uploaded after that, as transformers' ``save_pretrained`` uploads
    it (which would upload before the hook ran, without the code): the files this save wrote (so
    ``state_dict``, ``variant`` and ``max_shard_size`` are the ones saved) and every file of the bundle, with
    ``repo_id`` (default: the folder's name), ``private``, ``revision``, ``create_pr``, ``commit_message``,
    ``commit_description`` and ``token``; and the folder's ``README.md``: where there is none, the repository's
    card (or a new one) with the model's ``tags`` is written there first, as transformers does.

    A model of that copy (loaded with ``trust_remote_code``) re-saves as the folder it came from: transformers
    writes only its model module and the modules that one imports, so the other files of the bundle's manifest
    (the pipeline modules, the manifest itself) are copied from the folder or Hub repo it was loaded from
    (:meth:`_copy_bundle`). Where they cannot be found, the saved ``config.json`` loses ``custom_pipelines`` (a
    warning says so): ``pipeline()`` would look for the missing modules.
    """

    export_code_hook = None
    #: the bundle's manifest (``hf_sparse.hub.bundle.BUNDLE_MANIFEST``; that module is not in the bundle)
    _BUNDLE_MANIFEST = "hf_sparse_bundle.json"
    _PUSH_KEYWORDS = (
        "repo_id",
        "commit_message",
        "commit_description",
        "private",
        "revision",
        "create_pr",
        "tags",
    )

    def save_pretrained(self, save_directory, *args, push_to_hub: bool = False, **kwargs):
        hub = {k: kwargs.pop(k) for k in self._PUSH_KEYWORDS if k in kwargs}
        main = (args[0] if args else kwargs.get("is_main_process", True)) is not False
        hook = type(self).export_code_hook
        if hook is not None and main and getattr(hook, "check", None) is not None:
            hook.check(self, save_directory)  # before anything is written: no half-written folder
        if push_to_hub and main:
            from transformers.utils.hub import hf_api

            os.makedirs(save_directory, exist_ok=True)
            repo_id = hub.pop("repo_id", os.path.basename(os.path.normpath(save_directory)))
            token = kwargs.get("token")
            repo_id = (
                hf_api()
                .create_repo(repo_id, exist_ok=True, private=hub.pop("private", None), token=token)
                .repo_id
            )
            timestamps = self._get_files_timestamps(save_directory)
        out = super().save_pretrained(save_directory, *args, **kwargs)
        if hook is not None and main:
            hook(self, save_directory)
        elif getattr(self, "_auto_class", None) is not None and main:  # trust_remote_code: the bundle's copy
            self._copy_bundle(save_directory)
        if push_to_hub and main:
            self._upload_saved(save_directory, repo_id, timestamps, token, **hub)
        return out

    def _upload_saved(self, save_directory, repo_id, timestamps, token, tags=None, **commit) -> None:
        """Upload what ``save_pretrained`` just wrote into ``save_directory`` (transformers' way: the files modified
        since ``timestamps``), every file of the remote-code bundle (a re-save into the folder the model came from
        leaves them as they were) and the model card (the repository's, tagged, where the folder has none)."""
        from transformers.utils.hub import create_and_tag_model_card

        card = os.path.join(save_directory, "README.md")
        if not os.path.exists(card):
            tags = [tags] if isinstance(tags, str) else list(tags or [])
            tags = list(dict.fromkeys([*(self.model_tags or []), *tags]))
            create_and_tag_model_card(repo_id, tags or None, token=token).save(card)
        manifest = os.path.join(save_directory, self._BUNDLE_MANIFEST)
        try:
            with open(manifest, encoding="utf-8") as f:
                always = ["README.md", self._BUNDLE_MANIFEST, *json.load(f)["files"]]
        except (OSError, ValueError, KeyError, TypeError):
            always = ["README.md"]
        timestamps = {name: t for name, t in timestamps.items() if name not in always}
        self._upload_modified_files(save_directory, repo_id, timestamps, token=token, **commit)

    def _copy_bundle(self, save_directory) -> None:
        """Copy the bundle's files (its manifest and every file it lists) that transformers' ``save_pretrained``
        left out, from the folder of this class's module or else from the folder or Hub repo the model was
        loaded from (``name_or_path``); drop ``custom_pipelines`` from the saved config where any is missing."""
        import re
        import sys
        import warnings
        from pathlib import Path

        from transformers.utils import cached_file

        # the remote-code module cache; the files read there are the bundle's own modules
        here = Path(sys.modules[type(self).__module__].__file__).parent  # bundle: reads no data file
        source = self.config._name_or_path
        revision = getattr(self.config, "_commit_hash", None)

        def find(name: str) -> Path | None:
            if (here / name).is_file():
                return here / name
            if not source:
                return None
            try:
                path = cached_file(source, name, revision=revision, _raise_exceptions_for_missing_entries=False,
                                   _raise_exceptions_for_connection_errors=False)  # fmt: skip
            except (OSError, ValueError):  # a repo id that is not one, a gated repo, ...
                return None
            return Path(path) if path else None

        folder = Path(save_directory)
        manifest = find(self._BUNDLE_MANIFEST)
        try:
            bundle = json.loads(manifest.read_text(encoding="utf-8")) if manifest else None
            files = list(bundle["files"]) if bundle is not None else None
        except (ValueError, KeyError, TypeError):  # not a bundle's manifest
            bundle, files = None, None
        missing = [self._BUNDLE_MANIFEST] if files is None else []
        for name in [] if files is None else [self._BUNDLE_MANIFEST, *files]:
            # flat module names only: the manifest comes from the loaded repo, and a name must not leave the folder
            flat = isinstance(name, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.py", name)
            src = manifest if name == self._BUNDLE_MANIFEST else find(name) if flat else None
            if src is None:
                missing.append(str(name))
            elif not (folder / name).exists() or not os.path.samefile(src, folder / name):
                _replace_file(folder / name, src.read_bytes())
        config_file = folder / "config.json"
        if not config_file.is_file():
            return
        config = json.loads(config_file.read_text(encoding="utf-8"))
        saved = json.dumps(config, sort_keys=True)
        if files is not None and isinstance(bundle.get("auto_map"), dict):
            # transformers points AutoConfig at the config's own module again; the bundle loads every class
            # through one module (one package: one copy of each module), as its manifest says
            config["auto_map"] = {**(config.get("auto_map") or {}), **bundle["auto_map"]}
        dropped = bool(missing) and config.pop("custom_pipelines", None) is not None
        if json.dumps(config, sort_keys=True) != saved:
            _replace_file(config_file, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        if dropped:
            warnings.warn(
                f"{folder}: saved without custom_pipelines (pipeline() would look for code that is not there): "
                f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} of the remote-code bundle cannot be "
                f"found next to {type(self).__module__} or in {source!r}",
                stacklevel=3,
            )


def _replace_file(path, data: bytes) -> None:
    """``path`` replaced by ``data`` atomically: a temporary file in its folder, renamed over it (an interrupted save
    leaves the old file whole, never a truncated ``config.json``), with the mode a plain ``open()`` gives. Here,
    not ``hf_sparse.utils.io``: the remote-code bundle cannot import the package."""
    import tempfile

    fd, tmp = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(path)), prefix=".hf_sparse.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)  # mkstemp makes 0600
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class SparseTransformerPreTrainedModel(ExportCodeMixin, PreTrainedModel):
    config_class = SparseTransformerConfig
    config: SparseTransformerConfig
    base_model_prefix = "sparse_transformer"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SparseTransformerEmbeddings", "SparseTransformerLayer"]
    # attention goes through ALL_ATTENTION_FUNCTIONS: "hf_sparse" (default), "sdpa" and "eager"; flash and
    # flex attention cannot take an arbitrary materialised pattern mask
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    _supports_attention_backend = True
    #: Trainer: does the loss divide by the ``num_items_in_batch`` it is handed (then the Trainer does not divide it
    #: by the gradient-accumulation steps)? transformers guesses yes for any ``forward(**kwargs)``; these heads
    #: average their own loss, which made loss and gradients ``gradient_accumulation_steps`` times too large
    accepts_loss_kwargs = False
    # MoE layers' router logits: the first output of every router (returned with output_router_logits=True)
    _can_record_outputs = {"router_logits": OutputRecorder(SparseTransformerRouter, index=0)}

    def __init__(self, config, *inputs, **kwargs):
        config.validate_sparse()  # what from_pretrained(path, key=value) or `config.key = value` changed since __init__
        super().__init__(config, *inputs, **kwargs)

    def get_correct_attn_implementation(self, requested_attention, is_init_check=False):
        """``"hf_sparse"`` unless another implementation is asked for."""
        requested = ATTN_IMPLEMENTATION if requested_attention is None else requested_attention
        return super().get_correct_attn_implementation(requested, is_init_check)

    def get_correct_experts_implementation(self, requested_experts):
        """``"eager"`` (experts grouped by expert, one matmul each) unless another is asked for: on CPU
        transformers' ``"grouped_mm"`` default runs 4x and ``"batched_mm"`` 11x slower (forward + backward of
        pipelines/lm/moe.yaml's model); on GPU ask for ``experts_implementation="grouped_mm"``."""
        return super().get_correct_experts_implementation(
            "eager" if requested_experts is None else requested_experts
        )

    @torch.no_grad()
    def _init_weights(self, module):
        # transformers.initialization skips parameters already loaded from a checkpoint (a tied bias too)
        super()._init_weights(module)
        if isinstance(module, SparseTransformerLMHead):
            init.zeros_(module.bias)
        if isinstance(module, AdaptiveSpan):
            init.constant_(module.span, module.init_fraction)
        if isinstance(module, SparseTransformerExpertsBase):
            init_experts(module, self.config.initializer_range)
        if isinstance(module, SparseTransformerRouter):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        if isinstance(module, RotaryEmbedding):
            # non-persistent, so never in a checkpoint: from_pretrained leaves it uninitialised otherwise
            module.inv_freq.copy_(module.compute_inv_freq())  # deterministic: always recomputed


def with_span_penalty(model, loss, weight=1.0):
    """A head's loss plus ``weight`` times the adaptive-span penalty, in training mode only (evaluation losses
    stay the task's loss, comparable across models); ``weight``: see :func:`batch_share`."""
    if loss is None or not model.training or model.config.adaptive_span is None:
        return loss
    return loss + (weight * model.sparse_transformer.adaptive_span_loss()).to(loss.dtype)


def batch_share(labels, num_items_in_batch=None):
    """The weight of a forward's per-batch penalties (router losses, span penalty) next to a token loss: 1 for a
    loss averaged over this batch (``num_items_in_batch`` None), else this batch's labels (``labels`` != -100,
    as the token loss counts them) over the ``num_items_in_batch`` the Trainer hands every micro-batch of an
    accumulated step. The micro-batches' shares then add up to 1 (over the processes too, whose losses the
    Trainer scales by their number when it averages tokens across devices), so the accumulated step counts each
    penalty once, every micro-batch weighted by its tokens, as the token loss is."""
    if num_items_in_batch is None:
        return 1.0
    return (labels != -100).sum().to(torch.float32) / num_items_in_batch


def _fillable_dynamic_cache(cache) -> bool:
    """Whether ``cache`` is a DynamicCache (not offloaded) the model can fill with its pattern layers: an empty one
    (what generate() makes by default, and what transformers' manual decoding loop starts with), or one it filled
    before. The model reads it through a SparsePatternCache on its layers (``SparsePatternCache.sharing_layers``)."""
    return (
        type(cache) is DynamicCache
        and not getattr(cache, "offloading", False)
        and (cache.get_seq_length() == 0 or holds_pattern_layers(cache))
    )


def _return(return_dict, output, config):
    use = config.return_dict if return_dict is None else return_dict
    return output if use else output.to_tuple()


class SparseTransformerModel(SparseTransformerPreTrainedModel):
    """The bare encoder (or decoder, with ``is_decoder=True``) outputting hidden states."""

    def __init__(self, config: SparseTransformerConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = SparseTransformerEmbeddings(config)
        self.rotary = (
            RotaryEmbedding(config.head_dim, config.rope_theta)
            if config.position_embedding_type == "rotary"
            else None
        )
        self.encoder = SparseTransformerEncoder(config)
        self.pooler = SparseTransformerPooler(config) if add_pooling_layer else None
        self.post_init()
        # the attention_pattern and adaptive_span the layers follow (_follow_config)
        self._config_seen = copy.deepcopy((config.attention_pattern, config.adaptive_span))

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        global_attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        past_key_values=None,
        use_cache=None,
        cache_position=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        cache=None,
        output_router_logits=None,
        **kwargs,
    ) -> SparseTransformerModelOutput:
        r"""
        attention_mask (`(batch, seq)`): 1 for tokens, 0 for padding (with a cache: over past + new tokens).
            With left padding, a decoder's patterns count positions from each row's first token (an encoder's
            from the padded start: pad encoder inputs on the right).
        global_attention_mask (`(batch, seq)`): 1 for global tokens (attend and are attended everywhere).
        cache (`SparsePatternCache`): decoder cache (also accepted as `past_key_values`, the name older
            transformers 5 releases use); created when `use_cache` and none is given.
        cache_position (`(seq,)`): positions of the new tokens (default: after the cached ones).
        output_router_logits (`bool`): return the MoE layers' router logits (default: the config's).
        """
        cfg = self.config
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        _refuse_cross_attention_inputs(kwargs)
        self._follow_config()
        output_attentions = cfg.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = (
            cfg.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        use_cache = bool(cfg.is_decoder and (cfg.use_cache if use_cache is None else use_cache))
        given = _pick_cache(cache, past_key_values)
        if torch.compiler.is_exporting() and cfg.is_decoder and (use_cache or given is not None):
            raise NotImplementedError(
                "torch.export cannot trace the decoder's SparsePatternCache: which keys it keeps is decided in Python "
                "from the positions and padding, data-dependent steps that export cannot record; export with "
                "use_cache=False (model(..., use_cache=False), or config.use_cache = False) and no cache"
            )
        if (
            cfg.is_decoder
            and (use_cache or given is not None)
            and self.training
            and torch.is_grad_enabled()
            and any(getattr(layer, "gradient_checkpointing", False) for layer in self.encoder.layer)
        ):
            # the backward replay of a checkpointed layer would write the cache a second time; transformers'
            # checkpointing layer drops the cache only under the names it knows (5.10: not `cache`), so here
            logger.warning_once(
                "use_cache=True is incompatible with gradient checkpointing: setting use_cache=False"
            )
            use_cache = False
            if _fillable_dynamic_cache(given) or isinstance(given, SparsePatternCache):
                given = None  # (keys from elsewhere are still refused below)
        cache = self._cache(given, use_cache)
        self._check_cache_patterns(cache)
        ref = input_ids if input_ids is not None else inputs_embeds[..., 0]
        B, n = ref.shape
        past = cache.get_seq_length() if cache is not None else 0
        device = ref.device
        if cache_position is None:
            cache_position = torch.arange(past, past + n, device=device)
        if position_ids is None:
            position_ids = make_position_ids(cfg, input_ids, inputs_embeds, past)
        if attention_mask is not None:
            if attention_mask.dim() != 2:  # a 1D row, or a 4D additive mask as some transformers models take
                raise ValueError(
                    f"attention_mask must have shape (batch, seq) = ({B}, {past + n}) (1 for tokens, 0 for padding; "
                    f"with a cache over past + new tokens), got {tuple(attention_mask.shape)}"
                )
            attention_mask = attention_mask.to(device).long()
            if attention_mask.shape[-1] != past + n:
                raise ValueError(
                    f"attention_mask covers {attention_mask.shape[-1]} positions, expected {past + n} (cached + new)"
                )
        if global_attention_mask is not None and all_true(global_attention_mask == 0):
            global_attention_mask = None
        if global_attention_mask is not None and past > 0:
            raise ValueError("global_attention_mask cannot be combined with a KV cache; pass use_cache=False")
        row_offsets = left_padding(attention_mask) if cfg.is_decoder else None
        hidden = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)
        rope = self.rotary(position_ids, hidden.dtype) if self.rotary is not None else None
        masks = self._layer_masks(
            B,
            n,
            past,
            cache,
            cache_position,
            attention_mask,
            global_attention_mask,
            row_offsets,
            hidden.dtype,
            output_attentions,
        )
        hidden, all_hidden, all_attn, all_router_logits = self.encoder(
            hidden,
            masks,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            query_mask=None if attention_mask is None else attention_mask[:, -n:],
            global_attention_mask=global_attention_mask,
            position_embeddings=rope,
            cache=cache,
            cache_position=cache_position,
            row_offsets=row_offsets,
            key_padding_mask=attention_mask,
        )
        pooled = self.pooler(hidden) if self.pooler is not None else None
        token_mask = None if attention_mask is None else attention_mask[:, -n:]
        aux_loss, z_loss = router_losses(cfg, all_router_logits, token_mask)
        # a DynamicCache the model fills (the same layers) is returned itself, as transformers models do
        returned = given if cache is not None and getattr(given, "layers", None) is cache.layers else cache
        out = SparseTransformerModelOutput(
            last_hidden_state=hidden,
            pooler_output=pooled,
            hidden_states=all_hidden,
            attentions=all_attn,
            aux_loss=aux_loss,
            router_z_loss=z_loss,
            router_logits=all_router_logits
            if all_router_logits and wants_router_logits(cfg, output_router_logits)
            else None,
            **{CACHE_FIELD: returned},
        )
        return _return(return_dict, out, cfg)

    def _follow_config(self):
        """``config.attention_pattern`` or ``config.adaptive_span`` edited since the model was built (or last ran):
        the config is validated again (specs normalised, so that the layers, the masks they share and
        ``save_pretrained`` read the same patterns), and the layers read the new patterns. The adaptive-span
        modules were built for the config's ``max_span`` and ``ramp`` (trained spans are fractions of
        ``max_span``): another value, or adaptive span added or removed, is a ``ValueError``."""
        cfg = self.config
        if (cfg.attention_pattern, cfg.adaptive_span) == self._config_seen:
            return
        cfg.validate_sparse()
        want = (
            None if cfg.adaptive_span is None else (cfg.adaptive_span["max_span"], cfg.adaptive_span["ramp"])
        )
        span = self.encoder.layer[0].attention.self.adaptive_span
        built = None if span is None else (span.max_span, span.ramp)
        if want != built:
            have = "none" if built is None else f"max_span={built[0]}, ramp={built[1]}"
            raise ValueError(
                f"config.adaptive_span={cfg.adaptive_span!r} was changed after the model was built with {have}: the "
                "spans are trained parameters of the layers; build a new model from the edited config"
            )
        self._config_seen = copy.deepcopy((cfg.attention_pattern, cfg.adaptive_span))

    def _check_cache_patterns(self, cache):
        """A cache made before ``config.attention_pattern`` was edited keeps the keys of the old patterns: one that
        has dropped none takes the new patterns (from then on it keeps what they need); one that dropped keys the
        new pattern may attend is a ``ValueError``. A layer without a pattern keeps every key."""
        if cache is None:
            return
        for i, (layer, held) in enumerate(zip(self.encoder.layer, cache.layers)):
            pattern = layer.attention.self.pattern
            if held.pattern is None or held.pattern is pattern:
                continue
            if held.pattern != pattern and held.dropped_until > 0:
                raise ValueError(
                    f"the cache dropped layer {i}'s keys for {held.pattern!r}, but config.attention_pattern now "
                    f"gives {pattern!r}, which may attend them: decode with a new cache"
                )
            held.pattern = pattern

    def adaptive_span_loss(self):
        """The paper's L1 span penalty: ``adaptive_span.loss_coef`` times the sum over layers of the mean
        span (tokens); ``None`` without adaptive span."""
        if self.config.adaptive_span is None:
            return None
        total = sum(layer.attention.self.adaptive_span.penalty() for layer in self.encoder.running_layers())
        return self.config.adaptive_span["loss_coef"] * total

    def _layer_masks(
        self,
        B,
        n,
        past,
        cache,
        cache_position,
        attention_mask,
        global_attention_mask,
        row_offsets,
        dtype,
        weights,
    ):
        """One mask per layer from the mask interface of ``config._attn_implementation``; layers with
        the same pattern share it (their caches hold the same positions)."""
        impl = self.config._attn_implementation
        if weights and impl not in (None, "eager", ATTN_IMPLEMENTATION):
            impl = "eager"  # the layers fall back to eager attention to return weights
        specs = self.config.attention_pattern
        padding = None if attention_mask is None else attention_mask.bool()  # (B, past + n)
        g = None if global_attention_mask is None else global_attention_mask.to(cache_position.device).bool()
        masks, made = [], {}
        for i, layer in enumerate(self.encoder.running_layers()):
            key = json.dumps(specs[i], sort_keys=True, default=str) if isinstance(specs, list) else ""
            if key not in made:
                kpos = cache.key_positions(i, cache_position) if cache is not None else cache_position
                rule = PatternMask(
                    layer.attention.self.pattern, past, n, kpos,
                    padding=None if padding is None else padding[:, kpos], global_tokens=g, row_offsets=row_offsets,
                    key_start=0 if past == 0 else None,  # no data-dependent check without cached keys
                )  # fmt: skip
                made[key] = build_mask(impl, rule, B, dtype, cache_position.device)
            masks.append(made[key])
        return masks

    def _cache(self, given, use_cache):
        """The pattern-aware cache. A DynamicCache that is empty (generate's default, or a user's for the manual
        decoding loop) gets the pattern layers, and is read through a SparsePatternCache on them, so that it holds
        what the model cached. Keys from elsewhere are refused, with or without ``use_cache``: dropping them would
        run without them. A cache given is used whatever ``use_cache`` says, as transformers' models do: a decoder
        that dropped the keys it holds would start again at position 0."""
        if (
            given is not None
            and not isinstance(given, SparsePatternCache)
            and not holds_pattern_layers(given)
        ):
            held = given.get_seq_length() if isinstance(given, Cache) else None
            if held != 0:
                where = (
                    "an encoder (is_decoder=False) has no cache"
                    if not self.config.is_decoder
                    else "the cache must be a SparsePatternCache (keys are kept per pattern)"
                )
                raise TypeError(
                    f"{where}, got {type(given).__name__}"
                    f"{f' holding {held} tokens' if held else ''}: keys computed outside the model (e.g. PEFT "
                    "prefix tuning's virtual tokens) are not supported; PEFT's LoRA and prompt tuning are"
                )
        if not self.config.is_decoder or (given is None and not use_cache):
            return None
        if isinstance(given, SparsePatternCache):
            return given
        if given is None:
            return SparsePatternCache(self.config)
        if _fillable_dynamic_cache(given):
            return SparsePatternCache.sharing_layers(given, self.config)
        # a static, offloaded or quantized cache would be dropped here without a word: say so instead
        raise ValueError(
            f"SparseTransformer keeps each layer's keys per its attention pattern in a SparsePatternCache and "
            f"cannot use {type(given).__name__}{' with offloading' if getattr(given, 'offloading', False) else ''} "
            "(generate's cache_implementation): use the default cache (cache_implementation=None or 'dynamic') or "
            "use_cache=False"
        )


class _LMHeadMixin:
    """The LM heads' one bias: ``lm_head.decoder.bias`` is tied to ``lm_head.bias`` whether or not the word
    embeddings are (transformers ties the pair only with ``tie_word_embeddings``, which left an untied head with a
    bias that the logits never used, a parameter without gradient that plain DDP rejects, and that
    ``resize_token_embeddings`` did not resize). Checkpoints keep ``lm_head.bias``; from an untied head's checkpoint
    of earlier releases, which holds both keys, ``lm_head.decoder.bias`` (the one its logits used) is loaded."""

    _tied_weights_keys = {
        "lm_head.decoder.weight": "sparse_transformer.embeddings.word_embeddings.weight",
        "lm_head.decoder.bias": "lm_head.bias",
    }

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new):
        self.lm_head.decoder = new
        self.lm_head.bias = new.bias  # resize_token_embeddings makes a new projection: keep the one bias

    def get_expanded_tied_weights_keys(self, all_submodels=False):
        keys = super().get_expanded_tied_weights_keys(all_submodels)
        if not all_submodels:  # all_submodels asks each PreTrainedModel, this one included, for its own
            keys.setdefault("lm_head.decoder.bias", "lm_head.bias")
        return keys

    def tie_weights(self, missing_keys=None, recompute_mapping=True):
        head = self.lm_head
        if missing_keys is not None and not {"lm_head.bias", "lm_head.decoder.bias"} & set(missing_keys):
            # both keys in the checkpoint: an earlier release's untied head, whose lm_head.bias went unused
            head.bias = head.decoder.bias
        super().tie_weights(missing_keys=missing_keys, recompute_mapping=recompute_mapping)


class SparseTransformerForMaskedLM(_LMHeadMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.lm_head = SparseTransformerLMHead(config)
        self.post_init()

    #: the token loss divides by the Trainer's ``num_items_in_batch``, the penalties are weighted by ``batch_share``
    accepts_loss_kwargs = True

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerMaskedLMOutput:  # fmt: skip
        """``labels`` (batch, seq): token ids to predict, -100 where no loss is taken."""
        _refuse_cross_attention_inputs(kwargs)
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.lm_head(out.last_hidden_state)
        loss, share = None, 1.0
        if labels is not None:  # transformers' ForMaskedLM loss: a mean, or a sum over num_items_in_batch
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
            share = batch_share(labels, kwargs.get("num_items_in_batch"))
        loss = with_span_penalty(self, loss, share)
        res = SparseTransformerMaskedLMOutput(
            loss=add_router_losses(loss, self.config, out, share),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForCausalLM(_LMHeadMixin, SparseTransformerPreTrainedModel, GenerationMixin):
    """Decoder language model (``is_decoder=True``, causal patterns) with pattern-aware caching."""

    def __init__(self, config):
        if not config.is_decoder:
            raise ValueError(
                "SparseTransformerForCausalLM needs a config with is_decoder=True (and causal patterns)"
            )
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.lm_head = SparseTransformerLMHead(config)
        self.post_init()

    #: the token loss divides by the Trainer's ``num_items_in_batch``, the penalties are weighted by ``batch_share``
    accepts_loss_kwargs = True

    def prepare_inputs_for_generation(self, *args, **kwargs):
        """transformers' inputs, with the cache also as ``past_key_values`` where transformers passes it as
        ``cache`` (5.24): PEFT's prompt learning (0.21) looks for it there to tell the first step from the next
        ones, and without it prepended the virtual tokens again at every step (wrong tokens, silently).
        ``forward`` takes the one cache under either name."""
        inputs = super().prepare_inputs_for_generation(*args, **kwargs)
        if CACHE_FIELD == "cache" and inputs.get("cache") is not None:
            inputs.setdefault("past_key_values", inputs["cache"])
        return inputs

    # generate() reads these parameters (whether inputs_embeds are forwarded, which keywords are the model's)
    prepare_inputs_for_generation.__signature__ = inspect.signature(
        GenerationMixin.prepare_inputs_for_generation
    )

    def _prepare_position_ids_for_generation(self, inputs_tensor, model_kwargs):
        """generate()'s position ids (counted from 0 at each row's first token) in the config's style: with
        ``position_ids_style="roberta"`` from ``pad_token_id + 1``, padding at ``pad_token_id``, as ``forward`` makes
        them (generate passed its 0-based ids, which the model took as given: other tokens than ``model(ids)``'s)."""
        position_ids = super()._prepare_position_ids_for_generation(inputs_tensor, model_kwargs)
        if self.config.position_ids_style != "roberta":
            return position_ids
        pad = self.config.pad_token_id
        mask = model_kwargs.get("attention_mask")
        if mask is None:
            return position_ids + pad + 1
        return torch.where(mask.bool(), position_ids + pad + 1, pad)

    def _validate_model_kwargs(self, model_kwargs):
        """generate() never extends a ``global_attention_mask`` over the tokens it generates, and decoding from the
        cache adds no global row: refused here, not at the second forward."""
        if model_kwargs.get("global_attention_mask") is not None:
            raise ValueError(
                "generate() cannot take global_attention_mask for a decoder (it covers the prompt only, and cached "
                "decoding adds no global tokens): give the pattern fixed global tokens instead, e.g. "
                "attention_pattern=(SlidingWindow(window=w, causal=True) | Global(indices=[0])) & Causal(), or call "
                "the model's forward"
            )
        super()._validate_model_kwargs(model_kwargs)

    def _prepare_generated_length(self, generation_config, has_default_max_length, has_default_min_length,
                                  model_input_name, input_ids_length, inputs_tensor):  # fmt: skip
        """transformers' lengths, checked against the absolute position table (rotary positions have none): the
        last token fed is at position ``max_length - 2`` (``+ pad_token_id + 1`` in the "roberta" style). Past the
        table generate failed only at that step, after all the steps before it; a default ``max_length`` is
        clamped to the table (transformers clamps it to ``max_position_embeddings``)."""
        generation_config = super()._prepare_generated_length(
            generation_config, has_default_max_length, has_default_min_length, model_input_name,
            input_ids_length, inputs_tensor,
        )  # fmt: skip
        cfg = self.config
        if cfg.position_embedding_type != "absolute" or generation_config.max_length is None:
            return generation_config
        offset = cfg.pad_token_id + 1 if cfg.position_ids_style == "roberta" else 0
        # inputs_embeds: max_length counts the new tokens (and input_ids, if also given) only
        prompt = inputs_tensor.shape[1] if model_input_name == "inputs_embeds" else input_ids_length
        total = generation_config.max_length - input_ids_length + prompt
        limit = cfg.max_position_embeddings + 1 - offset  # longest sequence: its last fed token in the table
        asked = fit_max_length(generation_config, total, limit, has_default_max_length)
        if asked is None:
            return generation_config
        raise ValueError(
            f"{asked} with a prompt of {prompt} tokens runs to {total} tokens, but the position table "
            f"(max_position_embeddings={cfg.max_position_embeddings}, position_ids_style={cfg.position_ids_style!r}) "
            f"takes sequences of at most {limit}: ask for at most {max(limit - prompt, 0)} new tokens, or extend "
            "the model with hf_sparse.conversion"
        )

    def _prepare_cache_for_generation(
        self, generation_config, model_kwargs, generation_mode, *args, **kwargs
    ):
        """generate() makes a DynamicCache (or is given one): put a pattern-aware cache on its layers in its place
        here, so that what generate does to its cache reaches it (assisted decoding records the past, then crops).
        Past recording is on for assisted decoding (and its draft) only: a cache an assisted call returned still
        records, and any other decoding with it switches recording off, or it would keep every key it is given."""
        super()._prepare_cache_for_generation(
            generation_config, model_kwargs, generation_mode, *args, **kwargs
        )
        given = model_kwargs.get(CACHE_FIELD)
        if _fillable_dynamic_cache(given):
            cache = SparsePatternCache.sharing_layers(given, self.config)
            # transformers 5.24 marks a user's cache, to roll back a deferred stop's extra token (mps)
            cache._is_user_defined = getattr(given, "_is_user_defined", False)
            model_kwargs[CACHE_FIELD] = cache
        elif isinstance(given, SparsePatternCache):
            cache = given
        else:
            return
        assisted = generation_mode == GenerationMode.ASSISTED_GENERATION or getattr(
            generation_config, "is_assistant", False
        )
        if not assisted:
            cache.deactivate_past_recording()
        elif not all(layer.record_past for layer in cache.layers):
            cache.activate_past_recording()  # transformers 5.24 does it too; earlier releases do not

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, past_key_values=None, use_cache=None, labels=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, logits_to_keep=0, cache=None, output_router_logits=None,
                **kwargs) -> SparseTransformerCausalLMOutput:  # fmt: skip
        """``labels`` (batch, seq): the input ids (shifted inside), -100 where no loss is taken. The cache
        is read as ``cache`` (recent transformers) or ``past_key_values``; ``logits_to_keep``: an int (the
        last that many positions, 0 = all) or a 1D tensor of positions. ``cache_position`` is taken from the
        keyword arguments (older transformers 5 releases pass it): a parameter named so makes transformers 5.24
        warn, on the remote-code copy, that the model expects an argument it no longer makes."""
        cache_position = kwargs.pop("cache_position", None)
        _refuse_cross_attention_inputs(kwargs)
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, cache=_pick_cache(cache, past_key_values), use_cache=use_cache,
            cache_position=cache_position, output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            return_dict=True, output_router_logits=output_router_logits,
        )  # fmt: skip
        hidden = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        logits = self.lm_head(hidden)
        loss, share = None, 1.0
        if labels is not None:  # transformers' ForCausalLM loss: of the next tokens (or shift_labels)
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
            targets = labels[..., 1:] if kwargs.get("shift_labels") is None else kwargs["shift_labels"]
            share = batch_share(targets, kwargs.get("num_items_in_batch"))
        loss = with_span_penalty(self, loss, share)
        res = SparseTransformerCausalLMOutput(
            loss=add_router_losses(loss, self.config, out, share),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
            **{CACHE_FIELD: out.get(CACHE_FIELD)},
        )
        return _return(return_dict, res, self.config)


def sep_token_globals(input_ids, sep_token_id: int, side: str):
    """``(batch, seq)`` long, Longformer's global tokens around each row's first ``sep_token_id``, at position
    ``s``: ``side="before"`` marks positions ``i < s`` (``LongformerForQuestionAnswering``: the question),
    ``"after"`` positions ``i > s + 1`` (``LongformerForMultipleChoice``: past the ``</s></s>`` pair). A row
    without ``sep_token_id`` is a ``ValueError``."""
    is_sep = input_ids == sep_token_id  # (B, n)
    if not torch.compiler.is_compiling() and not bool(is_sep.any(-1).all()):
        rows = (~is_sep.any(-1)).nonzero().flatten().tolist()
        raise ValueError(
            f"global_tokens_from_sep={side!r} makes global the tokens {side} each row's first sep_token_id="
            f"{sep_token_id}, but input_ids rows {rows} have none (multiple choice: rows of the flattened "
            "(batch * num_choices, seq) input); pass a global_attention_mask"
        )
    s = is_sep.int().argmax(-1, keepdim=True)  # (B, 1): the first sep of each row
    pos = torch.arange(input_ids.shape[-1], device=input_ids.device)  # (n,)
    return (pos < s if side == "before" else pos > s + 1).long()  # (B, n)


class _FirstTokenGlobalMixin:
    """Heads that read the first token make it global unless the caller gives global tokens; with
    ``config.global_tokens_from_sep``, the tokens before or after each row's first ``sep_token_id`` instead."""

    def _globals(self, global_attention_mask, input_ids, inputs_embeds):
        cfg = self.config
        if global_attention_mask is not None or cfg.adaptive_span is not None:
            return global_attention_mask
        side = cfg.global_tokens_from_sep
        if side is None:
            return first_token_global(input_ids, inputs_embeds) if cfg.global_first_token else None
        if input_ids is None:
            raise ValueError(
                f"global_tokens_from_sep={side!r} finds sep_token_id={cfg.sep_token_id} in input_ids, but only "
                "inputs_embeds were given: pass a global_attention_mask (zeros for no global tokens) or set "
                "config.global_tokens_from_sep=None"
            )
        return sep_token_globals(input_ids, cfg.sep_token_id, side)


def pooled_token(config, hidden, input_ids, attention_mask, inputs_embeds, head: str):
    """(batch, 1, hidden) the token a sentence head reads: the first for an encoder; for a decoder
    (``is_decoder=True``), whose first token has seen nothing after it, each row's last token, as transformers'
    decoder heads (GPT-2, Llama) pool: the last position ``attention_mask`` marks (left or right padding), else the
    last that is not ``pad_token_id``; without either, the last position (a batch of several rows with
    ``input_ids`` is then a ``ValueError``, as in transformers; ``inputs_embeds`` are taken as unpadded)."""
    if not config.is_decoder:
        return hidden[:, :1]
    B, n = hidden.shape[:2]
    pad = config.pad_token_id
    if attention_mask is not None:
        valid = attention_mask.to(hidden.device) != 0  # (B, n)
    elif input_ids is not None and pad is not None:
        valid = input_ids.to(hidden.device) != pad  # (B, n)
    else:
        if input_ids is not None and B > 1:
            raise ValueError(
                f"{head} of a decoder (is_decoder=True) reads each row's last token, which a batch of {B} rows "
                "without attention_mask or config.pad_token_id does not show: pass attention_mask"
            )
        if input_ids is None:
            logger.warning_once(
                f"{head} of a decoder reads each row's last token; without attention_mask it cannot tell padding "
                "in inputs_embeds and reads the last position"
            )
        return hidden[:, -1:]
    positions = torch.arange(n, device=hidden.device)
    last = (positions * valid).argmax(-1)  # (B,): the last valid position (0 for a row without one)
    return hidden[torch.arange(B, device=hidden.device), last][:, None]  # (B, 1, hidden)


class SparseTransformerForSequenceClassification(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.classifier = SparseTransformerClassificationHead(config)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerSequenceClassifierOutput:  # fmt: skip
        """``labels``: class ids (single-label), floats (regression) or multi-hot floats (multi-label)."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=self._globals(global_attention_mask, input_ids, inputs_embeds),
            token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        pooled = pooled_token(
            self.config, out.last_hidden_state, input_ids, attention_mask, inputs_embeds, type(self).__name__
        )
        logits = self.classifier(pooled)
        loss = None if labels is None else sequence_loss(self.config, logits, labels.to(logits.device))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerSequenceClassifierOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


def sequence_loss(config, logits, labels):
    """Regression / single-label / multi-label loss, chosen as transformers' heads do."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return (
            MSELoss()(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            if config.num_labels == 1
            else MSELoss()(logits, labels)
        )
    if config.problem_type == "single_label_classification":
        return CrossEntropyLoss()(logits.view(-1, config.num_labels), labels.view(-1))
    return BCEWithLogitsLoss()(logits, labels.to(logits.dtype))


class SparseTransformerForTokenClassification(SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(rate)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerTokenClassifierOutput:  # fmt: skip
        """``labels`` (batch, seq): class ids, -100 where no loss is taken."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=global_attention_mask, token_type_ids=token_type_ids,
            position_ids=position_ids, inputs_embeds=inputs_embeds, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        logits = self.classifier(self.dropout(out.last_hidden_state))
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.to(logits.device).view(-1))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerTokenClassifierOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForMultipleChoice(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config)
        rate = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(rate)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, labels=None, output_attentions=None, output_hidden_states=None, return_dict=None,
                output_router_logits=None, **kwargs) -> SparseTransformerMultipleChoiceOutput:  # fmt: skip
        """Inputs are (batch, num_choices, seq); ``labels`` (batch,) is the index of the right choice."""
        ref = input_ids if input_ids is not None else inputs_embeds
        choices = ref.shape[1]

        def flat(t):
            return None if t is None else t.reshape(-1, *t.shape[2:])

        flat_ids, flat_embeds = flat(input_ids), flat(inputs_embeds)
        out = self.sparse_transformer(
            flat_ids, attention_mask=flat(attention_mask),
            global_attention_mask=self._globals(flat(global_attention_mask), flat_ids, flat_embeds),
            token_type_ids=flat(token_type_ids), position_ids=flat(position_ids), inputs_embeds=flat_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        pooled = out.pooler_output
        if self.config.is_decoder:  # the pooler on each row's last token (``pooled_token``), not the first
            last = pooled_token(
                self.config,
                out.last_hidden_state,
                flat_ids,
                flat(attention_mask),
                flat_embeds,
                type(self).__name__,
            )
            pooled = self.sparse_transformer.pooler(last)
        logits = self.classifier(self.dropout(pooled)).view(-1, choices)
        loss = None if labels is None else CrossEntropyLoss()(logits, labels.to(logits.device))
        loss = with_span_penalty(self, loss)
        res = SparseTransformerMultipleChoiceOutput(
            loss=add_router_losses(loss, self.config, out),
            logits=logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


class SparseTransformerForQuestionAnswering(_FirstTokenGlobalMixin, SparseTransformerPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.sparse_transformer = SparseTransformerModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, global_attention_mask=None, token_type_ids=None, position_ids=None,
                inputs_embeds=None, start_positions=None, end_positions=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, output_router_logits=None,
                **kwargs) -> SparseTransformerQuestionAnsweringOutput:  # fmt: skip
        """Extractive QA: start/end logits per token; positions outside the input are clamped (ignored)."""
        out = self.sparse_transformer(
            input_ids, attention_mask=attention_mask, global_attention_mask=self._globals(global_attention_mask, input_ids, inputs_embeds),
            token_type_ids=token_type_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, return_dict=True,
            output_router_logits=output_router_logits,
        )  # fmt: skip
        start_logits, end_logits = (
            t.squeeze(-1).contiguous() for t in self.qa_outputs(out.last_hidden_state).split(1, dim=-1)
        )
        loss = None
        if start_positions is not None and end_positions is not None:
            n = start_logits.shape[1]
            fn = CrossEntropyLoss(ignore_index=n)
            loss = (
                fn(start_logits, start_positions.clamp(0, n).to(start_logits.device))
                + fn(end_logits, end_positions.clamp(0, n).to(end_logits.device))
            ) / 2
        loss = with_span_penalty(self, loss)
        res = SparseTransformerQuestionAnsweringOutput(
            loss=add_router_losses(loss, self.config, out),
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=out.hidden_states,
            attentions=out.attentions,
            **router_fields(out),
        )
        return _return(return_dict, res, self.config)


#: Default LoRA target modules for every SparseTransformer head (also registered with peft).
LORA_TARGET_MODULES = ["query", "key", "value", "dense"]

__all__ = [
    "LORA_TARGET_MODULES",
    "SparsePatternCache",
    "SparseTransformerForCausalLM",
    "SparseTransformerForMaskedLM",
    "SparseTransformerForMultipleChoice",
    "SparseTransformerForQuestionAnswering",
    "SparseTransformerForSequenceClassification",
    "SparseTransformerForTokenClassification",
    "SparseTransformerModel",
    "SparseTransformerPreTrainedModel",
]
