"""Primer-XL: Primer EZ's multi-DConv-head attention inside Transformer-XL (`attention.py`),
with its options and preset (`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.xl_primer.config import PrimerXLConfig, primer_xl

if TYPE_CHECKING:
    from formers.variants.xl_primer.attention import PrimerXLAttention

# the attention needs torch: it loads on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__, {"PrimerXLAttention": "formers.variants.xl_primer.attention"}
)
__all__ = ["PrimerXLAttention", "PrimerXLConfig", "primer_xl"]
