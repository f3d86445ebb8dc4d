"""Secrets never reach disk or the Hub: a token planted through every path a user can give one
(recipe value, --override, environment variable HF_TOKEN) is in no file of the run folder and in no
file the upload sends, and the upload still uses it."""

import pytest
from huggingface_hub import constants

from hf_sparse.training.secrets import REDACTED, is_secret_key, redact
from tests.test_hub import _no_manifest
from tests.training.helpers import load_finetune_module, toy_recipe, write_recipe

TOKEN = "hf_PlAnTeDsEcReT0123456789abcdefGHIJ"


@pytest.fixture
def online(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def fake_upload(monkeypatch):
    """HfApi.create_repo/upload_folder recorded instead of sent."""
    calls = {}

    class Info:
        repo_url = "https://huggingface.co/someone/toy"

    def create_repo(self, repo_id, **kw):
        calls["create"] = {"repo_id": repo_id, **kw}

    def upload_folder(self, **kw):
        calls["upload"] = kw
        return Info()

    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", create_repo)
    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", upload_folder)
    monkeypatch.setattr("huggingface_hub.HfApi.hf_hub_download", _no_manifest)  # no earlier push's bundle
    return calls


def _holders(paths, secret):
    return [str(p) for p in paths if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.parametrize("path", ["recipe", "override", "environment"])
def test_a_planted_token_is_in_no_file_written_or_uploaded(
    path, tmp_path, online, fake_upload, monkeypatch, capsys
):
    from huggingface_hub.utils import filter_repo_objects

    monkeypatch.delenv("HF_TOKEN", raising=False)
    out = tmp_path / "out"
    values = dict(
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        eval_strategy="no",
        num_test=0,
        report_to="tensorboard",
        model_card=True,
        push_to_hub=True,
        hub_model_id="someone/toy",
    )
    args = []
    if path == "recipe":
        values["hub_token"] = TOKEN
    elif path == "override":
        args = ["--override", f"hub_token={TOKEN}"]
    else:
        monkeypatch.setenv("HF_TOKEN", TOKEN)
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(out, **values))
    assert load_finetune_module().main([str(recipe), *args]) == 0

    # the token was used for the push ...
    assert fake_upload["create"]["token"] == TOKEN
    assert fake_upload["upload"]["token"] == TOKEN
    # ... but no file written in the run (checkpoints, training_args.bin, runs/, card, results) holds it
    written = sorted(out.rglob("*"))
    assert any(p.name == "training_args.bin" for p in written)  # checkpoints keep theirs, for resume
    assert _holders(written, TOKEN) == []
    # ... and the upload sends an allow-list of files, none with the token
    sent = list(filter_repo_objects(
        [str(p.relative_to(out)) for p in written if p.is_file()],
        allow_patterns=fake_upload["upload"]["allow_patterns"],
    ))  # fmt: skip
    assert "model.safetensors" in sent and "README.md" in sent and "all_results.json" in sent
    assert not [
        f for f in sent if f.startswith(("checkpoint-", "runs/")) or f.endswith((".bin", ".pt", ".pth"))
    ]
    assert _holders([out / f for f in sent], TOKEN) == []
    # no pickle in the final model folder
    assert not (out / "training_args.bin").exists()
    # and nothing printed it
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    if path != "environment":
        import json

        results = json.loads((out / "all_results.json").read_text())
        assert results["recipe"]["values"]["hub_token"] == REDACTED


def test_secret_keys_and_redaction():
    for name in ("hub_token", "HF_TOKEN", "wandb_api_key", "password", "client_secret", "secret", "key"):
        assert is_secret_key(name), name
    for name in ("tokenizer_name", "average_tokens_across_devices", "include_num_input_tokens_seen", "keys"):
        assert not is_secret_key(name), name
    record = {
        "hub_token": TOKEN,
        "overrides": [f"hub_token={TOKEN}", "lr=1"],
        "note": f"x {TOKEN} y",
        "n": None,
    }
    clean = redact(record)
    assert TOKEN not in str(clean)
    assert clean["overrides"] == [f"hub_token={REDACTED}", "lr=1"] and clean["n"] is None


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["push_to_hub=true", "hub_token=", TOKEN], "is not of the form key=value"),  # a space after '='
        ([f"hub_token={TOKEN}", f"push_to_hub={TOKEN}"], "push_to_hub="),
        (["hub_token=my-own-password", "push_to_hub=my-own-password"], "push_to_hub="),  # not hf_-shaped
    ],
)
def test_a_token_in_a_bad_override_is_not_printed(overrides, needle, tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", toy_recipe(tmp_path / "out"))
    assert load_finetune_module().main([str(recipe), "--override", *overrides]) == 2
    err = capsys.readouterr().err
    line = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(line) == 1 and needle in line[0] and REDACTED in line[0], err
    assert TOKEN not in err and "my-own-password" not in err


@pytest.mark.parametrize(
    "text, shown",
    [
        ("r.yaml: hub_token={'value': 'MySecret42'} is not a valid str (x)", "r.yaml: hub_token=<redacted> is not a valid str (x)"),
        ("r.yaml: hub_token='MySecret42' is not a bool: 'MySecret42' is not", "r.yaml: hub_token=<redacted> is not a bool: <redacted> is not"),
        ("at (api_key=[1, 'My Secret']) and lr=1", "at (api_key=<redacted>) and lr=1"),
        ("hub_token=My Secret", "hub_token=<redacted>"),  # a bare key=value: all of the value
        ("password: {'x': 'MySecret42", "password: {'x': 'MySecret42"),  # no key=: left to the other rules
    ],
)  # fmt: skip
def test_a_secret_keys_value_in_a_message_is_masked_and_the_message_kept(text, shown):
    assert redact(text) == shown


def test_a_wrong_typed_token_in_the_recipe_is_explained_without_its_value(tmp_path, capsys):
    """hub_token: {value: ...} printed only 'r.yaml: hub_token=<redacted>': the reason was masked with the value."""
    recipe = write_recipe(
        tmp_path / "r.yaml", toy_recipe(tmp_path / "out", hub_token={"value": "MySecretTokenValue42"})
    )
    assert load_finetune_module().main([str(recipe)]) == 2
    err = capsys.readouterr().err
    line = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(line) == 1 and f"hub_token={REDACTED} is not a valid str" in line[0], err
    assert "MySecretTokenValue42" not in err
