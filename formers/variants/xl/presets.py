"""Transformer-XL's presets: the vanilla decoder (`ModelConfig()`'s defaults, the paper's base
model) plus relative attention and segment memory."""

from __future__ import annotations

import dataclasses

from formers.config import ModelConfig
from formers.variants.xl.config import XLConfig


def transformer_xl() -> ModelConfig:
    """Transformer-XL (Dai et al. 2019): vanilla + relative attention + segment memory.

    Post-LN as the reference code's default (`norm="pre"` for its pre_lnorm option); no
    absolute positions, they live in the attention; memory of 128 states per layer.
    """
    return dataclasses.replace(ModelConfig(), attention=XLConfig(mem_len=128), position="none")


def transformer_xl_enwik8() -> ModelConfig:
    """Transformer-XL's 12-layer enwik8 model (Dai et al. 2019, §4.1): 41M parameters, bytes.

    d_model=512, 8 heads, d_ff=2048, dropout 0.1, memory 512: train with seq_len 512, evaluate
    as the reference scripts do with --tgt-len 80 --mem-len 2100 --clamp-len 820 --same-length.
    A GPU model.
    """
    return dataclasses.replace(
        transformer_xl(), n_layers=12, vocab_size=256, attention=XLConfig(mem_len=512)
    )
