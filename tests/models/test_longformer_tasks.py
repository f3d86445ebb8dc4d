"""What the task models share (``hf_sparse.models.longformer_tasks``): loading the encoder of a backbone checkpoint
saved with a head, ``attn_implementation`` on either backbone, ``from_pretrained(path, key=value)`` checked as the
config's ``__init__`` checks it, and a clear error past a Longformer backbone's position table."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, LongformerConfig, LongformerForMaskedLM

import hf_sparse  # noqa: F401  (registers the Auto classes)
from hf_sparse import SparseTransformerConfig, SparseTransformerForMaskedLM
from hf_sparse.tasks.dialogue.modeling_dialogue import LongformerForDialogue
from hf_sparse.tasks.motif.modeling_motif import LongformerForMotifDetection
from hf_sparse.tasks.summarization.modeling_summarization import LongformerForExtractiveSummarization
from tests.models import summarization_tiny
from tests.models.motif_tiny import motif_model

TINY = dict(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
TASKS = {
    "motif": (LongformerForMotifDetection, dict(motif_names=["CTCF"])),
    "dialogue": (LongformerForDialogue, dict(act_labels=["INFORM", "REQUEST"], selection_head=False)),
    "extractive": (LongformerForExtractiveSummarization, dict(sentence_token_id=5)),
}


def _masked_lm(kind):
    """A tiny masked LM of ``kind`` and its encoder (keys ``longformer.*`` / ``sparse_transformer.*`` + ``lm_head.*``)."""
    if kind == "longformer":
        model = LongformerForMaskedLM(
            LongformerConfig(**TINY, attention_window=16, max_position_embeddings=130, pad_token_id=1)
        )
        return model, model.longformer
    config = SparseTransformerConfig(
        **TINY, max_position_embeddings=128, attention_pattern={"type": "sliding_window", "window": 16}
    )
    model = SparseTransformerForMaskedLM(config)
    return model, model.sparse_transformer


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("kind", ["longformer", "sparse_transformer"])
def test_task_model_loads_the_encoder_of_a_masked_lm_checkpoint(kind, task, tmp_path):
    """As ``allenai/longformer-base-4096`` (a LongformerForMaskedLM): before, embeddings and layers stayed random
    (every backbone key missing, every encoder key unexpected)."""
    torch.manual_seed(0)
    source, encoder = _masked_lm(kind)
    source.save_pretrained(tmp_path)
    cls, task_kwargs = TASKS[task]
    model, info = cls.from_pretrained(tmp_path, output_loading_info=True, **task_kwargs)
    assert model.config.backbone["model_type"] == kind
    want, got = encoder.state_dict(), model.backbone.state_dict()
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        torch.testing.assert_close(got[name], tensor, msg=name)
    assert info["missing_keys"] and not [k for k in info["missing_keys"] if k.startswith("backbone.")]
    assert all(k.startswith("lm_head.") for k in info["unexpected_keys"])


def _ids(n=37, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 9, (2, n), generator=g)
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0
    return ids, mask


@pytest.fixture(scope="module")
def saved_motif(tmp_path_factory):
    """A saved motif model of each backbone and its logits on ``_ids()``."""
    out = {}
    for kind in ("sparse_transformer", "longformer"):
        torch.manual_seed(0)
        model = motif_model(kind)
        path = tmp_path_factory.mktemp(kind)
        model.save_pretrained(path)
        with torch.no_grad():
            out[kind] = (path, model(*_ids()).logits)
    return out


@pytest.mark.parametrize("impl", ["eager", "sdpa", "hf_sparse"])
def test_a_sparse_backbone_runs_the_attention_implementation_loaded_with(impl, saved_motif):
    """Before: "sdpa" refused (``_supports_sdpa``), "hf_sparse" refused for the task config's missing
    ``attention_pattern`` (the backbone's has one)."""
    path, ref = saved_motif["sparse_transformer"]
    model = AutoModel.from_pretrained(path, attn_implementation=impl).eval()
    assert model.config._attn_implementation == impl
    assert model.backbone.config._attn_implementation == impl
    with torch.no_grad():
        torch.testing.assert_close(model(*_ids()).logits, ref, atol=1e-5, rtol=1e-5)
    other = "sdpa" if impl != "sdpa" else "eager"
    model.set_attn_implementation(other)
    assert model.backbone.config._attn_implementation == other
    with torch.no_grad():
        torch.testing.assert_close(model(*_ids()).logits, ref, atol=1e-5, rtol=1e-5)


def test_a_longformer_backbone_takes_eager_only(saved_motif):
    path, ref = saved_motif["longformer"]
    for impl in (None, "eager"):
        model = AutoModel.from_pretrained(path, attn_implementation=impl).eval()
        assert model.config._attn_implementation == "eager"
        with torch.no_grad():
            torch.testing.assert_close(model(*_ids()).logits, ref)
    for impl in ("sdpa", "hf_sparse"):
        with pytest.raises(ValueError, match=f"Longformer backbone .*='eager' only, got '{impl}'"):
            AutoModel.from_pretrained(path, attn_implementation=impl)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"global_every": -5}, "global_every must be a non-negative int"),
        ({"pooling": "max"}, "pooling must be one of"),
        ({"span_decoding": "fixed_length"}, "span_decoding='fixed_length' needs the counts"),
        ({"classifier_dropout": 3.0}, "classifier_dropout"),
    ],
)
def test_from_pretrained_kwargs_are_checked_as_the_config_checks_them(kwargs, match, saved_motif):
    """``from_pretrained(path, key=value)`` sets attributes after ``__init__``: before, -5 failed in torch ("step must
    be greater than zero"), "max" with a shape error, and "fixed_length" without motifs loaded silently."""
    path, _ = saved_motif["sparse_transformer"]
    with pytest.raises(ValueError, match=match):
        AutoModel.from_pretrained(path, **kwargs)


@pytest.mark.parametrize("kind", ["sparse_transformer", "longformer"])
def test_from_pretrained_kwargs_of_the_backbone_reach_the_backbone(kind, saved_motif):
    """As ``LongformerModel.from_pretrained(path, hidden_dropout_prob=0.5)``: before, the task model raised a bare
    ``TypeError`` from ``__init__`` and ``AutoConfig`` dropped the value."""
    from transformers import AutoConfig

    path, _ = saved_motif[kind]
    config = AutoConfig.from_pretrained(path, hidden_dropout_prob=0.5, global_every=7)
    assert config.backbone["hidden_dropout_prob"] == 0.5 and config.global_every == 7
    assert "hidden_dropout_prob" not in config.to_dict()  # not a top-level attribute nothing reads
    model = AutoModel.from_pretrained(path, hidden_dropout_prob=0.5, output_hidden_states=True)
    assert (
        model.backbone.config.hidden_dropout_prob == 0.5
        and model.config.backbone["hidden_dropout_prob"] == 0.5
    )
    assert model.config.output_hidden_states  # the task config's own attributes stay its own


def test_a_changed_config_is_checked_when_a_model_is_built():
    config = motif_model().config
    config.pooling = "max"
    with pytest.raises(ValueError, match="pooling must be one of"):
        LongformerForMotifDetection(config)


def test_extractive_kwargs_are_checked(tmp_path):
    tok = summarization_tiny.tiny_tokenizer()
    summarization_tiny.tiny_extractive(tok, "sparse_transformer", sentence_features=[]).save_pretrained(
        tmp_path
    )
    with pytest.raises(ValueError, match="sentence_features must be distinct names"):
        AutoModel.from_pretrained(tmp_path, sentence_features=["nope"])
    with pytest.raises(ValueError, match="loss must be one of"):
        AutoModel.from_pretrained(tmp_path, loss="hinge")


def test_an_input_past_a_longformer_backbone_positions_is_a_clear_error():
    """Before: a bare ``IndexError: index out of range in self`` from the position embedding."""
    model = motif_model("longformer")  # 131 positions, pad_token_id 0: 130 tokens
    limit = model.config.backbone["max_position_embeddings"] - 1
    ids = torch.randint(5, 9, (1, limit + 1))
    with torch.no_grad():
        assert model(ids[:, :limit]).logits.shape[1] == limit
        with pytest.raises(
            ValueError, match=f"position id {limit + 1} is out of range: max_position_embeddings"
        ):
            model(ids)
        # padding takes the padding position: a padded batch whose tokens fit runs
        padded = torch.cat([ids[:, :limit], torch.zeros(1, 14, dtype=torch.long)], 1)
        mask = (padded != 0).long()
        assert model(padded, attention_mask=mask).logits.shape[1] == limit + 14
    tok = summarization_tiny.tiny_tokenizer()
    extractive = summarization_tiny.tiny_extractive(tok, "longformer", sentence_features=[])
    ids = torch.randint(10, len(tok), (1, 300))
    ids[:, 1] = tok.convert_tokens_to_ids("<sent>")
    with torch.no_grad(), pytest.raises(ValueError, match="is out of range: max_position_embeddings is 258"):
        extractive(ids)


@pytest.mark.parametrize(
    "heads, label_names",
    [
        (dict(sequence_task=None), ["labels"]),
        (
            dict(motif_names=[], sequence_task="classification", sequence_label_names=["neg", "pos"]),
            ["sequence_labels"],
        ),
        (dict(), ["labels", "sequence_labels"]),
    ],
    ids=["tags", "class", "both"],
)
def test_trainer_evaluates_the_loss_with_the_documented_label_names(heads, label_names, tmp_path):
    """The Trainer's default label names are every ``*label*`` argument of ``forward`` (a class property it reads from
    the signature: nothing a model instance can change), so a batch with only some of them has no ``eval_loss``;
    README and the model docstrings name the ``label_names`` to pass."""
    from transformers import Trainer, TrainingArguments

    from hf_sparse.tasks.motif.collator import MotifCollator

    model = motif_model(**heads)
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(4):
        row = {"input_ids": [2] + torch.randint(5, 9, (20,), generator=g).tolist() + [3]}
        if "labels" in label_names:
            row["labels"] = [-100] + [0] * 20 + [-100]
        if "sequence_labels" in label_names:
            row["sequence_labels"] = i % 2 if model.config.sequence_task == "classification" else [1.0, 0.0]
        rows.append(row)

    def evaluate(names):
        args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to=[], use_cpu=True,
                                 disable_tqdm=True, label_names=names)  # fmt: skip
        return Trainer(
            model=model, args=args, eval_dataset=rows, data_collator=MotifCollator(0, 16)
        ).evaluate()

    assert "eval_loss" in evaluate(label_names)
    if len(label_names) == 1:  # the default waits for both
        assert "eval_loss" not in evaluate(None)


@pytest.mark.parametrize(
    "features", [{"conv_kernel_size": 3}, {"kmer_embedding": 3, "base_token_ids": [5, 6, 7, 8]}]
)
def test_embedding_features_take_a_full_length_input_on_a_longformer_backbone(features):
    """Convolutions and k-mer embeddings hand a Longformer backbone ``inputs_embeds``, which it numbered column by
    column, padding and the padding to a multiple of ``attention_window`` included. Before: the 130 tokens the
    table holds (and the pipeline's default window) raised ``position id 144 is out of range``."""
    from transformers import pipeline

    from hf_sparse.tokenization_dna import DNATokenizer

    torch.manual_seed(0)
    model = motif_model("longformer", **features)  # 131 positions, pad_token_id 0, window 16
    limit = model.config.backbone["max_position_embeddings"] - 1
    ids = torch.randint(5, 9, (2, limit), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    ids[1, 100:], mask[1, 100:] = 0, 0  # second row padded
    with torch.no_grad():
        out = model(ids, attention_mask=mask)
        # the same encoder given RoBERTa's positions explicitly: pad_token_id + the count of real tokens
        hidden = model.backbone(
            inputs_embeds=model._embeddings(ids, None, mask),
            attention_mask=mask,
            global_attention_mask=model.default_global_attention_mask(ids, mask),
            position_ids=mask.cumsum(-1) * mask,
        ).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(out.logits[real], model.token_classifier(hidden)[real])
    detect = pipeline("dna-motif-detection", model=model, tokenizer=DNATokenizer())
    assert detect("ACGT" * 100)["windows"] > 1  # default window: the 128 bases the table holds
