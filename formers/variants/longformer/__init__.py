"""Longformer, Beltagy et al. 2020 (https://arxiv.org/abs/2004.05150): a sliding window plus
global tokens (`attention.py`) over the shared sliding-window and rolling-window kernels
(`formers.kernels`), with its options (`config.py`)."""

from formers.variants.longformer.attention import LongformerAttention, LongformerCache
from formers.variants.longformer.config import LongformerConfig

__all__ = ["LongformerAttention", "LongformerCache", "LongformerConfig"]
