"""Routing Transformer, Roy et al. 2020 (https://arxiv.org/abs/2003.05997): attention inside
clusters of an online k-means (`attention.py`, `kmeans.py`) over the shared cluster and band
kernels (`formers.kernels`), with its options (`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.routing.config import RoutingConfig

if TYPE_CHECKING:
    from formers.variants.routing.attention import RoutingAttention, RoutingCache
    from formers.variants.routing.kmeans import OnlineKMeans

# the modules need torch: they load on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {
        "OnlineKMeans": "formers.variants.routing.kmeans",
        "RoutingAttention": "formers.variants.routing.attention",
        "RoutingCache": "formers.variants.routing.attention",
    },
)
__all__ = ["OnlineKMeans", "RoutingAttention", "RoutingCache", "RoutingConfig"]
