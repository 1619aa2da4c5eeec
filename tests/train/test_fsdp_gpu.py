"""FSDP on CUDA: NCCL, bf16 through FSDP's MixedPrecisionPolicy (no autocast), fp32 shards and
gradient reduction, sharded checkpoints on the GPU. Marked `gpu`: run with `-m gpu` on a CUDA
machine (they skip without one; the two-process test needs two GPUs)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from contextlib import nullcontext

import pytest
import torch
import torch.distributed as dist
from helpers import random_tokens, tiny_config
from test_fsdp import TORCHRUN, losses, model_args, train_args, weights

from formers.models import build
from formers.train import fsdp
from formers.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from formers.train.precision import autocast_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda", 0)
V = 50


def full_state(model):
    return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}


def test_fsdp_on_a_gpu_computes_in_bf16_and_keeps_fp32_shards(tmp_path):
    dist.init_process_group(
        "nccl", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        torch.cuda.set_device(CUDA)
        torch.manual_seed(0)
        plain = build(tiny_config("transformer-xl")).to(CUDA)
        sharded = fsdp.shard(copy.deepcopy(plain), 1, CUDA, "bf16")
        assert isinstance(autocast_for("bf16", CUDA, sharded=True), nullcontext)
        tokens = random_tokens(2, 16, V).to(CUDA)
        out = sharded(tokens)
        assert out.logits.dtype == torch.bfloat16  # computed in bf16 by the policy alone
        with torch.autocast("cuda", dtype=torch.bfloat16):
            reference = plain(tokens).logits.float()
        torch.testing.assert_close(out.logits.float(), reference, atol=5e-2, rtol=5e-2)
        out.logits.float().square().mean().backward()
        optimizer = torch.optim.AdamW(sharded.parameters(), lr=1e-3)
        for param in sharded.parameters():  # fp32 shards, fp32 gradients (reduce_dtype)
            assert param.dtype == torch.float32 and param.grad.dtype == torch.float32
        optimizer.step()
        path = save_checkpoint(
            tmp_path / "run", model=sharded, optimizer=optimizer, config={},
            state=TrainState(1), memory=out.memory,
        )  # fmt: skip
        torch.manual_seed(1)
        again = fsdp.shard(build(tiny_config("transformer-xl")).to(CUDA), 1, CUDA, "bf16")
        again_optimizer = torch.optim.AdamW(again.parameters(), lr=1e-3)
        loaded = load_checkpoint(path, model=again, optimizer=again_optimizer, map_location=CUDA)
        got, want = full_state(again), full_state(sharded)
        assert all(torch.equal(got[k], v) for k, v in want.items())
        assert loaded.memory[0].device.type == "cuda"
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_gpus_take_one_gpus_step_and_resume_exactly_in_bf16(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"row {i} of text, value {i * i % 97}\n" for i in range(600)))
    args = model_args("transformer-xl") + train_args(corpus, device="cuda")

    def run(launcher, run_dir, *extra):
        command = [*launcher, "-m", "formers", "train", "--no-progress", "--run-dir", str(run_dir)]
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    run(
        [sys.executable],
        tmp_path / "one",
        *args,
        "--train.batch_size",
        "4",
        "--train.max_steps",
        "2",
    )
    fsdp_args = [*args, "--train.batch_size", "2", "--train.distributed", "fsdp"]
    run(TORCHRUN, tmp_path / "two", *fsdp_args, "--train.max_steps", "2")
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=1e-4, rtol=1e-4)
    # bf16 by policy: a run stopped and resumed logs what a straight one does
    bf16 = [*fsdp_args, "--train.precision", "bf16"]
    run(TORCHRUN, tmp_path / "straight", *bf16, "--train.max_steps", "4")
    run(TORCHRUN, tmp_path / "resumed", *bf16, "--train.max_steps", "2")
    run(TORCHRUN, tmp_path / "resumed", "--resume", "--train.max_steps", "4")
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")
    manifest = tmp_path / "resumed/checkpoints/step_000004/manifest.json"
    assert json.loads(manifest.read_text())["layout"] == "sharded"
