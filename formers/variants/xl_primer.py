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

from dataclasses import dataclass

from formers.config import ModelConfig
from formers.variants.primer_ez import MDHAConfig, MultiDConvHeadAttention
from formers.variants.xl import RelativeMultiHeadAttention, XLConfig


@dataclass(frozen=True)
class PrimerXLConfig(XLConfig, MDHAConfig):
    """Transformer-XL's options (mem_len, same_length, clamp_len, …) plus MDHA's kernel_size
    and conv_bias."""

    kind: str = "primer_xl"


class PrimerXLAttention(MultiDConvHeadAttention, RelativeMultiHeadAttention):
    """Relative multi-head attention (`scores`) over depthwise-convolved q, k, v (`project`)."""

    config_class = PrimerXLConfig

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> PrimerXLAttention:
        """Build from a model config whose `attention` is a `PrimerXLConfig`."""
        attn = super().from_config(cfg)  # MDHA's constructor arguments; XL's init comes via MRO
        attn.clamp_len = cfg.attention.max_distance
        return attn
