"""Model cards, push (offline: it must fail cleanly) and the flat remote-code bundle."""

from __future__ import annotations

import ast
import hashlib
import http.server
import json
import logging
import os
import re
import shlex
import socket
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard, constants

import hf_sparse
from hf_sparse import hub
from hf_sparse import patterns as P
from hf_sparse.attention import fused
from hf_sparse.hub import push as hub_push
from hf_sparse.utils import io as utils_io

REPO = Path(__file__).resolve().parents[1]
SECRET = "hf_sEcReTtOkEn0123456789abcdefXYZ"


# -------------------------------------------------------------------------------------------------
# model cards
# -------------------------------------------------------------------------------------------------


def _card(**kw):
    args = dict(
        model_name="motif-tiny",
        repo_id="someone/motif-tiny",
        base_model="someone/base-dna",
        datasets=["someone/motifs"],
        dataset_name="Synthetic motifs",
        metrics={"eval_span_f1": 0.8125, "eval_loss": 0.25},
        pattern=P.SlidingWindow(window=64) | P.Global(indices=[0]),
        training_config={"learning_rate": 3e-4, "max_length": 512, "optim": {"name": "adamw"}},
    )
    args.update(kw)
    return hub.render_model_card(args.pop("task", "dna-motif-detection"), **args)


def test_card_metadata():
    card = _card()
    data = card.data
    assert data.license == "apache-2.0"
    assert data.pipeline_tag == "token-classification"
    assert data.datasets == ["someone/motifs"]
    assert data.base_model == "someone/base-dna"
    assert data.library_name == "transformers"
    assert {"hf-sparse", "sparse-attention"} <= set(data.tags)
    results = {r.metric_type: r for r in data.eval_results}
    assert set(results) == {"span_f1", "loss"}  # eval_ prefix dropped from the type ...
    assert results["span_f1"].metric_name == "eval_span_f1"  # ... kept in the name
    assert results["span_f1"].metric_value == pytest.approx(0.8125)
    assert results["span_f1"].dataset_type == "someone/motifs"
    assert results["span_f1"].dataset_name == "Synthetic motifs"
    assert results["span_f1"].task_type == "token-classification"
    # the YAML header round-trips through huggingface_hub's own parser
    again = ModelCard(str(card))
    assert [r.metric_value for r in again.data.eval_results] == [0.8125, 0.25]
    assert again.data.to_dict()["model-index"][0]["name"] == "motif-tiny"


@pytest.mark.parametrize("base_model", ["someone/base-dna", None])
def test_the_card_of_an_adapter_alone_is_a_peft_card_that_loads_the_base_then_the_adapter(base_model):
    """adapter_only: ``library_name: peft``, the base model (where given) in the metadata and the loading code, which
    loads it then the adapter with PeftModel; no claim of modelling code or a pipeline in the repository."""
    card = _card(base_model=base_model, adapter_only=True)
    meta = yaml.safe_load(str(card).split("---\n")[1])
    assert meta["library_name"] == "peft" and meta.get("base_model") == base_model
    how = card.text.split("## How to use\n")[1].split("\n## ")[0]
    assert "pip install peft" in how and "hf_sparse_bundle.json" not in how and "pipeline(" not in how
    loads = f'AutoModelForTokenClassification.from_pretrained("{base_model or "path/to/base-model"}"'
    assert f"base_model = {loads}, trust_remote_code=True)" in how
    assert 'model = PeftModel.from_pretrained(base_model, "someone/motif-tiny")' in how
    assert "runs the Python files of the base model's repository" in card.text
    full = _card(base_model=base_model)
    assert full.data.library_name == "transformers" and "PeftModel" not in full.text
    with pytest.raises(TypeError, match="adapter_only must be a bool"):
        _card(adapter_only="yes")


def test_each_split_is_a_model_index_result_of_its_own_and_counts_are_no_metrics(tmp_path):
    """The validation and test values of a metric sat in one model-index result without a split (the Hub could not
    tell which is which), and sample counts (eval_n_intent_seen) were published as metrics."""
    from huggingface_hub import metadata_load

    metrics = {"eval_loss": 0.25, "eval_span_f1": 0.8, "test_loss": 0.5, "test_span_f1": 0.75, "auroc": 0.9}
    card = _card(metrics=metrics, counts={"eval_n_seen": 5, "test_n_seen": 2153}, dataset_split="test")
    hub.save_model_card(card, tmp_path)
    results = metadata_load(tmp_path / "README.md")["model-index"][0]["results"]
    dataset = {"name": "Synthetic motifs", "type": "someone/motifs"}
    assert [r["dataset"] for r in results] == [{**dataset, "split": s} for s in ("validation", "test")]
    assert [{m["type"]: m["value"] for m in r["metrics"]} for r in results] == [
        {"loss": 0.25, "span_f1": 0.8},
        {"loss": 0.5, "span_f1": 0.75, "auroc": 0.9},  # no prefix: dataset_split
    ]
    again = ModelCard.load(tmp_path / "README.md").data.eval_results
    assert [(r.metric_name, r.dataset_split) for r in again][:3] == [
        ("eval_loss", "validation"), ("eval_span_f1", "validation"), ("test_loss", "test")
    ]  # fmt: skip
    assert "n_seen" not in str(card.data.to_dict())
    text = card.text
    splits = "`eval_*` on the validation split, `test_*` on the test split, the others on the test split"
    assert f"Results on Synthetic motifs; {splits}:" in text
    assert "| Count | Value |" in text and "| eval_n_seen | 5 |" in text and "| test_n_seen | 2153 |" in text
    assert "| test_span_f1 | 0.75 |" in text


def test_the_card_says_hf_sparse_is_needed_where_the_remote_code_imports_it():
    """The bundle of a task outside hf_sparse whose model uses ExportCodeMixin imports hf_sparse (its manifest's
    requirements list it): the card said the repository loads without installing hf-sparse."""
    task = "dialogue-response-selection"
    needs = _card(task=task, requirements=["hf_sparse", "torch", "transformers"]).text
    assert "that code imports hf-sparse: install it first\n(`pip install hf-sparse`)" in needs
    assert "pipeline()` runs it (with hf-sparse installed):" in needs
    assert "without installing hf-sparse" not in needs and "without hf-sparse installed" not in needs
    for requirements in (["torch", "transformers"], None):  # hf-sparse's own tasks: copies of its modules
        alone = _card(task=task, requirements=requirements).text
        assert "loads it without\ninstalling hf-sparse" in alone
        assert "runs it without hf-sparse installed" in alone
        assert "pip install hf-sparse" not in alone
    with pytest.raises(ValueError, match="requirements must hold non-empty strings, got ''"):
        _card(requirements=[""])


@pytest.mark.parametrize(
    "task, pipeline_tag, pipeline_task, auto_class",
    [
        (
            "dna-motif-detection",
            "token-classification",
            "dna-motif-detection",
            "AutoModelForTokenClassification",
        ),
        (
            "abstractive-summarization",
            "summarization",
            "long-document-summarization",
            "AutoModelForSeq2SeqLM",
        ),
        (
            "dialogue-response-selection",
            "text-ranking",
            "dialogue-response-selection",
            "AutoModelForSequenceClassification",
        ),
        ("extractive-summarization", "summarization", "long-document-summarization", "AutoModel"),
        ("dialogue-state-tracking", "token-classification", "dialogue-state-tracking", "AutoModel"),
    ],
)
def test_card_per_task(task, pipeline_tag, pipeline_task, auto_class):
    card = _card(task=task)
    assert card.data.pipeline_tag == pipeline_tag
    assert f'{auto_class}.from_pretrained("someone/motif-tiny", trust_remote_code=True)' in card.text
    assert f'pipeline("{pipeline_task}", model="someone/motif-tiny", trust_remote_code=True)' in card.text


def test_generic_card_has_no_pipeline_snippet_and_takes_an_explicit_tag():
    card = hub.render_model_card("sparse_transformer", model_name="st", pipeline_tag="fill-mask")
    assert card.data.pipeline_tag == "fill-mask"
    assert 'AutoModel.from_pretrained("st", trust_remote_code=True)' in card.text
    assert "pipeline(" not in card.text
    assert "No evaluation results were reported." in card.text
    assert card.data.eval_results is None


def test_card_body_pattern_density_metrics_training():
    pattern = P.SlidingWindow(window=64) | P.Global(indices=[0])
    card = _card(pattern=pattern)
    text = card.text
    assert repr(pattern) in text
    assert json.dumps(pattern.to_dict(), indent=2) in text
    assert f"**{100 * pattern.density(512):.2f}%**" in text  # at training_config["max_length"]
    assert "512 × 512" in text
    assert "| eval_span_f1 | 0.8125 |" in text
    assert "| eval_loss | 0.25 |" in text
    assert "| learning_rate | 0.0003 |" in text
    assert "| optim.name | adamw |" in text
    assert "sliding_window(window=64, causal=false) \\| global(indices=[0])" in text  # escaped cell


def test_precomputed_density_and_spec_dict():
    spec = {"type": "bigbird", "block": 16, "seed": 0}
    card = _card(pattern=spec, pattern_density=0.125, density_length=2048)
    assert "**12.50%**" in card.text
    assert "2048 × 2048" in card.text
    assert "BigBird(block=16" in card.text


def test_content_based_pattern_has_no_fixed_density():
    card = _card(pattern=P.LSH(bucket_size=16))
    assert "content-based pattern" in card.text
    assert "**" not in card.text.split("## Attention pattern")[1].split("## Evaluation")[0]


def test_a_per_layer_pattern_is_described_layer_by_layer():
    """``config.attention_pattern`` may hold one pattern per layer: each layer, its density, their mean."""
    layers = [P.SlidingWindow(window=8, causal=True)] * 2 + [P.Strided(stride=4, causal=True)]
    card = _card(pattern=[p.to_dict() for p in layers])
    text = card.text
    section = text.split("## Attention pattern")[1].split("## Evaluation")[0]
    for i, p in enumerate(layers):
        assert f"    {p!r},  # layer {i}: {100 * p.density(512):.2f}% of the pairs at 512 tokens" in section
    assert json.dumps([p.to_dict() for p in layers], indent=2) in section
    mean = sum(p.density(512) for p in layers) / 3
    assert f"**{100 * mean:.2f}%**" in section
    assert (
        "| Attention | per layer: layers 0-1: sliding_window(window=8, causal=true) · "
        "layer 2: strided(stride=4, causal=true) |"
    ) in text
    assert "beltagy2020longformer" in text and "child2019sparse" in text  # every pattern's paper
    with pytest.raises(ValueError, match=r"pattern\[1\] \{'type': 'nope'\} is not an hf_sparse pattern"):
        _card(pattern=[layers[0], {"type": "nope"}])
    with pytest.raises(ValueError, match="one pattern per layer, got an empty list"):
        _card(pattern=[])


@pytest.mark.parametrize(
    "pattern, key",
    [
        (P.BigBird(block=16, seed=0), "zaheer2020bigbird"),
        (P.Strided(stride=16), "child2019sparse"),
        (P.Longformer(window=32), "beltagy2020longformer"),
        (P.LSH(bucket_size=16), "kitaev2020reformer"),
    ],
)
def test_citations_follow_the_pattern(pattern, key):
    text = hub.render_model_card("sparse_transformer", model_name="m", pattern=pattern).text
    assert key in text
    others = {"zaheer2020bigbird", "child2019sparse", "beltagy2020longformer", "kitaev2020reformer"} - {key}
    assert not any(o in text for o in others)


def test_no_pattern_no_citation_but_summarization_cites_led():
    assert "## Citation" not in hub.render_model_card("dialogue-response-selection", model_name="m").text
    assert "beltagy2020longformer" in hub.render_model_card("extractive-summarization", model_name="m").text


def test_extra_fields_are_rendered_not_dropped():
    card = _card(
        extra={"description": "My words.", "limitations": ["Only chr22."], "seed": 7, "note": "a|b"},
        language="en",
        tags=["genomics", "custom-tag"],
    )
    assert "My words." in card.text
    assert "- Only chr22." in card.text
    assert "| seed | 7 |" in card.text and "| note | a\\|b |" in card.text
    assert card.data.language == ["en"]
    assert card.data.tags.count("genomics") == 1 and "custom-tag" in card.data.tags


def test_custom_template_extends_base(tmp_path):
    tpl = tmp_path / "mine.jinja"
    tpl.write_text(
        '{% extends "_base.jinja" %}\n{% block description %}Custom {{ model_name }}.{% endblock %}\n'
    )
    card = _card(template=tpl)
    assert "Custom motif-tiny." in card.text
    assert "## Attention pattern" in card.text


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task": "translation"}, "task must be 'sparse_transformer' or a registered task"),
        ({"task": "motif"}, "unknown task 'motif'; registered tasks: abstractive-summarization"),
        ({"metrics": {"f1": 0.5}, "datasets": (), "dataset_name": None}, "need dataset_name"),
        ({"metrics": {"f1": "high"}}, r"metrics\['f1'\] must be a number, got 'high'"),
        ({"metrics": {"f1": float("nan")}}, "must be finite"),
        ({"counts": {"eval_loss": 3}}, "'eval_loss' is in both metrics and counts"),
        ({"counts": {"n_seen": "many"}}, r"counts\['n_seen'\] must be a number, got 'many'"),
        ({"pattern_density": 1.5}, "pattern_density must be a fraction"),
        ({"repo_id": "no-namespace"}, "'no-namespace'"),
        ({"model_name": ""}, "model_name must be a non-empty str"),
        ({"pattern": {"type": "nope"}}, "unknown pattern"),
        ({"density_length": 0}, "density_length must be a positive int, got 0"),
    ],
)
def test_card_errors_name_the_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _card(**kwargs)


def test_templates_live_in_model_cards_and_ship_as_package_data():
    """One copy: the top-level model_cards/, installed as hf_sparse.model_cards (setup.py's package_dir; the
    editable install maps it there too); every package task's template and the generic one exist."""
    from importlib import import_module, resources

    import hf_sparse.tasks

    shipped = {p.name for p in (REPO / "model_cards").glob("*.jinja")}
    package_tasks = [d for f in hf_sparse.tasks.TASKS for d in import_module(f"hf_sparse.tasks.{f}").TASKS]
    wanted = {d.card.template for d in package_tasks} | {"_base.jinja", "sparse-transformer.jinja"}
    assert wanted <= shipped
    assert not (REPO / "hf_sparse" / "model_cards").exists()  # no second copy inside the source package
    assert Path(str(resources.files("hf_sparse.model_cards"))) == REPO / "model_cards" == hub.TEMPLATE_DIR
    assert 'extends "_base.jinja"' in (REPO / "model_cards" / "dna-motif-detection.jinja").read_text()
    setup = (REPO / "setup.py").read_text()
    assert '"hf_sparse.model_cards": "model_cards"' in setup
    assert '"hf_sparse.model_cards" = ["*.jinja"]' in (REPO / "pyproject.toml").read_text()


def test_save_model_card_writes_readme(tmp_path):
    card = _card()
    path = hub.save_model_card(card, tmp_path / "out")
    assert path == tmp_path / "out" / "README.md"
    loaded = ModelCard.load(path)
    assert loaded.data.to_dict() == card.data.to_dict()
    assert loaded.text == card.text


def test_save_model_card_is_atomic(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text("old card")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(utils_io.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        hub.save_model_card(_card(), tmp_path)
    assert (tmp_path / "README.md").read_text() == "old card"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # no temp file left behind


# -------------------------------------------------------------------------------------------------
# push
# -------------------------------------------------------------------------------------------------


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "sparse_transformer"}\n')
    (d / "model.safetensors").write_bytes(os.urandom(256))
    hub.save_model_card(_card(), d)
    return d


def _checksum(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def online(monkeypatch):
    """Pretend offline mode is off, so the push really tries the network (which is not there)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def _assert_unavailable(err, folder, repo_id):
    msg = str(err)
    assert "Could not reach the Hugging Face Hub" in msg
    assert f"the local output at {folder} is intact" in msg
    assert f"push it later with: python -m hf_sparse.hub {folder} {repo_id}" in msg
    assert "\n" not in msg
    assert SECRET not in msg and SECRET not in repr(err)


def test_push_offline_mode(model_dir, monkeypatch, capsys, caplog):
    monkeypatch.setenv("HF_TOKEN", SECRET)
    called = []
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda *a, **k: called.append(a))
    before = _checksum(model_dir)
    with caplog.at_level(logging.DEBUG), pytest.raises(hub.HubUnavailableError) as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token=SECRET, private=True)
    _assert_unavailable(info.value, model_dir, "someone/motif-tiny")
    assert "HF_HUB_OFFLINE=1" in str(info.value)
    assert str(info.value).endswith("--private")
    assert called == []  # offline mode is respected before any request
    assert _checksum(model_dir) == before
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + caplog.text


def test_push_maps_huggingface_hub_offline_error(model_dir, monkeypatch):
    # huggingface_hub itself refuses the request (its offline flag) -> the same one error
    monkeypatch.setattr(hub_push, "_offline_reason", lambda: None)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(hub.HubUnavailableError, match="OfflineModeIsEnabled") as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token=SECRET)
    _assert_unavailable(info.value, model_dir, "someone/motif-tiny")
    assert info.value.__suppress_context__


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("endpoint", ["connection-refused", "http://hf-sparse-no-such-host.invalid"])
def test_push_without_network(model_dir, online, endpoint, capsys, caplog):
    if endpoint == "connection-refused":
        endpoint = f"http://127.0.0.1:{_closed_port()}"
    before = _checksum(model_dir)
    with caplog.at_level(logging.DEBUG), pytest.raises(hub.HubUnavailableError) as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token=SECRET, endpoint=endpoint)
    _assert_unavailable(info.value, model_dir, "someone/motif-tiny")
    assert "ConnectError" in str(info.value)
    assert _checksum(model_dir) == before
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + caplog.text


class _FakeHub:
    """A local HTTP server answering every request with one status; records auth headers."""

    def __init__(self, status: int):
        seen = self.auth = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                seen.append(self.headers.get("authorization"))
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                body = json.dumps({"error": "nope"}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_hub(request):
    server = _FakeHub(request.param)
    yield server
    server.close()


@pytest.mark.parametrize("fake_hub", [401, 403], indirect=True)
def test_push_auth_error_hides_the_token(model_dir, online, fake_hub, monkeypatch, capsys, caplog):
    monkeypatch.setenv("MY_TOKEN", SECRET)
    before = _checksum(model_dir)
    with caplog.at_level(logging.DEBUG), pytest.raises(hub.HubAuthError) as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token_env="MY_TOKEN", endpoint=fake_hub.url)
    msg = str(info.value)
    assert "rejected the credentials" in msg and "HTTP 40" in msg
    assert "--token-env MY_TOKEN" in msg
    assert SECRET not in msg and SECRET not in repr(info.value)
    assert f"Bearer {SECRET}" in fake_hub.auth  # the token from --token-env was used ...
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + caplog.text  # ... and never shown
    assert _checksum(model_dir) == before


@pytest.mark.parametrize("fake_hub", [503], indirect=True)
def test_push_server_error_is_unavailable(model_dir, online, fake_hub):
    with pytest.raises(hub.HubUnavailableError, match="HTTP 503") as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token=SECRET, endpoint=fake_hub.url)
    _assert_unavailable(info.value, model_dir, "someone/motif-tiny")


def test_push_without_any_token(model_dir, online, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("huggingface_hub.get_token", lambda: None)
    with pytest.raises(hub.HubAuthError, match="No Hugging Face token found"):
        hub.push_to_hub(model_dir, "someone/motif-tiny")


def test_push_calls_create_repo_and_upload_folder(model_dir, online, monkeypatch):
    calls = []

    class Info:
        repo_url = "https://huggingface.co/someone/motif-tiny"

    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(
        "huggingface_hub.HfApi.create_repo", lambda self, *a, **k: calls.append(("create", a, k))
    )
    monkeypatch.setattr(
        "huggingface_hub.HfApi.create_branch", lambda self, *a, **k: calls.append(("branch", a, k))
    )
    monkeypatch.setattr(
        "huggingface_hub.HfApi.upload_folder", lambda self, **k: calls.append(("upload", (), k)) or Info()
    )
    url = hub.push_to_hub(model_dir, "someone/motif-tiny", private=True, revision="v1", commit_message="hi")
    assert url == "https://huggingface.co/someone/motif-tiny"
    (c_name, c_args, c_kw), (b_name, _, b_kw), (u_name, _, u_kw) = calls
    assert (c_name, c_args, c_kw["exist_ok"], c_kw["private"], c_kw["token"]) == (
        "create",
        ("someone/motif-tiny",),
        True,
        True,
        SECRET,  # read from HF_TOKEN
    )
    assert b_kw["branch"] == "v1"
    assert u_kw["folder_path"] == str(model_dir) and u_kw["repo_id"] == "someone/motif-tiny"
    assert u_kw["revision"] == "v1" and u_kw["commit_message"] == "hi"
    assert u_kw["allow_patterns"] == hub.upload_file_list(model_dir)  # an allow-list, not a deny-list
    assert "config.json" in u_kw["allow_patterns"] and "model.safetensors" in u_kw["allow_patterns"]


def test_upload_sends_only_the_allow_list(model_dir, online, monkeypatch):
    """Pickles, checkpoints, TensorBoard runs and stray files stay local; a planted token stops the push."""
    (model_dir / "training_args.bin").write_bytes(b"pickle")
    (model_dir / "checkpoint-2").mkdir()
    (model_dir / "checkpoint-2" / "optimizer.pt").write_bytes(b"pickle")
    (model_dir / "runs").mkdir()
    (model_dir / "runs" / "events.out.tfevents.1").write_bytes(b"x")
    (model_dir / "notes.txt").write_text("private")
    (model_dir / "helper.py").write_text("x = 1\n")  # not part of the remote-code bundle
    sent = hub.upload_file_list(model_dir)
    for name in ("training_args.bin", "notes.txt", "helper.py"):
        assert name not in sent
    assert not [f for f in sent if f.startswith(("checkpoint-", "runs/"))]
    assert "config.json" in sent and "model.safetensors" in sent

    calls = []
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda self, *a, **k: calls.append(a))
    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", lambda self, **k: calls.append(k))
    readme = model_dir / "README.md"
    readme.write_text((readme.read_text() if readme.exists() else "") + f"\ntoken: {SECRET}\n")
    with pytest.raises(hub.HubError, match="README.md contains a token") as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny", token=SECRET)
    assert SECRET not in str(info.value) and calls == []  # refused before anything was sent


@pytest.mark.parametrize(
    "config_name, auto_map, code",
    [
        (
            "tokenizer_config.json",
            {"AutoTokenizer": ["tokenization_x.XTokenizer", None]},
            ["tokenization_x.py"],
        ),
        (
            "tokenizer_config.json",
            ["tokenization_x.XTokenizer", "tokenization_x.XTokenizerFast"],
            ["tokenization_x.py"],
        ),
        (
            "processor_config.json",
            {"AutoProcessor": "someone/other--processing_x.XProcessor"},
            ["processing_x.py"],
        ),
        (
            "preprocessor_config.json",
            {
                "AutoImageProcessor": [None, "image_processing_x.XImageProcessorFast"],
                "AutoFeatureExtractor": "fe_x.X",
            },
            ["fe_x.py", "image_processing_x.py"],
        ),
    ],
)
def test_upload_sends_the_code_a_tokenizer_or_processor_auto_map_names(
    model_dir, config_name, auto_map, code
):
    """AutoTokenizer/AutoProcessor(trust_remote_code=True) on the Hub copy needs the module its auto_map names."""
    (model_dir / config_name).write_text(json.dumps({"auto_map": auto_map}))
    for name in [*code, "helper.py"]:
        (model_dir / name).write_text("x = 1\n")
    sent = hub.upload_file_list(model_dir)
    assert [f for f in sent if f.endswith(".py")] == code  # helper.py is named by nothing
    assert config_name in sent


def test_upload_sends_the_dna_tokenizer_code(model_dir):
    from hf_sparse.tokenization_dna import DNATokenizer

    DNATokenizer().save_pretrained(model_dir)
    assert "tokenization_dna.py" in hub.upload_file_list(model_dir)


def test_push_later_command_repeats_every_option(model_dir):
    """Rerun as printed, the command pushes to the same endpoint, branch and with the same message."""
    with pytest.raises(hub.HubUnavailableError) as info:
        hub.push_to_hub(
            model_dir,
            "someone/motif-tiny",
            token=SECRET,
            private=True,
            revision="v2",
            commit_message="v2 weights: it's 'better'",
            token_env="MY_TOKEN",
            endpoint="https://hub.internal.example",
        )
    command = str(info.value).split("push it later with: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "hf_sparse.hub"]
    args = hub.parse_args(argv[3:])
    assert (args.folder, args.repo_id, args.private, args.revision, args.token_env) == (
        str(model_dir),
        "someone/motif-tiny",
        True,
        "v2",
        "MY_TOKEN",
    )
    assert (args.commit_message, args.endpoint) == (
        "v2 weights: it's 'better'",
        "https://hub.internal.example",
    )


@pytest.mark.parametrize(
    "repo_id",
    ["noslash", "a/b/c", "user/--x", "user/x..y", "user/na me", "/name", "user/", "", None, "u/" + "x" * 97],
)
def test_repo_id_validation(model_dir, repo_id):
    with pytest.raises(ValueError, match="repo_id must") as info:
        hub.push_to_hub(model_dir, repo_id)
    assert repr(repo_id) in str(info.value)


def test_folder_validation(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        hub.push_to_hub(tmp_path / "missing", "user/name")
    with pytest.raises(ValueError, match=r"has no config\.json") as info:
        hub.push_to_hub(tmp_path, "user/name")
    assert str(tmp_path) in str(info.value)


@pytest.fixture
def fake_upload(online, monkeypatch):
    """HfApi mocked: what create_branch and upload_folder were called with."""
    calls = {}
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda self, *a, **k: None)
    monkeypatch.setattr(
        "huggingface_hub.HfApi.create_branch", lambda self, *a, **k: calls.setdefault("branch", k)
    )

    def upload_folder(self, **k):
        calls["upload"] = k
        return type("Info", (), {"repo_url": "https://huggingface.co/someone/tiny"})()

    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", upload_folder)
    monkeypatch.setattr("huggingface_hub.HfApi.hf_hub_download", _no_manifest)
    return calls


def _not_found(filename: str):
    """The error ``hf_hub_download`` raises for a file the repository lacks (HTTP 404 EntryNotFound)."""
    from huggingface_hub.errors import RemoteEntryNotFoundError

    try:
        from httpx2 import Request, Response  # huggingface_hub >= 2
    except ImportError:
        from httpx import Request, Response  # huggingface_hub 1.x (transformers 5.10)

    url = f"https://huggingface.co/someone/tiny/resolve/main/{filename}"
    return RemoteEntryNotFoundError(
        f"404 Client Error. Entry Not Found for url: {url}.",
        response=Response(404, request=Request("HEAD", url)),
    )


def _no_manifest(self, repo_id, filename, **kw):
    raise _not_found(filename)


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_variant_weights_are_pushed(tmp_path, fake_upload, shard):
    """save_pretrained(variant="fp16"): model.fp16.safetensors, or shards and model.safetensors.index.fp16.json."""
    from transformers import AutoModelForMaskedLM

    from tests.models.tiny import tiny_config

    folder = tmp_path / "model"
    kwargs = {"max_shard_size": shard} if shard else {}
    AutoModelForMaskedLM.from_config(tiny_config()).save_pretrained(folder, variant="fp16", **kwargs)
    weights = sorted(p.name for p in folder.iterdir() if "safetensors" in p.name)
    assert weights and all(".fp16" in n for n in weights)
    assert len(weights) > 2 if shard else weights == ["model.fp16.safetensors"]
    hub.push_to_hub(folder, "someone/tiny")
    sent = fake_upload["upload"]["allow_patterns"]
    assert [n for n in sent if "safetensors" in n] == weights  # every shard and the index
    assert "config.json" in sent


def test_a_folder_without_weights_is_not_pushed(model_dir, fake_upload):
    (model_dir / "model.safetensors").unlink()
    (model_dir / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ValueError, match="holds no weights to push") as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny")
    assert "left out: pytorch_model.bin" in str(info.value) and "Nothing was uploaded" in str(info.value)
    assert "upload" not in fake_upload
    assert hub_push.main([str(model_dir), "someone/motif-tiny"]) == 2  # the command line: one error line


def test_an_adapter_folder_is_pushed(tmp_path, fake_upload):
    """A LoRA run with merge_lora: false saves the adapter alone in output_dir (no config.json)."""
    folder = tmp_path / "adapter_only"
    folder.mkdir()
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (folder / "adapter_model.safetensors").write_bytes(os.urandom(64))
    (folder / "tokenizer.json").write_text("{}")
    hub.push_to_hub(folder, "someone/tiny", revision="dev")
    assert fake_upload["upload"]["allow_patterns"] == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
    ]
    assert fake_upload["branch"]["branch"] == "dev" and fake_upload["upload"]["revision"] == "dev"


class _FakeRepo:
    """A repository on a fake Hub: upload_folder as huggingface_hub does it (the files ``allow_patterns`` match
    are added or overwritten; remote files ``delete_patterns`` match are deleted unless uploaded, never
    .gitattributes)."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir()
        (root / ".gitattributes").write_text("*.safetensors filter=lfs\n")

    def files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def upload_folder(self, folder_path, allow_patterns=None, delete_patterns=None, **kw):
        from huggingface_hub.utils import filter_repo_objects

        local = Path(folder_path)
        added = list(
            filter_repo_objects(
                [str(p.relative_to(local)) for p in local.rglob("*") if p.is_file()],
                allow_patterns=allow_patterns,
            )
        )
        for name in (
            filter_repo_objects(self.files(), allow_patterns=delete_patterns) if delete_patterns else ()
        ):
            if name != ".gitattributes" and name not in added:
                (self.root / name).unlink()
        for name in added:
            (self.root / name).parent.mkdir(parents=True, exist_ok=True)
            (self.root / name).write_bytes((local / name).read_bytes())
        return type("Info", (), {"repo_url": "https://huggingface.co/someone/tiny"})()

    def hf_hub_download(self, repo_id, filename, *, cache_dir, **kw):
        if not (self.root / filename).is_file():
            raise _not_found(filename)
        path = Path(cache_dir) / "snapshot" / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((self.root / filename).read_bytes())
        return str(path)


@pytest.fixture
def fake_repo(tmp_path, online, monkeypatch):
    repo = _FakeRepo(tmp_path / "remote")
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda self, *a, **k: None)
    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", lambda self, **k: repo.upload_folder(**k))
    monkeypatch.setattr(
        "huggingface_hub.HfApi.hf_hub_download", lambda self, *a, **k: repo.hf_hub_download(*a, **k)
    )
    return repo


def _folder(path: Path, names) -> Path:
    path.mkdir()
    for name in names:
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text("{}" if name.endswith(".json") else name)
    return path


_MODEL = ["config.json", "model.safetensors"]
_ADAPTER = ["adapter_config.json", "adapter_model.safetensors"]
_SHARDED = ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
_SHARDED += ["model.safetensors.index.json"]


@pytest.mark.parametrize(
    "first, planted, second, kept",
    [
        # one file, then shards: the old model.safetensors would be what loads
        (_MODEL, [], _SHARDED, []),
        (_SHARDED, [], _MODEL, []),
        # a variant, then none (from_pretrained(variant="fp16") would load the old one); weights of any format
        (["config.json", "model.fp16.safetensors"], ["pytorch_model.bin"], _MODEL, []),
        # an adapter, then the merged model: an adapter_config.json left would load base + old adapter
        ([*_ADAPTER, "tokenizer.json"], [], _MODEL, ["tokenizer.json"]),
        (_MODEL, [], _ADAPTER, []),
        # adapter/ and results of a LoRA run, then a run without them
        ([*_MODEL, "adapter/adapter_config.json", "adapter/adapter_model.safetensors", "all_results.json"], [],
         _MODEL, []),
        # a new tokenizer replaces the old one (a fast tokenizer.json left would win over vocab.txt); code no
        # manifest of ours lists is the user's (test_a_push_deletes_only_the_code_the_manifest_lists)
        ([*_MODEL, "tokenizer.json", "vocab.txt"], ["tokenization_x.py", "patterns_base.py"], [*_MODEL, "vocab.txt"],
         ["tokenization_x.py", "patterns_base.py"]),
        # no tokenizer in this push: the repository's (and the code its config may name) stays
        ([*_MODEL, "tokenizer_config.json"], ["tokenization_x.py"], _MODEL, ["tokenizer_config.json",
         "tokenization_x.py"]),
        # the user's card, notes, images and code that is not ours stay
        (_MODEL, ["README.md", "notes.md", "handler.py", "logo.png"], _MODEL, ["README.md", "notes.md",
         "handler.py", "logo.png"]),
    ],
)  # fmt: skip
def test_a_second_push_replaces_what_the_first_left(tmp_path, fake_repo, first, planted, second, kept):
    """The repository holds what the last push sent (and files that are not ours), not a mix of two models."""
    hub.push_to_hub(_folder(tmp_path / "v1", first), "someone/tiny")
    assert fake_repo.files() == sorted([".gitattributes", *first])
    for name in planted:  # uploaded by hand, or by an earlier version
        (fake_repo.root / name).write_text(name)
    v2 = _folder(tmp_path / "v2", second)
    hub.push_to_hub(v2, "someone/tiny")
    assert fake_repo.files() == sorted({".gitattributes", *second, *kept})
    assert (fake_repo.root / second[-1]).read_text() == (v2 / second[-1]).read_text()


_USER_CODE = ["utils.py", "data.py", "metrics.py", "viz.py", "conversion.py", "modeling_user.py"]


def _bundle(folder: Path, names) -> Path:
    """A remote-code bundle in ``folder``: the modules and the manifest listing them."""
    for name in names:
        (folder / name).write_text(f"# {folder.name}\n")
    manifest = {"format": 1, "files": {n: f"hf_sparse.{n[:-3]}" for n in names}}
    (folder / hub.BUNDLE_MANIFEST).write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize(
    "second, kept",
    [
        # a stock model with a tokenizer: the earlier bundle and its manifest go, the user's code stays
        ([*_MODEL, "tokenizer.json"], []),
        # a bundle again: what the new manifest lists is overwritten, what only the old one listed is deleted
        ([*_MODEL, "tokenizer.json", "modeling_x.py"], []),
        # no tokenizer: the repository's tokenizer (its config may name a bundled module) and the bundle stay
        (_MODEL, ["tokenizer.json", hub.BUNDLE_MANIFEST, "modeling_x.py", "patterns_base.py", "utils_io.py"]),
    ],
)
def test_a_push_deletes_only_the_code_the_manifest_lists(tmp_path, fake_repo, second, kept):
    """Files named like the package's modules (utils.py, data.py, ...) that no push of ours sent stay."""
    old = ["modeling_x.py", "patterns_base.py", "utils_io.py"]
    hub.push_to_hub(_bundle(_folder(tmp_path / "v1", [*_MODEL, "tokenizer.json"]), old), "someone/tiny")
    assert set(old) <= set(fake_repo.files())
    for name in _USER_CODE:
        (fake_repo.root / name).write_text("the user's own file")
    code = [n for n in second if n.endswith(".py")]
    v2 = _folder(tmp_path / "v2", [n for n in second if n not in code])
    hub.push_to_hub(_bundle(v2, code) if code else v2, "someone/tiny")
    sent = [*second, hub.BUNDLE_MANIFEST] if code else second
    assert fake_repo.files() == sorted({".gitattributes", *sent, *_USER_CODE, *kept})
    for name in _USER_CODE:
        assert (fake_repo.root / name).read_text() == "the user's own file"
    for name in code:
        assert (fake_repo.root / name).read_text() == "# v2\n"


def test_a_push_reads_the_manifest_at_its_branch_and_classifies_failures(
    model_dir, fake_upload, monkeypatch, caplog
):
    """The manifest is read from the branch pushed to, with the push's token; a network failure there is the
    push's one HubUnavailableError, a manifest that is not ours (no "files") deletes no code."""
    try:
        import httpx2  # huggingface_hub >= 2
    except ImportError:
        import httpx as httpx2  # huggingface_hub 1.x (transformers 5.10)

    (model_dir / "tokenizer.json").write_text("{}")
    asked = []

    def download(self, repo_id, filename, **kw):
        asked.append((repo_id, filename, kw["revision"], kw["token"]))
        path = Path(kw["cache_dir"]) / filename
        path.write_text('{"format": 1}')
        return str(path)

    monkeypatch.setattr("huggingface_hub.HfApi.hf_hub_download", download)
    with caplog.at_level(logging.WARNING):
        hub.push_to_hub(model_dir, "someone/motif-tiny", revision="dev")
    assert asked == [("someone/motif-tiny", hub.BUNDLE_MANIFEST, "dev", SECRET)]
    assert "lists no files" in caplog.text
    deleted = fake_upload["upload"]["delete_patterns"]
    assert hub.BUNDLE_MANIFEST in deleted and not [p for p in deleted if p.endswith(".py")]

    def offline(self, *a, **k):
        raise httpx2.ConnectError("[Errno 101] Network is unreachable")

    monkeypatch.setattr("huggingface_hub.HfApi.hf_hub_download", offline)
    with pytest.raises(hub.HubUnavailableError, match="ConnectError") as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny")
    _assert_unavailable(info.value, model_dir, "someone/motif-tiny")


@pytest.mark.parametrize("name", ["*.py", "utils", "a/b.py", "x[0].py", 3])
def test_stale_patterns_refuses_names_that_are_not_flat_modules(name):
    with pytest.raises(ValueError, match="bundle_files must name flat module files") as info:
        hub.stale_patterns(["config.json", "tokenizer.json"], [name])
    assert repr(name) in str(info.value)


def test_a_sharded_push_over_one_file_loads_the_new_weights(tmp_path, fake_repo):
    from transformers import AutoModelForMaskedLM

    from tests.models.tiny import tiny_config

    v1 = AutoModelForMaskedLM.from_config(tiny_config()).eval()
    v1.save_pretrained(tmp_path / "v1")
    hub.push_to_hub(tmp_path / "v1", "someone/tiny")
    torch.manual_seed(1)
    v2 = AutoModelForMaskedLM.from_config(tiny_config()).eval()
    v2.save_pretrained(tmp_path / "v2", max_shard_size="50KB")
    hub.push_to_hub(tmp_path / "v2", "someone/tiny")
    loaded = AutoModelForMaskedLM.from_pretrained(fake_repo.root).eval()
    ids = torch.randint(2, 90, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, v2(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize(
    "error",
    [OSError("[Errno 28] No space left on device"), KeyError("repo_url"), RuntimeError(f"boom {SECRET}")],
    ids=["oserror", "keyerror", "token-in-message"],
)
def test_an_unexpected_push_failure_is_one_error_line(model_dir, fake_upload, monkeypatch, capsys, error):
    """Whatever fails inside the push, the command line prints one error: line with the push-later command."""

    def create_repo(self, *a, **k):
        raise error

    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", create_repo)
    with pytest.raises(hub.HubError) as info:
        hub.push_to_hub(model_dir, "someone/motif-tiny")
    msg = str(info.value)
    assert f"Pushing to someone/motif-tiny failed ({type(error).__name__}: " in msg
    assert f"push it later with: python -m hf_sparse.hub {model_dir} someone/motif-tiny" in msg
    assert SECRET not in msg and "\n" not in msg
    # the cause stays chained for a traceback, unless it shows the token
    assert info.value.__cause__ is (None if SECRET in str(error) else error)
    assert hub_push.main([str(model_dir), "someone/motif-tiny"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: Pushing to someone/motif-tiny failed"), err
    assert SECRET not in "".join(err)


def _run(args, env_extra=None, **kw):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra or {})
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=240, **kw)


def test_cli_offline_exit_code_and_one_line(model_dir):
    res = _run(
        [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), str(model_dir), "someone/m", "--private"],
        {"HF_HUB_OFFLINE": "1", "HF_TOKEN": SECRET},
    )
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: Could not reach the Hugging Face Hub")
    assert f"python -m hf_sparse.hub {model_dir} someone/m --private" in lines[0]
    assert SECRET not in res.stdout + res.stderr


def test_cli_arguments_help_and_missing_token_env(model_dir, capsys):
    args = hub.parse_args([str(model_dir), "a/b", "--private", "--token-env", "X"])
    assert (args.folder, args.repo_id, args.private, args.token_env) == (str(model_dir), "a/b", True, "X")
    with pytest.raises(SystemExit) as info:
        hub.parse_args(["--help"])
    assert info.value.code == 0
    usage = capsys.readouterr().out
    for flag in (
        "folder",
        "repo_id",
        "--private",
        "--token-env",
        "--revision",
        "--commit-message",
        "--endpoint",
    ):
        assert flag in usage
    assert hub.main([str(model_dir), "a/b", "--token-env", "HF_SPARSE_UNSET_VAR_XYZ"]) == 2
    assert "HF_SPARSE_UNSET_VAR_XYZ (--token-env) is not set" in capsys.readouterr().err
    assert hub.main([str(model_dir), "not-a-repo"]) == 2  # ValueError -> one line, exit 2
    assert capsys.readouterr().err.startswith("error: repo_id must")


# -------------------------------------------------------------------------------------------------
# remote-code export: a fake package
# -------------------------------------------------------------------------------------------------

FAKEPKG = {
    "__init__.py": '''
        """Root of the fake package."""
        __version__ = "9.9"
        from .util import tools
    ''',
    "core/__init__.py": """
        from .ops import scale, Scaler
        from .consts import *
        from . import plugin  # registers itself: a side effect of importing the package
        DEFAULT = 3

        def default_factor():
            return DEFAULT * 2
    """,
    "core/ops.py": """
        def scale(x, f):
            return x * f

        class Scaler:
            def __init__(self, f):
                self.f = f

            def __call__(self, x):
                return scale(x, self.f)
    """,
    "core/consts.py": """
        __all__ = ["OFFSET"]
        OFFSET = 10
        HIDDEN = -1
    """,
    "core/registry.py": """
        REGISTRY = []

        def register(name):
            REGISTRY.append(name)
    """,
    "core/plugin.py": """
        from .registry import register

        register("plugin")
    """,
    "core/deep/__init__.py": "",
    "core/deep/leaf.py": """
        from ...util import tools
        from ..ops import scale

        def leaf_value(x):
            return scale(tools.add_one(x), 2)
    """,
    "util/__init__.py": "",
    "util/tools.py": """
        def add_one(x):
            return x + 1

        def lazy_offset():
            from fakepkg.core.consts import OFFSET

            return OFFSET
    """,
    "util/reg_user.py": """
        from fakepkg.core.registry import REGISTRY

        def names():
            return list(REGISTRY)
    """,
    "util/optional.py": """
        def plot():
            try:
                import matplotlib_not_installed_anywhere  # noqa: F401
            except ImportError:
                return "no plot"
            return "plot"
    """,
    "models/fake/__init__.py": "",
    "models/fake/configuration_fake.py": """
        from transformers import PretrainedConfig

        class FakeConfig(PretrainedConfig):
            model_type = "hf_sparse_fake_bundle_test"

            def __init__(self, hidden=4, **kwargs):
                self.hidden = hidden
                super().__init__(**kwargs)
    """,
    "models/fake/modeling_fake.py": """
        from __future__ import annotations

        import math

        import torch
        from transformers import PreTrainedModel

        import fakepkg.core.ops
        import fakepkg.util.tools as T
        from fakepkg.core import DEFAULT, OFFSET, Scaler, default_factor, scale
        from fakepkg import __version__ as PKG_VERSION
        from ... import core
        from ...core.deep.leaf import leaf_value
        from ...core.registry import REGISTRY
        from .configuration_fake import FakeConfig
        from ...core.consts import *

        def compute(x):
            from ...util import optional
            from fakepkg.util.tools import lazy_offset
            from ...util.reg_user import names

            return {
                "scale": scale(x, 2),
                "scaler": Scaler(3)(x),
                "default": DEFAULT,
                "factor": default_factor(),
                "offset": OFFSET,
                "star": OFFSET + 1,
                "core_attr": core.ops.scale(x, 5),
                "dotted": fakepkg.core.ops.scale(x, 7),
                "alias": T.add_one(x),
                "leaf": leaf_value(x),
                "lazy": lazy_offset(),
                "optional": optional.plot(),
                "version": PKG_VERSION,
                "pi": round(math.pi, 2),
                "registry": list(REGISTRY),
                "reg_user": names(),
            }

        class FakeModel(PreTrainedModel):
            config_class = FakeConfig
            base_model_prefix = "fake"

            def __init__(self, config):
                super().__init__(config)
                self.proj = torch.nn.Linear(config.hidden, config.hidden)
                self.post_init()

            def forward(self, x):
                return scale(self.proj(x), default_factor()) + leaf_value(OFFSET)
    """,
}

EXPECTED_COMPUTE = {
    "scale": 6,
    "scaler": 9,
    "default": 3,
    "factor": 6,
    "offset": 10,
    "star": 11,
    "core_attr": 15,
    "dotted": 21,
    "alias": 4,
    "leaf": 8,
    "lazy": 10,
    "optional": "no plot",
    "version": "9.9",
    "pi": 3.14,
    "registry": ["plugin"],  # fakepkg.core's __init__ ran before fakepkg.core.registry was used
    "reg_user": ["plugin"],
}


def _write_tree(root: Path, files: dict):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


@pytest.fixture
def fakepkg(tmp_path):
    src = tmp_path / "src"
    _write_tree(src / "fakepkg", FAKEPKG)
    return src


def _export_fake(src, folder, **kw):
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.json").exists():
        (folder / "config.json").write_text('{"model_type": "hf_sparse_fake_bundle_test"}\n')
    kw.setdefault(
        "auto_map", {"AutoConfig": "configuration_fake.FakeConfig", "AutoModel": "modeling_fake.FakeModel"}
    )
    return hub.export_remote_code(
        folder, ["fakepkg.models.fake.modeling_fake"], package="fakepkg", package_dir=src / "fakepkg", **kw
    )


BLOCK_PACKAGE = "import sys; sys.modules[{name!r}] = None; sys.dont_write_bytecode = True\n"


def test_fake_package_runs_where_it_cannot_be_imported(fakepkg, tmp_path, monkeypatch):
    # 1. with the package importable (here, in the test process): save a model and its output
    model_dir = tmp_path / "bundle_model"
    monkeypatch.syspath_prepend(str(fakepkg))
    try:
        from fakepkg.models.fake.modeling_fake import FakeConfig, FakeModel, compute

        assert compute(3) == EXPECTED_COMPUTE
        model = FakeModel(FakeConfig(hidden=4)).eval()
        model.save_pretrained(model_dir)
        x = torch.randn(2, 4)
        with torch.no_grad():
            torch.save({"x": x, "y": model(x)}, tmp_path / "expected.pt")
    finally:
        for name in [m for m in sys.modules if m == "fakepkg" or m.startswith("fakepkg.")]:
            del sys.modules[name]

    # 2. export the flat bundle
    manifest = _export_fake(fakepkg, model_dir)
    files = set(manifest["files"])
    assert files == {
        "modeling_fake.py",
        "configuration_fake.py",
        "fakepkg.py",  # the root package, bound by `import fakepkg.core.ops`
        "core.py",
        "core_ops.py",
        "core_consts.py",
        "core_registry.py",
        "core_plugin.py",
        "core_deep_leaf.py",
        "util_tools.py",
        "util_optional.py",
        "util_reg_user.py",
    }
    assert manifest["hf_sparse_version"] == hf_sparse.__version__
    assert set(manifest["requirements"]) == {"torch", "transformers"}  # matplotlib: inside try
    config = json.loads((model_dir / "config.json").read_text())
    # one loader module for every Auto class: one package, one copy of each module (see below)
    assert config["auto_map"] == {
        "AutoConfig": "modeling_fake.FakeConfig",
        "AutoModel": "modeling_fake.FakeModel",
    }
    assert manifest["auto_map_requested"]["AutoConfig"] == "configuration_fake.FakeConfig"
    assert config["model_type"] == "hf_sparse_fake_bundle_test"  # merged, not replaced
    for name in files:
        tree = ast.parse((model_dir / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    assert not (node.module or "").startswith("fakepkg"), name
                assert node.level <= 1, name  # siblings only; `from .fakepkg import` is the flat root
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("fakepkg") for a in node.names), name
    leaf = (model_dir / "core_deep_leaf.py").read_text()
    assert "from .util_tools import __name__" in leaf and "from . import util_tools as tools" in leaf
    assert "from .core_ops import scale" in leaf
    modeling = (model_dir / "modeling_fake.py").read_text()
    assert "from .core_ops import Scaler, scale" in modeling  # re-exports resolved to the defining module
    assert "from .core import default_factor" in modeling  # defined in the package __init__
    assert "from .core import __name__ as _bundled_core  # runs package fakepkg.core first" in modeling
    assert "from . import core_plugin as plugin" in (model_dir / "core.py").read_text()
    assert "DEFAULT = 3" in modeling and "PKG_VERSION = '9.9'" in modeling  # __init__ constants inlined

    # transformers' relative-import scan reaches every bundled file from the model file
    from transformers.dynamic_module_utils import get_relative_import_files

    reached = {Path(f).name for f in get_relative_import_files(model_dir / "modeling_fake.py")}
    assert reached | {"modeling_fake.py"} == files

    # 3. without the package: plain import of the bundle, and AutoModel with trust_remote_code
    script = (
        BLOCK_PACKAGE.format(name="fakepkg")
        + f"""
import importlib, json, torch
sys.path.insert(0, {str(tmp_path)!r})
# a module that uses fakepkg.core.registry, imported first: the package's __init__ must still run
print(json.dumps(importlib.import_module("bundle_model.util_reg_user").names()))
mod = importlib.import_module("bundle_model.modeling_fake")
print(json.dumps(mod.compute(3)))
try:
    import fakepkg
except ImportError:
    print("fakepkg unavailable")
from transformers import AutoModel
model = AutoModel.from_pretrained({str(model_dir)!r}, trust_remote_code=True).eval()
saved = torch.load({str(tmp_path / "expected.pt")!r})
with torch.no_grad():
    torch.testing.assert_close(model(saved["x"]), saved["y"])
assert type(model.config) is type(model).config_class, (type(model.config), type(model).config_class)
copies = [m for m in sys.modules if m.startswith("transformers_modules.") and m.endswith(".core_ops")]
assert len(copies) == 1, copies  # AutoConfig and AutoModel share one package
print(type(model).__module__)
"""
    )
    env = {"HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    res = _run([sys.executable, "-c", script], env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout.strip().splitlines()
    assert json.loads(out[0]) == ["plugin"]
    assert json.loads(out[1]) == EXPECTED_COMPUTE
    assert out[2] == "fakepkg unavailable"
    assert out[3].startswith("transformers_modules.") and out[3].endswith("modeling_fake")


def test_reexport_again_removes_stale_files_and_merges_auto_map(fakepkg, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "config.json").write_text('{"auto_map": {"AutoTokenizer": ["tok.T", null]}, "x": 1}')
    _export_fake(fakepkg, folder)
    (folder / "util_optional.py").write_text("# stale")
    (folder / "weights.bin").write_bytes(b"w")
    # now the optional module is excluded: its (function-level) import becomes `raise ImportError`
    manifest = _export_fake(fakepkg, folder, exclude=["fakepkg.util.optional"])
    assert "util_optional.py" not in manifest["files"]
    assert not (folder / "util_optional.py").exists()
    assert (folder / "weights.bin").exists()  # files the bundle did not write are never touched
    assert (
        "raise ImportError('fakepkg.util.optional is not part of this remote-code bundle"
        in (folder / "modeling_fake.py").read_text()
    )
    config = json.loads((folder / "config.json").read_text())
    assert config["x"] == 1 and config["auto_map"]["AutoTokenizer"] == ["tok.T", None]
    assert config["auto_map"]["AutoModel"] == "modeling_fake.FakeModel"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no staging left


def test_reexport_reuses_the_flattened_package_until_a_file_changes(fakepkg, tmp_path, monkeypatch):
    """Every save_pretrained exports the bundle: the package is flattened once per content of its files."""
    from hf_sparse.hub import flatten

    calls = []
    closure = flatten._Bundler.closure
    monkeypatch.setattr(
        flatten._Bundler, "closure", lambda self, entries: calls.append(1) or closure(self, entries)
    )
    leaf = fakepkg / "fakepkg" / "core" / "deep" / "leaf.py"
    _export_fake(fakepkg, tmp_path / "a")
    _export_fake(fakepkg, tmp_path / "b")
    assert len(calls) == 1
    assert (tmp_path / "a" / "core_deep_leaf.py").read_text() == (
        tmp_path / "b" / "core_deep_leaf.py"
    ).read_text()
    # same size, same folder, within the file system's timestamp tick: only the content tells
    source = leaf.read_text()
    changed = source.replace("x), 2)", "x), 3)")
    assert changed != source and len(changed) == len(source)
    leaf.write_text(changed)
    _export_fake(fakepkg, tmp_path / "c")
    assert len(calls) == 2
    assert "x), 3)" in (tmp_path / "c" / "core_deep_leaf.py").read_text()


@pytest.mark.parametrize(
    "files, match",
    [
        ({"core/__init__.py": "def __getattr__(name):\n    return 1\n"}, "builds its namespace lazily"),
        ({"core/deep/leaf.py": "x = 1; from ..ops import scale\n"}, "shares its line"),
        ({"core/deep/leaf.py": "from ..nothing import x\n"}, "fakepkg.core.nothing, which is not a module"),
        ({"core/deep/leaf.py": "from ....above import x\n"}, "goes above the top-level package"),
        (
            {"core/deep/leaf.py": "from ...core import NOT_THERE\n"},
            "cannot find 'NOT_THERE' in package fakepkg.core",
        ),
        (
            {"core_ops.py": "X = 1\n", "util/optional.py": "from ..core_ops import X\n"},
            "fakepkg.core.ops and fakepkg.core_ops would both be bundled as core_ops.py",
        ),
    ],
)
def test_export_errors_name_file_and_reason(fakepkg, tmp_path, files, match):
    _write_tree(fakepkg / "fakepkg", files)
    folder = tmp_path / "out"
    with pytest.raises(hub.BundleError, match=match):
        _export_fake(fakepkg, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]  # nothing written on failure


def test_export_excluding_a_module_level_import_fails(fakepkg, tmp_path):
    with pytest.raises(hub.BundleError, match="excluded but imported when the module loads"):
        _export_fake(fakepkg, tmp_path / "out", exclude=["fakepkg.core.deep"])


@pytest.mark.parametrize(
    "auto_map, match",
    [
        (
            {"AutoModel": "modeling_other.FakeModel"},
            "names module 'modeling_other', which is not in the bundle",
        ),
        ({"AutoModel": "modeling_fake.NoSuchModel"}, "defines no 'NoSuchModel'"),
        ({"AutoNothing": "modeling_fake.FakeModel"}, "not a transformers Auto class"),
        ({"AutoModel": "FakeModel"}, "must be 'module.ClassName'"),
    ],
)
def test_export_checks_auto_map(fakepkg, tmp_path, auto_map, match):
    with pytest.raises(ValueError, match=match):
        _export_fake(fakepkg, tmp_path / "out", auto_map=auto_map)


def test_export_argument_errors(fakepkg, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        hub.export_remote_code(
            tmp_path / "empty",
            ["fakepkg.models.fake.modeling_fake"],
            {"AutoModel": "modeling_fake.FakeModel"},
            package="fakepkg",
            package_dir=fakepkg / "fakepkg",
        )
    with pytest.raises(ValueError, match="'other.module'"):
        hub.export_remote_code(
            tmp_path, ["other.module"], None, package="fakepkg", package_dir=fakepkg / "fakepkg"
        )
    with pytest.raises(ValueError, match="'fakepkg.nope' does not exist"):
        hub.export_remote_code(
            tmp_path, ["fakepkg.nope"], None, package="fakepkg", package_dir=fakepkg / "fakepkg"
        )


@pytest.mark.parametrize(
    "module, flat",
    [
        ("hf_sparse.patterns.base", "patterns_base"),
        ("hf_sparse.attention.blocked", "attention_blocked"),
        ("hf_sparse.models.sparse_transformer.modeling_sparse_transformer", "modeling_sparse_transformer"),
        (
            "hf_sparse.models.sparse_transformer.configuration_sparse_transformer",
            "configuration_sparse_transformer",
        ),
        ("hf_sparse.patterns", "patterns"),
        ("hf_sparse", "hf_sparse"),
    ],
)
def test_flat_module_names(module, flat):
    assert hub.flat_module_name(module) == flat


# -------------------------------------------------------------------------------------------------
# remote-code export: the real patterns + attention closure
# -------------------------------------------------------------------------------------------------


FUSED_SOURCE = REPO / "hf_sparse" / "attention" / "csrc" / "block_sparse.cpp"


def test_real_attention_bundle_matches_the_package(tmp_path):
    folder = tmp_path / "sparse_bundle"
    folder.mkdir()
    with warnings.catch_warnings():  # fused.py reads csrc/ next to it: the bundle embeds it, no warning
        warnings.filterwarnings("error", message=".*not part of the bundle")
        manifest = hub.export_remote_code(folder, ["hf_sparse.attention.dispatch"], None)
    files = set(manifest["files"])
    assert {
        "attention_dispatch.py",
        "attention_blocked.py",
        "patterns.py",
        "patterns_base.py",
        "viz.py",
    } <= files
    assert manifest["requirements"] == ["torch"]  # matplotlib stays behind viz's try block
    assert manifest["files"]["patterns_base.py"] == "hf_sparse.patterns.base"

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 37, 8, generator=g) for _ in range(3))  # 37: not a block multiple
    mask = torch.ones(2, 37)
    mask[1, 30:] = 0
    glob = torch.zeros(2, 37)
    glob[:, 0] = 1
    spec = (P.SlidingWindow(window=8) | P.Strided(stride=8, causal=False)).to_dict()
    cases = {}
    for backend in ("dense", "blocked"):
        cases[backend] = hf_sparse.sparse_attention(
            q, k, v, P.from_dict(spec), attention_mask=mask, global_attention_mask=glob, backend=backend
        )
    torch.save({"q": q, "k": k, "v": v, "mask": mask, "glob": glob, "spec": spec}, tmp_path / "inputs.pt")

    script = (
        BLOCK_PACKAGE.format(name="hf_sparse")
        + f"""
import importlib, torch
sys.path.insert(0, {str(tmp_path)!r})
dispatch = importlib.import_module("sparse_bundle.attention_dispatch")
pats = importlib.import_module("sparse_bundle.patterns")
d = torch.load({str(tmp_path / "inputs.pt")!r})
out = {{}}
for backend in ("dense", "blocked"):
    out[backend] = dispatch.sparse_attention(d["q"], d["k"], d["v"], pats.from_dict(d["spec"]),
        attention_mask=d["mask"], global_attention_mask=d["glob"], backend=backend)
torch.save(out, {str(tmp_path / "bundle_out.pt")!r})
leaked = [m for m, mod in sys.modules.items() if "{REPO / "hf_sparse"}" in str(getattr(mod, "__file__", ""))]
print("leaked:", leaked)
fused = importlib.import_module("sparse_bundle.attention_fused")
print("fused:", fused.available(), fused._source() == open({str(FUSED_SOURCE)!r}, "rb").read())
"""
    )
    res = _run([sys.executable, "-c", script], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "leaked: []" in res.stdout
    # the kernel's C++ source travels in the bundle (BUNDLE_FILES): the bundle builds the same kernel
    assert not (folder / "csrc").exists()
    assert f"fused: {fused.available()} True" in res.stdout, res.stdout + res.stderr
    got = torch.load(tmp_path / "bundle_out.pt")
    for backend, expected in cases.items():
        torch.testing.assert_close(got[backend], expected, rtol=0, atol=1e-6)


def test_files_a_module_declares_are_embedded_in_its_bundled_copy(tmp_path):
    """``BUNDLE_FILES`` (files a module reads next to itself) become ``BUNDLED_FILES`` in the flat copy, one
    line per file, so transformers' line-based import scan sees no import in them; bad declarations raise."""
    from hf_sparse.hub.bundle import _bundled_files

    (tmp_path / "data").mkdir()
    text = "from .x import y\nimport os\n"
    (tmp_path / "data" / "k.txt").write_text(text)
    module = tmp_path / "m.py"
    source = 'BUNDLE_FILES = ("data/k.txt",)\n'
    extra = _bundled_files(module, source, "pkg.m")
    namespace = {}
    exec(source + extra, namespace)
    assert namespace["BUNDLED_FILES"] == {"data/k.txt": text}
    assert not re.search(r"^\s*(from|import)\s", extra, re.MULTILINE)
    assert _bundled_files(module, "X = 1\n", "pkg.m") == ""
    for bad in ('("missing.txt",)', '("../m.py",)', "[name]", '"data/k.txt"'):
        with pytest.raises(hub.BundleError, match="pkg.m: BUNDLE_FILES"):
            _bundled_files(module, f"BUNDLE_FILES = {bad}\n", "pkg.m")


@pytest.mark.parametrize(
    "line,warns",
    [
        ('open(os.path.join(os.path.dirname(__file__), "table.txt")).read()', True),
        ('importlib.resources.files("fakepkg.util").joinpath("table.txt").read_text()', True),
        ('getattr(sys.modules[__name__], "__file__", None)  # bundle: reads no data file', False),
    ],
    ids=["__file__", "importlib.resources", "marked"],
)
def test_data_files_next_to_a_module_are_reported_unless_the_line_says_it_reads_none(
    fakepkg, tmp_path, line, warns
):
    """A module that locates files next to itself warns (the flat bundle lacks them), naming the module and
    line; a line that only uses ``__file__`` otherwise (a module's source hash) can say so."""
    tools = fakepkg / "fakepkg" / "util" / "tools.py"
    text = tools.read_text() + f"\n\ndef table():\n    import importlib, os, sys\n\n    return {line}\n"
    tools.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _export_fake(fakepkg, tmp_path / "out")
    said = [str(w.message) for w in caught if "not part of the bundle" in str(w.message)]
    if warns:
        assert said and f"fakepkg.util.tools (line {len(text.splitlines())})" in said[0], said
    else:
        assert not said, said


def test_saving_a_summarization_model_reports_no_data_files(tmp_path):
    """hf_sparse.data.loading (in the summarization bundle) hashes a module's own source for a cache fingerprint
    and reads no data file: every save_pretrained warned that data files were not part of the bundle."""
    from tests.models.summarization_tiny import tiny_extractive, tiny_tokenizer

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*not part of the bundle")
        tiny_extractive(tiny_tokenizer()).save_pretrained(tmp_path / "model")
    manifest = json.loads((tmp_path / "model" / hub.BUNDLE_MANIFEST).read_text())
    assert manifest["files"]["data_loading.py"] == "hf_sparse.data.loading"


def test_fused_kernel_source_from_the_package_or_the_bundled_copy(tmp_path, monkeypatch):
    """The kernel compiles from csrc/block_sparse.cpp in the package, from ``BUNDLED_FILES`` in a bundle
    (no csrc folder there), and says which file is missing where neither is (``_load`` then falls back)."""
    assert fused._source() == FUSED_SOURCE.read_bytes()
    monkeypatch.setattr(fused, "_SOURCE", str(tmp_path / "csrc" / "block_sparse.cpp"))
    with pytest.raises(FileNotFoundError, match="block_sparse.cpp"):
        fused._source()
    monkeypatch.setattr(fused, "BUNDLED_FILES", {"csrc/block_sparse.cpp": "// é\n"}, raising=False)
    assert fused._source() == "// é\n".encode()
    build = tmp_path / "build"
    build.mkdir()
    path = fused._build_source(b"// the source\n", str(build))
    assert Path(path).read_bytes() == b"// the source\n" and Path(path).parent == build
    assert fused._build_source(b"// other\n", str(build)) == path  # a build folder holds one source's copy


SAVE_ONLY = """
import sys, torch
import hf_sparse
from hf_sparse import SparseTransformerConfig, SparseTransformerModel
from hf_sparse.tasks.motif import DNA_MOTIF_DETECTION
before = set(sys.modules)
small = dict(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=32, attention_pattern={"type": "sliding_window", "window": 8})
config = SparseTransformerConfig(**small)
SparseTransformerModel(config).save_pretrained(sys.argv[1] + "/st")
cfg = DNA_MOTIF_DETECTION.config_class(
    motif_names=["A"], backbone=dict(model_type="sparse_transformer", **small))
DNA_MOTIF_DETECTION.auto_classes["AutoModel"](cfg).save_pretrained(sys.argv[1] + "/motif")
new = sorted(m for m in set(sys.modules) - before if m.startswith(("hf_sparse", "jinja2")))
print(",".join(new))
"""


def test_saving_a_model_imports_the_bundle_code_only(tmp_path):
    """save_pretrained writes the remote-code bundle (hf_sparse.hub.bundle) and never loads the card or push
    code. (jinja2 itself is imported by ``transformers`` (chat templates), so only our modules are checked,
    and that no module of hf_sparse but the card module imports jinja2.)"""
    out = subprocess.run(
        [sys.executable, "-c", SAVE_ONLY, str(tmp_path)], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = set(out.stdout.strip().splitlines()[-1].split(","))
    assert "hf_sparse.hub.bundle" in loaded and (tmp_path / "motif" / "modeling_motif.py").is_file()
    assert not loaded & {"hf_sparse.hub.cards", "hf_sparse.hub.push"}, loaded
    importers = [
        str(p.relative_to(REPO))
        for p in (REPO / "hf_sparse").rglob("*.py")
        if any(
            isinstance(node, (ast.Import, ast.ImportFrom))
            and any((getattr(node, "module", None) or a.name).split(".")[0] == "jinja2" for a in node.names)
            for node in ast.walk(ast.parse(p.read_text()))
        )
    ]
    assert importers == ["hf_sparse/hub/cards.py"]


def test_push_command_line_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "hf_sparse.hub", "--help"], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0 and "folder repo_id" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("results, pushed", [(None, True), ({"lora": True}, True), ({"lora": False}, False)])
def test_an_adapter_of_an_earlier_lora_run_is_not_pushed(model_dir, results, pushed):
    """An adapter/ that all_results.json does not claim (a LoRA run's, left in a folder a later full fine-tune
    wrote into: the runner's --overwrite_output_dir now deletes it, but a folder filled by hand may hold one)."""
    (model_dir / "adapter").mkdir()
    (model_dir / "adapter" / "adapter_config.json").write_text("{}")
    (model_dir / "adapter" / "adapter_model.safetensors").write_bytes(os.urandom(64))
    if results is not None:
        (model_dir / "all_results.json").write_text(json.dumps(results))
    sent = hub.upload_file_list(model_dir)
    adapter = [f for f in sent if f.startswith("adapter/")]
    assert adapter == (["adapter/adapter_config.json", "adapter/adapter_model.safetensors"] if pushed else [])
    assert "model.safetensors" in sent
