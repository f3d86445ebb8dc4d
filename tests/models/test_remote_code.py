"""A saved SparseTransformer folder loads with ``trust_remote_code`` where hf_sparse cannot be imported."""

import json
import os
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

from hf_sparse import patterns as P
from tests.models.tiny import tiny_config, tiny_decoder_config

BLOCK = "import sys; sys.modules['hf_sparse'] = None; sys.dont_write_bytecode = True\n"
LOAD = """
import json, torch, transformers
try:
    import hf_sparse
except ImportError:
    print("hf_sparse unavailable")
d = torch.load({inputs!r})
model = getattr(transformers, {auto!r}).from_pretrained({folder!r}, trust_remote_code=True).eval()
with torch.no_grad():
    out = model(**d).logits
torch.save(out, {result!r})
print(type(model).__module__)
"""


def _run_without_the_package(script: str, tmp_path, modules: str = "modules") -> subprocess.CompletedProcess:
    """Run ``script`` (which starts with ``BLOCK``) in a fresh interpreter with its own remote-code module cache
    (``tmp_path / modules``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_MODULES_CACHE"] = str(tmp_path / modules)
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240
    )
    assert res.returncode == 0, res.stderr
    return res


@pytest.mark.parametrize(
    "auto,pattern,extra",
    [
        (AutoModelForMaskedLM, P.Longformer(window=8) | P.Strided(stride=8, causal=False), {}),
        (AutoModelForSequenceClassification, P.BigBird(block=8, seed=3), {}),
        (
            AutoModelForMaskedLM,
            P.SlidingWindow(window=30),
            {"adaptive_span": {"max_span": 12, "ramp": 4, "init": 5}},
        ),
    ],
    ids=["longformer_strided", "bigbird", "adaptive_span"],
)
def test_saved_folder_loads_without_the_package(auto, pattern, extra, tmp_path):
    model = auto.from_config(tiny_config(attention_pattern=pattern, **extra)).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"][auto.__name__] == f"modeling_sparse_transformer.{type(model).__name__}"
    assert (folder / "modeling_sparse_transformer.py").is_file() and (folder / "patterns_base.py").is_file()

    ids = torch.randint(2, 97, (2, 45), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 45, dtype=torch.long)
    mask[1, 40:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.save(inputs, tmp_path / "inputs.pt")
    script = BLOCK + LOAD.format(
        inputs=str(tmp_path / "inputs.pt"),
        auto=auto.__name__,
        folder=str(folder),
        result=str(tmp_path / "out.pt"),
    )
    res = _run_without_the_package(script, tmp_path)
    assert "hf_sparse unavailable" in res.stdout
    assert "transformers_modules" in res.stdout  # the bundled code, not the package
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), expected, rtol=0, atol=1e-6)


GENERATE = """
import torch, transformers
d = torch.load({inputs!r})
model = transformers.AutoModelForCausalLM.from_pretrained({folder!r}, trust_remote_code=True).eval()
kw = dict(attention_mask=torch.ones_like(d), max_new_tokens=16, do_sample=False, pad_token_id=0, eos_token_id=0)
torch.save([model.generate(d, **kw), model.generate(d, prompt_lookup_num_tokens=3, **kw)], {result!r})
print(type(model).__module__)
"""


def test_saved_decoder_generates_without_the_package_and_without_warnings(tmp_path):
    torch.manual_seed(0)
    cfg = tiny_decoder_config(P.SlidingWindow(window=6, causal=True), hidden_size=64, initializer_range=0.3)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    model.save_pretrained(tmp_path / "model")
    ids = torch.randint(1, 97, (1, 10), generator=torch.Generator().manual_seed(0)).repeat(1, 2)
    kw = dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=16,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=0,
    )
    expected = model.generate(ids, **kw)
    torch.save(ids, tmp_path / "inputs.pt")
    script = BLOCK + GENERATE.format(
        inputs=str(tmp_path / "inputs.pt"), folder=str(tmp_path / "model"), result=str(tmp_path / "out.pt")
    )
    res = _run_without_the_package(script, tmp_path)
    assert "transformers_modules" in res.stdout
    plain, lookup = torch.load(tmp_path / "out.pt")
    assert torch.equal(plain, expected) and torch.equal(lookup, expected)
    said = [line for line in res.stderr.splitlines() if "Loading weights" not in line and line.strip()]
    assert not said, said  # e.g. 5.24's "The remote code model ... seems to expect `cache_position`"


@pytest.mark.parametrize("kind", ["sparse_transformer", "motif"])
def test_save_pretrained_with_push_to_hub_uploads_the_remote_code(kind, tmp_path, monkeypatch):
    """``save_pretrained(push_to_hub=True)`` uploads the folder with its code and ``auto_map``, as ``push_to_hub``
    does (transformers' own upload ran before the code was written: a Hub copy that could not load)."""
    from huggingface_hub import HfApi

    from tests.models.motif_tiny import motif_model

    uploads = []

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: op.path_or_fileobj for op in operations}
        with open(files["config.json"], encoding="utf-8") as f:
            uploads.append((repo_id, sorted(files), json.load(f).get("auto_map")))
        return type("Commit", (), {"commit_url": "", "oid": "", "pr_url": None})()

    monkeypatch.setattr(
        HfApi, "create_repo", lambda self, repo_id, **kw: type("Repo", (), {"repo_id": repo_id})()
    )
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    model = AutoModelForMaskedLM.from_config(tiny_config()) if kind == "sparse_transformer" else motif_model()
    model.save_pretrained(
        tmp_path / "local", push_to_hub=True, repo_id="user/tiny", token="hf_x", commit_message="m"
    )
    [(repo_id, files, auto_map)] = uploads
    local = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert repo_id == "user/tiny" and auto_map and "hf_sparse_bundle.json" in files
    assert set(local) <= set(files) and sum(f.endswith(".py") for f in files) > 10


RESAVE = """
import json, shutil, warnings, transformers
for name in ("motif", "dialogue", "orphan"):
    model = transformers.AutoModel.from_pretrained({root!r} + "/" + name, trust_remote_code=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained({root!r} + "/" + name, trust_remote_code=True)
    if name == "orphan":  # the folder it came from is gone: the pipeline code cannot be found
        shutil.rmtree({root!r} + "/" + name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.save_pretrained({root!r} + "/" + name + "_resaved")
    tokenizer.save_pretrained({root!r} + "/" + name + "_resaved")
    print(json.dumps([name, [str(w.message) for w in caught if "custom_pipelines" in str(w.message)]]))
"""
RESAVED_PIPELINES = """
import json, transformers
try:
    import hf_sparse
except ImportError:
    print("hf_sparse unavailable")
out = {{}}
for task, name, inputs in json.loads({calls!r}):
    pipe = transformers.pipeline(task, model={root!r} + "/" + name + "_resaved", trust_remote_code=True)
    out[task] = [type(pipe).__module__, pipe(inputs)]
print(json.dumps(out))
"""


def test_a_remote_code_model_resaves_with_its_pipeline_code(tmp_path):
    """Download, fine-tune, push: a model loaded with ``trust_remote_code`` where hf_sparse cannot be imported
    re-saves the whole bundle (transformers alone writes the model's modules, not the pipeline modules that
    ``custom_pipelines`` names), so ``pipeline(task, model=resaved)`` gives the original's outputs. Where the
    bundle's files cannot be found, the re-saved config drops ``custom_pipelines`` with a warning."""
    from transformers import pipeline

    from hf_sparse.tokenization_dna import DNATokenizer
    from tests.models.dialogue_tiny import tiny_model, tokenizer_and_formatter
    from tests.models.motif_tiny import motif_model
    from tests.pipelines.outputs import assert_same_outputs

    torch.manual_seed(0)
    for name in ("motif", "orphan"):
        motif_model("sparse_transformer").save_pretrained(tmp_path / name)
        DNATokenizer().save_pretrained(tmp_path / name)
    tokenizer, formatter = tokenizer_and_formatter(max_length=40)
    tiny_model(tokenizer, formatter, selection_head=True, act_labels=["INFORM", "REQUEST"], intent_labels=["NONE"]
               ).save_pretrained(tmp_path / "dialogue")  # fmt: skip
    tokenizer.save_pretrained(tmp_path / "dialogue")
    history = ["find me a restaurant please", "which city ?", "in paris"]
    calls = [
        ("dna-motif-detection", "motif", "ACGTTGCAACGTAGGCTTACGATCGA"),
        ("dialogue-state-tracking", "dialogue", {"turns": history}),
        (
            "dialogue-response-selection",
            "dialogue",
            {"turns": history, "candidates": ["ok", "in rome", "bye"]},
        ),
    ]
    expected = {
        task: pipeline(task, model=str(tmp_path / name), trust_remote_code=True)(inputs)
        for task, name, inputs in calls
    }

    res = _run_without_the_package(BLOCK + RESAVE.format(root=str(tmp_path)), tmp_path, "modules_resave")
    warned = dict(json.loads(line) for line in res.stdout.splitlines() if line.startswith("["))
    assert warned["motif"] == warned["dialogue"] == [], warned
    for name in ("motif", "dialogue"):
        original, resaved = tmp_path / name, tmp_path / f"{name}_resaved"
        code = sorted(
            p.name for p in original.iterdir() if p.suffix == ".py" or p.name == "hf_sparse_bundle.json"
        )
        assert sorted(p.name for p in resaved.iterdir() if p.name in code or p.suffix == ".py") == code
        for file in code:  # the same code: byte for byte
            assert (resaved / file).read_bytes() == (original / file).read_bytes(), file
        configs = [json.loads((folder / "config.json").read_text()) for folder in (original, resaved)]
        assert configs[1]["custom_pipelines"] == configs[0]["custom_pipelines"]
        assert configs[1]["auto_map"] == configs[0]["auto_map"]
    script = BLOCK + RESAVED_PIPELINES.format(root=str(tmp_path), calls=json.dumps(calls))
    res = _run_without_the_package(script, tmp_path, "modules_pipelines")
    lines = res.stdout.strip().splitlines()
    assert lines[0] == "hf_sparse unavailable"
    got = json.loads(lines[-1])
    for task, _, _ in calls:
        module, out = got[task]
        assert module.startswith("transformers_modules.") and "_resaved" in module, module
        assert_same_outputs(out, expected[task])
    [orphan] = warned["orphan"]
    assert "saved without custom_pipelines" in orphan and "hf_sparse_bundle.json" in orphan
    orphan_config = json.loads((tmp_path / "orphan_resaved" / "config.json").read_text())
    assert "custom_pipelines" not in orphan_config and orphan_config["auto_map"]


def test_bundle_rewrites_the_saved_config_atomically(tmp_path):
    """The config rewrite after ``save_pretrained`` (here: ``custom_pipelines`` dropped, as the bundle's files
    cannot be found) replaces config.json with a new file, never rewrites it in place (an interrupted save left a
    truncated config.json), keeps the umask's mode and leaves no temporary file."""
    from tests.models.motif_tiny import motif_model

    model = motif_model("sparse_transformer")
    model.save_pretrained(tmp_path)
    config_file = tmp_path / "config.json"
    assert "custom_pipelines" in json.loads(config_file.read_text())
    before, mode = os.stat(config_file).st_ino, os.stat(config_file).st_mode
    (tmp_path / "hf_sparse_bundle.json").unlink()  # where the bundle's manifest would be found
    with pytest.warns(UserWarning, match="saved without custom_pipelines"):
        model._copy_bundle(tmp_path)
    assert "custom_pipelines" not in json.loads(config_file.read_text())
    assert os.stat(config_file).st_ino != before and os.stat(config_file).st_mode == mode
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("package_registered", [True, False], ids=["package_installed", "bundles_only"])
def test_each_bundle_runs_its_own_attention_code(package_registered, tmp_path, monkeypatch):
    """Two remote-code models in one process (two Hub repos, possibly saved by different hf-sparse versions): each
    runs its own bundle's attention functions, whichever copy holds "hf_sparse" (the installed package's, or,
    without the package, the last bundle's). Bundle B stands in for another version: its kernel returns zeros."""
    from transformers import AttentionInterface
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from transformers.masking_utils import AttentionMaskInterface

    from hf_sparse.attention.integration import sparse_attention_forward

    models = {
        "a": AutoModelForMaskedLM.from_config(tiny_config(attention_pattern=P.SlidingWindow(window=6))),
        "b": AutoModelForCausalLM.from_config(tiny_decoder_config(P.Strided(stride=4, causal=True))),
    }
    ids = torch.randint(2, 97, (1, 24), generator=torch.Generator().manual_seed(0))
    # folders named apart: transformers names a folder's modules by its name and code, imported once per process
    folder = {name: tmp_path / f"{name}_{'package' if package_registered else 'bundles'}" for name in models}
    expected = {}
    for name, model in models.items():
        model.eval().save_pretrained(folder[name])
        with torch.no_grad():
            expected[name] = model(ids).logits
    other_version = folder["b"] / "attention_integration.py"
    source = other_version.read_text()
    assert "\ndef sparse_attention_forward(" in source
    other_version.write_text(
        source.replace("\ndef sparse_attention_forward(", "\ndef _sparse_attention_forward(", 1)
        + "\n\ndef sparse_attention_forward(*args, **kwargs):\n"
        + "    out, weights = _sparse_attention_forward(*args, **kwargs)\n"
        + "    return out * 0.0, weights\n"
    )
    for interface in (AttentionInterface, AttentionMaskInterface):  # restored after the test
        mapping = dict(interface._global_mapping)
        if not package_registered:  # as in a process where hf_sparse is not installed
            del mapping["hf_sparse"]
        monkeypatch.setattr(interface, "_global_mapping", mapping)
    remote = {}
    for name, auto in (("a", "AutoModelForMaskedLM"), ("b", "AutoModelForCausalLM")):
        auto_map = json.loads((folder[name] / "config.json").read_text())["auto_map"]
        try:
            cls = get_class_from_dynamic_module(auto_map[auto], str(folder[name]))
        except FileNotFoundError as e:  # transformers 5.0 copies the bundle's sibling modules differently
            pytest.skip(f"this transformers cannot import the remote-code bundle in-process: {e}")
        remote[name] = cls.from_pretrained(folder[name]).eval()
        assert type(remote[name]).__module__.startswith("transformers_modules.")
    with torch.no_grad():
        got = {name: model(ids).logits for name, model in remote.items()}
    torch.testing.assert_close(got["a"], expected["a"], rtol=0, atol=1e-6)  # not B's kernel
    assert not torch.allclose(got["b"], expected["b"], atol=1e-3)  # B's own (other version's) kernel
    if package_registered:  # stock models (attn_implementation="hf_sparse") keep the package's functions
        assert AttentionInterface._global_mapping["hf_sparse"] is sparse_attention_forward
