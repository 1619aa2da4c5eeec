"""Linformer, Wang et al. 2020 (https://arxiv.org/abs/2006.04768): keys and values compressed
along the sequence to k rows (`attention.py`), with its options (`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.linformer.config import LinformerConfig

if TYPE_CHECKING:
    from formers.variants.linformer.attention import LinformerAttention, compress

# the attention needs torch: it loads on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {name: "formers.variants.linformer.attention" for name in ("LinformerAttention", "compress")},
)
__all__ = ["LinformerAttention", "LinformerConfig", "compress"]
