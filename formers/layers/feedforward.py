"""Position-wise feed-forward network, Vaswani et al. 2017 §3.3.

    FFN(x) = act(x W_1 + b_1) W_2 + b_2          (Eq. 2, act = ReLU in the paper)

Squared ReLU, act(x) = max(x, 0)², is Primer's (So et al. 2021, https://arxiv.org/abs/2109.08668).
GELU comes exact, x·Φ(x), or in the tanh approximation GPT-2 and BERT were trained with,
0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (Hendrycks & Gimpel 2016, §2): "gelu_tanh".
SiLU, x·σ(x) (Elfwing et al. 2017; "swish" in Ramachandran et al. 2017): "silu".
Shapes: B batch, T length, D model width, F inner width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import FFNConfig, ModelConfig
from formers.layers.cache import LayerState


def squared_relu(x: Tensor) -> Tensor:
    """max(x, 0)² (Primer, So et al. 2021 §2)."""
    return torch.square(F.relu(x))


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU in its tanh approximation (Hendrycks & Gimpel 2016 §2)."""
    return F.gelu(x, approximate="tanh")


ACTIVATION: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "squared_relu": squared_relu,
    "gelu_tanh": gelu_tanh,
    "silu": F.silu,
}


class FeedForward(nn.Module):
    """Two projections with an activation between them, applied to each position alike.

    Args:
        d_model: model width D.
        d_ff: inner width F.
        activation: "relu", "gelu", "gelu_tanh", "squared_relu" or "silu".
        dropout: dropout on the activations (between the projections).
        bias: whether the projections have biases.
    """

    config_class: ClassVar[type[FFNConfig]] = FFNConfig

    def __init__(
        self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0, bias=True
    ):
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.activation = ACTIVATION[activation]
        self.dropout = nn.Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: FFNConfig) -> FeedForward:
        """Build one layer's network from the model config and that layer's options."""
        return cls(cfg.d_model, cfg.d_ff, options.activation, cfg.ffn_dropout, options.bias)

    def new_state(self) -> LayerState | None:
        """None: each position is computed alone, so decoding needs nothing from earlier ones.
        A network that shares capacity between tokens returns what it must remember of them."""
        return None

    def forward(
        self, x: Tensor, valid: Tensor | None = None, state: LayerState | None = None
    ) -> Tensor:
        """(B, T, D) -> (B, T, D). Networks that share capacity between tokens (experts) read
        `valid` (B, T), False at padding, and, when decoding, their own `new_state()` as
        `state`, extended in place; both are ignored here."""
        return self.down(self.dropout(self.activation(self.up(x))))  # (B, T, F) inside
