"""What layers keep from one call to the next: the state protocol and the key/value cache.

Every module that remembers earlier positions makes its own state (`new_state()`): an attention
kind a growing key/value cache here, a rolling window, a convolution tail, cluster assignments or
a segment memory in the variants; a feed-forward network that shares capacity between tokens
its counts of them. A layer's state is a `BlockState` with one part per module, and a model's
`Cache` is just the list of its layers' states plus the number of positions they hold, so
generation, beam search, evaluation and the trainer carry it without knowing which variant made
it.

Shapes: B batch, H heads, S cached length, K head dim, D model width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor


class LayerState:
    """What one layer keeps between calls; subclasses hold tensors whose first axis is the batch.

    Two duties beyond holding the tensors, both with defaults that fit most states:
      reorder(index)  keep batch rows `index` (beam search, dropping finished rows);
      carried()       what the layer hands to the next segment of a text as `out.memory`
                      (None: nothing; only recurrent states such as Transformer-XL's memory).
    And one fact: `bounded`, True for a state that keeps only a window of the latest
    positions (its size stops growing), so decoding never needs to crop the text for it.
    """

    bounded: ClassVar[bool] = False

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` of every tensor attribute; a state that holds its tensors
        otherwise (in a dict, say) extends this."""
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(self, name, value[index])

    def carried(self) -> Tensor | None:
        """The tensor this layer carries to the next segment (`out.memory`), or None."""
        return None


class BlockState(LayerState):
    """One layer's decoding state, a part per module that keeps one, each read and extended in
    place by its own module only.

    Args:
        attn: the self-attention's state (`attn.new_state()`), or None.
        ffn: the feed-forward network's state (`ffn.new_state()`), or None.
    """

    def __init__(self, attn: LayerState | None = None, ffn: LayerState | None = None) -> None:
        self.attn, self.ffn = attn, ffn

    @property
    def bounded(self) -> bool:  # type: ignore[override]
        """Whether the attention keeps a bounded window and the feed-forward part, if any, a
        bounded state too."""
        if self.attn is None or not self.attn.bounded:
            return False
        return self.ffn is None or self.ffn.bounded

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` of each part."""
        for part in (self.attn, self.ffn):
            if part is not None:
                part.reorder(index)

    def carried(self) -> Tensor | None:
        """What the attention part carries to the next segment (a recurrent memory), or None."""
        return self.attn.carried() if self.attn is not None else None


def block_parts(state: BlockState | None) -> tuple[LayerState | None, LayerState | None]:
    """The attention's and the feed-forward network's parts of `state`; (None, None) for none."""
    return (state.attn, state.ffn) if state is not None else (None, None)


class KVCache(LayerState):
    """Keys and values of one attention layer for the positions already decoded.

    The buffers grow by doubling, so appending one token costs O(1) amortised copies instead of
    re-concatenating the whole history every step.
    """

    def __init__(self) -> None:
        self.length = 0
        self._k: Tensor | None = None  # (B, H, capacity, K)
        self._v: Tensor | None = None

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
    """The decoding state of a whole model: one `LayerState` per layer (None for a layer that
    keeps none), and how many positions they have seen.

    Args:
        layers: the layers' states, in order.
    """

    def __init__(self, layers: Sequence[LayerState | None]) -> None:
        self.layers = list(layers)
        self.position = 0

    def __len__(self) -> int:
        return self.position

    @torch.no_grad()
    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` of every layer's state (beam search, dropping finished rows).

        Args:
            index: (B',) long indices into the current batch; rows may repeat.
        """
        for layer in self.layers:
            if layer is not None:
                layer.reorder(index)
