"""Transformer-XL (Dai et al. 2019), Hugging Face's `TransfoXLLMHeadModel` (transformers ≤ 4.37,
whose later releases dropped it), as formers' `transformer-xl` decoder LM.

The model is the `xl` attention with these settings:

    norm = "post"                       pre_lnorm false (true is refused: no final norm there)
    attention = XLConfig(bias=False)    qkv_net, o_net, r_net have no biases
      mem_len, clamp_len                mem_len; clamp_len, ≤ 0 meaning no cap (None)
      same_length                       same_length, with same_length_inclusive: Hugging
                                        Face's mask shows a query mem_len keys, itself included
      untie_rel_bias                    untie_r: u = r_w_bias, v = r_r_bias, (H, d_head) flat
    d_ff, dropout, attn_dropout         d_inner, dropout (also ffn_dropout), dropatt
    ffn.activation = "relu"             CoreNet.0 -> ffn.up, CoreNet.3 -> ffn.down
    position = "none"                   positions are the relative sinusoids
    adaptive_input, adaptive_cutoffs,   the adaptive embedding and the projected adaptive
    adaptive_div_value, adaptive_d_embed  softmax: cutoffs, div_val, d_embed
    embed_scale = √d_model              the adaptive embedding's emb_scale
    tie_embeddings = False              the tied tables and projections are copied apart

Weights: with div_val = 1 Hugging Face keeps one (V, d_embed) table and one output matrix,
split here at the cutoffs, each cluster with the one projection (the identity where d_embed
= d_model and there is none). The head's cluster rows (cluster_weight, cluster_bias) follow
its V_0 token rows in cluster order, as transformers' forward reads them. Tensors tied to the
embedding (out_layers, out_projs under tie_projs) and the shared r-biases may be missing from a
safetensors save: read from the tensor they are tied to.

Refused: d_head · n_head != d_model, attn_type != 0, sample_softmax > 0, pre_lnorm, no cutoffs.
Tokenizer: the word-level vocab.pkl is a pickle and is never read: the model comes without a
tokenizer (encode ids yourself, or pass a tokenizer.json of the same vocabulary).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from formers.config import FFNConfig, ModelConfig
from formers.pretrained.family import Family, HFConfig, Param
from formers.variants.xl import XLConfig

# TransfoXLConfig's defaults, for a config.json that leaves a field out
DEFAULTS = {
    "cutoffs": [20000, 40000, 200000],
    "d_model": 1024,
    "d_embed": 1024,
    "n_head": 16,
    "d_head": 64,
    "d_inner": 4096,
    "div_val": 4,
    "pre_lnorm": False,
    "n_layer": 18,
    "mem_len": 1600,
    "clamp_len": 1000,
    "same_length": True,
    "attn_type": 0,
    "sample_softmax": -1,
    "untie_r": True,
    "dropout": 0.1,
    "dropatt": 0.0,
    "init_std": 0.02,
    "layer_norm_epsilon": 1e-5,
    "tgt_len": 128,
}
T = "transformer."


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a TransfoXLConfig."""
    hf.require("attn_type", (0,), "formers' XL attention is the relative attention of type 0")
    hf.require("pre_lnorm", (False,), "a pre-norm formers stack adds a final LayerNorm")
    if hf["sample_softmax"] > 0:
        hf.require("sample_softmax", (-1,), "formers has no sampled softmax")
    d_model, heads = hf["d_model"], hf["n_head"]
    hf.require("d_head", (d_model // heads,), "formers' heads are d_model / n_head wide")
    if not hf["cutoffs"]:
        hf.require("cutoffs", ("a non-empty list",), "the embedding is adaptive")
    clamp = hf["clamp_len"]
    attention = XLConfig(
        mem_len=hf["mem_len"],
        same_length=bool(hf["same_length"]),
        same_length_inclusive=True,
        clamp_len=clamp if clamp > 0 else None,
        untie_rel_bias=bool(hf["untie_r"]),
    )
    return ModelConfig(
        arch="decoder",
        vocab_size=hf["vocab_size"],
        d_model=d_model,
        n_heads=heads,
        n_layers=hf["n_layer"],
        d_ff=hf["d_inner"],
        dropout=float(hf["dropout"]),
        attn_dropout=float(hf["dropatt"]),
        ffn_dropout=float(hf["dropout"]),
        norm="post",
        norm_eps=float(hf["layer_norm_epsilon"]),
        position="none",
        max_len=max(1024, hf["tgt_len"]),
        embed_init_std=float(hf["init_std"]),
        embed_scale=d_model**0.5,
        tie_embeddings=False,
        adaptive_cutoffs=tuple(hf["cutoffs"]),
        adaptive_div_value=float(hf["div_val"]),
        adaptive_d_embed=hf["d_embed"],
        adaptive_input=True,
        attention=attention,
        ffn=FFNConfig(activation="relu"),
    )


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter and its tensor, under the names `normalise` gives them."""
    out = []
    for c in range(len(cfg.adaptive_cutoffs) + 1):
        out += [
            Param(f"embed.token.tables.{c}.weight", f"{T}word_emb.emb_layers.{c}.weight"),
            Param(f"embed.token.projs.{c}.weight", f"{T}word_emb.emb_projs.{c}"),
            Param(f"lm_head.projs.{c}.weight", f"crit.out_projs.{c}", transpose=True),
            Param(f"lm_head.outs.{c}.weight", f"crit.out_layers.{c}.weight"),
            Param(f"lm_head.outs.{c}.bias", f"crit.out_layers.{c}.bias"),
        ]
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"{T}layers.{i}."
        out += [
            Param(f"{ours}attn.u", f"{theirs}dec_attn.r_w_bias"),
            Param(f"{ours}attn.v", f"{theirs}dec_attn.r_r_bias"),
        ]
        for name, hf, bias in (
            ("attn.qkv_proj", "dec_attn.qkv_net", False),
            ("attn.out_proj", "dec_attn.o_net", False),
            ("attn.r_proj", "dec_attn.r_net", False),
            ("attn_res.norm", "dec_attn.layer_norm", True),
            ("ffn.up", "pos_ff.CoreNet.0", True),
            ("ffn.down", "pos_ff.CoreNet.3", True),
            ("ffn_res.norm", "pos_ff.layer_norm", True),
        ):
            out.append(Param(f"{ours}{name}.weight", f"{theirs}{hf}.weight"))
            if bias:
                out.append(Param(f"{ours}{name}.bias", f"{theirs}{hf}.bias"))
    return out


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The checkpoint's tensors in the per-cluster layout `params` reads: tied tensors filled
    in, one-table models split at the cutoffs, the head's cluster rows in cluster order."""
    w = dict(weights)
    clusters = len(cfg.adaptive_cutoffs) + 1
    if cfg.adaptive_div_value == 1:
        split_single_table(w, cfg)
    for c in range(clusters):
        w.setdefault(f"crit.out_layers.{c}.weight", w.get(f"{T}word_emb.emb_layers.{c}.weight"))
        w.setdefault(f"crit.out_projs.{c}", w.get(f"{T}word_emb.emb_projs.{c}"))
        for name in (f"{T}word_emb.emb_projs.{c}", f"crit.out_projs.{c}"):
            if w.get(name) is None:  # no projection: d_embed = d_model
                w[name] = torch.eye(cfg.d_model)
    head_w, head_b = w.pop("crit.cluster_weight"), w.pop("crit.cluster_bias")
    w["crit.out_layers.0.weight"] = torch.cat([w["crit.out_layers.0.weight"], head_w])
    w["crit.out_layers.0.bias"] = torch.cat([w["crit.out_layers.0.bias"], head_b])
    shared = {b: w.pop(f"{T}{b}", None) for b in ("r_w_bias", "r_r_bias")}
    for i in range(cfg.n_layers):
        for bias, tensor in shared.items():
            name = f"{T}layers.{i}.dec_attn.{bias}"
            w.setdefault(name, tensor)
            if w[name] is not None:
                w[name] = w[name].reshape(-1)
    return {k: v for k, v in w.items() if v is not None}


def split_single_table(w: dict[str, Tensor], cfg: ModelConfig) -> None:
    """div_val = 1: the one embedding table and output layer cut at the cutoffs, every cluster
    with the one projection (in place)."""
    edges = [0, *cfg.adaptive_cutoffs, cfg.vocab_size]
    table = w.pop(f"{T}word_emb.emb_layers.0.weight")
    proj = w.pop(f"{T}word_emb.emb_projs.0", None)
    out_w = w.pop("crit.out_layers.0.weight", table)
    out_b = w.pop("crit.out_layers.0.bias")
    out_projs = {c: w.pop(f"crit.out_projs.{c}", None) for c in range(len(edges) - 1)}
    for c, (start, end) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        w[f"{T}word_emb.emb_layers.{c}.weight"] = table[start:end]
        w[f"{T}word_emb.emb_projs.{c}"] = proj
        w[f"crit.out_layers.{c}.weight"] = out_w[start:end]
        w[f"crit.out_layers.{c}.bias"] = out_b[start:end]
        w[f"crit.out_projs.{c}"] = out_projs[c] if out_projs[c] is not None else proj


FAMILY = Family(
    name="transfo-xl",
    architectures=("TransfoXLLMHeadModel",),
    model_type="transfo-xl",
    model_config=model_config,
    params=params,
    defaults=DEFAULTS,
    ignored=re.compile(r"pos_emb\.inv_freq$"),
    normalise=normalise,
    needs_tokenizer=False,
)
