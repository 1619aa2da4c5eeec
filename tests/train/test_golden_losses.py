"""Golden losses: the first training losses of fixed tiny CPU runs, compared exactly.

A change that should not touch the numerics (a refactor, a new variant beside the old ones) must
reproduce them bit for bit, as torchtitan's golden loss curves do. To record them again after a
change that is meant to alter the numerics:

    FORMERS_WRITE_GOLDEN=1 python -m pytest tests/train/test_golden_losses.py

Floating-point kernels differ between CPU instruction sets, so the file records the one it was
written on; elsewhere the losses must agree to 1e-5 relative instead of exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import read_metrics

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "losses.json"
PRESETS = ("vanilla", "transformer-xl", "primer-ez")
STEPS = 20


def corpus(tmp_path: Path) -> Path:
    """~20 KB of deterministic text (no dependency on the Python installation's files)."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    lines = [
        " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(i % 9 + 3)) + f" {i % 97}\n"
        for i in range(600)
    ]
    path = tmp_path / "golden.txt"
    path.write_text("".join(lines))
    return path


def losses(preset: str, tmp_path: Path) -> list[float]:
    """The first STEPS training losses of a tiny fp32 run of `preset`, on one thread."""
    cfg = run_config(
        preset,
        {
            "model.n_layers": 2,
            "model.d_model": 32,
            "model.n_heads": 4,
            "model.d_ff": 64,
            "model.dropout": 0.1,
            "train.corpus": str(corpus(tmp_path)),
            "train.batch_size": 4,
            "train.seq_len": 32,
            "train.max_steps": STEPS,
            "train.warmup_steps": 5,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.eval_tokens": 64,
            "train.save_every": 0,
            "train.precision": "fp32",
            "train.seed": 1234,
        },
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.train(cfg, tmp_path / preset, progress=False)
    finally:
        torch.set_num_threads(threads)
    return [r["loss"] for r in read_metrics(tmp_path / preset, "train")]


def cpu_capability() -> str:
    return torch.backends.cpu.get_cpu_capability()


@pytest.mark.parametrize("preset", PRESETS)
def test_first_training_losses_are_the_golden_ones(preset, tmp_path):
    got = losses(preset, tmp_path)
    assert len(got) == STEPS
    if os.environ.get("FORMERS_WRITE_GOLDEN"):
        saved = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {"losses": {}}
        saved["cpu_capability"] = cpu_capability()
        saved["torch"] = torch.__version__.split("+")[0]
        saved["losses"][preset] = got
        GOLDEN.write_text(json.dumps(saved, indent=1) + "\n")
    golden = json.loads(GOLDEN.read_text())
    want = golden["losses"][preset]
    same_kernels = (
        golden["cpu_capability"] == cpu_capability()
        and golden["torch"] == torch.__version__.split("+")[0]
    )
    if same_kernels:
        assert got == want  # bit for bit
    else:
        assert got == pytest.approx(want, rel=1e-5)
