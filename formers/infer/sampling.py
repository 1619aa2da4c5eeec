"""Choosing the next token from a model's scores: greedy, temperature, top-k and nucleus.

    p(v) ∝ exp(logit_v / temperature), restricted to the k most likely tokens (Fan et al. 2018,
    https://arxiv.org/abs/1805.04833) and then to the smallest set whose mass reaches top_p
    (Holtzman et al. 2019, https://arxiv.org/abs/1904.09751).

Shapes: B batch, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from formers.errors import InputError


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise InputError (a ValueError) unless the sampling arguments make sense."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise InputError(f"temperature must be a number, got {type(temperature).__name__}")
    if not math.isfinite(temperature) or temperature < 0:
        raise InputError(
            f"temperature={temperature} must be a finite number >= 0 (0 means greedy decoding)"
        )
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InputError(f"top_k={top_k!r} must be an integer >= 1, or None to keep every token")
    if top_p is not None and (
        isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1
    ):
        raise InputError(f"top_p={top_p!r} must be in (0, 1], or None to keep every token")


def sample_next(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one token id per row from (B, V) next-token logits; returns (B,) int64.

    Args:
        logits: (B, V) unnormalised scores of the next token.
        temperature: divides the logits; 0 picks the argmax (greedy, top_k/top_p irrelevant).
        top_k: keep only the k highest-scoring tokens (k is clamped to V).
        top_p: then keep the smallest most-likely set whose probability reaches top_p;
            the most likely token always stays.
        generator: a torch.Generator for reproducible draws; None uses the global RNG.
    """
    check_sampling(temperature, top_k, top_p)
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise InputError(f"logits must have shape (batch, vocab), got {shape}")
    # fp32 whatever the model ran in: a bf16 softmax/cumsum visibly distorts small probabilities.
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        # scatter the k winners into -inf rather than thresholding at the k-th value, so ties
        # at the boundary cannot let more than k tokens through.
        top = logits.topk(top_k, dim=-1)  # (B, k)
        logits = torch.full_like(logits, -math.inf).scatter(-1, top.indices, top.values)
    if top_p is not None and top_p < 1:
        logits = _nucleus(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _nucleus(logits: Tensor, top_p: float) -> Tensor:
    """Mask (B, V) logits outside the smallest set of most likely tokens with mass >= top_p."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
    probs = torch.softmax(sorted_logits, dim=-1)
    # a token is dropped when the tokens ranked above it already reach top_p; the first token
    # has zero mass above it, so at least one always survives.
    mass_above = probs.cumsum(dim=-1) - probs  # (B, V)
    sorted_logits = sorted_logits.masked_fill(mass_above >= top_p, -math.inf)
    return torch.full_like(logits, -math.inf).scatter(-1, order, sorted_logits)
