"""torchrun with 2 CPU processes (gloo) takes the same step as one process on the whole batch."""

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from formers.train.metrics import read_metrics


def cli_args(corpus, run_dir, batch_size):
    return [
        "train",
        "--no-progress",
        "--run-dir",
        str(run_dir),
        "--model.n_layers",
        "2",
        "--model.d_model",
        "32",
        "--model.n_heads",
        "4",
        "--model.d_ff",
        "64",
        "--model.dropout",
        "0",
        "--train.corpus",
        str(corpus),
        "--train.batch_size",
        str(batch_size),
        "--train.seq_len",
        "16",
        "--train.max_steps",
        "2",
        "--train.optimizer",
        "sgd",
        "--train.lr",
        "0.5",
        "--train.warmup_steps",
        "0",
        "--train.schedule",
        "constant",
        "--train.eval_every",
        "0",
        "--train.precision",
        "fp32",
        "--train.grad_clip",
        "0",
        "--train.log_every",
        "1",
    ]


def weights(run_dir):
    return load_file(str(next((run_dir / "checkpoints").glob("step_*")) / "model.safetensors"))


def test_two_process_ddp_step_equals_single_process_step(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"row {i} of text, value {i * i % 97}\n" for i in range(600)))
    env_run = dict(check=True, capture_output=True, text=True, timeout=300)
    single = subprocess.run(
        [sys.executable, "-m", "formers", *cli_args(corpus, tmp_path / "one", 4)], **env_run
    )
    assert single.returncode == 0, single.stderr
    launched = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "formers",
            *cli_args(corpus, tmp_path / "two", 2),
        ],
        **env_run,
    )
    assert launched.returncode == 0, launched.stderr
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=2e-6, rtol=1e-5)
    # the steps moved the weights well beyond that tolerance: the comparison means something
    start = weights_at_init()
    assert max((one[k] - start[k]).abs().max().item() for k in one) > 1e-2
    # what is logged is the whole step's: the loss averaged over both processes (each saw half
    # the rows), the tokens of both
    logged_one = read_metrics(tmp_path / "one", "train")
    logged_two = read_metrics(tmp_path / "two", "train")
    assert [r["tokens"] for r in logged_two] == [r["tokens"] for r in logged_one] == [64, 128]
    for a, b in zip(logged_one, logged_two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    assert "}" in launched.stdout and launched.stdout.count('"run_dir"') == 1  # rank 0 prints


def weights_at_init():
    from formers.models import build
    from formers.train.checkpoint.rng import seed_everything
    from formers.train.config import run_config, with_vocab

    cfg = run_config(
        "vanilla",
        {
            "model.n_layers": 2,
            "model.d_model": 32,
            "model.n_heads": 4,
            "model.d_ff": 64,
            "model.dropout": 0.0,
        },
    )
    seed_everything(0)
    model = build(with_vocab(cfg, 256).model)
    return model.state_dict()
