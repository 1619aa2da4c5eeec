"""Linformer, Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"
(https://arxiv.org/abs/2006.04768).

The n×n attention matrix is close to low rank (§3), so keys and values are compressed along the
sequence to k ≪ n rows by learned projections E_i, F_i ∈ R^{n×k} before Eq. 1 (Eq. 7):

    head_i = softmax(Q W_i^Q (E_iᵀ K W_i^K)ᵀ / √d_k) · F_iᵀ V W_i^V      (n×k weights, not n×n)

Time and memory are O(n·k). Sharing (§4, "Additional Efficiency Techniques"):
    none        E_i, F_i per head                    2·H·n·k parameters per layer
    headwise    E, F shared by the heads of a layer  2·n·k per layer
    kv          headwise, and F = E                  n·k per layer
    layerwise   one E for every head, K and V and layer of the stack: n·k in all

Diff from vanilla: `project` only. Keys and values are projected as usual, then compressed:
k ← Eᵀ k, v ← Fᵀ v; `scores` and `weights` are vanilla, so the fused SDPA kernel runs on the
(T, k) problem.
Not causal: every compressed key E_iᵀ K mixes all n positions, the future included, so a
"language model" on it (lucidrains' LinformerLM) reads the tokens it is asked to predict. The
config refuses causal stacks; its home is a bidirectional encoder (masked LM, `arch="encoder"`)
or the encoder of an encoder–decoder.
Our choices:
  - E, F are (n_max, k): an input of n < n_max positions uses their first n rows (the paper's
    fixed n, made usable for shorter inputs as fairseq and lucidrains do); n > n_max is an error;
  - padded positions are zeroed in k and v before the compression, so padding contributes
    nothing to the compressed keys and values (a padded input equals the unpadded one: the
    pad rows meet zeros of E and F's extra rows, exactly);
  - init N(0, 1/n_max): Eᵀ K then keeps the scale of K at n = n_max (an nn.Linear(n_max, k),
    fairseq's layout, has the same 1/√n scale);
  - default sharing "headwise": the layout of lucidrains' LinformerSelfAttention (one
    projection per layer for keys, one for values), so the benchmark compares like with like.

Shapes: B batch, H heads, T query length, S key length (≤ n_max), P projection copies (H or 1),
k compressed length, K head dim, D = H·K model width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from formers.config import AttentionConfig, ModelConfig
from formers.errors import InputError
from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import LayerState
from formers.layers.mask import AttentionMask
from formers.variants.linformer.config import LinformerConfig


def compress(x: Tensor, proj: Tensor) -> Tensor:
    """projᵀ x along the sequence: (B, H, S, K) with (P, S, k) -> (B, H, k, K), P = H or 1."""
    batch, heads, length, dim = x.shape
    proj = proj.to(x.dtype)
    if proj.shape[0] == heads and heads > 1:
        return proj.transpose(1, 2) @ x  # (H, k, S) @ (B, H, S, K): one product per head
    # one E for all heads: one (k, S) @ (S, D) product per sequence on the heads' shared layout
    # (a strided view of the fused qkv output, read in place), instead of a broadcast over heads
    # that would copy E once per head, or a transposed product that would copy k and v
    flat = x.transpose(1, 2).reshape(batch, length, heads * dim)  # (B, S, D), a view of qkv
    out = proj[0].transpose(0, 1) @ flat  # (B, k, D)
    return out.view(batch, -1, heads, dim).transpose(1, 2)  # (B, H, k, K)


class LinformerAttention(MultiHeadAttention):
    """Multi-head attention over keys and values compressed to `proj_len` rows (Eq. 7).

    Args:
        d_model: model width D.
        n_heads: heads H.
        max_len: n_max, the longest input (`options.seq_len(cfg)`).
        options: the layer's `LinformerConfig`, kept as `self.options`.
        dropout: dropout on the attention weights.
    """

    config_class = LinformerConfig
    key_axis = "compressed key row (Eᵀ K)"

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        max_len: int,
        options: LinformerConfig,
        dropout: float = 0.0,
    ):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.max_len, self.options = max_len, options
        proj_len, sharing = options.proj_len, options.sharing
        copies = n_heads if sharing == "none" else 1
        self.e_proj = nn.Parameter(torch.randn(copies, max_len, proj_len) / math.sqrt(max_len))
        self.f_proj = None  # kv and layerwise sharing: F = E
        if sharing in ("none", "headwise"):
            self.f_proj = nn.Parameter(torch.randn(copies, max_len, proj_len) / math.sqrt(max_len))

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: LinformerConfig) -> LinformerAttention:
        """Build from a model config and a layer's `LinformerConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options.seq_len(cfg), options, cfg.attn_dropout)

    @classmethod
    def tie_layers(cls, layers: list[MultiHeadAttention], options: AttentionConfig) -> None:
        """Layerwise sharing: every layer of the stack uses the first layer's E (§4)."""
        if getattr(options, "sharing", None) == "layerwise":
            for layer in layers[1:]:
                layer.e_proj = layers[0].e_proj

    def new_state(self) -> LayerState | None:
        """No decoding state: Linformer is never causal, so it never decodes token by token."""
        return None

    def project(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """Vanilla q, k, v, then k ← Eᵀ k and v ← Fᵀ v along the sequence; every compressed key
        is visible, so the returned mask is empty."""
        if mask.causal:
            raise InputError(
                "linformer attention got a causal mask: its compressed keys mix all positions, "
                "so it cannot hide the future; use it in an encoder"
            )
        q, k, v, _ = super().project(x, context)  # (B, H, T|S, K)
        length = k.shape[2]
        if length > self.max_len:
            raise InputError(
                f"a sequence of {length} positions is longer than attention.max_len="
                f"{self.max_len}, the rows of Linformer's projections E, F: cut the input to "
                f"{self.max_len} positions, or build the model with attention.max_len >= {length}"
            )
        if mask.key_valid is not None:
            keep = mask.key_valid[:, None, :, None]  # (B, 1, S, 1)
            k, v = k.masked_fill(~keep, 0.0), v.masked_fill(~keep, 0.0)
        e = self.e_proj[:, :length]  # (P, S, k): the first S rows
        f = e if self.f_proj is None else self.f_proj[:, :length]
        return q, compress(k, e), compress(v, f), NO_MASK  # k, v: (B, H, k, K)

    # --- cost model (formers bench) ----------------------------------------------------------

    def keys_per_query(self, seq_len: int) -> int:
        """Each query is scored against the k compressed keys, whatever the length."""
        return self.options.proj_len

    def score_flops_per_token(self, seq_len: int) -> float:
        """q·kᵀ and the weighted sum over k keys (4·k·D), plus each token's share of the
        compressions Eᵀ K and Fᵀ V (2 FLOPs · k · D each)."""
        return (
            super().score_flops_per_token(seq_len) + 2.0 * 2 * self.options.proj_len * self.d_model
        )

    def per_segment_parameters(self) -> list[nn.Parameter]:
        """E and F: each token meets k of their entries per channel, counted in
        `score_flops_per_token`, not once per entry like a weight matrix."""
        return [p for p in (self.e_proj, self.f_proj) if p is not None]
