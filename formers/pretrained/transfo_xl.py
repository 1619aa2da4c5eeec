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

Without cutoffs (div_val 1, d_embed = d_model) the model has one table and a plain output
layer with a bias, tied to the table under tie_word_embeddings: `adaptive_cutoffs` None,
`output_bias`, `tie_embeddings` = tie_word_embeddings.

Weights: with div_val = 1 Hugging Face keeps one (V, d_embed) table and one output matrix,
split here at the cutoffs, each cluster with the one projection (the identity where d_embed
= d_model and there is none). The head's cluster rows (cluster_weight, cluster_bias) follow
its V_0 token rows in cluster order, as transformers' forward reads them. Tensors tied to the
embedding (out_layers, out_projs under tie_projs) and the shared r-biases may be missing from a
safetensors save: read from the tensor they are tied to.

Export (`hf_config`, `denormalise`): a decoder with the `xl` attention, post-norm, a dense ReLU
network with biases, and any of formers' input and output layers. transformers multiplies the
table by √d_model: another `embed_scale` is multiplied into the table, and the output layer is
then written apart (`tied`); so is everything of an adaptive model (tie_projs all false). A
one-table embedding beside an adaptive softmax, or an adaptive input with div 1 and d_embed
= d_model, becomes div_val 1 with d_embed = d_model, each cluster's projections multiplied into
its table and output rows; torch's `AdaptiveLogSoftmaxWithLoss` is the projected softmax with
the identity head projection and zero biases. Refused: what `DIFF` does not allow, same_length
without same_length_inclusive, an adaptive input with a fractional div value, and div 1 with
d_embed != d_model whose clusters' embedding projections differ (transformers has one).

Refused on import: d_head · n_head != d_model, attn_type != 0, sample_softmax > 0, pre_lnorm,
no cutoffs with div_val != 1 or d_embed != d_model.
Tokenizer: the word-level vocab.pkl is a pickle and is never read: the model comes without a
tokenizer (encode ids yourself, or pass a tokenizer.json of the same vocabulary); export
writes the run's tokenizer.json, which TransfoXLTokenizer cannot read.
"""

from __future__ import annotations

import math
import re

import torch
from torch import Tensor

from formers.config import FFNConfig, ModelConfig
from formers.data.tokenizers import Tokenizer
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import Family, HFConfig, Param, exportable, pair
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
    "tie_word_embeddings": True,
}
T = "transformer."
# what a formers config must be to be Transformer-XL (the settings above that have one value)
DIFF = {
    "arch": "decoder",
    "attention.kind": "xl",
    "attention.bias": False,
    "attention.layers": "all",
    "norm": "post",
    "position": "none",
    "embed_norm": False,
    "type_vocab_size": 0,
    "head_transform": False,
    "ffn.kind": "dense",
    "ffn.bias": True,
    "ffn.layers": "all",
    "ffn.activation": "relu",
}


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a TransfoXLConfig."""
    hf.require("attn_type", (0,), "formers' XL attention is the relative attention of type 0")
    hf.require("pre_lnorm", (False,), "a pre-norm formers stack adds a final LayerNorm")
    if hf["sample_softmax"] > 0:
        hf.require("sample_softmax", (-1,), "formers has no sampled softmax")
    d_model, heads = hf["d_model"], hf["n_head"]
    hf.require("d_head", (d_model // heads,), "formers' heads are d_model / n_head wide")
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
        attention=attention,
        ffn=FFNConfig(activation="relu"),
        **embedding(hf),
    )


def embedding(hf: HFConfig) -> dict:
    """The formers fields of the input and output layers: the adaptive ones, or without cutoffs
    one table and an output layer with a bias, tied to it where tie_word_embeddings is true."""
    if not hf["cutoffs"]:
        for key, value in (("div_val", 1), ("d_embed", hf["d_model"])):
            hf.require(key, (value,), "without cutoffs the embedding is one unprojected table")
        return {"tie_embeddings": bool(hf["tie_word_embeddings"]), "output_bias": True}
    return {
        "tie_embeddings": False,
        "adaptive_cutoffs": tuple(hf["cutoffs"]),
        "adaptive_div_value": float(hf["div_val"]),
        "adaptive_d_embed": hf["d_embed"],
        "adaptive_input": True,
    }


def params(cfg: ModelConfig) -> list[Param]:
    """Every formers parameter and its tensor, under the names `normalise` gives them."""
    out = embedding_params(cfg) + output_params(cfg)
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
            pairs = pair(f"{ours}{name}", f"{theirs}{hf}")
            out += pairs if bias else pairs[:1]
    return out


def embedding_params(cfg: ModelConfig) -> list[Param]:
    """The input layer: one table per cluster and its projection (`adaptive_input`), or the
    one (V, d_model) table."""
    if not cfg.adaptive_input:
        return [Param("embed.token.weight", f"{T}word_emb.emb_layers.0.weight")]
    out = []
    for c in range(len(cfg.adaptive_cutoffs) + 1):
        out += [
            Param(f"embed.token.tables.{c}.weight", f"{T}word_emb.emb_layers.{c}.weight"),
            Param(f"embed.token.projs.{c}.weight", f"{T}word_emb.emb_projs.{c}"),
        ]
    return out


def output_params(cfg: ModelConfig) -> list[Param]:
    """The output layer: the projected adaptive softmax cluster by cluster; the tails of
    `torch.nn.AdaptiveLogSoftmaxWithLoss` (`denormalise` adds what it lacks); or without
    cutoffs the output layer, its bias where it has one."""
    if not cfg.adaptive_cutoffs:
        table = f"{T}word_emb.emb_layers.0.weight"
        out = [Param("lm_head.weight", table if tied(cfg) else "crit.out_layers.0.weight")]
        return out + ([Param("lm_head.bias", "crit.out_layers.0.bias")] if cfg.output_bias else [])
    if cfg.adaptive_d_embed is None:
        out = [Param("lm_head.softmax.head.weight", "crit.out_layers.0.weight")]
        for c in range(1, len(cfg.adaptive_cutoffs) + 1):
            tail = f"lm_head.softmax.tail.{c - 1}"
            out += [
                Param(f"{tail}.0.weight", f"crit.out_projs.{c}", transpose=True),
                Param(f"{tail}.1.weight", f"crit.out_layers.{c}.weight"),
            ]
        return out
    out = []
    for c in range(len(cfg.adaptive_cutoffs) + 1):
        out.append(Param(f"lm_head.projs.{c}.weight", f"crit.out_projs.{c}", transpose=True))
        out += pair(f"lm_head.outs.{c}", f"crit.out_layers.{c}")
    return out


def tied(cfg: ModelConfig) -> bool:
    """Whether a checkpoint of `cfg` ties its output layer to the embedding table: transformers
    multiplies the table by √d_model on the way in and the output layer reads it as it is, so
    only a tied model with that scale and an unscaled output is a tied checkpoint."""
    return (
        cfg.adaptive_cutoffs is None
        and cfg.tie_embeddings
        and not cfg.scale_tied_output
        and math.isclose(cfg.embedding_scale, math.sqrt(cfg.d_model), rel_tol=1e-12)
    )


def normalise(weights: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The checkpoint's tensors in the layout `params` reads: tied tensors filled in (dropped
    where formers ties them too), one-table models split at the cutoffs, the head's cluster rows
    in cluster order, the r-biases of every layer flat."""
    w = dict(weights)
    if cfg.adaptive_cutoffs:
        split_clusters(w, cfg)
    elif tied(cfg):
        w.pop("crit.out_layers.0.weight", None)  # a .bin save keeps the tied copy
    shared = {b: w.pop(f"{T}{b}", None) for b in ("r_w_bias", "r_r_bias")}
    for i in range(cfg.n_layers):
        for bias, tensor in shared.items():
            name = f"{T}layers.{i}.dec_attn.{bias}"
            w.setdefault(name, tensor)
            if w[name] is not None:
                w[name] = w[name].reshape(-1)
    return {k: v for k, v in w.items() if v is not None}


def split_clusters(w: dict[str, Tensor], cfg: ModelConfig) -> None:
    """The adaptive layers per cluster (in place): tied tensors filled in, a one-table model
    split at the cutoffs, the head's cluster rows after its token rows."""
    if cfg.adaptive_div_value == 1:
        split_single_table(w, cfg)
    for c in range(len(cfg.adaptive_cutoffs) + 1):
        w.setdefault(f"crit.out_layers.{c}.weight", w.get(f"{T}word_emb.emb_layers.{c}.weight"))
        w.setdefault(f"crit.out_projs.{c}", w.get(f"{T}word_emb.emb_projs.{c}"))
        for name in (f"{T}word_emb.emb_projs.{c}", f"crit.out_projs.{c}"):
            if w.get(name) is None:  # no projection: d_embed = d_model
                w[name] = torch.eye(cfg.d_model)
    head_w, head_b = w.pop("crit.cluster_weight"), w.pop("crit.cluster_bias")
    w["crit.out_layers.0.weight"] = torch.cat([w["crit.out_layers.0.weight"], head_w])
    w["crit.out_layers.0.bias"] = torch.cat([w["crit.out_layers.0.bias"], head_b])


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


def hf_config(cfg: ModelConfig, tokenizer: Tokenizer | None) -> dict:
    """The TransfoXLConfig of a formers decoder LM that is Transformer-XL shaped (refused, naming
    the first field that is not). Nothing is tied but a plain output that `tied` allows: the
    tensors are written apart."""
    exportable(cfg, "Transformer-XL", DIFF)
    check_embedding(cfg)
    attention = cfg.attention
    if attention.same_length and not attention.same_length_inclusive:
        refuse("attention.same_length_inclusive", False, "=True with attention.same_length")
    cutoffs = list(cfg.adaptive_cutoffs or [])
    layout = div_and_width(cfg)
    hf = getattr(tokenizer, "hf", None)
    return {
        "architectures": ["TransfoXLLMHeadModel"],
        "model_type": "transfo-xl",
        "vocab_size": cfg.vocab_size,
        "cutoffs": cutoffs,
        "div_val": layout[0],
        "d_embed": layout[1],
        "tie_projs": [False] * (len(cutoffs) + 1),
        "tie_word_embeddings": tied(cfg),
        "d_model": cfg.d_model,
        "n_head": cfg.n_heads,
        "d_head": cfg.d_head,
        "d_inner": cfg.d_ff,
        "n_layer": cfg.n_layers,
        "pre_lnorm": False,
        "attn_type": 0,
        "sample_softmax": -1,
        "mem_len": attention.mem_len,
        "clamp_len": attention.max_distance or -1,
        "same_length": attention.same_length,
        "untie_r": attention.untie_rel_bias,
        "dropout": cfg.dropout,
        "dropatt": cfg.attn_dropout,
        "init_std": cfg.embedding_std,
        "layer_norm_epsilon": cfg.norm_eps,
        "tgt_len": cfg.max_len,
        "eos_token_id": None if hf is None else hf.token_to_id("<eos>"),
    }


def div_and_width(cfg: ModelConfig) -> tuple[int, int]:
    """div_val and d_embed of the checkpoint: formers' own with the adaptive input; else
    div_val 1 and d_embed = d_model, transformers' one table of width d_model, into which the
    output layer's projections are multiplied (`one_projection`)."""
    if cfg.adaptive_input:
        return int(cfg.adaptive_div_value), cfg.adaptive_d_embed or cfg.d_model
    return 1, cfg.d_model


def check_embedding(cfg: ModelConfig) -> None:
    """Refuse an adaptive input transformers' cannot be: one whose clusters' widths are not
    d_embed // div_val^c for a whole div_val."""
    if cfg.adaptive_input and cfg.adaptive_div_value != int(cfg.adaptive_div_value):
        refuse("adaptive_div_value", cfg.adaptive_div_value, " a whole number")


def refuse(field: str, value: object, needs: str) -> None:
    """The one-line refusal of a `field` a Transformer-XL checkpoint has no counterpart for:
    "it needs `field` + `needs`"."""
    raise PretrainedError(
        f"the model has {field}={value!r}, which a Transformer-XL checkpoint cannot express: "
        f"it needs {field}{needs}"
    )


def denormalise(tensors: dict[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """The inverse of `normalise` on export: the head's cluster rows apart, a one-table model
    joined, the embedding scale folded into the tables, the r-biases (H, d_head), once where
    they are shared."""
    w = dict(tensors)
    if cfg.adaptive_cutoffs:
        join_clusters(w, cfg)
    else:
        plain_output(w, cfg)
    scale = cfg.embedding_scale / math.sqrt(cfg.d_model)
    if not math.isclose(scale, 1.0, rel_tol=1e-12):  # transformers multiplies by √d_model
        for name in [k for k in w if k.startswith(f"{T}word_emb.emb_layers.")]:
            w[name] = w[name] * scale
    for bias in ("r_w_bias", "r_r_bias"):
        per_layer = [w.pop(f"{T}layers.{i}.dec_attn.{bias}") for i in range(cfg.n_layers)]
        if not cfg.attention.untie_rel_bias:
            per_layer, names = per_layer[:1], [f"{T}{bias}"]
        else:
            names = [f"{T}layers.{i}.dec_attn.{bias}" for i in range(cfg.n_layers)]
        for name, tensor in zip(names, per_layer, strict=True):
            w[name] = tensor.reshape(cfg.n_heads, cfg.d_head)
    return w


def plain_output(w: dict[str, Tensor], cfg: ModelConfig) -> None:
    """No cutoffs: the output layer's bias (zero where formers has none) and scale (in place)."""
    out = "crit.out_layers.0"
    if cfg.scale_tied_output:  # formers ties it; the checkpoint cannot, see `tied`
        w[f"{out}.weight"] = w[f"{out}.weight"] * cfg.d_model**-0.5
    w.setdefault(f"{out}.bias", w[f"{T}word_emb.emb_layers.0.weight"].new_zeros(cfg.vocab_size))


def join_clusters(w: dict[str, Tensor], cfg: ModelConfig) -> None:
    """The inverse of `split_clusters` (in place): the head's cluster rows as cluster_weight and
    cluster_bias; with div_val 1 the clusters joined into one table and one output layer. The
    head of `torch.nn.AdaptiveLogSoftmaxWithLoss` projects with the identity, and none of its
    layers has a bias: zero."""
    clusters = range(len(cfg.adaptive_cutoffs) + 1)
    if cfg.adaptive_d_embed is None:
        head = w["crit.out_layers.0.weight"]
        w["crit.out_projs.0"] = torch.eye(cfg.d_model, dtype=head.dtype)
        for c in clusters:
            w[f"crit.out_layers.{c}.bias"] = head.new_zeros(len(w[f"crit.out_layers.{c}.weight"]))
    div_val, d_embed = div_and_width(cfg)
    if div_val == 1:
        one_projection(w, cfg, d_embed)
    shortlist = cfg.adaptive_cutoffs[0]
    for kind in ("weight", "bias"):
        head = w.pop(f"crit.out_layers.0.{kind}")
        w[f"crit.out_layers.0.{kind}"] = head[:shortlist].clone()
        w[f"crit.cluster_{kind}"] = head[shortlist:].clone()
    if div_val == 1:
        names = ["crit.out_layers.{}.weight", "crit.out_layers.{}.bias"]
        if cfg.adaptive_input:  # else the one table is there already
            names.append(f"{T}word_emb.emb_layers.{{}}.weight")
        for name in names:
            w[name.format(0)] = torch.cat([w.pop(name.format(c)) for c in clusters])


def one_projection(w: dict[str, Tensor], cfg: ModelConfig, d_embed: int) -> None:
    """div_val 1 (in place): transformers projects every cluster's embedding with one matrix,
    and with none (nor the output) where d_embed = d_model. There the projections (the
    identity, in an imported model) are multiplied into the tables and output layers;
    elsewhere the clusters' embedding projections must be one."""
    clusters = range(len(cfg.adaptive_cutoffs) + 1)
    projs = [w.pop(f"{T}word_emb.emb_projs.{c}") for c in clusters] if cfg.adaptive_input else []
    if d_embed != cfg.d_model:
        if any(not torch.equal(proj, projs[0]) for proj in projs):
            raise PretrainedError(
                "the model's adaptive clusters project their embeddings differently "
                f"(adaptive_div_value=1 and adaptive_d_embed={d_embed}), which a "
                "Transformer-XL checkpoint cannot express: with div_val 1 it has one projection; "
                f"it needs adaptive_d_embed={cfg.d_model} (d_model) or adaptive_div_value > 1"
            )
        w[f"{T}word_emb.emb_projs.0"] = projs[0]
        return
    for c, proj in enumerate(projs):
        table = f"{T}word_emb.emb_layers.{c}.weight"
        w[table] = w[table] @ proj.t()  # (n_c, d_model)
    for c in clusters:
        out = f"crit.out_layers.{c}.weight"
        w[out] = w[out] @ w.pop(f"crit.out_projs.{c}").t()  # (n_c, d_model)


FAMILY = Family(
    name="transfo-xl",
    architectures=("TransfoXLLMHeadModel",),
    model_type="transfo-xl",
    model_config=model_config,
    params=params,
    hf_config=hf_config,
    defaults=DEFAULTS,
    ignored=re.compile(r"pos_emb\.inv_freq$"),
    normalise=normalise,
    denormalise=denormalise,
    needs_tokenizer=False,
    attention="xl",
)
