"""GPT-2 (Radford et al. 2019), Hugging Face's `GPT2LMHeadModel`, as a formers decoder LM.

GPT-2 is the `vanilla` decoder LM with these settings (no new module):

    norm = "pre"                 ln_1 / ln_2 inside the branches, ln_f the final norm
    norm_eps                     layer_norm_epsilon (1e-5)
    position = "learned"         wpe, max_len = n_positions rows
    ffn.activation = "gelu_tanh" activation_function "gelu_new" (or "gelu_pytorch_tanh");
                                 "gelu" and "relu" map to formers' own
    d_ff                         n_inner, or 4 · n_embd when it is null
    embed_scale = 1              wte is added as it is, without formers' 1/std scaling
    tie_embeddings               tie_word_embeddings: lm_head is wte
    dropout                      resid_pdrop = embd_pdrop (formers has one residual dropout)
    attn_dropout                 attn_pdrop; ffn_dropout = 0 (GPT-2 has none inside the MLP)
    embed_init_std               initializer_range, for a model built from scratch
    pad_id = None                GPT-2 has no padding token; pad_token_id is not mapped, as
                                 masking keys equal to it (often <|endoftext|>) would change
                                 the logits of a text that holds one

Attention is Vaswani's: softmax(q kᵀ / √d_head) v, causal, biases on every projection.

Weights: Hugging Face's Conv1D stores the (in, out) matrix, the transpose of nn.Linear's, so
c_attn, c_proj, c_fc and mlp.c_proj are transposed. c_attn's output columns are q, then k,
then v, each split into heads as (H, d_head): the layout of formers' fused `qkv_proj`, so the
matrix maps whole.

Refused (one line naming the field): scale_attn_weights=false, scale_attn_by_inverse_layer_idx,
reorder_and_upcast_attn, add_cross_attention, another activation, embd_pdrop != resid_pdrop.
"""

from __future__ import annotations

import re

from torch import Tensor

from formers.config import AttentionConfig, FFNConfig, ModelConfig
from formers.data.tokenizers import Tokenizer
from formers.pretrained.family import BIASED_LAYERS, Family, HFConfig, Param, exportable

# GPT2Config's defaults, for a config.json that leaves a field out
DEFAULTS = {
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "initializer_range": 0.02,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
# Hugging Face's activation names -> formers'
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
}
HF_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
PREFIX = "transformer."
# what a formers config must be to be GPT-2 (the settings above that have one value)
DIFF = {
    "arch": "decoder",
    "norm": "pre",
    "position": "learned",
    "embedding_scale": 1.0,
    "scale_tied_output": False,
    "ffn_dropout": 0.0,
    "pad_id": None,
    "adaptive_cutoffs": None,
    "embed_norm": False,
    "type_vocab_size": 0,
    "head_transform": False,
    "output_bias": False,
    **BIASED_LAYERS,
    "ffn.activation": tuple(HF_ACTIVATIONS),
}


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a GPT2Config."""
    hf.require("scale_attn_weights", (True,), "formers always scales scores by 1/√d_head")
    for flag, why in (
        ("scale_attn_by_inverse_layer_idx", "a per-layer attention scale"),
        ("reorder_and_upcast_attn", "an attention reordered for fp16 training"),
        ("add_cross_attention", "a decoder LM has no encoder to attend to"),
    ):
        hf.require(flag, (False,), why)
    hf.require("activation_function", tuple(ACTIVATIONS), "no such formers activation")
    hf.require("embd_pdrop", (hf["resid_pdrop"],), "formers has one dropout, = resid_pdrop")
    d_model = hf["n_embd"]
    return ModelConfig(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=hf["n_head"],
        n_layers=hf["n_layer"],
        d_ff=hf.values.get("n_inner") or 4 * d_model,
        dropout=float(hf["resid_pdrop"]),
        attn_dropout=float(hf["attn_pdrop"]),
        ffn_dropout=0.0,
        norm="pre",
        norm_eps=float(hf["layer_norm_epsilon"]),
        position="learned",
        max_len=hf["n_positions"],
        embed_init_std=float(hf["initializer_range"]),
        embed_scale=1.0,
        tie_embeddings=bool(hf["tie_word_embeddings"]),
        attention=AttentionConfig(),
        ffn=FFNConfig(activation=ACTIVATIONS[hf["activation_function"]]),
    )


def hf_config(cfg: ModelConfig, tokenizer: Tokenizer | None) -> dict:
    """The GPT2Config of a formers decoder LM that is GPT-2 shaped (refused, naming the first
    field that is not); <|endoftext|> begins and ends texts when the tokenizer has it."""
    exportable(cfg, "GPT-2", DIFF)
    hf = getattr(tokenizer, "hf", None)
    special = None if hf is None else hf.token_to_id(FAMILY.special_tokens[0])
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_len,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layers,
        "n_head": cfg.n_heads,
        "n_inner": cfg.d_ff,
        "activation_function": HF_ACTIVATIONS[cfg.ffn.activation],
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.attn_dropout,
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_range": cfg.embedding_std,
        "tie_word_embeddings": cfg.tie_embeddings,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "bos_token_id": special,
        "eos_token_id": special,
    }


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter of the decoder and its GPT2LMHeadModel tensor."""
    t = PREFIX
    out = [
        Param("embed.token.weight", f"{t}wte.weight"),
        Param("embed.position.table.weight", f"{t}wpe.weight"),
        Param("final_norm.weight", f"{t}ln_f.weight"),
        Param("final_norm.bias", f"{t}ln_f.bias"),
        Param("lm_head.weight", f"{t}wte.weight" if cfg.tie_embeddings else "lm_head.weight"),
    ]
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"{t}h.{i}."
        for name, hf, transpose in (
            ("attn_res.norm", "ln_1", False),
            ("attn.qkv_proj", "attn.c_attn", True),
            ("attn.out_proj", "attn.c_proj", True),
            ("ffn_res.norm", "ln_2", False),
            ("ffn.up", "mlp.c_fc", True),
            ("ffn.down", "mlp.c_proj", True),
        ):
            out.append(Param(f"{ours}{name}.weight", f"{theirs}{hf}.weight", transpose))
            out.append(Param(f"{ours}{name}.bias", f"{theirs}{hf}.bias"))
    return out


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """A GPT2Model save (no "transformer." prefix) named as GPT2LMHeadModel's; a tied lm_head
    saved beside wte dropped (it is wte)."""
    named = {
        k if k.startswith(PREFIX) or k.startswith("lm_head.") else PREFIX + k: v
        for k, v in weights.items()
    }
    if cfg.tie_embeddings:
        named.pop("lm_head.weight", None)
    return named


FAMILY = Family(
    name="gpt2",
    architectures=("GPT2LMHeadModel",),
    model_type="gpt2",
    model_config=model_config,
    params=params,
    hf_config=hf_config,
    defaults=DEFAULTS,
    # the causal-mask buffers that transformers < 4.40 saved with every layer
    ignored=re.compile(r"\.attn\.(masked_)?bias$"),
    special_tokens=("<|endoftext|>",),
    normalise=normalise,
)
