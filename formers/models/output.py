"""What every model returns."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class ModelOutput:
    """Output of a formers model.

    Attributes:
        logits: (B, T, V) next-token (or masked-token) scores.
        loss: mean cross-entropy over non-ignored targets when targets were given, else None.
        aux_loss: scalar sum of auxiliary losses (Switch load balancing, ...); 0 when unused.
        memory: per-layer memory to pass back as `memory=` (Transformer-XL); None otherwise.
    """

    logits: Tensor
    loss: Tensor | None
    aux_loss: Tensor
    memory: list[Tensor] | None = None
