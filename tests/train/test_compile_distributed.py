"""`train.compile` under DDP and FSDP: their forward (DDP's buckets, FSDP2's gather and free
hooks) does not trace as one graph, so the trainer compiles the wrapped model as torch supports
it. In this process (gloo, one process: fast) the compiled loss and gradients equal eager's;
under torchrun (two CPU processes, slow) the run trains as one eager process does on the
combined batch (tests/train/test_ddp.py's setup)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import run_steps, tiny_training_config, two_batches
from test_ddp import cli_args

import formers
from formers.errors import FormersError
from formers.train import distributed, fsdp
from formers.train.metrics import read_metrics
from formers.train.step import compiled_training_loss, training_loss
from formers.train.tasks import task_for

WORKER = Path(__file__).with_name("compile_worker.py")
ROOT = Path(__file__).parents[2]  # the worker is a script: formers from this tree
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_compiled_two_process_run_trains_as_one_eager_process(strategy, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"row {i} of text, value {i * i % 97}\n" for i in range(600)))
    flags = dict(check=False, capture_output=True, text=True, timeout=300)
    three = ["--train.max_steps", "3"]  # a step after the first two: compile seconds said
    single = subprocess.run(
        [sys.executable, "-m", "formers", *cli_args(corpus, tmp_path / "one", 4), *three], **flags
    )
    assert single.returncode == 0, single.stderr
    compiled = [*cli_args(corpus, tmp_path / "two", 2), *three, "--train.compile", "true",
                "--train.distributed", strategy]  # fmt: skip
    paths = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": paths}
    launched = subprocess.run([*TORCHRUN, str(WORKER), *compiled], env=env, **flags)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert "train.compile: the first steps took" in launched.stderr
    want, got = (read_metrics(tmp_path / run, "train") for run in ("one", "two"))
    assert [r["tokens"] for r in got] == [r["tokens"] for r in want] == [64, 128, 192]
    for a, b in zip(want, got, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    assert "compile_seconds" not in got[1] and "compile_seconds" in got[2]


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, torch.distributed.tensor.DTensor) else tensor


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_compiled_loss_of_a_wrapped_model_equals_eagers(strategy, tmp_path, monkeypatch):
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend="eager", **kw))
    torch._dynamo.reset()
    task = task_for(tiny_training_config("transformer-xl", tmp_path, n_layers=1))
    torch.manual_seed(0)
    eager = formers.build(task.cfg.model).train()
    model = formers.build(task.cfg.model).train()
    model.load_state_dict(eager.state_dict())
    batches, coef = two_batches(task), task.cfg.train.aux_loss_coef
    want = run_steps(eager, training_loss(task, eager, coef), batches)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        env = distributed.Distributed(0, 2, 0, torch.device("cpu"))  # as if two: wrap for real
        if strategy == "fsdp":
            wrapped = fsdp.shard(model, 1, env.device, "fp32")
        else:
            wrapped = distributed.wrap(model, env, "ddp")
        loss_fn = compiled_training_loss(task, wrapped, coef, wrapped=True)
        got = run_steps(model, loss_fn, batches)
    finally:
        dist.destroy_process_group()
        fsdp.forget_meshes()
    for (loss, grads, _), (want_loss, want_grads, _) in zip(got, want, strict=True):
        torch.testing.assert_close(loss, want_loss, atol=1e-6, rtol=1e-6)
        names = {name.removeprefix("module."): grad for name, grad in grads.items()}
        assert names.keys() == want_grads.keys()
        for name, grad in names.items():
            torch.testing.assert_close(full(grad), want_grads[name], atol=1e-6, rtol=1e-5)


def test_a_compiler_failure_on_a_wrapped_model_is_said_in_one_line(tmp_path, monkeypatch):
    # under torchrun the wrapped model is compiled, not the loss: its compiler's failure is said
    # as the single-process run's is (test_compiled_step.py), not as dynamo's traceback
    def broken(graph, inputs):
        raise RuntimeError("no kernel for this op")

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=broken, **kw))
    torch._dynamo.reset()
    task = task_for(tiny_training_config("vanilla", tmp_path, n_layers=1))
    model = formers.build(task.cfg.model).train()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)  # fmt: skip
    try:
        env = distributed.Distributed(0, 2, 0, torch.device("cpu"))  # as if two: wrap for real
        wrapped = distributed.wrap(model, env, "ddp")
        loss_fn = compiled_training_loss(task, wrapped, task.cfg.train.aux_loss_coef, wrapped=True)
        batch = two_batches(task)[0]
        with pytest.raises(FormersError, match=r"the compiler failed .*no kernel.*compile false"):
            loss_fn(batch, None)
    finally:
        dist.destroy_process_group()
        torch._dynamo.reset()
