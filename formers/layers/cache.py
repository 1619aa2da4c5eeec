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

from formers.errors import InputError


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
        cross: a decoder layer's cross-attention state (its `ContextKV`), or None.
    """

    def __init__(
        self,
        attn: LayerState | None = None,
        ffn: LayerState | None = None,
        cross: LayerState | None = None,
    ) -> None:
        self.attn, self.ffn, self.cross = attn, ffn, cross

    @property
    def bounded(self) -> bool:  # type: ignore[override]
        """Whether the attention keeps a bounded window and the feed-forward part, if any, a
        bounded state too."""
        if self.attn is None or not self.attn.bounded:
            return False
        return self.ffn is None or self.ffn.bounded

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` of each part."""
        for part in (self.attn, self.ffn, self.cross):
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
    re-concatenating the whole history every step. Beam search reorders the rows at every step
    into a second pair of buffers of the same size, then swaps the pairs: no allocation per step.
    The pairs are tuples, which `LayerState.reorder` leaves to this class.
    """

    def __init__(self) -> None:
        self.length = 0
        self._kv: tuple[Tensor, Tensor] | None = None  # (B, H, capacity, K) each
        self._spare: tuple[Tensor, Tensor] | None = None  # the reorder's target, same shapes

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add (B, H, T, K) keys and values; return all keys and values so far (B, H, S, K)."""
        new_length = self.length + k.shape[2]
        capacity = 0 if self._kv is None else self._kv[0].shape[2]
        if new_length > capacity:
            self._grow(k, v, max(new_length, 2 * capacity))
        keys, values = self._kv
        keys[:, :, self.length : new_length] = k
        values[:, :, self.length : new_length] = v
        self.length = new_length
        return keys[:, :, :new_length], values[:, :, :new_length]

    def _grow(self, k: Tensor, v: Tensor, capacity: int) -> None:
        batch, heads, _, dim = k.shape
        new_k = k.new_empty(batch, heads, capacity, dim)
        new_v = v.new_empty(batch, heads, capacity, v.shape[-1])
        if self._kv is not None:
            new_k[:, :, : self.length] = self._kv[0][:, :, : self.length]
            new_v[:, :, : self.length] = self._kv[1][:, :, : self.length]
        self._kv, self._spare = (new_k, new_v), None

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index`: into the spare buffers when the batch keeps its size."""
        super().reorder(index)
        if self._kv is None:
            return
        filled = slice(0, self.length)
        if index.shape[0] != self._kv[0].shape[0]:  # rows dropped or repeated: a new size
            self._kv = tuple(t[index] for t in self._kv)  # type: ignore[assignment]
            self._spare = None
            return
        if self._spare is None:
            self._spare = (torch.empty_like(self._kv[0]), torch.empty_like(self._kv[1]))
        for source, target in zip(self._kv, self._spare, strict=True):
            torch.index_select(source[:, :, filled], 0, index, out=target[:, :, filled])
        self._kv, self._spare = self._spare, self._kv


class ContextKV(LayerState):
    """Keys and values of a fixed context (an encoder's output), projected once per source.

    Decoding rows read context rows in equal groups, in order: rows r·G … r·G + G - 1 read
    context row r (G = `group`; beam search's K beams of sentence r). Beam search moves rows
    within their groups at every step, which moves nothing here: only dropping (or repeating)
    sentences copies the keys and values. Before the first step, when there are no keys yet,
    `rows` remembers which context row each decoding row reads.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (C, H, S, K), C context rows
        self.v: Tensor | None = None
        self.key_valid: Tensor | None = None  # (C, S) bool, False at padding
        self.group = 1
        self.rows: Tensor | None = None  # (N,) context row of each decoding row, before k

    def store(self, k: Tensor, v: Tensor, key_valid: Tensor | None, batch: int) -> None:
        """Keep (C, H, S, K) keys and values of the context for `batch` decoding rows."""
        rows = self.rows
        if rows is None:  # no reorder yet: the rows are the context's, or groups of them
            if batch % k.shape[0]:
                raise InputError(
                    f"{batch} decoding rows cannot share {k.shape[0]} context rows: pass the "
                    "encoder output of the sources themselves and reorder the cache instead"
                )
            rows = torch.arange(k.shape[0], device=k.device).repeat_interleave(batch // k.shape[0])
        elif rows.shape[0] != batch:
            raise InputError(
                f"the cache was reordered to {rows.shape[0]} rows but {batch} rows were decoded: "
                "decode the rows of the cache's last reorder"
            )
        self.k, self.v, self.key_valid, self.rows = k, v, key_valid, None
        self._regroup(rows)

    def reorder(self, index: Tensor) -> None:
        """Keep decoding rows `index`; copies only when the context rows they read change."""
        if self.k is None:
            self.rows = index if self.rows is None else self.rows[index]
        else:
            self._regroup(index // self.group)

    def _regroup(self, rows: Tensor) -> None:
        """Point decoding row i at context row rows[i]: equal consecutive runs become groups."""
        keep, counts = torch.unique_consecutive(rows, return_counts=True)
        if bool((counts == counts[0]).all()):
            self.group = int(counts[0])
        else:  # runs of unequal length: one context row per decoding row
            keep, self.group = rows, 1
        unchanged = keep.shape[0] == self.k.shape[0] and bool(
            (keep == torch.arange(keep.shape[0], device=keep.device)).all()
        )
        if not unchanged:
            self.k, self.v = self.k.index_select(0, keep), self.v.index_select(0, keep)
            if self.key_valid is not None:
                self.key_valid = self.key_valid.index_select(0, keep)


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
