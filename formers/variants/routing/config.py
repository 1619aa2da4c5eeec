"""Options of routing attention (Roy et al. 2020, https://arxiv.org/abs/2003.05997)."""

from __future__ import annotations

from dataclasses import dataclass

from formers.config import AttentionConfig, ModelConfig, positive
from formers.errors import ConfigError


@dataclass(frozen=True)
class RoutingConfig(AttentionConfig):
    """Heads split between a causal local window and routing by online k-means.

    Args:
        n_clusters: centroids per routed head, about √T for T tokens (the paper's
            `sparsity_cluster_size`).
        window: the most members of its cluster a routed query sees, itself included (the
            paper's `sparsity_cluster_attention_window`, about T / n_clusters: there the last
            member of a cluster of `window` sees all of it). Clusters are cut into blocks of
            ⌈window / 2⌉ members; a query sees its block up to itself and the block before, so
            between ⌈window / 2⌉ and window of its cluster's most recent members.
        local_heads: heads that attend to a local window instead; None: half of the heads, the
            paper's split ("we divide the total attention head budget equally").
        local_window: positions per local block; a local query sees its block up to itself
            and the previous block: window + 1 to 2·window positions, itself included (window to
            2·window − 1 back).
        ema_decay: λ of the centroids' moving average.
        commitment: coefficient of the commitment loss (aux loss).
    """

    kind: str = "routing"
    n_clusters: int = 32
    window: int = 32
    local_heads: int | None = None
    local_window: int = 128
    ema_decay: float = 0.999
    commitment: float = 1e-4

    def heads(self, n_heads: int) -> int:
        """How many of `n_heads` heads are local."""
        return n_heads // 2 if self.local_heads is None else self.local_heads

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        for name in ("n_clusters", "window", "local_window"):
            positive(f"attention.{name}", getattr(self, name))
        local = self.local_heads
        if local is not None and (type(local) is not int or not 0 <= local < model.n_heads):
            raise ConfigError(
                f"attention.local_heads={local!r} must be an integer in [0, n_heads="
                f"{model.n_heads}): set it below n_heads to leave a routed head (None: half)"
            )
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(
                f"attention.ema_decay={self.ema_decay} must be in [0, 1): the weight the "
                "centroids keep at each update (0.999 in the paper)"
            )
        if self.commitment < 0:
            raise ConfigError(f"attention.commitment={self.commitment} must be >= 0")
