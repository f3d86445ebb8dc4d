"""The remote code of a saved folder where it leaves hf-sparse: a save whose bundle cannot be made, a task's
tokenizer that imports hf_sparse, a model loaded with trust_remote_code and saved again by transformers alone,
pushing such a folder, and ``save_pretrained(push_to_hub=True)``."""

import json
import textwrap

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM, BertTokenizer, pipeline

from hf_sparse.hub import upload_file_list
from hf_sparse.tasks import CardInfo, TaskDescriptor, register, registry
from tests.models.tiny import tiny_config
from tests.tasks.toy.configuration_toy import ToyPresenceConfig
from tests.tasks.toy.modeling_toy import ToyPresenceModel


@pytest.fixture
def descriptors(monkeypatch):
    """A copy of the task registry for the test (the real one is left as it was)."""
    monkeypatch.setattr(registry, "_DESCRIPTORS", dict(registry._DESCRIPTORS))
    return registry._DESCRIPTORS


def _package(root, name: str, files: dict, monkeypatch):
    """An importable package ``name`` under ``root`` holding ``files`` ({module: source})."""
    (root / name).mkdir(parents=True)
    for module, source in {"__init__": "", **files}.items():
        (root / name / f"{module}.py").write_text(textwrap.dedent(source).lstrip())
    monkeypatch.syspath_prepend(str(root))


CONFIGURATION = """
    from transformers import PretrainedConfig


    class PackConfig(PretrainedConfig):
        model_type = "{model_type}"
"""


def test_a_bundle_that_cannot_be_made_fails_before_the_weights_are_written(tmp_path, monkeypatch):
    """The hook ran after transformers' save: the folder kept config.json and weights without the remote code."""
    from transformers import AutoConfig

    from hf_sparse.hub import BundleError
    from hf_sparse.models import register_auto

    modeling = """
        from torch import nn
        from transformers import PreTrainedModel

        from hf_sparse.models.longformer_tasks import ExportCodeMixin

        from .configuration_pack import PackConfig

        BUNDLE_FILES = ("table.txt",)  # not there: the bundle cannot be made


        class PackModel(ExportCodeMixin, PreTrainedModel):
            config_class = PackConfig

            def __init__(self, config):
                super().__init__(config)
                self.linear = nn.Linear(2, 2)
                self.post_init()
    """
    configuration = CONFIGURATION.format(model_type="hf_sparse_test_hub_unbundlable")
    files = {"configuration_pack": configuration, "modeling_pack": modeling}
    _package(tmp_path / "src", "hub_unbundlable", files, monkeypatch)
    from hub_unbundlable.modeling_pack import PackConfig, PackModel

    register_auto(PackConfig, {AutoModel: PackModel})
    assert AutoConfig.for_model("hf_sparse_test_hub_unbundlable").__class__ is PackConfig
    with pytest.raises(BundleError, match="BUNDLE_FILES names 'table.txt'"):
        PackModel(PackConfig()).save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_tokenizer_that_imports_hf_sparse_is_a_requirement_of_the_bundle(
    tmp_path, monkeypatch, descriptors
):
    """A task's tokenizer subclassing DNATokenizer: its module (copied as it is by the tokenizer's own save) imports
    hf_sparse, while the manifest said torch and transformers, and the card that the folder loads without
    hf-sparse (where the pipeline then ran with no tokenizer)."""
    from hf_sparse.hub import render_model_card

    modeling = """
        from torch import nn
        from transformers import PreTrainedModel

        from .configuration_pack import PackConfig


        class PackModel(PreTrainedModel):
            config_class = PackConfig
            export_code_hook = None

            def __init__(self, config):
                super().__init__(config)
                self.linear = nn.Linear(2, 2)
                self.post_init()

            def save_pretrained(self, save_directory, *args, **kwargs):
                out = super().save_pretrained(save_directory, *args, **kwargs)
                if type(self).export_code_hook is not None and kwargs.get("is_main_process", True):
                    type(self).export_code_hook(self, save_directory)
                return out
    """
    tokenization = """
        from hf_sparse.tokenization_dna import DNATokenizer


        class PackDNATokenizer(DNATokenizer):
            pass
    """
    configuration = CONFIGURATION.format(model_type="hf_sparse_test_hub_dna_tokenizer")
    files = {
        "configuration_pack": configuration,
        "modeling_pack": modeling,
        "tokenization_pack": tokenization,
    }
    _package(tmp_path / "src", "hub_dna_tokenizer", files, monkeypatch)
    from hub_dna_tokenizer.modeling_pack import PackConfig, PackModel
    from hub_dna_tokenizer.tokenization_pack import PackDNATokenizer

    task = register(
        TaskDescriptor(
            name="hub-dna-tokenizer",
            config_class=PackConfig,
            auto_classes={"AutoModel": PackModel},
            task_class="hub_dna_tokenizer.task:Task",
            tokenizer_class=PackDNATokenizer,
            card=CardInfo(template="dna-motif-detection.jinja", title="t", description="d"),
        )
    )
    PackModel(PackConfig()).save_pretrained(tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "hf_sparse_bundle.json").read_text())
    assert manifest["requirements"] == ["hf_sparse", "torch", "transformers"]
    assert "tokenization_pack.py" not in manifest["files"]  # the tokenizer's own save_pretrained copies it
    card = str(render_model_card(task, model_name="m", requirements=manifest["requirements"]))
    assert "pip install hf-sparse" in card


def _toy_tokenizer(folder):
    vocab = folder / "vocab.txt"
    vocab.parent.mkdir(parents=True, exist_ok=True)
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"t{i}" for i in range(11))]) + "\n"
    )
    return BertTokenizer(str(vocab))


def test_a_remote_code_model_saved_again_by_transformers_keeps_its_pipeline(tmp_path):
    """A task outside hf_sparse (README 'Adding a task', the toy): the remote copy of its model saves with
    transformers' save_pretrained alone, which copied the model's module and what it imports; config.json kept
    custom_pipelines, and pipeline(model=folder) stopped at the missing pipeline module."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    tokenizer = _toy_tokenizer(tmp_path / "vocab")
    ToyPresenceModel(ToyPresenceConfig(vocab_size=len(tokenizer))).eval().save_pretrained(tmp_path / "model")
    # what AutoModel.from_pretrained(trust_remote_code=True) does where the toy is not registered (it is here)
    auto_map = json.loads((tmp_path / "model" / "config.json").read_text())["auto_map"]
    for auto in ("AutoConfig", "AutoModel"):
        remote = get_class_from_dynamic_module(auto_map[auto], str(tmp_path / "model"))
        remote.register_for_auto_class(auto)
    assert remote.__module__.startswith("transformers_modules.") and remote.export_code_hook is None
    remote.from_pretrained(tmp_path / "model").save_pretrained(tmp_path / "again")
    tokenizer.save_pretrained(tmp_path / "again")

    config = json.loads((tmp_path / "again" / "config.json").read_text())
    impl = config["custom_pipelines"]["toy-token-presence"]["impl"]
    assert impl == "tasks_toy_pipeline.ToyPresencePipeline"
    assert (tmp_path / "again" / "tasks_toy_pipeline.py").is_file()
    assert "tasks_toy_pipeline.py" in upload_file_list(tmp_path / "again")
    pipe = pipeline(model=str(tmp_path / "again"), trust_remote_code=True)
    assert type(pipe).__module__.startswith("transformers_modules.")
    assert pipe("t1 t7 t3")["label"] in ("absent", "present")


def test_upload_file_list_sends_the_modules_the_remote_code_imports(tmp_path):
    """A folder saved by transformers alone (no manifest): the pushed repository lacked utils.py, which the
    model's module imports (``from .utils import pool``), and did not load."""
    files = {
        "config.json": json.dumps(
            {
                "auto_map": {"AutoModel": "modeling_x.XModel", "AutoConfig": "configuration_x.XConfig"},
                "custom_pipelines": {"x-task": {"impl": "pipeline_x.XPipeline", "pt": ["AutoModel"]}},
            }
        ),
        "model.safetensors": "",
        "configuration_x.py": "class XConfig: ...\n",
        "modeling_x.py": "from .configuration_x import XConfig\nfrom .utils import pool\n",
        "utils.py": "from .deeper import helper\n",
        "deeper.py": "def helper(): ...\n",
        "pipeline_x.py": "from .pipeline_helpers import ready\n",
        "pipeline_helpers.py": "ready = True\n",
        "unrelated.py": "x = 1\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    sent = upload_file_list(tmp_path)
    assert sorted(f for f in sent if f.endswith(".py")) == [
        "configuration_x.py",
        "deeper.py",
        "modeling_x.py",
        "pipeline_helpers.py",
        "pipeline_x.py",
        "utils.py",
    ]


@pytest.fixture
def fake_hub(monkeypatch):
    """HfApi's create_repo, create_branch and create_commit recorded: (call, arguments, committed files)."""
    from huggingface_hub import HfApi

    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", repo_id, kwargs))
        return type("Repo", (), {"repo_id": repo_id})()

    def create_branch(self, repo_id, branch, **kwargs):
        calls.append(("create_branch", repo_id, {"branch": branch, **kwargs}))

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj for op in operations}
        calls.append(
            (
                "create_commit",
                repo_id,
                {**kwargs, "files": {n: open(p, "rb").read() for n, p in files.items()}},
            )
        )
        return type("Commit", (), {"commit_url": "", "oid": "", "pr_url": None})()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return calls


def test_save_pretrained_push_uploads_the_folder_it_saved(tmp_path, fake_hub):
    """It pushed another save (into a temporary folder, max_shard_size only): the Hub got the model's own weights
    instead of ``state_dict`` (merged or averaged weights), under model.safetensors instead of ``variant``."""
    from safetensors.torch import load

    model = AutoModelForMaskedLM.from_config(tiny_config())
    zeros = {name: torch.zeros_like(t) for name, t in model.state_dict().items()}
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "README.md").write_text("my card\n")
    model.save_pretrained(tmp_path / "out", push_to_hub=True, repo_id="user/tiny", token="hf_x", state_dict=zeros,
                          variant="v1", private=True, revision="dev", create_pr=True, commit_message="m")  # fmt: skip
    [repo, branch, commit] = fake_hub
    assert (
        repo[:2] == ("create_repo", "user/tiny") and repo[2]["private"] is True and repo[2]["token"] == "hf_x"
    )
    assert branch[:2] == ("create_branch", "user/tiny") and branch[2]["branch"] == "dev"
    sent = commit[2].pop("files")
    assert commit[2] == {
        "commit_message": "m",
        "commit_description": None,
        "token": "hf_x",
        "create_pr": True,
        "revision": "dev",
    }
    assert sorted(sent) == sorted(
        p.name for p in (tmp_path / "out").iterdir()
    )  # what was saved, card included
    assert "model.v1.safetensors" in sent and "model.safetensors" not in sent
    assert all(not t.any() for t in load(sent["model.v1.safetensors"]).values())
    assert all(not t.any() for t in load_file(tmp_path / "out" / "model.v1.safetensors").values())
    assert sent["README.md"] == b"my card\n" and "hf_sparse_bundle.json" in sent
    assert json.loads(sent["config.json"])["auto_map"]["AutoModelForMaskedLM"]
