"""The pluggable parts, by config `kind`: plain dicts, filled in one place, and the one function
that builds a stack of layers from them.

A variant adds its module here and its config class (the module's `config_class`) to
`formers.config_kinds`, which reads configs without torch. An attention kind whose layers need a
block of their own (Transformer-XL's memory) lists it in BLOCK.
"""

from __future__ import annotations

from collections import defaultdict

from torch import nn

from formers.config import AttentionConfig, FFNConfig, ModelConfig, Stack
from formers.config_kinds import lookup
from formers.layers.attention import MultiHeadAttention
from formers.layers.block import Block, DecoderBlock
from formers.layers.cross_attention import CrossAttention
from formers.layers.feedforward import FeedForward
from formers.variants.linformer import LinformerAttention
from formers.variants.longformer import LongformerAttention
from formers.variants.primer_ez import MultiDConvHeadAttention
from formers.variants.routing import RoutingAttention
from formers.variants.switch import SwitchFeedForward
from formers.variants.topk import TopKAttention
from formers.variants.xl import RelativeMultiHeadAttention, XLBlock
from formers.variants.xl_primer import PrimerXLAttention

ATTENTION: dict[str, type[MultiHeadAttention]] = {
    "vanilla": MultiHeadAttention,
    "mdha": MultiDConvHeadAttention,
    "xl": RelativeMultiHeadAttention,
    "primer_xl": PrimerXLAttention,
    "topk": TopKAttention,
    "linformer": LinformerAttention,
    "routing": RoutingAttention,
    "longformer": LongformerAttention,
}
BLOCK: dict[str, type[Block]] = {"xl": XLBlock, "primer_xl": XLBlock}
FFN: dict[str, type[nn.Module]] = {"dense": FeedForward, "switch": SwitchFeedForward}


def build_attention(cfg: ModelConfig, options: AttentionConfig) -> MultiHeadAttention:
    """The attention module of `options.kind`, for a model `cfg`."""
    return lookup(ATTENTION, options.kind, "attention.kind").from_config(cfg, options)


def build_ffn(cfg: ModelConfig, options: FFNConfig) -> nn.Module:
    """The feed-forward module of `options.kind`, for a model `cfg`."""
    return lookup(FFN, options.kind, "ffn.kind").from_config(cfg, options)


def build_stack(cfg: ModelConfig, stack: Stack, cross_attention: bool = False) -> nn.ModuleList:
    """The layers of `stack` ("decoder" or "encoder"), each built from its own configs.

    Args:
        cfg: the model config; `cfg.attention_at(stack, i)` and `cfg.ffn_at(stack, i)` say
            what layer i is made of.
        stack: which stack.
        cross_attention: decoder layers of an encoder-decoder, with attention over the encoder.
    """
    layers: list[nn.Module] = []
    by_kind: dict[str, list[MultiHeadAttention]] = defaultdict(list)
    first_options: dict[str, AttentionConfig] = {}
    for index in range(cfg.stack_layers(stack)):
        options = cfg.attention_at(stack, index)
        attn = build_attention(cfg, options)
        ffn = build_ffn(cfg, cfg.ffn_at(stack, index))
        if cross_attention:
            cross = CrossAttention.from_config(cfg, AttentionConfig(bias=cfg.attention.bias))
            layers.append(DecoderBlock(cfg, attn, cross, ffn))
        else:
            layers.append(BLOCK.get(options.kind, Block)(cfg, attn, ffn))
        by_kind[options.kind].append(attn)
        first_options.setdefault(options.kind, options)
    for kind, modules in by_kind.items():
        ATTENTION[kind].tie_layers(modules, first_options[kind])
    return nn.ModuleList(layers)
