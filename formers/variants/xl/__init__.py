"""Transformer-XL, Dai et al. 2019 (https://arxiv.org/abs/1901.02860): relative positional
attention (`attention.py`) and segment-level recurrence (`block.py`), with its options
(`config.py`) and mask (`mask.py`)."""

from formers.variants.xl.attention import (
    RelativeMultiHeadAttention,
    rel_shift,
    relative_sinusoid,
)
from formers.variants.xl.block import XLBlock, XLMemory
from formers.variants.xl.config import XLConfig
from formers.variants.xl.mask import XLMask, xl_mask

__all__ = [
    "RelativeMultiHeadAttention",
    "XLBlock",
    "XLConfig",
    "XLMask",
    "XLMemory",
    "rel_shift",
    "relative_sinusoid",
    "xl_mask",
]
