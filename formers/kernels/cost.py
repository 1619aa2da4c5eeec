"""What one token costs an attention layer: the cost model `formers bench` reads.

Each attention kind inherits these and overrides what its pattern changes (a window, compressed
keys, relative terms): the keys a query is scored against and the FLOPs of those products.
"""

from __future__ import annotations

from torch import nn


class AttentionCost:
    """The cost model of full attention over `d_model`-wide queries (vanilla's)."""

    d_model: int

    def keys_per_query(self, seq_len: int) -> int:
        """Keys each query is scored against in a sequence of `seq_len` tokens."""
        return seq_len

    def score_flops_per_token(self, seq_len: int) -> float:
        """Forward FLOPs per query of the products with keys: q·kᵀ and the weighted sum of
        values, 2 FLOPs per multiply-add (Chowdhery et al. 2022, App. B; no causal halving)."""
        return 2.0 * 2 * self.keys_per_query(seq_len) * self.d_model

    def per_segment_parameters(self) -> list[nn.Parameter]:
        """Parameters multiplied once per sequence rather than once per token (none here)."""
        return []
