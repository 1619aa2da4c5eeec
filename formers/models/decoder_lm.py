"""Decoder-only causal language model: the paper's decoder without cross-attention.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor

from formers.errors import InputError
from formers.layers.cache import Cache
from formers.layers.mask import AttentionMask, padding_mask
from formers.models.output import ModelOutput
from formers.models.stack import BlockStackLM


class DecoderLM(BlockStackLM):
    """p(x_t | x_<t) with a stack of causal self-attention blocks.

    Args:
        cfg: the model config (arch="decoder").
    """

    def new_cache(self) -> Cache:
        """An empty key/value cache for incremental decoding with `cache=`."""
        return Cache(len(self.layers))

    def forward(
        self,
        tokens: Tensor,
        targets: Tensor | None = None,
        *,
        memory: list[Tensor] | None = None,
        cache: Cache | None = None,
    ) -> ModelOutput:
        """Score (B, T) tokens; with `cache`, they continue the positions already cached.

        Args:
            tokens: (B, T) token ids.
            targets: (B, T) next-token ids; positions equal to -100 or `pad_id` are ignored.
            memory: segment memory; only recurrent models (Transformer-XL) accept it.
            cache: key/value cache from `new_cache()`, extended in place.
        """
        if memory is not None:
            raise InputError(
                "this model keeps no segment memory: pass memory= only to a recurrent model "
                "such as the 'transformer-xl' preset"
            )
        offset = cache.position if cache is not None else 0
        x = self.embed(tokens, offset)  # (B, T, D)
        key_valid = padding_mask(tokens, self.cfg.pad_id) if cache is None else None
        mask = AttentionMask(causal=True, key_valid=key_valid)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, cache=cache.layers[i] if cache is not None else None)
        if cache is not None:
            cache.position += tokens.shape[1]
        return self.output(x, tokens, targets)
