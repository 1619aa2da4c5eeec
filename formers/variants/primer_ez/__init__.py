"""Primer EZ, So et al. 2021 (https://arxiv.org/abs/2109.08668): multi-DConv-head attention
(`attention.py`; its squared ReLU is `formers.layers.feedforward`'s), with its options
(`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.primer_ez.config import MDHAConfig

if TYPE_CHECKING:
    from formers.variants.primer_ez.attention import (
        DConvCache,
        DepthwiseCausalConv,
        MultiDConvHeadAttention,
        qkv_convolutions,
    )

# the attention needs torch: it loads on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {
        name: "formers.variants.primer_ez.attention"
        for name in (
            "DConvCache",
            "DepthwiseCausalConv",
            "MultiDConvHeadAttention",
            "qkv_convolutions",
        )
    },
)
__all__ = [
    "DConvCache",
    "DepthwiseCausalConv",
    "MDHAConfig",
    "MultiDConvHeadAttention",
    "qkv_convolutions",
]
