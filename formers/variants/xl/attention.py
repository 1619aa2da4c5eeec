"""Transformer-XL attention, Dai et al. 2019 (https://arxiv.org/abs/1901.02860).

A segment attends to its own tokens and to a memory of the previous segment's hidden states
(§3.2), so positions can only enter through the distance i − j between a query and a key
(§3.3). The score of query i against key j is

    A^rel_{i,j} = q_iᵀ k_j                     (a) content
                + q_iᵀ W_{k,R} R_{i−j}         (b) content-dependent position
                + uᵀ k_j                       (c) global content bias
                + vᵀ W_{k,R} R_{i−j}           (d) global position bias

with q_i = W_q E_{x_i}, k_j = W_{k,E} E_{x_j}, R a fixed sinusoid table of distances and u, v
learned per head. Grouped as the reference code does: (a)+(c) = (q_i + u)ᵀ k_j, and
(b)+(d) = (q_i + v)ᵀ W_{k,R} R_{i−j}, computed against all distances S−1 … −1 at once and then
aligned with `rel_shift`, a view.

Diff from vanilla:
  - `scores` adds terms (b)–(d), and folds the causal mask in while it lays the aligned position
    terms out (the one pass over (T, S) that the scores need anyway); `weights` is then a plain
    softmax. The explicit path, not the fused kernel; on CUDA `attend` runs FlexAttention
    instead, (b)+(d) read by a score_mod from the unshifted terms (`formers.kernels.sparse`).
  - one more projection per layer, W_{k,R} (`r_proj`); u, v (`u`, `v`) shared by all layers in
    the reference code, per layer with `untie_rel_bias`; no biases on the projections.
  - keys and values are computed from context = cat(memory, x); no absolute positions.
  - the mask: causal with the memory as a visible prefix, optionally cut to the same length.
The memory itself, and the block that reads it, are in `formers.variants.xl.block`.

Shapes: B batch, T query (segment) length, M memory length, S = M + T key length, D model
width, H heads, K head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.kernels.attention import adds_mask_as_bias, blocked_bias, mask_scores
from formers.kernels.sparse import offset_bias_attention
from formers.layers.attention import MultiHeadAttention, zero_rows_without_keys
from formers.layers.cache import LayerState
from formers.layers.mask import AttentionMask
from formers.variants.xl.config import XLConfig
from formers.variants.xl.mask import XLMask


def relative_sinusoid(distances: Tensor, d_model: int, dtype: torch.dtype) -> Tensor:
    """R for the given distances, (S, D): [sin(d·ω), cos(d·ω)] with ω_i = 10000^(−2i/D).

    The reference code's layout (all sines, then all cosines); angles in at least fp32, so
    distances in the thousands stay exact in low-precision models.
    """
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, device=distances.device, dtype=compute)
        * (-math.log(10000.0) / d_model)
    )  # (D/2,)
    angles = distances.to(compute)[:, None] * inv_freq  # (S, D/2)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).to(dtype)  # (S, D)


def rel_shift(x: Tensor) -> Tensor:
    """Align scores against distances S−1 … −1 so that entry (i, j) is for distance i + S − T − j.

    Column c of row i of `x` holds distance S − 1 − c, and entry (i, j) needs column
    j + T − 1 − i. In the flat buffer that is element i·(S+1) + j + T − 1 = i·S + j + (T − 1):
    the aligned (T, S) scores are the T·S consecutive elements from offset T − 1, read with rows
    of length S. So the shift is a view, where the reference code pads a zero column and copies
    (Dai et al., App. B; `_rel_shift`); the extra distance −1 column takes the pad's place.
    Entries above the causal diagonal (j > i + S − T) then hold values from other columns: exact
    only under the causal mask, never for bidirectional attention.

    Args:
        x: (…, T, S + 1) contiguous scores with T <= S.

    Returns:
        (…, T, S), a view of x.
    """
    *lead, length, width = x.shape
    key_len = width - 1
    flat = x.view(*lead, length * width)  # (…, T·(S+1))
    return flat[..., length - 1 : length - 1 + length * key_len].view(*lead, length, key_len)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention scored by A^rel (Dai et al. 2019 §3.3): content plus relative position.

    Called by `XLBlock` with context = cat(memory, x): queries come from x (B, T, D), keys and
    values from the context (B, S, D), whose last T rows are x.

    Args:
        d_model: model width D.
        n_heads: heads H.
        options: the layer's `XLConfig`, kept as `self.options` (its block reads mem_len and
            same_length there).
        dropout: dropout on the attention weights.
    """

    config_class = XLConfig

    def __init__(self, d_model: int, n_heads: int, options: XLConfig, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.options = options
        self.r_proj = nn.Linear(d_model, d_model, bias=False)  # W_{k,R}
        nn.init.xavier_uniform_(self.r_proj.weight)
        # u and v as flat (H·K,) vectors: AdamW then treats them like biases (no decay).
        self.u = nn.Parameter(torch.empty(d_model).normal_(std=0.02))
        self.v = nn.Parameter(torch.empty(d_model).normal_(std=0.02))

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: XLConfig) -> RelativeMultiHeadAttention:
        """Build from a model config and a layer's `XLConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options, cfg.attn_dropout)

    @classmethod
    def tie_layers(cls, layers: list[MultiHeadAttention], options: XLConfig) -> None:
        """One u and one v for the whole stack, as in the reference code (unless untied)."""
        if options.untie_rel_bias:
            return
        first = layers[0]
        for layer in layers[1:]:
            layer.u, layer.v = first.u, first.v

    def new_state(self) -> LayerState | None:
        """None: the memory is kept by the block (`XLBlock`), which owns the layer's input."""
        return None

    def relative_keys(self, key_len: int, device: torch.device) -> Tensor:
        """W_{k,R} R for distances S−1 … 0, −1 (capped at clamp_len), in heads, (H, S + 1, K).

        Distance −1 (a future key) is never attended to; its column lets `rel_shift` be a view.
        """
        distances = torch.arange(key_len - 1, -2, -1, device=device)  # (S + 1,)
        if self.options.max_distance is not None:
            distances = distances.clamp(max=self.options.max_distance)
        weight = self.r_proj.weight
        r = self.r_proj(relative_sinusoid(distances, self.d_model, weight.dtype))  # (S + 1, D)
        return r.view(key_len + 1, self.n_heads, self.d_head).transpose(0, 1)  # (H, S + 1, K)

    def position_scores(self, q: Tensor, key_len: int) -> Tensor:
        """Terms (b) + (d) over scaled queries (B, H, T, K) against distances S−1 … −1:
        (B, H, T, S + 1), column c for distance S − 1 − c (unaligned: see `rel_shift`)."""
        v = self.v.view(self.n_heads, 1, self.d_head).to(q.dtype)  # (H, 1, K)
        r = self.relative_keys(key_len, q.device).to(q.dtype)  # (H, S + 1, K)
        # 1/√d_k goes on the (T, K) queries, not on the (T, S) scores: one pass fewer over them.
        return ((q + v) * self.scale) @ r.transpose(-2, -1)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Eq. 4 then Eq. 1: on CUDA the relative terms (b) + (d) are a score_mod of FlexAttention
        over the causal tiles (`formers.kernels.sparse`), else `scores` and `weights`."""

        def explicit() -> Tensor:
            return MultiHeadAttention.attend(self, q, k, v, mask, state)

        if not isinstance(mask, XLMask) or mask.key_valid is not None or state is not None:
            return explicit()
        u = self.u.view(self.n_heads, 1, self.d_head).to(q.dtype)  # (H, 1, K)
        return offset_bias_attention(
            q + u,  # (a) + (c): (q_i + u)ᵀ k_j
            k,
            v,
            lambda: self.position_scores(q, k.shape[-2]),
            window=mask.window,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
            explicit=explicit,
        )

    def scores(self, q: Tensor, k: Tensor, mask: AttentionMask) -> Tensor:
        """A^rel / √d_k for queries (B, H, T, K) against keys (B, H, S, K), masked: (B, H, T, S).

        Masked entries are pushed below every visible score (`mask_scores`), so `weights` is a
        plain softmax.
        """
        batch, heads, length, _ = q.shape
        key_len = k.shape[-2]
        u = self.u.view(heads, 1, self.d_head).to(q.dtype)  # (H, 1, K)
        position = self.position_scores(q, key_len)  # (b) + (d), (B, H, T, S + 1)
        shifted = rel_shift(position.flatten(0, 1))  # aligned to i − j, a view (B·H, T, S)
        allowed = mask.dense(length, key_len, q.device)  # (B|1, 1, T, S) bool
        folds_mask = allowed is not None and adds_mask_as_bias(q.dtype)
        if not folds_mask:
            scores = shifted.contiguous()
        else:
            # the pass that lays the shifted view out also adds the mask (`blocked_bias`)
            blocked = blocked_bias(allowed, q.dtype)  # (B|1, 1, T, S)
            if blocked.shape[0] == 1:
                blocked = blocked[0]  # (1, T, S)
            else:  # a mask per sequence, repeated for the heads
                blocked = blocked.expand(-1, heads, -1, -1).flatten(0, 1)  # (B·H, T, S)
            scores = shifted + blocked  # (B·H, T, S)
        content_q = ((q + u) * self.scale).flatten(0, 1)  # (B·H, T, K)
        keys = k.flatten(0, 1).transpose(1, 2)  # (B·H, K, S)
        # (a) + (c) added in place by the matmul (C = C + A·B)
        scores = scores.baddbmm_(content_q, keys).view(batch, heads, length, key_len)
        if allowed is not None and not folds_mask:  # fp16: filled once the sum is known
            scores = mask_scores(scores, allowed)
        return scores

    def weights(self, scores: Tensor, mask: AttentionMask) -> Tensor:
        """Softmax over keys: `scores` already carry the mask."""
        weights = torch.softmax(scores, dim=-1)
        if mask.every_query_sees_a_key:
            return weights
        allowed = mask.dense(scores.shape[-2], scores.shape[-1], scores.device)
        return weights if allowed is None else zero_rows_without_keys(weights, mask, allowed)

    # --- cost model ---------------------------------------------------------------------------

    def keys_per_query(self, seq_len: int) -> int:
        """The segment plus a full memory."""
        return seq_len + self.options.mem_len

    def score_flops_per_token(self, seq_len: int) -> float:
        """Three products per query–key pair: content, position (Eq. 4 (b)+(d)) and values."""
        return 2.0 * 3 * self.keys_per_query(seq_len) * self.d_model

    def per_segment_parameters(self) -> list[nn.Parameter]:
        """W_{k,R} projects the S relative sinusoids once per segment, shared by the batch."""
        return list(self.r_proj.parameters())
