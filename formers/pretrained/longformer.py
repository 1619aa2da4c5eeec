"""Longformer (Beltagy et al. 2020), Hugging Face's `LongformerForMaskedLM`, as formers'
two-sided Longformer encoder LM with global tokens.

Longformer is RoBERTa with Longformer attention, so the model is BERT's mapping (bert.py: post-LN,
token types, the embeddings' LayerNorm, the MLM head's transform and bias) with these
differences:

    attention.kind = "longformer"  two-sided sliding window plus global tokens
    attention.window               attention_window, one int or one per layer: HF's query i sees
                                   |i − j| <= attention_window // 2, and formers' two-sided
                                   window w sees w // 2 on each side, so window = attention_window
                                   (even, as transformers requires)
    attention.global_tokens = [0]  the first token (<s>) global, Longformer's usual use: HF's
                                   global_attention_mask with a 1 at position 0 (a padding
                                   position is never global). formers' global tokens are fixed
                                   positions, the same in every row; set global_tokens to [] for
                                   transformers' default without global_attention_mask
    attention.global_projections   query_global, key_global, value_global: Q_g, K_g, V_g of the
                                   global rows and the keys they see, kept whatever the global
                                   tokens; the other rows see the global keys through the
                                   ordinary key and value projections, as in transformers
    position_offset = pad + 1      RoBERTa's positions: token i (counting from 0) reads row
                                   padding_idx + 1 + i, as create_position_ids_from_input_ids
                                   numbers the tokens of a right-padded row; max_len is
                                   max_position_embeddings − (padding_idx + 1)
    ffn.activation = "gelu"        hidden_act must be the exact GELU: LongformerLMHead applies
                                   it in the head whatever hidden_act says

transformers pads every input to a multiple of the largest window internally and drops the
padding again; formers' kernel needs no padding, and padding keys are masked in both, so the
logits of every real position are equal.

Not imported (one line naming the field): another hidden_act, an odd or non-positive
attention_window, a window list that does not have one entry per layer, type_vocab_size 0.
Left padding: RoBERTa numbers the real tokens after left padding from padding_idx + 1, formers
from their place in the row; formers' batches are right-padded.
"""

from __future__ import annotations

import dataclasses
import re

import torch
from torch import Tensor

from formers.config import FFNConfig, ModelConfig
from formers.data.tokenizers import Tokenizer
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import Family, HFConfig, Param, exportable
from formers.variants.longformer import LongformerConfig

# LongformerConfig's defaults, for a config.json that leaves a field out
DEFAULTS = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "pad_token_id": 1,
    "attention_window": 512,
    "tie_word_embeddings": True,
}
PREFIX, HEAD = "longformer.", "lm_head."
DIFF = {
    "arch": "encoder",
    "norm": "post",
    "position": "learned",
    "embedding_scale": 1.0,
    "embed_norm": True,
    "head_transform": True,
    "output_bias": True,
    "scale_tied_output": False,
    "ffn_dropout": 0.0,
    "adaptive_cutoffs": None,
    "attention.kind": "longformer",
    "attention.bias": True,
    "attention.layers": "all",
    "attention.dilation": 1,
    "ffn.kind": "dense",
    "ffn.bias": True,
    "ffn.layers": "all",
    "ffn.activation": "gelu",
}
# the fused projections of formers and the separate ones they stack (q, then k, then v)
FUSED = {
    "qkv": ("query", "key", "value"),
    "global_qkv": ("query_global", "key_global", "value_global"),
}


def windows(hf: HFConfig) -> int | tuple[int, ...]:
    """formers' window(s) of attention_window: the same numbers, each checked even."""
    value = hf["attention_window"]
    layers = hf["num_hidden_layers"]
    values = list(value) if isinstance(value, list | tuple) else [value]
    if isinstance(value, list | tuple) and len(values) != layers:
        raise PretrainedError(
            f"{hf.folder}/config.json sets attention_window with {len(values)} entries for "
            f"num_hidden_layers={layers}: it imports one window, or one per layer"
        )
    for window in values:
        if isinstance(window, bool) or not isinstance(window, int) or window < 2 or window % 2:
            raise PretrainedError(
                f"{hf.folder}/config.json sets attention_window={value!r}, which formers "
                "cannot honour (a window is attention_window // 2 keys on each side): it "
                "imports checkpoints with even attention_window >= 2"
            )
    return tuple(values) if isinstance(value, list | tuple) else value


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a LongformerConfig."""
    hf.require("hidden_act", ("gelu",), "the masked-LM head applies the exact GELU")
    if not hf["type_vocab_size"] >= 1:
        raise PretrainedError(
            f"{hf.folder}/config.json sets type_vocab_size={hf['type_vocab_size']!r}, which "
            "formers cannot honour (every token has a type): it imports checkpoints with "
            "type_vocab_size >= 1"
        )
    pad_id = hf["pad_token_id"]
    attention = LongformerConfig(window=windows(hf), global_tokens=(0,), global_projections=True)
    return ModelConfig(
        arch="encoder",
        vocab_size=hf["vocab_size"],
        d_model=hf["hidden_size"],
        n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"],
        dropout=float(hf["hidden_dropout_prob"]),
        attn_dropout=float(hf["attention_probs_dropout_prob"]),
        ffn_dropout=0.0,
        norm="post",
        norm_eps=float(hf["layer_norm_eps"]),
        position="learned",
        max_len=hf["max_position_embeddings"] - (pad_id + 1),
        position_offset=pad_id + 1,
        embed_init_std=float(hf["initializer_range"]),
        embed_scale=1.0,
        embed_norm=True,
        type_vocab_size=hf["type_vocab_size"],
        head_transform=True,
        output_bias=True,
        tie_embeddings=bool(hf["tie_word_embeddings"]),
        pad_id=pad_id,
        attention=attention,
        ffn=FFNConfig(activation="gelu"),
    )


def hf_config(cfg: ModelConfig, tokenizer: Tokenizer | None) -> dict:
    """The LongformerConfig of a formers encoder LM that is Longformer shaped (refused, naming
    the first field that is not)."""
    exportable(cfg, "Longformer", DIFF)
    attention = cfg.attention
    if not (attention.global_tokens or attention.global_projections):
        raise PretrainedError(
            "the model has no global projections, which a Longformer checkpoint holds: it "
            "needs attention.global_projections=True or attention.global_tokens"
        )
    if cfg.pad_id is None or cfg.position_offset != cfg.pad_id + 1:
        raise PretrainedError(
            f"the model has position_offset={cfg.position_offset} and pad_id={cfg.pad_id}, "
            "which a Longformer checkpoint cannot express: it needs position_offset = pad_id + 1"
        )
    window = attention.window
    for w in window if isinstance(window, tuple) else (window,):
        if w % 2:
            raise PretrainedError(
                f"the model has attention.window={w}, which a Longformer checkpoint cannot "
                "express: it needs an even window"
            )
    if cfg.type_vocab_size < 1:
        raise PretrainedError(
            "the model has type_vocab_size=0, which a Longformer checkpoint cannot express: it "
            "needs type_vocab_size >= 1"
        )
    return {
        "architectures": ["LongformerForMaskedLM"],
        "model_type": "longformer",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_ff,
        "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attn_dropout,
        "max_position_embeddings": cfg.max_len + cfg.position_offset,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.embedding_std,
        "layer_norm_eps": cfg.norm_eps,
        "pad_token_id": cfg.pad_id,
        "attention_window": list(window) if isinstance(window, tuple) else window,
        "tie_word_embeddings": cfg.tie_embeddings,
    }


def _pair(ours: str, theirs: str) -> list[Param]:
    """A layer's weight and bias."""
    return [Param(f"{ours}.weight", f"{theirs}.weight"), Param(f"{ours}.bias", f"{theirs}.bias")]


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter of the encoder LM and its LongformerForMaskedLM tensor."""
    e = f"{PREFIX}embeddings."
    words = f"{e}word_embeddings.weight"
    out = [
        Param("embed.token.weight", words),
        Param("embed.token_type.weight", f"{e}token_type_embeddings.weight"),
        Param("embed.position.table.weight", f"{e}position_embeddings.weight"),
        *_pair("embed.norm", f"{e}LayerNorm"),
    ]
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"{PREFIX}encoder.layer.{i}."
        for name, hf in (
            ("attn.qkv_proj", "attention.self.qkv"),  # fused by `normalise`
            ("attn.global_qkv_proj", "attention.self.global_qkv"),  # likewise
            ("attn.out_proj", "attention.output.dense"),
            ("attn_res.norm", "attention.output.LayerNorm"),
            ("ffn.up", "intermediate.dense"),
            ("ffn.down", "output.dense"),
            ("ffn_res.norm", "output.LayerNorm"),
        ):
            out += _pair(ours + name, theirs + hf)
    return out + [
        *_pair("head_transform.dense", f"{HEAD}dense"),
        *_pair("head_transform.norm", f"{HEAD}layer_norm"),
        Param("lm_head.weight", words if cfg.tie_embeddings else f"{HEAD}decoder.weight"),
        Param("lm_head.bias", f"{HEAD}bias"),
    ]


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The checkpoint's tensors under the names `params` spells: each layer's query, key and
    value (and their global twins) stacked into one (3D, D) matrix; the decoder's copies of
    the tied matrix and of the bias dropped."""
    named = {k if k.startswith((PREFIX, HEAD)) else PREFIX + k: v for k, v in weights.items()}
    decoder_bias = named.pop(f"{HEAD}decoder.bias", None)  # lm_head.bias itself, tied
    if decoder_bias is not None and f"{HEAD}bias" not in named:
        named[f"{HEAD}bias"] = decoder_bias
    if cfg.tie_embeddings:
        named.pop(f"{HEAD}decoder.weight", None)
    for i in range(cfg.n_layers):
        base = f"{PREFIX}encoder.layer.{i}.attention.self."
        for fused, parts in FUSED.items():
            for kind in ("weight", "bias"):
                names = [f"{base}{n}.{kind}" for n in parts]
                if all(n in named for n in names):  # else the missing one is reported fused
                    named[f"{base}{fused}.{kind}"] = torch.cat([named.pop(n) for n in names])
    return named


def denormalise(tensors: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The inverse of `normalise` on export: each fused matrix split into its three."""
    out = dict(tensors)
    out[f"{HEAD}decoder.bias"] = out[f"{HEAD}bias"].clone()
    for i in range(cfg.n_layers):
        base = f"{PREFIX}encoder.layer.{i}.attention.self."
        for fused, parts in FUSED.items():
            for kind in ("weight", "bias"):
                whole = out.pop(f"{base}{fused}.{kind}")
                for name, part in zip(parts, whole.chunk(3), strict=True):
                    out[f"{base}{name}.{kind}"] = part.contiguous()
    return out


def without_global_tokens(cfg: ModelConfig) -> ModelConfig:
    """The same model with no global token: transformers' LongformerForMaskedLM called without
    global_attention_mask. Its weights are the imported model's (the global projections stay)."""
    attention = dataclasses.replace(cfg.attention, global_tokens=())
    return dataclasses.replace(cfg, attention=attention)


FAMILY = Family(
    name="longformer",
    architectures=("LongformerForMaskedLM",),
    model_type="longformer",
    model_config=model_config,
    params=params,
    hf_config=hf_config,
    defaults=DEFAULTS,
    ignored=re.compile(r"_ids$"),  # position_ids buffers older versions saved
    special_tokens=("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
    normalise=normalise,
    denormalise=denormalise,
    arch="encoder",
)
