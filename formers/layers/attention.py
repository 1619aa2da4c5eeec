"""Multi-head attention, Vaswani et al. 2017 §3.2 (https://arxiv.org/abs/1706.03762).

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V                                   (Eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

The hooks, in the order `forward` calls them; a variant overrides one and inherits the rest:

  project(x, context, mask, state) -> q, k, v, mask
        the projections, split into heads; returns the mask that goes with the keys it
        returns (Linformer compresses k and v along the sequence, so its keys need no padding
        mask; Primer convolves q, k and v and keeps the convolution's tail in `state`).
  attend(q, k, v, mask, state) -> out
        everything between the projections and the output projection: extends the keys with
        the decoding `state` and runs Eq. 1: the shared `formers.kernels.attention` kernel
        (fused or explicit by its one rule) when `scores` and `weights` are vanilla, else the
        two hooks below. A variant with its own pattern (Longformer's blocked band, Routing's
        clusters) overrides it whole and calls the kernels itself.
  scores(q, k, mask) -> (B, H, T, S) logits
        Transformer-XL adds its relative-position terms (and may fold the mask in);
  weights(scores, mask) -> (B, H, T, S) probabilities
        top-k keeps the k largest scores of each row.

State: `new_state()` makes the per-layer decoding state the kind needs (a growing key/value
cache here; a rolling window, a convolution tail or cluster assignments in the variants), and
the same object comes back as `state` on every call of that layer, to read and extend in place.

Shapes: B batch, T query length, S key length, D model width, H heads, K head dim.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import AttentionConfig, ModelConfig
from formers.kernels.attention import mask_scores, masked_attention
from formers.kernels.attention import zero_rows_without_keys as zero_rows
from formers.kernels.cost import AttentionCost
from formers.kernels.record import keep, recording, report
from formers.layers.cache import KVCache, LayerState
from formers.layers.mask import AttentionMask

NO_MASK = AttentionMask()


def zero_rows_without_keys(weights: Tensor, mask: AttentionMask, allowed: Tensor) -> Tensor:
    """Zero the weights of queries that see no key (their softmax spread evenly over masked keys).

    Skipped when the mask guarantees a key for every query: a full pass over the (T, S) weights.
    """
    return weights if mask.every_query_sees_a_key else zero_rows(weights, allowed)


class MultiHeadAttention(nn.Module, AttentionCost):
    """h parallel scaled dot-product heads of width d_model / h, then an output projection.

    Args:
        d_model: model width D.
        n_heads: number of heads H; D must be divisible by H.
        dropout: dropout on the attention weights (training only).
        bias: whether the projections have biases.
    """

    config_class: ClassVar[type[AttentionConfig]] = AttentionConfig
    fused: ClassVar[bool] = True
    # What the keys of a recorded attention map are (`formers.kernels.record`): None for the
    # sequence's positions; a kind whose keys are something else names them.
    key_axis: ClassVar[str | None] = None
    # Consecutive input tokens one key mixes (a convolution's width); 1: only its own.
    tokens_per_key: int = 1

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # The fused kernel computes exactly the vanilla scores and weights; a subclass that
        # changes either must take the explicit path.
        cls.fused = (
            cls.scores is MultiHeadAttention.scores and cls.weights is MultiHeadAttention.weights
        )

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.scale = 1.0 / math.sqrt(self.d_head)
        # W^Q, W^K, W^V stacked into one (3D, D) matrix: one matmul for self-attention, and
        # the same layout as torch.nn.MultiheadAttention.in_proj_weight.
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        nn.init.xavier_uniform_(self.qkv_proj.weight)
        if bias:
            nn.init.zeros_(self.qkv_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: AttentionConfig) -> MultiHeadAttention:
        """Build one layer's attention from the model config and that layer's attention options
        (`cfg.attention_at(stack, index)`); variants read their own fields from `options`."""
        return cls(cfg.d_model, cfg.n_heads, dropout=cfg.attn_dropout, bias=options.bias)

    @classmethod
    def tie_layers(cls, layers: list[MultiHeadAttention], options: AttentionConfig) -> None:
        """Share parameters between the layers of one stack that use this kind (none here)."""

    def new_state(self) -> LayerState | None:
        """An empty decoding state for this layer: the keys and values seen so far."""
        return KVCache()

    def head_roles(self) -> list[str] | None:
        """What each head does, for a recorded attention map, when a kind's heads differ from
        one another; None: every head is alike."""
        return None

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> Tensor:
        """Attend from x (B, T, D) to context (B, S, D), or to x itself when context is None.

        Args:
            x: (B, T, D) the queries' inputs.
            context: (B, S, D) the keys' and values' inputs; None for self-attention.
            mask: which keys each query may see.
            state: this layer's decoding state from `new_state()`, extended in place.
        """
        batch, length, _ = x.shape
        q, k, v, mask = self.project(x, context, mask, state)  # (B, H, T|S, K) each
        out = self.attend(q, k, v, mask, state)  # (B, H, T, K)
        if recording():
            keep(self)  # the weights `attend` reported, over key positions
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, self.d_model))

    def project(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """Queries from x, keys and values from context (or x), split into heads; the mask."""
        if context is None:
            qkv = self.qkv_proj(x)  # (B, T, 3D)
            return (*self.split_heads(qkv, 3), mask)
        (q,) = self.split_heads(self.in_proj(x, slice(None, self.d_model)), 1)
        k, v = self.split_heads(self.in_proj(context, slice(self.d_model, None)), 2)
        return q, k, v, mask

    def in_proj(self, x: Tensor, rows: slice) -> Tensor:
        """x (B, T, D) through `rows` of the stacked W^Q, W^K, W^V and their biases: (B, T, D)
        for W^Q alone, (B, T, 2D) for W^K and W^V."""
        bias = self.qkv_proj.bias
        return F.linear(x, self.qkv_proj.weight[rows], None if bias is None else bias[rows])

    def split_heads(self, x: Tensor, parts: int) -> tuple[Tensor, ...]:
        """(B, T, parts·D) -> `parts` tensors of shape (B, H, T, K)."""
        batch, length, _ = x.shape
        x = x.view(batch, length, parts, self.n_heads, self.d_head)
        return x.permute(2, 0, 3, 1, 4).unbind(0)  # parts × (B, H, T, K)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Eq. 1 for every head: (B, H, T, K) queries against (B, H, S, K) keys and values,
        after the keys and values of earlier calls (`state`, a `KVCache`)."""
        if state is not None:
            k, v = state.append(k, v)  # (B, H, S, K)
        dropout = self.dropout if self.training else 0.0
        if self.fused:
            # Vanilla scores and weights: the shared kernel, fused or explicit by its one rule.
            allowed, causal = mask.kernel_form(q.shape[-2], k.shape[-2], q.device)
            return masked_attention(
                q,
                k,
                v,
                allowed,
                causal=causal,
                dropout=dropout,
                every_query_sees_a_key=mask.every_query_sees_a_key,
            )
        weights = self.weights(self.scores(q, k, mask), mask)  # (B, H, T, S)
        if recording():
            report(weights)
        if dropout > 0:
            weights = F.dropout(weights, dropout)
        return weights @ v

    def scores(self, q: Tensor, k: Tensor, mask: AttentionMask) -> Tensor:
        """Q Kᵀ / √d_k, (B, H, T, S); the mask is applied by `weights`."""
        return (q * self.scale) @ k.transpose(-2, -1)

    def weights(self, scores: Tensor, mask: AttentionMask) -> Tensor:
        """Masked softmax over keys; a query with no visible key gets all-zero weights."""
        # torch's softmax kernels accumulate bf16/fp16 inputs in fp32 and round only the output,
        # so this is the fp32 softmax; an explicit .float() would add two passes over (T, S).
        allowed = mask.dense(scores.shape[-2], scores.shape[-1], scores.device)
        if allowed is None:
            return torch.softmax(scores, dim=-1)
        weights = torch.softmax(mask_scores(scores, allowed), dim=-1)
        return zero_rows_without_keys(weights, mask, allowed)
