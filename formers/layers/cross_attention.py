"""Encoder–decoder attention, Vaswani et al. 2017 §3.2.3 (https://arxiv.org/abs/1706.03762).

Queries come from the decoder, keys and values from the encoder's output, which does not change
while a sentence is decoded. So a decoding state (`ContextKV`) projects the context once per
source and keeps it, instead of projecting it again at every step.

Diff from vanilla (`MultiHeadAttention`), with a decoding state only:
  - project: W^K and W^V run on the context at the first step; later steps reuse them;
  - attend: the G decoding rows that read one context row (beam search's beams of a sentence)
    attend as G queries of that row, so its keys and values are read once, not G times.
Without a state (training, scoring, decoding without a cache) it is the vanilla layer.

Shapes: B context rows, G decoding rows per context row, N = B·G, H heads, T query length,
S context length, K head dim.
"""

from __future__ import annotations

from torch import Tensor

from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import ContextKV, LayerState
from formers.layers.mask import AttentionMask


class CrossAttention(MultiHeadAttention):
    """Multi-head attention from decoder states to a fixed context, cached per source."""

    def new_state(self) -> LayerState | None:
        """An empty decoding state: the context's keys and values, once they are projected."""
        return ContextKV()

    def project(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """Queries from x (N, T, D); the context's keys and values from the state, projected
        from `context` (B, S, D) the first time."""
        if not isinstance(state, ContextKV):
            return super().project(x, context, mask, state)
        if state.k is None:
            k, v = self.split_heads(self.in_proj(context, slice(self.d_model, None)), 2)
            # contiguous: every later step reads them whole
            state.store(k.contiguous(), v.contiguous(), mask.key_valid, x.shape[0])
        (q,) = self.split_heads(self.in_proj(x, slice(None, self.d_model)), 1)  # (N, H, T, K)
        return q, state.k, state.v, AttentionMask(key_valid=state.key_valid)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Eq. 1 with (N, H, T, K) queries against (B, H, S, K) keys: each group of G rows as
        G·T queries of its context row."""
        group = state.group if isinstance(state, ContextKV) else 1
        if group == 1:
            return super().attend(q, k, v, mask)  # no state: nothing to extend the keys with
        rows, heads, length, dim = q.shape
        grouped = q.view(-1, group, heads, length, dim).transpose(1, 2)  # (B, H, G, T, K)
        out = super().attend(grouped.reshape(-1, heads, group * length, dim), k, v, mask)
        out = out.view(-1, heads, group, length, dim).transpose(1, 2)  # (B, G, H, T, K)
        return out.reshape(rows, heads, length, dim)  # (N, H, T, K)
