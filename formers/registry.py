"""The pluggable parts, by config `kind`: plain dicts, filled in one place.

A variant adds its module here; its config class is the module's `config_class`.
"""

from __future__ import annotations

from torch import nn

from formers.config import AttentionConfig, FFNConfig, ModelConfig
from formers.errors import ConfigError
from formers.layers.attention import MultiHeadAttention
from formers.layers.feedforward import FeedForward
from formers.variants.primer_ez import MDHAConfig, MultiDConvHeadAttention
from formers.variants.xl import RelativeMultiHeadAttention, XLConfig
from formers.variants.xl_primer import PrimerXLAttention, PrimerXLConfig

ATTENTION: dict[str, type[MultiHeadAttention]] = {
    "vanilla": MultiHeadAttention,
    "mdha": MultiDConvHeadAttention,
    "xl": RelativeMultiHeadAttention,
    "primer_xl": PrimerXLAttention,
}
ATTENTION_CONFIG: dict[str, type[AttentionConfig]] = {
    "vanilla": AttentionConfig,
    "mdha": MDHAConfig,
    "xl": XLConfig,
    "primer_xl": PrimerXLConfig,
}

FFN: dict[str, type[nn.Module]] = {"dense": FeedForward}
FFN_CONFIG: dict[str, type[FFNConfig]] = {"dense": FFNConfig}


def _lookup(table: dict, kind: str, what: str) -> type:
    if kind not in table:
        raise ConfigError(f"{what}={kind!r} is unknown: choose one of {', '.join(sorted(table))}")
    return table[kind]


def attention_config_class(kind: str) -> type[AttentionConfig]:
    """The config dataclass of attention `kind`."""
    return _lookup(ATTENTION_CONFIG, kind, "attention.kind")


def ffn_config_class(kind: str) -> type[FFNConfig]:
    """The config dataclass of feed-forward `kind`."""
    return _lookup(FFN_CONFIG, kind, "ffn.kind")


def build_attention(cfg: ModelConfig) -> MultiHeadAttention:
    """The attention module named by `cfg.attention.kind`."""
    return _lookup(ATTENTION, cfg.attention.kind, "attention.kind").from_config(cfg)


def build_ffn(cfg: ModelConfig) -> nn.Module:
    """The feed-forward module named by `cfg.ffn.kind`."""
    return _lookup(FFN, cfg.ffn.kind, "ffn.kind").from_config(cfg)
