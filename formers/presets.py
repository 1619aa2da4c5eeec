"""Named configurations. Each preset is a function stating its diff from `vanilla`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from formers.config import ModelConfig, did_you_mean
from formers.config_kinds import attention_config_class, ffn_config_class
from formers.errors import ConfigError
from formers.overrides import apply_overrides
from formers.variants.linformer import LinformerConfig
from formers.variants.longformer import LongformerConfig
from formers.variants.primer_ez import MDHAConfig
from formers.variants.routing import RoutingConfig
from formers.variants.switch import SwitchConfig
from formers.variants.topk import TopKConfig
from formers.variants.xl.presets import transformer_xl, transformer_xl_enwik8
from formers.variants.xl_primer import primer_xl


def vanilla() -> ModelConfig:
    """Decoder-only causal LM made of the paper's base blocks (Vaswani et al. 2017, Table 3).

    These are `ModelConfig()`'s defaults, so a variant's presets can start from either.
    """
    return ModelConfig(
        arch="decoder", d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1, norm="post"
    )


def transformer() -> ModelConfig:
    """The encoder–decoder base model: N=6, d_model=512, h=8, d_ff=2048, dropout 0.1.

    One shared source/target vocabulary (37,000 BPE tokens in the paper), padding id 0, and the
    paper's token embeddings (`embed_init="paper"`): a translation model has no reason to start
    at ln V, and the smaller default table learned the toy translation task more slowly
    (docs/architecture.md, "Initialisation").
    """
    return dataclasses.replace(
        vanilla(), arch="encoder_decoder", vocab_size=37000, pad_id=0, embed_init="paper"
    )


def squared_relu() -> ModelConfig:
    """Primer's feed-forward alone: vanilla with act(x) = max(x, 0)² (So et al. 2021)."""
    return override(vanilla(), {"ffn.activation": "squared_relu"})


def dconv() -> ModelConfig:
    """Primer's attention alone: vanilla with multi-DConv-head attention (kernel 3)."""
    return dataclasses.replace(vanilla(), attention=MDHAConfig())


def primer_ez() -> ModelConfig:
    """Primer EZ (So et al. 2021, arXiv 2109.08668): vanilla + squared ReLU + MDHA."""
    return override(vanilla(), {"ffn.activation": "squared_relu", "attention": MDHAConfig()})


def sparse_topk() -> ModelConfig:
    """Explicit Sparse Transformer (Zhao et al. 2019): vanilla whose queries keep their 8 best
    keys."""
    return dataclasses.replace(vanilla(), attention=TopKConfig(top_k=8))


def bert() -> ModelConfig:
    """BERT-base's masked-LM encoder (Devlin et al. 2019, §3): vanilla attention, bidirectional.

    12 layers, d_model 768, 12 heads, d_ff 3072, GELU, learned positions up to 512. Pre-LN
    instead of BERT's post-LN: it trains without a long warmup (Xiong et al. 2020).
    """
    return override(
        vanilla(),
        {
            "arch": "encoder",
            "n_layers": 12,
            "d_model": 768,
            "n_heads": 12,
            "d_ff": 3072,
            "norm": "pre",
            "position": "learned",
            "max_len": 512,
            "ffn.activation": "gelu",
        },
    )


def linformer() -> ModelConfig:
    """Linformer (Wang et al. 2020, arXiv 2006.04768): bert whose keys and values are compressed
    to k = 128 rows along the sequence (one E, F per layer)."""
    return dataclasses.replace(bert(), attention=LinformerConfig(proj_len=128))


def switch() -> ModelConfig:
    """Switch Transformer (Fedus et al. 2021, arXiv 2101.03961): vanilla whose feed-forward
    network in every other layer (1, 3, 5: the paper's placement) is a top-1 mixture of 8
    experts."""
    return dataclasses.replace(vanilla(), ffn=SwitchConfig(layers="odd", n_experts=8))


def routing() -> ModelConfig:
    """Routing Transformer (Roy et al. 2020): vanilla whose heads are half local (a window of 128
    to 255 positions) and half routed by online k-means (32 clusters, a query seeing up to 32
    members of its cluster: about √T clusters of √T tokens at T = 1,024)."""
    return dataclasses.replace(vanilla(), attention=RoutingConfig())


def longformer() -> ModelConfig:
    """Longformer (Beltagy et al. 2020): vanilla whose queries see the last 256 positions, in
    O(n·w) (§3.1); no global tokens in a causal LM, like the paper's character LM (§4)."""
    return dataclasses.replace(vanilla(), attention=LongformerConfig(window=256))


PRESETS: dict[str, Callable[[], ModelConfig]] = {
    "transformer": transformer,
    "vanilla": vanilla,
    "primer-ez": primer_ez,
    "squared-relu": squared_relu,
    "dconv": dconv,
    "transformer-xl": transformer_xl,
    "transformer-xl-enwik8": transformer_xl_enwik8,
    "primer-xl": primer_xl,
    "sparse-topk": sparse_topk,
    "bert": bert,
    "linformer": linformer,
    "switch": switch,
    "routing": routing,
    "longformer": longformer,
}


def _kind_class(path: str, kind: str) -> type:
    if path.endswith("attention"):
        return attention_config_class(kind)
    if path.endswith("ffn"):
        return ffn_config_class(kind)
    raise ConfigError(f"{path} has no kinds")


def config(name: str, **overrides: Any) -> ModelConfig:
    """The preset `name` with `overrides` applied, e.g. config("vanilla", d_model=256).

    Nested fields take dotted keys (`**{"ffn.activation": "gelu"}`) or dicts
    (`ffn={"activation": "gelu"}`).
    """
    if name not in PRESETS:
        raise ConfigError(
            f"unknown preset {name!r}{did_you_mean(name, list(PRESETS))}; "
            f"valid presets: {', '.join(PRESETS)}"
        )
    return override(PRESETS[name](), overrides)


def override(cfg: ModelConfig, overrides: Mapping[str, Any]) -> ModelConfig:
    """A copy of `cfg` with (possibly dotted, possibly string-valued) overrides applied."""
    return apply_overrides(cfg, overrides, _kind_class)


def config_from_dict(data: Mapping[str, Any]) -> ModelConfig:
    """Rebuild a config saved with `ModelConfig.to_dict()` (also by an earlier version)."""
    return override(ModelConfig(), _moved_fields(data))


def _moved_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """Saved configs from before the adaptive softmax became a model option (it was XL's), and
    from before `embed_init`, whose models multiplied their embeddings by √d_model (by 1 with
    `scale_embeddings` false) and started them at `embed_init_std`, if set, else at
    d_model**-0.5 — except between the versions that added `embed_init_std` and
    `scale_tied_output`, where an unset `embed_init_std` meant 1/d_model."""
    data = dict(data)
    if "scale_embeddings" in data:
        d_model = float(data.get("d_model", ModelConfig.d_model))
        scale = d_model**0.5 if data.pop("scale_embeddings") else 1.0
        data["embed_init"] = "paper"
        if "embed_init_std" in data and "scale_tied_output" not in data:
            data["embed_init_std"] = data["embed_init_std"] or 1.0 / d_model
        std = data.get("embed_init_std") or d_model**-0.5
        if not math.isclose(scale, 1.0 / std, rel_tol=1e-12):
            data["embed_scale"] = scale
    attention = data.get("attention")
    if isinstance(attention, Mapping):
        attention = dict(attention)
        for name in ("adaptive_cutoffs", "adaptive_div_value"):
            if name in attention:
                data.setdefault(name, attention.pop(name))
        data["attention"] = attention
    return data
