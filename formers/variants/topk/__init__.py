"""Explicit Sparse Transformer, Zhao et al. 2019 (https://arxiv.org/abs/1912.11637): each query
keeps its k best keys (`attention.py`), with its options (`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.topk.config import TopKConfig

if TYPE_CHECKING:
    from formers.variants.topk.attention import TopKAttention, keep_top_k

# the attention needs torch: it loads on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {name: "formers.variants.topk.attention" for name in ("TopKAttention", "keep_top_k")},
)
__all__ = ["TopKAttention", "TopKConfig", "keep_top_k"]
