"""The one check every model runs on its token ids, before any embedding reads them."""

from __future__ import annotations

from torch import Tensor

from formers.errors import InputError
from formers.kernels.host_reads import host_reads_allowed


def check_tokens(tokens: Tensor, vocab_size: int, name: str = "tokens") -> None:
    """Raise InputError unless `tokens` is a (B, T) integer tensor of ids in [0, vocab_size)."""
    if not isinstance(tokens, Tensor) or tokens.dtype.is_floating_point or tokens.is_complex():
        kind = tokens.dtype if isinstance(tokens, Tensor) else type(tokens).__name__
        raise InputError(f"{name} must be an integer tensor of token ids, got {kind}")
    if tokens.dim() != 2:
        raise InputError(
            f"{name} must have shape (batch, seq), got {tuple(tokens.shape)}: "
            "add a batch dimension with tokens[None] for a single sequence"
        )
    if tokens.numel() == 0 or not host_reads_allowed():  # the caller vouches for the ids
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise InputError(
            f"{name} contain id {bad}, outside the vocabulary [0, {vocab_size}): "
            f"encode with the tokenizer the model was built for, or set vocab_size > {high}"
        )
