"""Model shapes, `build`, and `reconfigure` for a trained model's runtime options."""

from __future__ import annotations

import itertools
from typing import Any

from torch import nn

from formers.config import ModelConfig
from formers.errors import ConfigError
from formers.models.decoder_lm import DecoderLM
from formers.models.encoder_decoder import EncoderDecoder
from formers.models.encoder_lm import EncoderLM
from formers.models.output import ModelOutput
from formers.presets import override

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


def runtime_config(cfg: ModelConfig, changes: dict[str, Any]) -> ModelConfig:
    """`cfg` with runtime options changed: fields the attention declares in `runtime_fields`
    (they change how the model runs, not its weights, e.g. a memory length).

    Keys are "attention.<field>" (or "encoder_attention.<field>"), or a bare field name of the
    (decoder) attention.
    """
    overrides = {}
    for key, value in changes.items():
        group, _, name = key.rpartition(".")
        group = group or "attention"
        options = getattr(cfg, group, None)
        allowed = getattr(options, "runtime_fields", ())
        if group not in ("attention", "encoder_attention") or name not in allowed:
            kind = getattr(options, "kind", None)
            can = ", ".join(allowed) or "none"
            raise ConfigError(
                f"{group}.{name} cannot change on a trained model: the options of "
                f"{group}.kind={kind!r} that may change after training are: {can}"
            )
        overrides[f"{group}.{name}"] = value
    return override(cfg, overrides)


def reconfigure(model: nn.Module, **changes: Any) -> nn.Module:
    """The same model, weights shared, with runtime options changed (see `runtime_config`).

        model = reconfigure(model, **{"attention.clamp_len": 820})   # Transformer-XL

    Returns a new module with a copy of the weights, on the same device and dtype, in the same
    mode (train or eval).
    """
    cfg = runtime_config(model.cfg, changes)
    new = build(cfg)
    first = next(itertools.chain(model.parameters(), model.buffers()), None)
    if first is not None:
        new = new.to(device=first.device, dtype=first.dtype)
    new.load_state_dict(model.state_dict())
    return new.train(model.training)


__all__ = [
    "MODELS",
    "DecoderLM",
    "EncoderDecoder",
    "EncoderLM",
    "ModelOutput",
    "build",
    "reconfigure",
    "runtime_config",
]
