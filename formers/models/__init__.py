"""Model shapes and `build`."""

from __future__ import annotations

from torch import nn

from formers.config import ModelConfig
from formers.errors import ConfigError
from formers.models.decoder_lm import DecoderLM
from formers.models.encoder_decoder import EncoderDecoder
from formers.models.encoder_lm import EncoderLM
from formers.models.output import ModelOutput

MODELS: dict[str, type[nn.Module]] = {
    "decoder": DecoderLM,
    "encoder_decoder": EncoderDecoder,
    "encoder": EncoderLM,
}


def build(cfg: ModelConfig) -> nn.Module:
    """The model that `cfg` describes, freshly initialised."""
    if not isinstance(cfg, ModelConfig):
        raise ConfigError(
            f"build() takes a ModelConfig, got {type(cfg).__name__}: "
            "make one with formers.config(preset, **overrides)"
        )
    return MODELS[cfg.arch](cfg)


__all__ = ["MODELS", "DecoderLM", "EncoderDecoder", "EncoderLM", "ModelOutput", "build"]
