"""A trained run folder: its config, tokenizer and weights, ready to evaluate or sample."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from formers.data.corpora import Corpus, load_corpus
from formers.data.errors import DataError
from formers.data.tokenizers import PRETRAINED_TOKENIZER, Tokenizer, tokenizer_from_dict
from formers.errors import FormersError
from formers.models import build, runtime_config
from formers.train.checkpoint import latest_checkpoint, load_checkpoint, load_config
from formers.train.checkpoint.format import CHECKPOINTS_DIR
from formers.train.checkpoint.read import step_dirs
from formers.train.config import RunConfig, run_config_from_dict


@dataclass
class LoadedRun:
    """A model with its weights, the tokenizer it reads, and the config that made it."""

    run_dir: Path
    config: RunConfig
    model: nn.Module
    tokenizer: Tokenizer
    step: int


def checkpoint_of(run_dir: Path, step: int | None = None) -> Path:
    """The run's latest checkpoint, or the one of `step`.

    Its errors name fixes that work from Python (`load_run`) and on the command line alike.
    """
    if not run_dir.is_dir():
        raise FormersError(f"no run folder at {run_dir}: give the folder of a formers train run")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        if not (run_dir / "config.json").exists() and not (run_dir / CHECKPOINTS_DIR).exists():
            raise FormersError(
                f"{run_dir} is not a run folder (no config.json or {CHECKPOINTS_DIR}/): give the "
                "folder of a formers train run"
            )
        raise FormersError(
            f"{run_dir} holds no checkpoint yet: train it first, or wait until its training "
            "saves one"
        )
    if step is None:
        return checkpoint
    steps = checkpoint_steps(run_dir)
    if step not in steps:
        raise FormersError(
            f"{run_dir} has no checkpoint of step {step}: use checkpoint "
            f"{' or '.join(map(str, steps))}, or leave it out for the latest"
        )
    return run_dir / CHECKPOINTS_DIR / f"step_{step:06d}"


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """The steps of a run's complete checkpoints, oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    folders = step_dirs(root) if root.is_dir() else []
    return [int(path.name.removeprefix("step_")) for path in folders]


def read_run_config(run_dir: str | Path, checkpoint: int | None = None) -> RunConfig:
    """The config a run's latest checkpoint (or the one of step `checkpoint`) was trained with."""
    return run_config_from_dict(load_config(checkpoint_of(Path(run_dir), checkpoint)))


def load_run(
    run_dir: str | Path,
    device: str | torch.device = "cpu",
    runtime: dict[str, Any] | None = None,
    checkpoint: int | None = None,
) -> LoadedRun:
    """Load a `formers train` run folder's model (in eval mode), tokenizer and config.

        run = formers.load_run("runs/ts")
        ids = run.tokenizer.encode("ROMEO:")

    Works on any run: a sharded (FSDP) checkpoint is assembled into the plain model in this
    process, without a process group.

    Args:
        run_dir: the run folder.
        device: where to put the model.
        runtime: runtime options to change, e.g. {"attention.clamp_len": 820} (only fields the
            attention lists in `runtime_fields`: they do not change the weights).
        checkpoint: the step of the checkpoint to load; None: the latest.
    """
    run_dir = Path(run_dir)
    saved = checkpoint_of(run_dir, checkpoint)  # first: "no run folder" before anything else
    tokenizer_file = run_dir / "tokenizer.json"
    if not tokenizer_file.exists():
        probe = run_config_from_dict(load_config(saved)).train.probe
        if probe is not None:
            raise FormersError(
                f"{run_dir} trained on the {probe.kind} probe, which has no tokenizer (its "
                "sequences are ids): score it with formers eval"
            )
        raise FormersError(f"{tokenizer_file} is missing: the run folder is incomplete")
    cfg, model, step = load_model(run_dir, device, runtime, checkpoint)
    tokenizer = tokenizer_from_dict(json.loads(tokenizer_file.read_text()))
    return LoadedRun(run_dir, cfg, model, tokenizer, step)


def load_model(
    run_dir: str | Path,
    device: str | torch.device = "cpu",
    runtime: dict[str, Any] | None = None,
    checkpoint: int | None = None,
) -> tuple[RunConfig, nn.Module, int]:
    """A run's config, model (in eval mode, on `device`) and step, without its tokenizer: all
    a probe run has (its sequences are token ids already). Arguments as `load_run`'s."""
    checkpoint = checkpoint_of(Path(run_dir), checkpoint)
    cfg = run_config_from_dict(load_config(checkpoint))
    if runtime:
        cfg = dataclasses.replace(cfg, model=runtime_config(cfg.model, runtime))
    model = build(cfg.model)
    loaded = load_checkpoint(checkpoint, model=model, restore_rng=False, map_location=device)
    return cfg, model.to(device).eval(), loaded.state.step


def corpus_of(run: LoadedRun, data_dir: str | None = None) -> Corpus:
    """The run's corpus, tokenized exactly as in training (checked against the saved tokenizer)."""
    tc = run.config.train
    # a pretrained model's tokenizer is the run's own, never rebuilt from the corpus
    tokenizer = run.tokenizer if tc.tokenizer == PRETRAINED_TOKENIZER else tc.tokenizer
    corpus = load_corpus(tc.corpus, data_dir or tc.data_dir, tokenizer, tc.tokenizer_vocab)
    if corpus.tokenizer.to_dict() != run.tokenizer.to_dict():
        raise DataError(
            f"the corpus {tc.corpus!r} now tokenizes differently from when {run.run_dir} was "
            "trained (its files changed?): evaluate on the data the run was trained on"
        )
    return corpus


def with_eval_samples(cfg: RunConfig, eval_samples: int | None) -> RunConfig:
    """`cfg` with its probe's held-out sequences per point set to `eval_samples` (None: as
    trained)."""
    if eval_samples is None:
        return cfg
    probe = dataclasses.replace(cfg.train.probe, eval_samples=eval_samples)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, probe=probe))
