"""Routing Transformer, Roy et al. 2020 (https://arxiv.org/abs/2003.05997): attention inside
clusters of an online k-means (`attention.py`, `kmeans.py`) over the shared cluster and band
kernels (`formers.kernels`), with its options (`config.py`)."""

from formers.variants.routing.attention import RoutingAttention, RoutingCache
from formers.variants.routing.config import RoutingConfig
from formers.variants.routing.kmeans import OnlineKMeans

__all__ = ["OnlineKMeans", "RoutingAttention", "RoutingCache", "RoutingConfig"]
