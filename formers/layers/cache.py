"""Key/value cache for incremental decoding.

Shapes: B batch, H heads, S cached length, K head dim.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer for the positions already decoded.

    The buffers grow by doubling, so appending one token costs O(1) amortised copies instead of
    re-concatenating the whole history every step. `extra` holds any other per-layer state a
    variant needs between steps (e.g. Primer's last kernel-1 projections).
    """

    def __init__(self) -> None:
        self.length = 0
        self._k: Tensor | None = None  # (B, H, capacity, K)
        self._v: Tensor | None = None
        self.extra: dict[str, Tensor] = {}

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T, K) keys and values; return all keys and values so far (B, H, S, K)."""
        new_length = self.length + k.shape[2]
        if self._k is None or new_length > self._k.shape[2]:
            self._grow(k, v, max(new_length, 2 * (self._k.shape[2] if self._k is not None else 0)))
        self._k[:, :, self.length : new_length] = k
        self._v[:, :, self.length : new_length] = v
        self.length = new_length
        return self._k[:, :, :new_length], self._v[:, :, :new_length]

    def _grow(self, k: Tensor, v: Tensor, capacity: int) -> None:
        batch, heads, _, dim = k.shape
        new_k = k.new_empty(batch, heads, capacity, dim)
        new_v = v.new_empty(batch, heads, capacity, v.shape[-1])
        if self._k is not None:
            new_k[:, :, : self.length] = self._k[:, :, : self.length]
            new_v[:, :, : self.length] = self._v[:, :, : self.length]
        self._k, self._v = new_k, new_v


class Cache:
    """Per-layer caches of a whole model plus how many positions they hold."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [KVCache() for _ in range(n_layers)]
        self.position = 0

    def __len__(self) -> int:
        return self.position

    @torch.no_grad()
    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (beam search, dropping finished samples)."""
        for layer in self.layers:
            if layer._k is not None:
                layer._k, layer._v = layer._k[index], layer._v[index]
            layer.extra = {name: t[index] for name, t in layer.extra.items()}
