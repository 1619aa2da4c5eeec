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

from torch import Tensor

from formers.config import ModelConfig
from formers.data.tokenizers import Tokenizer
from formers.pretrained import bert
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import Family, HFConfig, Param, exportable
from formers.variants.longformer import LongformerConfig

# LongformerConfig's defaults, for a config.json that leaves a field out: BertConfig's but
# for the fields of BERT's that Longformer has not
BERT_ONLY = ("position_embedding_type", "is_decoder", "add_cross_attention")
DEFAULTS = {
    **{k: v for k, v in bert.DEFAULTS.items() if k not in BERT_ONLY},
    "pad_token_id": 1,
    "attention_window": 512,
}
# what a formers config must be to be Longformer: BERT with Longformer attention
DIFF = {
    **bert.DIFF,
    "attention.kind": "longformer",
    "attention.dilation": 1,
    "ffn.activation": "gelu",
}
# where LongformerForMaskedLM keeps its tensors: BERT's with other names, the global
# projections fused beside q, k and v, and a decoder bias that is always the head's
LAYOUT = bert.Layout(
    prefix="longformer.",
    head="lm_head.",
    unprefixed=("longformer.", "lm_head."),
    transform=("dense", "layer_norm"),
    fused={"qkv": bert.QKV, "global_qkv": ("query_global", "key_global", "value_global")},
    tied_bias=True,
)


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
    bert.check_types(hf)
    pad_id = hf["pad_token_id"]
    attention = LongformerConfig(window=windows(hf), global_tokens=(0,), global_projections=True)
    return bert.encoder_config(hf, pad_id, attention, "gelu", position_offset=pad_id + 1)


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
    positions = cfg.max_len + cfg.position_offset
    return {
        "architectures": ["LongformerForMaskedLM"],
        "model_type": "longformer",
        **bert.encoder_hf_config(cfg, "Longformer", "gelu", positions),
        "attention_window": list(window) if isinstance(window, tuple) else window,
    }


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter of the encoder LM and its LongformerForMaskedLM tensor."""
    return bert.params(cfg, LAYOUT)


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The checkpoint's tensors under the names `params` spells (bert.normalise)."""
    return bert.normalise(weights, cfg, LAYOUT)


def denormalise(tensors: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The inverse of `normalise` on export (bert.denormalise)."""
    return bert.denormalise(tensors, cfg, LAYOUT)


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
    attention="longformer",
)
