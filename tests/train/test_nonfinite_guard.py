"""The non-finite guard without a host sync per step: a step whose loss or gradient norm is
not finite makes the optimizer step a no-op on the device, and the run stops at the next read
of the device (a log, an evaluation, a save or the end) with exit status 1, its weights those
from before that step."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from torch import nn

from formers import cli
from formers.errors import FormersError
from formers.train import startup
from formers.train.checkpoint import latest_checkpoint, load_checkpoint
from formers.train.config import TrainConfig
from formers.train.optim import make_optimizer, step_unless
from formers.train.step import compiled


def test_a_finite_loss_with_an_infinite_gradient_stops_the_run_before_the_step(
    tmp_path, monkeypatch, capsys
):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    models, passes = [], []
    build = startup.build

    def overflowing(cfg):  # the third backward pass overflows one gradient; no loss does
        model = build(cfg)
        passes.clear()

        def overflow(grad):
            passes.append(True)
            return torch.full_like(grad, math.inf) if len(passes) == 3 else grad

        next(model.parameters()).register_hook(overflow)
        models.append(model)
        return model

    monkeypatch.setattr(startup, "build", overflowing)
    run = tmp_path / "run"
    flags = {
        "model.n_layers": 1, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
        "train.batch_size": 2, "train.seq_len": 16, "train.eval_every": 0,
        "train.precision": "fp32", "train.warmup_steps": 1, "train.max_steps": 8,
        # reads at steps 1 (a log), 2 and 4 (saves): step 3 is found at step 4's read
        "train.log_every": 5, "train.save_every": 2,
    }  # fmt: skip
    args = [f for key, value in flags.items() for f in (f"--{key}", str(value))]
    code = cli.main(["train", "--run-dir", str(run), "--train.corpus", str(corpus), *args,
                     "--no-progress"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1, out.err[-2000:]
    summary = json.loads(out.out)
    divergence = summary["divergence"]
    assert summary["stopped"] == "nonfinite" and summary["step"] == 2
    assert divergence["step"] == 3 and math.isfinite(divergence["loss"])
    assert divergence["grad_norm"] is None  # infinite, written as JSON null
    assert "training diverged: step 3" in out.err
    reloaded = build(models[0].cfg)
    saved = load_checkpoint(latest_checkpoint(run), model=reloaded, restore_rng=False)
    assert saved.state.step == 2  # nothing saved after it
    for (name, trained), (_, kept) in zip(
        models[0].named_parameters(), reloaded.named_parameters(), strict=True
    ):
        assert torch.isfinite(trained).all(), name
        assert torch.equal(trained, kept), name  # steps 3 and 4 changed no weight


@pytest.mark.parametrize("optimizer", ["adamw", "adam_paper", "sgd"])
def test_a_skipped_step_leaves_the_weights_and_the_optimizer_state_as_they_were(optimizer):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3))
    opt = make_optimizer(model, TrainConfig(optimizer=optimizer, lr=0.1))

    def backward():
        opt.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()

    backward()
    step_unless(opt, torch.tensor(False))  # a first step: the state exists
    weights = copy.deepcopy(model.state_dict())
    state = copy.deepcopy(opt.state_dict()["state"])
    backward()
    step_unless(opt, torch.tensor(True))
    for name, value in model.state_dict().items():
        assert torch.equal(value, weights[name]), name
    for index, entries in opt.state_dict()["state"].items():
        for key, value in entries.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(state[index][key])), key
    step_unless(opt, torch.tensor(False))
    assert not torch.equal(model.state_dict()["0.weight"], weights["0.weight"])


def test_a_training_loss_that_does_not_compile_as_one_graph_is_refused_in_one_line():
    def loss(batch, memory):  # code that splits the graph, as a read of a value would
        torch._dynamo.graph_break()
        return batch.sum(), None

    with pytest.raises(FormersError) as error:
        compiled(loss)(torch.ones(3), None)
    assert "set train.compile false" in str(error.value) and "\n" not in str(error.value)
