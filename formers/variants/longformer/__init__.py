"""Longformer, Beltagy et al. 2020 (https://arxiv.org/abs/2004.05150): a sliding window plus
global tokens (`attention.py`) over the shared sliding-window and rolling-window kernels
(`formers.kernels`), with its options (`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.longformer.config import LongformerConfig

if TYPE_CHECKING:
    from formers.variants.longformer.attention import LongformerAttention, LongformerCache

# the attention needs torch: it loads on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {
        name: "formers.variants.longformer.attention"
        for name in ("LongformerAttention", "LongformerCache")
    },
)
__all__ = ["LongformerAttention", "LongformerCache", "LongformerConfig"]
