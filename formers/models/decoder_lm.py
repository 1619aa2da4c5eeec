"""Decoder-only causal language model: the paper's decoder without cross-attention.

Two kinds of state, both owned by the layers (`formers.layers.cache`):
  cache   decoding: `new_cache()`, then `model(tokens, cache=cache)` continues the positions
          already cached, each layer extending its own state in place;
  memory  recurrence between segments of a text (Transformer-XL): `model(tokens, memory=m)`
          starts each recurrent layer from its entry of m and returns the next in `out.memory`.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from formers.errors import InputError
from formers.layers.cache import Cache, LayerState
from formers.layers.mask import AttentionMask, padding_mask
from formers.models.output import ModelOutput
from formers.models.stack import BlockStackLM


class DecoderLM(BlockStackLM):
    """p(x_t | x_<t) with a stack of causal self-attention blocks.

    Args:
        cfg: the model config (arch="decoder").
    """

    stack = "decoder"

    @property
    def recurrent(self) -> bool:
        """Whether some layer carries a memory from one segment of a text to the next."""
        return any(layer.recurrent for layer in self.layers)

    def new_cache(self) -> Cache:
        """An empty decoding state for incremental decoding with `cache=`."""
        return Cache([layer.new_state() for layer in self.layers])

    def forward(
        self,
        tokens: Tensor,
        targets: Tensor | None = None,
        *,
        memory: list[Any] | None = None,
        cache: Cache | None = None,
        only_last: bool = False,
    ) -> ModelOutput:
        """Score (B, T) tokens; with `cache`, they continue the positions already cached.

        Args:
            tokens: (B, T) token ids.
            targets: (B, T) next-token ids; positions equal to -100 or `pad_id` are ignored.
            memory: `out.memory` of the previous segment of the same texts (recurrent models;
                None or [] at the start of a text).
            cache: decoding state from `new_cache()`, extended in place.
            only_last: return the logits of the last position alone, (B, 1, V), as decoding
                needs; no targets.
        """
        self.diagnostics.reset()
        if cache is not None:
            if memory is not None:
                raise InputError("pass either cache= (decoding) or memory= (segments), not both")
            states, offset = cache.layers, cache.position
        else:
            states, offset = self.memory_states(memory), 0
        x = self.embed(tokens, offset)  # (B, T, D)
        valid = padding_mask(tokens, self.cfg.pad_id) if cache is None else None
        mask = AttentionMask(causal=True, key_valid=valid)
        for layer, state in zip(self.layers, states, strict=True):
            x = layer(x, mask, state, valid)
        if cache is not None:
            cache.position += tokens.shape[1]
        out = self.output(x, tokens, targets, only_last)
        if cache is None and self.recurrent:
            out.memory = [None if state is None else state.carried() for state in states]
        return out

    def memory_states(self, memory: list[Any] | None) -> list[LayerState | None]:
        """Per layer, the state a segment starts from: recurrent layers from `memory`."""
        if not self.recurrent:
            if memory is not None:
                raise InputError(
                    "this model keeps no segment memory (no layer of it is recurrent): "
                    "call it without memory="
                )
            return [None] * len(self.layers)
        if not memory:
            memory = [None] * len(self.layers)
        if len(memory) != len(self.layers):
            raise InputError(
                f"memory has {len(memory)} tensors but the model has {len(self.layers)} layers: "
                "pass the out.memory of this model's previous call, or None to start a new text"
            )
        return [
            layer.new_state(carried) if layer.recurrent else None
            for layer, carried in zip(self.layers, memory, strict=True)
        ]
