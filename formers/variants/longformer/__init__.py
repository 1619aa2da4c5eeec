"""Longformer, Beltagy et al. 2020 (https://arxiv.org/abs/2004.05150): a sliding window plus
global tokens (`attention.py`), computed in blocks over the shared band kernel
(`sliding_window.py`), decoded with a rolling window (`sliding_window_cache.py`), with its
options (`config.py`)."""

from formers.variants.longformer.attention import LongformerAttention, LongformerCache
from formers.variants.longformer.config import LongformerConfig
from formers.variants.longformer.sliding_window import sliding_window_attention
from formers.variants.longformer.sliding_window_cache import (
    RollingKVCache,
    rolling_window_attention,
)

__all__ = [
    "LongformerAttention",
    "LongformerCache",
    "LongformerConfig",
    "RollingKVCache",
    "rolling_window_attention",
    "sliding_window_attention",
]
