"""A secret environment variable blocks a push only where its value is in a file: a value too short to be
one (a local MLflow password ``test``) matches words like ``test_accuracy``, and the refusal names the
variable, never the value."""

import pytest
from huggingface_hub import constants

from hf_sparse import hub
from hf_sparse.training.secrets import (
    MIN_ENV_SECRET_LENGTH,
    SECRET_ENV_VARS,
    find_secrets,
    which_secret,
)

TOKEN = "hf_PlAnTeDsEcReT0123456789abcdefGHIJ"


@pytest.fixture(autouse=True)
def no_secret_env(monkeypatch):
    for var in SECRET_ENV_VARS:
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def uploads(monkeypatch):
    """Online, with HfApi.create_repo/upload_folder recorded instead of sent."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    calls = []
    monkeypatch.setattr("huggingface_hub.HfApi.create_repo", lambda self, *a, **k: None)
    monkeypatch.setattr(
        "huggingface_hub.HfApi.upload_folder",
        lambda self, **k: calls.append(k) or type("Info", (), {"repo_url": "u"})(),
    )
    return calls


@pytest.fixture
def model_dir(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "sparse_transformer"}\n')
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    (folder / "all_results.json").write_text('{"test_accuracy": 0.5, "eval_loss": 0.25}\n')
    (folder / "README.md").write_text("# model\n\n| test_accuracy | 0.5 |\n")
    return folder


@pytest.mark.parametrize(
    "env, text, found",
    [
        ({"MLFLOW_TRACKING_PASSWORD": "test"}, "test_accuracy: 0.5", None),  # too short to be looked for
        ({"WANDB_API_KEY": "x" * (MIN_ENV_SECRET_LENGTH - 1)}, "x" * 20, None),
        ({"WANDB_API_KEY": "0123456789abcdef"}, "key: 0123456789abcdef", "the value of WANDB_API_KEY"),
        ({"MLFLOW_TRACKING_PASSWORD": "s3cret-pw"}, "pw=s3cret-pw", "the value of MLFLOW_TRACKING_PASSWORD"),
        ({}, f"token: {TOKEN}", "an hf_... or Bearer token"),  # token-shaped, whatever the environment
        ({"HF_TOKEN": TOKEN}, f"token: {TOKEN}", "the value of HF_TOKEN"),
    ],
)
def test_which_secret_names_it(env, text, found, monkeypatch):
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert which_secret(text) == found
    assert which_secret(text.encode()) == found
    assert find_secrets(text) is (found is not None)


def test_a_given_secret_is_named_by_its_key():
    assert which_secret("pw: hunter", {"the Hub token": "hunter"}) == "the Hub token"
    assert which_secret("pw: hunter", ["hunter"]) == "a given secret"
    assert which_secret("pw: hun", ["hun"]) is None  # under 4 characters, as before


def test_a_short_env_value_does_not_block_a_push(model_dir, uploads, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "test")
    assert hub.push_to_hub(model_dir, "someone/m") == "u"
    assert "README.md" in uploads[0]["allow_patterns"] and "all_results.json" in uploads[0]["allow_patterns"]


@pytest.mark.parametrize(
    "var, value, name, named",
    [
        ("WANDB_API_KEY", "0123456789abcdef", "all_results.json", "the value of WANDB_API_KEY"),
        ("HF_TOKEN", TOKEN, "README.md", "the Hub token"),  # the token the push uses
    ],
)
def test_a_refused_push_names_the_secret_not_its_value(
    model_dir, uploads, monkeypatch, var, value, name, named
):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv(var, value)
    path = model_dir / name
    path.write_text(path.read_text().replace("0.5", f'"{value}"'))
    with pytest.raises(hub.HubError) as info:
        hub.push_to_hub(model_dir, "someone/m")
    msg = str(info.value)
    assert f"{name} contains a token or secret ({named})" in msg and "Nothing was uploaded" in msg
    assert value not in msg and uploads == []
