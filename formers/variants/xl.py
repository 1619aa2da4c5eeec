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
    softmax. The explicit path, not the fused kernel.
  - one more projection per layer, W_{k,R} (`r_proj`); u, v (`u`, `v`) shared by all layers in
    the reference code, per layer with `untie_rel_bias`; no biases on the projections.
  - keys and values are computed from context = cat(memory, x); no absolute positions.
  - the mask: causal with the memory as a visible prefix, optionally cut to the same length.
The recurrent model that carries memory from segment to segment is
`formers.models.transformer_xl.TransformerXL`.

Shapes: B batch, T query (segment) length, M memory length, S = M + T key length, D model
width, H heads, K head dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from formers.config import AttentionConfig, ModelConfig
from formers.errors import ConfigError
from formers.layers.attention import MultiHeadAttention, zero_rows_without_keys
from formers.layers.mask import AttentionMask, adds_mask_as_bias, blocked_bias, mask_scores


@dataclass(frozen=True)
class XLConfig(AttentionConfig):
    """Transformer-XL: relative positional attention and segment-level recurrence.

    Args:
        mem_len: hidden states kept per layer as memory for the next segment (0: no memory).
        same_length: every query sees the same number of keys, itself and the `mem_len`
            positions before it (the reference code's evaluation setting).
        clamp_len: cap relative distances at this value, so a long evaluation memory reuses the
            farthest trained distance (None or -1: no cap).
        untie_rel_bias: give every layer its own u and v instead of one pair for all layers.
        adaptive_cutoffs: vocabulary cutoffs of an adaptive softmax output layer (Grave et al.
            2017, `torch.nn.AdaptiveLogSoftmaxWithLoss`), e.g. (20000, 40000, 200000) for
            WikiText-103; None: a plain softmax. Needs tie_embeddings=False.
        adaptive_div_value: each adaptive-softmax cluster is this much narrower than the last.
    """

    kind: str = "xl"
    bias: bool = False  # the reference code's projections have no biases
    mem_len: int = 128
    same_length: bool = False
    clamp_len: int | None = None
    untie_rel_bias: bool = False
    adaptive_cutoffs: tuple[int, ...] | None = None
    adaptive_div_value: float = 4.0

    # the model shape that carries the memory (see formers.models.build)
    model: ClassVar[str] = "transformer_xl"

    def __post_init__(self) -> None:
        cutoffs = self.adaptive_cutoffs
        if isinstance(cutoffs, str):  # from the command line: "2000,10000"
            cutoffs = [part for part in cutoffs.replace(" ", "").split(",") if part]
        if cutoffs is not None:
            try:
                cutoffs = tuple(int(c) for c in cutoffs)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"attention.adaptive_cutoffs={self.adaptive_cutoffs!r} must be a list of "
                    "increasing token ids, e.g. [2000, 10000]"
                ) from None
        object.__setattr__(self, "adaptive_cutoffs", cutoffs or None)

    @property
    def max_distance(self) -> int | None:
        """The relative distance cap, or None."""
        return None if self.clamp_len is None or self.clamp_len < 0 else self.clamp_len

    def validate(self, model: ModelConfig) -> None:
        super().validate(model)
        if model.arch != "decoder":
            raise ConfigError(
                f"attention.kind='xl' needs arch='decoder', not {model.arch!r}: its relative "
                "shift is exact only under the causal mask, and its memory only makes sense "
                "for a causal LM"
            )
        if model.position != "none":
            raise ConfigError(
                f"attention.kind='xl' encodes positions inside attention (relative sinusoids): "
                f"set position='none' instead of {model.position!r}"
            )
        if isinstance(self.mem_len, bool) or not isinstance(self.mem_len, int) or self.mem_len < 0:
            raise ConfigError(f"attention.mem_len={self.mem_len!r} must be an integer >= 0")
        if self.clamp_len is not None and (
            isinstance(self.clamp_len, bool)
            or not isinstance(self.clamp_len, int)
            or (self.clamp_len < 1 and self.clamp_len != -1)
        ):
            raise ConfigError(
                f"attention.clamp_len={self.clamp_len!r} must be a positive distance cap, or None "
                "(or -1) for no cap"
            )
        if self.adaptive_cutoffs is not None:
            self._validate_adaptive(model)

    def _validate_adaptive(self, model: ModelConfig) -> None:
        cutoffs = self.adaptive_cutoffs
        if list(cutoffs) != sorted(set(cutoffs)) or cutoffs[0] < 1:
            raise ConfigError(
                f"attention.adaptive_cutoffs={list(cutoffs)} must be strictly increasing "
                "positive token ids"
            )
        if cutoffs[-1] >= model.vocab_size:
            raise ConfigError(
                f"attention.adaptive_cutoffs={list(cutoffs)} must all be below "
                f"vocab_size={model.vocab_size}: drop the cutoffs at or above it"
            )
        if model.tie_embeddings:
            raise ConfigError(
                "attention.adaptive_cutoffs: an adaptive softmax has its own output projections "
                "and cannot share the input embedding: set tie_embeddings=False"
            )
        if self.adaptive_div_value <= 0:
            raise ConfigError(
                f"attention.adaptive_div_value={self.adaptive_div_value} must be positive"
            )


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


@dataclass(frozen=True)
class XLMask(AttentionMask):
    """A dense (T, S) mask built once per forward and shared by every layer."""

    allowed: Tensor | None = None  # (T, S) bool

    def dense(self, query_len: int, key_len: int, device: torch.device) -> Tensor:
        if self.allowed is None or self.allowed.shape != (query_len, key_len):
            raise ValueError(f"XLMask holds no ({query_len}, {key_len}) mask")
        return self.allowed[None, None]  # (1, 1, T, S)


def xl_mask(
    query_len: int,
    memory_len: int,
    same_length_window: int | None = None,
    device: torch.device | None = None,
) -> XLMask:
    """Query i, at absolute position M + i, sees key j iff 0 <= M + i − j (<= window).

    The window (`same_length`, set to mem_len) keeps for every query only itself and the window
    keys before it, so that all queries of a segment with full memory see the same number of keys.
    This is the original TensorFlow code's mask (mem_len + 1 keys); the PyTorch reference code
    drops one more key (huggingface/transformers#14832).
    """
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(memory_len + query_len, device=device)[None, :]
    distance = memory_len + rows - cols  # (T, S)
    allowed = distance >= 0
    if same_length_window is not None:
        allowed &= distance <= same_length_window
    return XLMask(causal=True, allowed=allowed)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention scored by A^rel (Dai et al. 2019 §3.3): content plus relative position.

    Called by `XLBlock` with context = cat(memory, x): queries come from x (B, T, D), keys and
    values from the context (B, S, D), whose last T rows are x.

    Args:
        d_model: model width D.
        n_heads: heads H.
        dropout: dropout on the attention weights.
        bias: biases on the q/k/v and output projections.
        clamp_len: cap relative distances at this value (None: no cap).
    """

    config_class = XLConfig

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        bias: bool = False,
        clamp_len: int | None = None,
    ):
        super().__init__(d_model, n_heads, dropout=dropout, bias=bias)
        self.clamp_len = clamp_len
        self.r_proj = nn.Linear(d_model, d_model, bias=False)  # W_{k,R}
        nn.init.xavier_uniform_(self.r_proj.weight)
        # u and v as flat (H·K,) vectors: AdamW then treats them like biases (no decay).
        self.u = nn.Parameter(torch.empty(d_model).normal_(std=0.02))
        self.v = nn.Parameter(torch.empty(d_model).normal_(std=0.02))

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> RelativeMultiHeadAttention:
        """Build from a model config whose `attention` is an `XLConfig`."""
        att = cfg.attention
        return cls(
            cfg.d_model,
            cfg.n_heads,
            dropout=cfg.attn_dropout,
            bias=att.bias,
            clamp_len=att.max_distance,
        )

    def relative_keys(self, key_len: int, device: torch.device) -> Tensor:
        """W_{k,R} R for distances S−1 … 0, −1 (capped at clamp_len), in heads, (H, S + 1, K).

        Distance −1 (a future key) is never attended to; its column lets `rel_shift` be a view.
        """
        distances = torch.arange(key_len - 1, -2, -1, device=device)  # (S + 1,)
        if self.clamp_len is not None:
            distances = distances.clamp(max=self.clamp_len)
        weight = self.r_proj.weight
        r = self.r_proj(relative_sinusoid(distances, self.d_model, weight.dtype))  # (S + 1, D)
        return r.view(key_len + 1, self.n_heads, self.d_head).transpose(0, 1)  # (H, S + 1, K)

    def scores(self, q: Tensor, k: Tensor, mask: AttentionMask) -> Tensor:
        """A^rel / √d_k for queries (B, H, T, K) against keys (B, H, S, K), masked: (B, H, T, S).

        Masked entries are pushed below every visible score (`mask_scores`), so `weights` is a
        plain softmax.
        """
        batch, heads, length, _ = q.shape
        key_len = k.shape[-2]
        u = self.u.view(heads, 1, self.d_head).to(q.dtype)  # (H, 1, K)
        v = self.v.view(heads, 1, self.d_head).to(q.dtype)
        r = self.relative_keys(key_len, q.device).to(q.dtype)  # (H, S + 1, K)
        # 1/√d_k goes on the (T, K) queries, not on the (T, S) scores: one pass fewer over them.
        position = ((q + v) * self.scale) @ r.transpose(-2, -1)  # (b) + (d), (B, H, T, S + 1)
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
