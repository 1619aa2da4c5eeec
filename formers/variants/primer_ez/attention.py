"""Primer EZ, So et al. 2021, "Primer: Searching for Efficient Transformers for Language Modeling"
(https://arxiv.org/abs/2109.08668).

An architecture search over TensorFlow programs found two changes that carry most of Primer's
gain; "Primer EZ" is vanilla plus just those two:
  squared ReLU in the feed-forward network      act(x) = max(x, 0)²
  multi-DConv-head attention (MDHA)             a causal depthwise convolution of width 3 along
                                                the sequence after each of the Q, K, V projections

Diff from vanilla:
  - FeedForward(activation="squared_relu") (already in `formers.layers.feedforward`).
  - `MultiDConvHeadAttention` overrides only `project`: q, k, v ← DConv(q), DConv(k), DConv(v).
    `scores` and `weights` are vanilla, so the fused SDPA kernel still runs.
  - During cached decoding the last kernel−1 *pre-conv* projections of each layer are kept in
    its decoding state (`DConvCache`, a KV cache with the convolutions' tails), so each new
    token's convolution sees the same inputs as a full pass.

Shapes: B batch, T query length, S key length, P left-context length, H heads, K head dim,
D = H·K model width.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError
from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import KVCache, LayerState
from formers.layers.mask import AttentionMask
from formers.variants.primer_ez.config import MDHAConfig


class DepthwiseCausalConv(nn.Module):
    """y_t = Σ_{j<k} w_j ⊙ x_{t−j} + b, a separate kernel for every channel of every head.

    The taps are kept as one (D,) vector per shift distance j, the layout of the official code
    (`causal_depthwise_conv` in google-research primer/t5_models.py); being 1-d, they are also
    spared weight decay, like the other per-channel gains. Initialisation as there: w_0 = 0.5,
    w_j = 0.5 / k for j ≥ 1, so at the start each channel is about a smoothed copy of itself.

    Args:
        n_heads: heads H.
        d_head: channels per head K.
        kernel_size: taps k; k−1 past positions are mixed into each output.
        bias: add a per-channel bias b (zero-initialised).
    """

    def __init__(self, n_heads: int, d_head: int, kernel_size: int = 3, bias: bool = True):
        super().__init__()
        self.n_heads, self.d_head, self.kernel_size = n_heads, d_head, kernel_size
        channels = n_heads * d_head
        self.taps = nn.ParameterList(
            nn.Parameter(torch.full((channels,), 0.5 if shift == 0 else 0.5 / kernel_size))
            for shift in range(kernel_size)
        )
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    @property
    def context_size(self) -> int:
        """How many past inputs each output needs: kernel_size − 1."""
        return self.kernel_size - 1

    def forward(self, x: Tensor, prefix: Tensor | None = None) -> Tensor:
        """Convolve (B, H, T, K) along T, causally.

        Args:
            x: (B, H, T, K) projections of T consecutive positions.
            prefix: (B, H, P, K) projections of the positions just before x (a cache, or the
                tail of a previous segment); only the last kernel_size−1 are used, and missing
                ones are zeros (the causal zero padding of a sequence start).
        """
        span, length = self.context_size, x.shape[2]
        shape = (self.n_heads, 1, self.d_head)  # broadcasts over (B, H, T, K)
        if prefix is not None and span > 0:
            x = torch.cat([prefix[:, :, max(0, prefix.shape[2] - span) :], x], dim=2)
        x = F.pad(x, (0, 0, span + length - x.shape[2], 0))  # (B, H, span + T, K)
        out = self.taps[0].to(x.dtype).view(shape) * x[:, :, span:]
        for shift in range(1, self.kernel_size):
            window = x[:, :, span - shift : span - shift + length]  # x_{t−shift}, (B, H, T, K)
            out = out + self.taps[shift].to(x.dtype).view(shape) * window
        if self.bias is not None:
            out = out + self.bias.to(x.dtype).view(shape)
        return out

    def next_prefix(self, x: Tensor, prefix: Tensor | None = None) -> Tensor:
        """The left context for the positions after x: the last kernel_size−1 of (prefix, x)."""
        if prefix is not None:
            x = torch.cat([prefix, x], dim=2)
        return x[:, :, max(0, x.shape[2] - self.context_size) :]  # (B, H, ≤ k−1, K)


def qkv_convolutions(n_heads: int, d_head: int, options: MDHAConfig) -> list[DepthwiseCausalConv]:
    """The three convolutions, of q, k and v, that `options` asks for."""
    size, bias = options.kernel_size, options.conv_bias
    return [DepthwiseCausalConv(n_heads, d_head, size, bias) for _ in range(3)]


class DConvCache(KVCache):
    """A key/value cache plus, per projection, its last kernel_size−1 pre-conv inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.tails: dict[str, Tensor] = {}  # "q" | "k" | "v" -> (B, H, ≤ k−1, K)

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` of the keys, values and tails."""
        super().reorder(index)
        self.tails = {name: tail[index] for name, tail in self.tails.items()}


class MultiDConvHeadAttention(MultiHeadAttention):
    """Multi-head attention whose q, k and v each pass through a `DepthwiseCausalConv`.

    Self-attention only: the encoder–decoder builds its cross-attention as plain
    `MultiHeadAttention`. A `context` is read as Transformer-XL's `cat(memory, x)` (its last T rows
    are x), so the convolutions see the memory's tail instead of zero padding.

    Args:
        d_model: model width D.
        n_heads: heads H.
        options: the layer's `MDHAConfig`, kept as `self.options`.
        dropout: dropout on the attention weights.
    """

    config_class = MDHAConfig

    def __init__(self, d_model: int, n_heads: int, options: MDHAConfig, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.options = options
        self.q_dconv, self.k_dconv, self.v_dconv = qkv_convolutions(n_heads, self.d_head, options)

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: MDHAConfig) -> MultiDConvHeadAttention:
        """Build from a model config and a layer's `MDHAConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options, cfg.attn_dropout)

    @property
    def tokens_per_key(self) -> int:
        """Each key is a convolution of its own token's projection and the kernel_size − 1
        before it."""
        return self.options.kernel_size

    def new_state(self) -> LayerState | None:
        """Keys and values so far, and the convolutions' left context."""
        return DConvCache()

    def project(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """Vanilla projections, then the depthwise convolutions, (B, H, T, K) each."""
        if context is not None:
            return (*self.project_with_memory(x, context), mask)
        *projected, _ = super().project(x)  # q, k, v before the convolutions
        convs = (self.q_dconv, self.k_dconv, self.v_dconv)
        if not isinstance(state, DConvCache):  # a sequence start: zero left context
            return (*(conv(p) for conv, p in zip(convs, projected, strict=True)), mask)
        out = []
        for name, conv, p in zip(("q", "k", "v"), convs, projected, strict=True):
            prefix = state.tails.get(name)  # the last k−1 pre-conv projections
            out.append(conv(p, prefix))
            state.tails[name] = conv.next_prefix(p, prefix)
        return (*out, mask)

    def project_with_memory(self, x: Tensor, context: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention over `context` = cat(memory, x) (B, M + T, D), queries from x (B, T, D).

        k and v are convolved along the whole context; q's left context is the projection of the
        last kernel_size−1 memory rows. The first kernel_size−1 memory keys still see zeros.
        """
        length, memory_length = x.shape[1], context.shape[1] - x.shape[1]
        if memory_length < 0:
            raise InputError(
                f"MultiDConvHeadAttention is self-attention: context (length {context.shape[1]}) "
                f"must be cat(memory, x) and so at least as long as x (length {length})"
            )
        span = self.q_dconv.context_size
        memory_tail = context[:, max(0, memory_length - span) : memory_length]  # (B, ≤ k−1, D)
        q, k, v, _ = super().project(torch.cat([memory_tail, x], dim=1), context)
        q = self.q_dconv(q)[:, :, q.shape[2] - length :]  # drop the memory rows, (B, H, T, K)
        return q, self.k_dconv(k), self.v_dconv(v)
