"""Primer-XL: Primer EZ's multi-DConv-head attention inside Transformer-XL.

The two chapters compose: `MultiDConvHeadAttention` changes only `project` (a causal depthwise
convolution after each of the q, k, v projections), `RelativeMultiHeadAttention` only `scores`
(A^rel with u, v and relative sinusoids). With segment memory the convolutions read the tail of
the previous segment instead of zero padding (`MultiDConvHeadAttention.project_with_memory`), so
a text scored segment by segment is scored as in one pass, in training as in evaluation.

Diff from Transformer-XL:
  - q, k, v ← DConv(q), DConv(k), DConv(v) over cat(memory, x) (kernel 3 by default);
  - the feed-forward uses squared ReLU (the `primer-xl` preset).
"""

from __future__ import annotations

from formers.layers.cache import LayerState
from formers.variants.primer_ez import MultiDConvHeadAttention, qkv_convolutions
from formers.variants.xl import RelativeMultiHeadAttention
from formers.variants.xl_primer.config import PrimerXLConfig


class PrimerXLAttention(MultiDConvHeadAttention, RelativeMultiHeadAttention):
    """Relative multi-head attention (`scores`) over depthwise-convolved q, k, v (`project`)."""

    config_class = PrimerXLConfig

    def __init__(self, d_model: int, n_heads: int, options: PrimerXLConfig, dropout: float = 0.0):
        # XL's layer (projections, W_{k,R}, u, v), then MDHA's convolutions: MDHA's __init__
        # would reach XL's through the MRO with MultiHeadAttention's arguments
        RelativeMultiHeadAttention.__init__(self, d_model, n_heads, options, dropout)
        self.q_dconv, self.k_dconv, self.v_dconv = qkv_convolutions(n_heads, self.d_head, options)

    def new_state(self) -> LayerState | None:
        """None: the memory is the block's (`XLBlock`), and the convolutions read its tail."""
        return None

