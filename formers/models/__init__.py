"""Model shapes and `build`."""

from __future__ import annotations

from torch import nn

from formers.config import ModelConfig
from formers.errors import ConfigError
from formers.models.decoder_lm import DecoderLM
from formers.models.encoder_decoder import EncoderDecoder
from formers.models.encoder_lm import EncoderLM
from formers.models.output import ModelOutput
from formers.models.transformer_xl import TransformerXL

MODELS: dict[str, type[nn.Module]] = {
    "decoder": DecoderLM,
    "encoder_decoder": EncoderDecoder,
    "encoder": EncoderLM,
    "transformer_xl": TransformerXL,  # arch="decoder" with XL attention
}


def build(cfg: ModelConfig) -> nn.Module:
    """The model that `cfg` describes, freshly initialised."""
    if not isinstance(cfg, ModelConfig):
        raise ConfigError(
            f"build() takes a ModelConfig, got {type(cfg).__name__}: "
            "make one with formers.config(preset, **overrides)"
        )
    # an attention that needs its own model shape names it (Transformer-XL: memory)
    return MODELS[getattr(cfg.attention, "model", cfg.arch)](cfg)


__all__ = [
    "MODELS",
    "DecoderLM",
    "EncoderDecoder",
    "EncoderLM",
    "ModelOutput",
    "TransformerXL",
    "build",
]
