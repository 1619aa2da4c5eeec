"""Primer-XL's options (Transformer-XL's and MDHA's together) and its preset."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from formers.config import FFNConfig, ModelConfig
from formers.variants.primer_ez.config import MDHAConfig
from formers.variants.xl.config import XLConfig
from formers.variants.xl.presets import transformer_xl


@dataclass(frozen=True)
class PrimerXLConfig(XLConfig, MDHAConfig):
    """Transformer-XL's options (mem_len, same_length, clamp_len, …) plus MDHA's kernel_size
    and conv_bias."""

    kind: str = "primer_xl"


def primer_xl() -> ModelConfig:
    """Primer EZ inside Transformer-XL: squared ReLU, DConv and relative attention, memory.

    The convolutions read the previous segment's tail instead of zero padding.
    """
    return dataclasses.replace(
        transformer_xl(),
        ffn=FFNConfig(activation="squared_relu"),
        attention=PrimerXLConfig(mem_len=128),
    )
