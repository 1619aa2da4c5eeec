"""Checkpoint averaging: the new run holds the element-wise mean of the last N checkpoints."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_checksummed, tiny_config

import formers
from formers.errors import FormersError
from formers.run import load_run
from formers.train.checkpoint import TrainState, save_checkpoint
from formers.train.checkpoint.average import average_checkpoints
from formers.train.config import RunConfig


def write_run(run_dir, n: int) -> list[dict[str, torch.Tensor]]:
    """A translation run with n checkpoints of random weights; their state dicts, oldest first."""
    cfg = RunConfig(preset="transformer", model=tiny_config("transformer"))
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict()))
    (run_dir / "tokenizer.json").write_text(json.dumps({"unit": "byte"}))
    states = []
    for i in range(n):
        torch.manual_seed(i)
        model = formers.build(cfg.model)
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        state = TrainState(step=10 * (i + 1), tokens_seen=100 * (i + 1))
        save_checkpoint(
            run_dir, model=model, optimizer=None, config=cfg.to_dict(), state=state, keep=None
        )
    return states


def test_the_average_run_holds_the_mean_of_the_last_n(tmp_path):
    states = write_run(tmp_path / "run", 4)
    out = average_checkpoints(tmp_path / "run", last=3)
    assert out == tmp_path / "run-avg3"
    run = load_run(out)
    assert run.step == 40
    averaged = run.model.state_dict()
    for name, value in averaged.items():
        expected = sum(s[name].double() for s in states[1:]) / 3  # float64 reference
        torch.testing.assert_close(value.double(), expected, rtol=0, atol=1e-7)
    assert not torch.equal(
        averaged["encoder.0.ffn.up.weight"], states[-1]["encoder.0.ffn.up.weight"]
    )
    # the shared embedding is still one matrix
    assert run.model.lm_head.weight is run.model.src_embed.token.weight
    assert (out / "tokenizer.json").read_text() == (tmp_path / "run" / "tokenizer.json").read_text()


def test_averaging_one_checkpoint_copies_it(tmp_path):
    states = write_run(tmp_path / "run", 2)
    run = load_run(average_checkpoints(tmp_path / "run", last=1, out=tmp_path / "one"))
    assert_checksummed(tmp_path / "one" / "checkpoints" / "step_000020")
    for name, value in run.model.state_dict().items():
        assert torch.equal(value, states[-1][name])


def test_too_few_checkpoints_names_the_fix(tmp_path):
    write_run(tmp_path / "run", 2)
    with pytest.raises(
        FormersError,
        match=r"holds 2 checkpoint\(s\), fewer than the last 5 asked for.*"
        r"keep_checkpoints 5",
    ):
        average_checkpoints(tmp_path / "run", last=5)


def test_the_average_never_overwrites_the_run(tmp_path):
    write_run(tmp_path / "run", 2)
    with pytest.raises(FormersError, match="is the run itself"):
        average_checkpoints(tmp_path / "run", last=2, out=tmp_path / "run")
    # nor the folder that holds it, which replacing would delete with the run
    with pytest.raises(FormersError, match="or holds it"):
        average_checkpoints(tmp_path / "run", last=2, out=tmp_path, replace=True)
    assert (tmp_path / "run" / "checkpoints").is_dir()
