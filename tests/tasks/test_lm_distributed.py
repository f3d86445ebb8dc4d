"""The causal-lm task's ``lm_metrics`` under ``accelerate launch`` with two CPU processes: every rank reports
the perplexity of every block, as one process does (not of its own shard)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hf_sparse.models.sparse_transformer import SparseTransformerForCausalLM
from tests.models.tiny import tiny_decoder_config
from tests.training.helpers import REPO_ROOT, subprocess_env

WORKER = Path(__file__).resolve().parent / "lm_metrics_worker.py"


# ~18 s on 2 busy cores (launcher + two workers importing torch/transformers/hf_sparse), as
# tests/training/test_ddp.py: under the 30 s line for the `slow` marker.
def test_lm_metrics_under_two_process_ddp_cover_every_block_once(tmp_path):
    model = SparseTransformerForCausalLM(tiny_decoder_config({"type": "causal"})).eval()
    model.save_pretrained(tmp_path / "model")
    # 5 blocks in batches of 2 per process: the last batches repeat blocks to even out the two shards, and the
    # repeats must not count twice
    blocks = torch.randint(2, 97, (5, 12), generator=torch.Generator().manual_seed(0))
    (tmp_path / "blocks.json").write_text(json.dumps(blocks.tolist()))
    with torch.no_grad():
        logits = model(input_ids=blocks).logits[:, :-1]
    expected = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), blocks[:, 1:].reshape(-1)
    )

    accelerate = Path(sys.executable).parent / "accelerate"
    cmd = [
        str(accelerate), "launch", "--config_file", str(REPO_ROOT / "configs" / "accelerate" / "cpu_ddp.yaml"),
        str(WORKER), str(tmp_path / "model"), str(tmp_path / "blocks.json"), str(tmp_path),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    for result in results:
        assert result["world_size"] == 2
        assert result["eval_lm_loss"] == pytest.approx(expected.item(), rel=1e-6)
        assert result["eval_perplexity"] == pytest.approx(expected.exp().item(), rel=1e-6)
