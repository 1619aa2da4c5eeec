"""Transformer-XL, Dai et al. 2019 (https://arxiv.org/abs/1901.02860): relative positional
attention (`attention.py`) and segment-level recurrence (`block.py`), with its options
(`config.py`), presets (`presets.py`) and mask (`mask.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.xl.config import XLConfig

if TYPE_CHECKING:
    from formers.variants.xl.attention import (
        RelativeMultiHeadAttention,
        rel_shift,
        relative_sinusoid,
    )
    from formers.variants.xl.block import XLBlock, XLMemory
    from formers.variants.xl.mask import XLMask, xl_mask

# the modules need torch: they load on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {
        **{
            name: "formers.variants.xl.attention"
            for name in ("RelativeMultiHeadAttention", "rel_shift", "relative_sinusoid")
        },
        "XLBlock": "formers.variants.xl.block",
        "XLMemory": "formers.variants.xl.block",
        "XLMask": "formers.variants.xl.mask",
        "xl_mask": "formers.variants.xl.mask",
    },
)
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
