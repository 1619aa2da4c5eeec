"""Shared helpers for the test suite (tests/ is on sys.path through conftest.py)."""

from __future__ import annotations

import torch

import formers


def tiny_config(name: str, **overrides) -> formers.ModelConfig:
    """A few-thousand-parameter version of preset `name`, without dropout."""
    base = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=50, dropout=0.0)
    if formers.PRESETS[name]().arch == "encoder_decoder":
        base["pad_id"] = 0
    base.update(overrides)
    return formers.config(name, **base)


def random_tokens(batch: int, length: int, vocab: int, low: int = 1) -> torch.Tensor:
    """Ids in [low, vocab): id 0 stays free to act as padding."""
    return torch.randint(low, vocab, (batch, length))
