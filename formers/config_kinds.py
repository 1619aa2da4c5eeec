"""The config class of every attention and feed-forward kind, by `kind`: all that reading,
checking and printing a config needs. The modules built from them are in `formers.registry`,
which needs torch; this table does not, so `formers config` and `formers presets` start without
it. A variant lists its config class here and its module there (whose `config_class` is the
same class: tests/models/test_core_contracts.py checks both tables agree).
"""

from __future__ import annotations

from formers.config import AttentionConfig, FFNConfig
from formers.errors import ConfigError
from formers.variants.linformer import LinformerConfig
from formers.variants.longformer import LongformerConfig
from formers.variants.primer_ez import MDHAConfig
from formers.variants.routing import RoutingConfig
from formers.variants.switch import SwitchConfig
from formers.variants.topk import TopKConfig
from formers.variants.xl import XLConfig
from formers.variants.xl_primer import PrimerXLConfig

ATTENTION_CONFIG: dict[str, type[AttentionConfig]] = {
    "vanilla": AttentionConfig,
    "mdha": MDHAConfig,
    "xl": XLConfig,
    "primer_xl": PrimerXLConfig,
    "topk": TopKConfig,
    "linformer": LinformerConfig,
    "routing": RoutingConfig,
    "longformer": LongformerConfig,
}
FFN_CONFIG: dict[str, type[FFNConfig]] = {"dense": FFNConfig, "switch": SwitchConfig}


def lookup(table: dict, kind: str, what: str) -> type:
    """`table[kind]`, or an error that lists the kinds."""
    if kind not in table:
        raise ConfigError(f"{what}={kind!r} is unknown: choose one of {', '.join(sorted(table))}")
    return table[kind]


def attention_config_class(kind: str) -> type[AttentionConfig]:
    """The config dataclass of attention `kind`."""
    return lookup(ATTENTION_CONFIG, kind, "attention.kind")


def ffn_config_class(kind: str) -> type[FFNConfig]:
    """The config dataclass of feed-forward `kind`."""
    return lookup(FFN_CONFIG, kind, "ffn.kind")
