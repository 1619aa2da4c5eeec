"""Marian (Junczys-Dowmunt et al. 2018; the Opus-MT models), Hugging Face's `MarianMTModel`, as
the formers encoder–decoder `transformer`.

Marian is Vaswani's encoder–decoder with these settings (no new module):

    norm = "post"                 self_attn_layer_norm, encoder_attn_layer_norm and
                                  final_layer_norm after each residual sum; no final norm, no
                                  LayerNorm on the embeddings; ε = 1e-5 (PyTorch's, fixed)
    position = "sinusoidal_halves" the paper's sinusoids, sines in the first half of the channels
                                  and cosines in the second (MarianSinusoidalPositionalEmbedding),
                                  not interleaved as in formers' "sinusoidal"; positions start at
                                  0 in the encoder and the decoder
    embed_scale                   √d_model with scale_embedding (Opus-MT), else 1
    ffn.activation                activation_function: "swish"/"silu" -> "silu" (Opus-MT),
                                  "gelu", "relu", "gelu_new" -> "gelu_tanh"
    output_bias = True            final_logits_bias (a (1, V) buffer in transformers) is the bias
                                  of formers' output projection
    tie_embeddings = True         one vocabulary: model.shared is the source embedding, the
                                  target embedding and lm_head
    pad_id                        pad_token_id: source keys equal to it are masked; the decoder
                                  starts from it (decoder_start_token_id), so formers never
                                  treats the first decoder input as padding
    n_encoder_layers, n_layers    encoder_layers, decoder_layers
    dropout, attn_dropout,        dropout, attention_dropout, activation_dropout
    ffn_dropout

Tokens: the source ends in </s> (eos_token_id); decoding starts from <pad> and stops at </s>,
which transformers forces at its maximum length (forced_eos_token_id) as formers forces it at
source length + max_len_b. The tokenizer (source.spm, target.spm, vocab.json) becomes a
`SentencePiecePairTokenizer`.

Weights: transformers keeps q_proj, k_proj and v_proj apart; formers' fused `qkv_proj` is their
rows stacked (q, then k, then v), so `normalise` concatenates them and `denormalise` splits them.

Refused (one line naming the field): separate source and target vocabularies
(share_encoder_decoder_embeddings=false, a decoder_vocab_size of its own), an untied lm_head,
encoder and decoder of different widths or head counts, layerdrop, a decoder_start_token_id
other than pad_token_id, another activation.
"""

from __future__ import annotations

import math
import re

from torch import Tensor

from formers.config import AttentionConfig, FFNConfig, ModelConfig
from formers.data.tokenizers import Tokenizer
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import (
    BIASED_LAYERS,
    Family,
    HFConfig,
    Param,
    exportable,
    fuse,
    pair,
    split,
)

# MarianConfig's defaults, for a config.json that leaves a field out
DEFAULTS = {
    "max_position_embeddings": 1024,
    "encoder_layers": 12,
    "encoder_ffn_dim": 4096,
    "encoder_attention_heads": 16,
    "decoder_layers": 12,
    "decoder_ffn_dim": 4096,
    "decoder_attention_heads": 16,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "activation_function": "gelu",
    "d_model": 1024,
    "dropout": 0.1,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "init_std": 0.02,
    "decoder_start_token_id": 58100,
    "scale_embedding": False,
    "pad_token_id": 58100,
    "eos_token_id": 0,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
}
ACTIVATIONS = {
    "swish": "silu",
    "silu": "silu",
    "gelu": "gelu",
    "relu": "relu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
}
HF_ACTIVATIONS = {"silu": "swish", "gelu": "gelu", "relu": "relu", "gelu_tanh": "gelu_new"}
PREFIX = "model."
QKV = ("q_proj", "k_proj", "v_proj")
STACKS = ("encoder", "decoder")
# what a formers config must be to be Marian (the settings above that have one value)
DIFF = {
    "arch": "encoder_decoder",
    "norm": "post",
    "norm_eps": 1e-5,
    "position": "sinusoidal_halves",
    "tie_embeddings": True,
    "output_bias": True,
    "tgt_vocab_size": None,
    "scale_tied_output": False,
    "adaptive_cutoffs": None,
    "encoder_attention": None,
    "encoder_ffn": None,
    **BIASED_LAYERS,
    "ffn.activation": tuple(HF_ACTIVATIONS),
}


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a MarianConfig."""
    hf.require("share_encoder_decoder_embeddings", (True,), "formers shares one vocabulary")
    if hf.values.get("decoder_vocab_size") is not None:  # null: the same as vocab_size
        hf.require("decoder_vocab_size", (hf["vocab_size"],), "formers shares one vocabulary")
    hf.require("tie_word_embeddings", (True,), "lm_head is the shared embedding in formers")
    for ours, theirs in (("attention_heads", "heads"), ("ffn_dim", "d_ff")):
        why = f"formers' encoder and decoder have the same {theirs}"
        hf.require(f"decoder_{ours}", (hf[f"encoder_{ours}"],), why)
    for side in ("encoder", "decoder"):
        hf.require(f"{side}_layerdrop", (0, 0.0), "formers has no layer dropout")
    hf.require("decoder_start_token_id", (hf["pad_token_id"],), "decoding starts from <pad>")
    hf.require("activation_function", tuple(ACTIVATIONS), "no such formers activation")
    d_model = hf["d_model"]
    return ModelConfig(
        arch="encoder_decoder",
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=hf["encoder_attention_heads"],
        n_layers=hf["decoder_layers"],
        n_encoder_layers=hf["encoder_layers"],
        d_ff=hf["encoder_ffn_dim"],
        dropout=float(hf["dropout"]),
        attn_dropout=float(hf["attention_dropout"]),
        ffn_dropout=float(hf["activation_dropout"]),
        norm="post",
        norm_eps=1e-5,
        position="sinusoidal_halves",
        max_len=hf["max_position_embeddings"],
        embed_init_std=float(hf["init_std"]),
        embed_scale=math.sqrt(d_model) if hf["scale_embedding"] else 1.0,
        tie_embeddings=True,
        output_bias=True,
        pad_id=hf["pad_token_id"],
        attention=AttentionConfig(),
        ffn=FFNConfig(activation=ACTIVATIONS[hf["activation_function"]]),
    )


def hf_config(cfg: ModelConfig, tokenizer: Tokenizer | None) -> dict:
    """The MarianConfig of a formers encoder–decoder that is Marian shaped (refused, naming the
    first field that is not); the special ids are the tokenizer's, where it has them."""
    exportable(cfg, "Marian", DIFF)
    scaled = math.isclose(cfg.embedding_scale, math.sqrt(cfg.d_model), rel_tol=1e-12)
    if not scaled and cfg.embedding_scale != 1.0:
        raise PretrainedError(
            f"the model has embed_scale={cfg.embedding_scale!r}, which a Marian checkpoint cannot "
            f"express: it needs embed_scale={math.sqrt(cfg.d_model)!r} (√d_model) or 1.0"
        )
    if cfg.pad_id is None:
        raise PretrainedError(
            "the model has pad_id=None, which a Marian checkpoint cannot express: it needs a "
            "pad_id (the token decoding starts from)"
        )
    eos = getattr(tokenizer, "eos_id", 0)
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": cfg.vocab_size,
        "decoder_vocab_size": cfg.vocab_size,
        "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True,
        "d_model": cfg.d_model,
        "encoder_layers": cfg.stack_layers("encoder"),
        "decoder_layers": cfg.n_layers,
        "encoder_attention_heads": cfg.n_heads,
        "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff,
        "decoder_ffn_dim": cfg.d_ff,
        "activation_function": HF_ACTIVATIONS[cfg.ffn.activation],
        "dropout": cfg.dropout,
        "attention_dropout": cfg.attn_dropout,
        "activation_dropout": cfg.ffn_dropout,
        "max_position_embeddings": cfg.max_len,
        "init_std": cfg.embedding_std,
        "scale_embedding": scaled,
        "pad_token_id": cfg.pad_id,
        "decoder_start_token_id": getattr(tokenizer, "bos_id", cfg.pad_id),
        "eos_token_id": eos,
        "forced_eos_token_id": eos,
        "is_encoder_decoder": True,
    }


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter of the encoder–decoder and its MarianMTModel tensor."""
    shared = f"{PREFIX}shared.weight"
    out = [
        Param("src_embed.token.weight", shared),
        Param("tgt_embed.token.weight", shared),
        Param("lm_head.weight", shared),
        Param("lm_head.bias", "final_logits_bias"),  # (V,) here: `normalise` flattens it
    ]
    layers = {"encoder": ("self_attn",), "decoder": ("self_attn", "encoder_attn")}
    for stack, attentions in layers.items():
        for i in range(cfg.stack_layers(stack)):
            ours, theirs = f"{stack}.{i}.", f"{PREFIX}{stack}.layers.{i}."
            for attn, hf in zip(("attn", "cross_attn"), attentions, strict=False):
                res = "attn_res" if attn == "attn" else "cross_res"
                out += pair(f"{ours}{attn}.qkv_proj", f"{theirs}{hf}.qkv_proj")  # fused
                out += pair(f"{ours}{attn}.out_proj", f"{theirs}{hf}.out_proj")
                out += pair(f"{ours}{res}.norm", f"{theirs}{hf}_layer_norm")
            out += pair(f"{ours}ffn.up", f"{theirs}fc1")
            out += pair(f"{ours}ffn.down", f"{theirs}fc2")
            out += pair(f"{ours}ffn_res.norm", f"{theirs}final_layer_norm")
    return out


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """q, k and v fused into one qkv_proj per attention; final_logits_bias flattened to (V,);
    the tied copies of model.shared that some saves hold (the stacks' embed_tokens, lm_head)
    dropped."""
    named = dict(weights)
    for key in ("lm_head.weight", *(f"{PREFIX}{s}.embed_tokens.weight" for s in STACKS)):
        named.pop(key, None)
    if "final_logits_bias" in named:
        named["final_logits_bias"] = named["final_logits_bias"].reshape(-1)
    for key in [k for k in named if k.endswith(".q_proj.weight")]:
        fuse(named, key.removesuffix("q_proj.weight"), "qkv_proj", QKV)
    return named


def denormalise(tensors: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The inverse of `normalise` on export: each fused qkv_proj split into q, k and v, and
    final_logits_bias as transformers' (1, V) buffer."""
    out = dict(tensors)
    out["final_logits_bias"] = out["final_logits_bias"].reshape(1, -1).contiguous()
    for key in [k for k in out if k.endswith(".qkv_proj.weight")]:
        split(out, key.removesuffix("qkv_proj.weight"), "qkv_proj", QKV)
    return out


FAMILY = Family(
    name="marian",
    architectures=("MarianMTModel",),
    model_type="marian",
    model_config=model_config,
    params=params,
    hf_config=hf_config,
    defaults=DEFAULTS,
    # the fixed sinusoid tables that older transformers saved (formers computes its own)
    ignored=re.compile(r"\.embed_positions\.weight$"),
    normalise=normalise,
    denormalise=denormalise,
    arch="encoder_decoder",
)
