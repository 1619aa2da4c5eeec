"""The Switch feed-forward network's options (Fedus et al. 2021, https://arxiv.org/abs/2101.03961)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from formers.config import FFNConfig, ModelConfig, positive
from formers.errors import ConfigError


@dataclass(frozen=True)
class SwitchConfig(FFNConfig):
    """A top-1 mixture of experts in place of the dense feed-forward network (§2.1).

    Args:
        n_experts: experts E, each a feed-forward network of the model's d_ff.
        capacity_factor: in training, each expert takes at most ⌈capacity_factor · n / E⌉ of a
            sequence's n tokens (§2.2; 1.25 in the paper's Table 1); the rest skip the layer.
        eval_capacity_factor: the same in evaluation and generation (2.0 in the paper's code).
        balance_coef: α, the weight of the load-balancing loss α·E·Σ fᵢ·Pᵢ (Eq. 4; 0.01).
        z_loss_coef: weight of the router z-loss (ST-MoE, Zoph et al. 2022, Eq. 5; 0.001 there);
            0 leaves it out.
        jitter: multiplicative noise on the router's input in training, x·U(1−ε, 1+ε) (§2.4,
            as in the paper's code: ε = 0.01); 0 turns it off.
        init_scale: s of the truncated-normal initialisation σ = √(s / fan_in) of the router and
            the experts; the paper cuts the Transformer's s = 1 by ten (§2.4).
        expert_dropout: dropout between the experts' two projections (§2.4 and Table 4, "expert
            dropout"); None uses the model's ffn_dropout.
    """

    kind: str = "switch"
    n_experts: int = 8
    capacity_factor: float = 1.25
    eval_capacity_factor: float = 2.0
    balance_coef: float = 0.01
    z_loss_coef: float = 0.0
    jitter: float = 0.01
    init_scale: float = 0.1
    expert_dropout: float | None = None

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        positive("ffn.n_experts", self.n_experts, "experts per layer (8 in the preset)")
        for name in ("capacity_factor", "eval_capacity_factor", "init_scale"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(
                    f"ffn.{name}={value!r} must be a positive number (a capacity factor of at "
                    "least n_experts never drops a token)"
                )
        for name in ("balance_coef", "z_loss_coef"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"ffn.{name}={value!r} must be 0 or more")
        if not 0.0 <= self.jitter < 1.0:
            raise ConfigError(f"ffn.jitter={self.jitter!r} must be in [0, 1) (0 turns it off)")
        if self.expert_dropout is not None and not 0.0 <= self.expert_dropout < 1.0:
            raise ConfigError(
                f"ffn.expert_dropout={self.expert_dropout!r} must be in [0, 1), or None to use "
                "ffn_dropout"
            )
