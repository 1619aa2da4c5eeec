"""What every model returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor


@dataclass
class ModelOutput:
    """Output of a formers model.

    Attributes:
        logits: (B, T, V) next-token (or masked-token) scores.
        loss: mean cross-entropy over non-ignored targets when targets were given, else None.
        aux_loss: scalar sum of this pass's auxiliary losses (Switch load balancing, ...); 0
            when unused.
        memory: what a recurrent model carries to the next segment of the text, one entry per
            layer (Transformer-XL: each layer's last inputs); pass it back as `memory=`. None
            for models that carry nothing.
        metrics: scalar diagnostics of this pass (detached), named "<module path>.<name>",
            e.g. a Switch layer's share of dropped tokens.
    """

    logits: Tensor
    loss: Tensor | None
    aux_loss: Tensor
    memory: list[Any] | None = None
    metrics: dict[str, Tensor] = field(default_factory=dict)
