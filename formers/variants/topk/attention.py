"""Explicit Sparse Transformer, Zhao et al. 2019, "Explicit Sparse Transformer: Concentrated
Attention Through Explicit Selection" (https://arxiv.org/abs/1912.11637).

Each query keeps only its k largest scores; the rest get zero weight, so attention concentrates
on the most relevant keys (§2, Eq. 5–7):

    P = Q Kᵀ / √d                                   the vanilla scores, masked as usual
    t_i = the k-th largest entry of row i of P
    M(P, k)_ij = P_ij if P_ij ≥ t_i else −∞         (Eq. 6)
    A = softmax(M(P, k)) V                          (Eq. 7)

Diff from vanilla:
  - `weights` masks everything below the k-th score of each row before the softmax; `scores`
    is vanilla. Selecting by value takes the whole (T, S) score matrix, so this runs on the
    explicit path (no fused kernel), and its memory is that of full attention's scores plus
    the (T, k) top values: the paper's selection saves no memory, it focuses the attention.
  - on CUDA, `attend` finds each query's k-th score first (without gradient) and runs
    FlexAttention with a score_mod that drops the scores below it (`formers.kernels.sparse`):
    the (T, S) weights are then never stored for the backward pass.
Our choices:
  - the selection comes after the causal and padding masks (a masked key is never selected);
    a row with fewer than k visible keys keeps all of them (k is clamped to the visible keys);
  - ties: a score equal to the k-th largest is kept, so a row may keep more than k keys when
    several are tied there (the reference code's `>=` threshold);
  - no gradient reaches the dropped scores (they are constants after the selection), as in the
    paper.

Shapes: B batch, H heads, T query length, S key length, k kept keys per query.
"""

from __future__ import annotations

import torch
from torch import Tensor

from formers.config import ModelConfig
from formers.kernels.attention import mask_scores
from formers.kernels.sparse import threshold_attention
from formers.layers.attention import MultiHeadAttention, zero_rows_without_keys
from formers.layers.cache import LayerState
from formers.layers.mask import AttentionMask
from formers.variants.topk.config import TopKConfig


def keep_top_k(scores: Tensor, k: int) -> Tensor:
    """`scores` (…, S) with every entry below the k-th largest of its row pushed to the dtype's
    minimum (Eq. 6); entries tied with the k-th largest stay. k ≥ S keeps everything."""
    if k >= scores.shape[-1]:
        return scores
    kth = scores.topk(k, dim=-1, sorted=False).values.amin(dim=-1, keepdim=True)  # (…, 1)
    return scores.masked_fill(scores < kth, torch.finfo(scores.dtype).min)


class TopKAttention(MultiHeadAttention):
    """Multi-head attention whose weights keep only the top_k scores of each query.

    Args:
        d_model: model width D.
        n_heads: heads H.
        options: the layer's `TopKConfig`, kept as `self.options`.
        dropout: dropout on the attention weights.
    """

    config_class = TopKConfig

    def __init__(self, d_model: int, n_heads: int, options: TopKConfig, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.options = options

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: TopKConfig) -> TopKAttention:
        """Build from a model config and a layer's `TopKConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options, cfg.attn_dropout)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Eq. 5–7 for every head: on CUDA FlexAttention keeps the scores at or above each
        query's k-th (found first, without gradient) over the causal tiles
        (`formers.kernels.sparse`), else `scores` then `weights`."""

        def explicit() -> Tensor:
            return MultiHeadAttention.attend(self, q, k, v, mask, state)

        if state is not None:  # decoding: a few queries against the cache, explicit
            return explicit()
        return threshold_attention(
            q,
            k,
            v,
            self.options.top_k,
            causal=mask.causal,
            key_valid=mask.key_valid,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
            explicit=explicit,
        )

    def weights(self, scores: Tensor, mask: AttentionMask) -> Tensor:
        """Masked, then the top_k of each row (Eq. 6), then the softmax (Eq. 7); (B, H, T, S)."""
        allowed = mask.dense(scores.shape[-2], scores.shape[-1], scores.device)
        if allowed is not None:
            # masked scores fall below every visible one, so they are picked last: a row with
            # fewer than k visible keys keeps them all, and its masked ones still get exp(−∞)
            scores = mask_scores(scores, allowed)
        weights = torch.softmax(keep_top_k(scores, self.options.top_k), dim=-1)
        if allowed is None:
            return weights
        return zero_rows_without_keys(weights, mask, allowed)
