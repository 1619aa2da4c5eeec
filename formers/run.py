"""A trained run folder: its config, tokenizer and weights, ready to evaluate or sample."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from formers.data.corpora import Corpus, load_corpus
from formers.data.errors import DataError
from formers.data.tokenizers import Tokenizer, tokenizer_from_dict
from formers.errors import FormersError
from formers.models import build
from formers.train.checkpoint import latest_checkpoint, load_checkpoint
from formers.train.config import RunConfig, run_config_from_dict


@dataclass
class LoadedRun:
    """A model with its weights, the tokenizer it reads, and the config that made it."""

    run_dir: Path
    config: RunConfig
    model: nn.Module
    tokenizer: Tokenizer
    step: int


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """Load the latest checkpoint of a `formers train` run folder, in eval mode."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FormersError(f"no run folder at {run_dir}: give the --run-dir of a `formers train`")
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise FormersError(
            f"{run_dir} holds no checkpoint yet: train it first (formers train --run-dir {run_dir})"
        )
    tokenizer_file = run_dir / "tokenizer.json"
    if not tokenizer_file.exists():
        raise FormersError(f"{tokenizer_file} is missing: the run folder is incomplete")
    loaded = load_checkpoint(checkpoint, restore_rng=False)
    cfg = run_config_from_dict(loaded.config)
    model = build(cfg.model)
    load_checkpoint(checkpoint, model=model, restore_rng=False, map_location=device)
    tokenizer = tokenizer_from_dict(json.loads(tokenizer_file.read_text()))
    return LoadedRun(run_dir, cfg, model.to(device).eval(), tokenizer, loaded.state.step)


def corpus_of(run: LoadedRun, data_dir: str | None = None) -> Corpus:
    """The run's corpus, tokenized exactly as in training (checked against the saved tokenizer)."""
    tc = run.config.train
    corpus = load_corpus(tc.corpus, data_dir or tc.data_dir, tc.tokenizer, tc.tokenizer_vocab)
    if corpus.tokenizer.to_dict() != run.tokenizer.to_dict():
        raise DataError(
            f"the corpus {tc.corpus!r} now tokenizes differently from when {run.run_dir} was "
            "trained (its files changed?): evaluate on the data the run was trained on"
        )
    return corpus
