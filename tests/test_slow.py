"""Slow tests (`bash scripts/test.sh -m slow`): real training that takes minutes, and the demo."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from formers.data import CORPORA
from formers.train import trainer
from formers.train.config import run_config

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not CORPORA["tinyshakespeare"].present(), reason="Tiny Shakespeare absent")
def test_a_small_model_learns_tiny_shakespeare(tmp_path):
    cfg = run_config(
        "vanilla",
        {
            "model.n_layers": 2,
            "model.d_model": 64,
            "model.n_heads": 4,
            "model.d_ff": 256,
            "model.dropout": 0.0,
            "train.corpus": "tinyshakespeare",
            "train.batch_size": 16,
            "train.seq_len": 64,
            "train.max_steps": 300,
            "train.lr": 3e-3,
            "train.eval_every": 0,
            "train.precision": "fp32",
        },
    )
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.valid.loss < 2.6  # nats per character; a uniform guess is ln 65 = 4.17


def test_the_demo_runs_end_to_end():
    # a step budget: the same evaluations and schedule on any machine, however busy
    env = {**os.environ, "FORMERS_DEMO_STEPS": "40"}
    result = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # the periodic evaluations, then the final one (the whole split) at step 40
    assert re.findall(r"step (\d+): valid loss", result.stderr) == ["10", "20", "30", "40"]
    assert "stopped at step 40: reached max_steps" in result.stderr
    final = json.loads(result.stdout.split("== test split ==")[0])
    assert final["step"] == 40 and final["valid"]["loss"] > 0
    sample = result.stdout.split("== sample ==\n")[1]
    assert sample.startswith("    def __init__(self, ") and len(sample) > 100


@pytest.mark.skipif(
    not (CORPORA["wikitext-2-bytes"].present() and CORPORA["tinyshakespeare"].present()),
    reason="WikiText-2 or Tiny Shakespeare absent",
)
def test_the_pretrained_worked_example_runs_end_to_end(tmp_path):
    # docs/pretrained.md's example, shortened: pretrain, export, import, eval, fine-tune, export
    exe = sys.executable
    env = {
        **os.environ,
        "PRETRAIN_STEPS": "10",
        "FINETUNE_STEPS": "20",
        "FORMERS": f"{exe} -m formers",
        "PYTHON": exe,
    }
    result = subprocess.run(
        ["bash", "scripts/pretrained_example.sh", str(tmp_path / "example")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    own, imported = re.search(
        r"WikiText-2 valid loss: (\S+) of the pretraining run, (\S+) of its import", result.stdout
    ).groups()
    assert own == imported  # the exported and re-imported weights score as the originals
    before = float(re.search(r"imported: valid loss (\S+)", result.stdout).group(1))
    after = float(re.search(r"fine-tuned: valid loss (\S+)", result.stdout).group(1))
    assert after < before
    gap = re.search(r"largest logit difference (\S+)", result.stdout)
    assert gap is None or float(gap.group(1)) < 1e-4
