"""BERT (Devlin et al. 2019), Hugging Face's `BertForMaskedLM`, as formers' masked-LM encoder.

BERT is the `vanilla` encoder LM (arch "encoder") with these settings (no new module):

    norm = "post"                x ← LayerNorm(x + sublayer(x)), the paper's; no final norm
    norm_eps                     layer_norm_eps (1e-12), for every LayerNorm
    position = "learned"         position_embeddings, max_len = max_position_embeddings rows
    type_vocab_size              token_type_embeddings; `EncoderLM(token_types=)`, type 0
                                 when none are given (as transformers does without
                                 token_type_ids)
    embed_norm = True            the embeddings' LayerNorm over word + type + position
    embed_scale = 1              word embeddings added as they are
    ffn.activation               hidden_act "gelu" (exact, erf) -> "gelu"; "gelu_new" and
                                 "gelu_pytorch_tanh" -> "gelu_tanh"; "relu" -> "relu"
    head_transform = True        the MLM head's transform: dense, hidden_act, LayerNorm
    output_bias = True           cls.predictions.bias, the decoder's bias
    tie_embeddings               tie_word_embeddings: the decoder's weight is word_embeddings
    dropout                      hidden_dropout_prob (embeddings and both residual branches)
    attn_dropout                 attention_probs_dropout_prob; ffn_dropout = 0 (BERT has none
                                 inside the MLP)
    pad_id                       pad_token_id: keys equal to it are masked, as transformers
                                 masks them when given attention_mask = (ids != pad)
    embed_init_std               initializer_range, for a model built from scratch

Attention is Vaswani's, softmax(q kᵀ / √d_head) v, bidirectional, biases on every projection.

Weights: query, key and value are separate nn.Linear layers in BERT; formers' fused
`qkv_proj` is their rows stacked (q, then k, then v), so `normalise` concatenates them into one
tensor under the name `params` spells (`attention.self.qkv`) and `denormalise` splits it again
on export. The pooler and the next-sentence head (`bert.pooler.*`, `cls.seq_relationship.*`,
which checkpoints saved from BertForPreTraining hold) are no part of the masked LM and are
skipped; so are the `position_ids` buffers older versions saved. LayerNorm `gamma` / `beta`
(TensorFlow-converted checkpoints) are read as `weight` / `bias`.

Refused (one line naming the field): position_embedding_type other than "absolute",
is_decoder, add_cross_attention, another hidden_act, type_vocab_size 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

# BertConfig's defaults, for a config.json that leaves a field out
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
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "is_decoder": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
# Hugging Face's activation names -> formers'
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
}
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
PREFIX, HEAD = "bert.", "cls.predictions."
# what a formers config must be to be BERT (the settings above that have one value)
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
    **BIASED_LAYERS,
    "ffn.activation": tuple(HF_ACTIVATIONS),
}
QKV = ("query", "key", "value")


@dataclass(frozen=True)
class Layout:
    """Where a BERT-shaped checkpoint keeps its tensors, for the families that are BERT's
    mapping with other names.

    Attributes:
        prefix: the encoder's ("bert."), which a save of the bare encoder lacks.
        head: the masked-LM head's ("cls.predictions.").
        unprefixed: the names that stand without `prefix` in a whole-model save.
        transform: the head transform's dense layer and LayerNorm, under `head`.
        fused: each layer's fused projections under attention.self. (formers' attn.<name>_proj)
            and the three that transformers keeps apart, stacked in that order.
        tied_bias: the decoder's bias is always the head's own (else it is the head's only
            when tie_word_embeddings, and a parameter of its own when not).
        tf_norms: read TensorFlow's LayerNorm gamma and beta as weight and bias.
    """

    prefix: str
    head: str
    unprefixed: tuple[str, ...]
    transform: tuple[str, str]
    fused: dict[str, tuple[str, ...]]
    tied_bias: bool = False
    tf_norms: bool = False


BERT = Layout(
    prefix=PREFIX,
    head=HEAD,
    unprefixed=(PREFIX, "cls."),
    transform=("transform.dense", "transform.LayerNorm"),
    fused={"qkv": QKV},
    tf_norms=True,
)
# each layer's tensors besides the fused projections: formers' name, the checkpoint's
LAYER = (
    ("attn.out_proj", "attention.output.dense"),
    ("attn_res.norm", "attention.output.LayerNorm"),
    ("ffn.up", "intermediate.dense"),
    ("ffn.down", "output.dense"),
    ("ffn_res.norm", "output.LayerNorm"),
)


def check_types(hf: HFConfig) -> None:
    """Refuse type_vocab_size 0: formers gives every token a type."""
    if not hf["type_vocab_size"] >= 1:
        raise PretrainedError(
            f"{hf.folder}/config.json sets type_vocab_size={hf['type_vocab_size']!r}, which "
            "formers cannot honour (every token has a type): it imports checkpoints with "
            "type_vocab_size >= 1"
        )


def encoder_config(
    hf: HFConfig,
    pad_id: int | None,
    attention: AttentionConfig,
    activation: str,
    position_offset: int = 0,
) -> ModelConfig:
    """The formers config of a BERT-shaped config.json, with what the families set apart."""
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
        max_len=hf["max_position_embeddings"] - position_offset,
        position_offset=position_offset,
        embed_init_std=float(hf["initializer_range"]),
        embed_scale=1.0,
        embed_norm=True,
        type_vocab_size=hf["type_vocab_size"],
        head_transform=True,
        output_bias=True,
        tie_embeddings=bool(hf["tie_word_embeddings"]),
        pad_id=pad_id,
        attention=attention,
        ffn=FFNConfig(activation=activation),
    )


def model_config(hf: HFConfig) -> ModelConfig:
    """The formers config of a BertConfig."""
    hf.require("position_embedding_type", ("absolute",), "formers' learned positions are absolute")
    hf.require("is_decoder", (False,), "the masked-LM encoder is bidirectional")
    hf.require("add_cross_attention", (False,), "a masked LM has no encoder to attend to")
    hf.require("hidden_act", tuple(ACTIVATIONS), "no such formers activation")
    check_types(hf)
    # an explicit null means no padding token, so the config's default must not fill it in
    pad_id = hf.values.get("pad_token_id", DEFAULTS["pad_token_id"])
    return encoder_config(hf, pad_id, AttentionConfig(), ACTIVATIONS[hf["hidden_act"]])


def encoder_hf_config(cfg: ModelConfig, family: str, hidden_act: str, positions: int) -> dict:
    """The config.json fields of a formers encoder LM that every BERT-shaped family writes
    (its type vocabulary refused, naming the field, when a `family` checkpoint has none)."""
    if cfg.type_vocab_size < 1:
        raise PretrainedError(
            f"the model has type_vocab_size=0, which a {family} checkpoint cannot express: it "
            "needs type_vocab_size >= 1"
        )
    return {
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_ff,
        "hidden_act": hidden_act,
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attn_dropout,
        "max_position_embeddings": positions,
        "type_vocab_size": cfg.type_vocab_size,
        "initializer_range": cfg.embedding_std,
        "layer_norm_eps": cfg.norm_eps,
        "pad_token_id": cfg.pad_id,
        "tie_word_embeddings": cfg.tie_embeddings,
    }


def hf_config(cfg: ModelConfig, tokenizer: Tokenizer | None) -> dict:
    """The BertConfig of a formers encoder LM that is BERT shaped (refused, naming the first
    field that is not)."""
    exportable(cfg, "BERT", DIFF)
    act = HF_ACTIVATIONS[cfg.ffn.activation]
    return {
        "architectures": ["BertForMaskedLM"],
        "model_type": "bert",
        **encoder_hf_config(cfg, "BERT", act, cfg.max_len),
        "position_embedding_type": "absolute",
        "is_decoder": False,
    }


def params(cfg: ModelConfig, layout: Layout = BERT) -> list[Param]:
    """Every formers parameter of the encoder LM and its tensor in a `layout` checkpoint
    (BertForMaskedLM's by default)."""
    e, head = f"{layout.prefix}embeddings.", layout.head
    words = f"{e}word_embeddings.weight"
    out = [
        Param("embed.token.weight", words),
        Param("embed.token_type.weight", f"{e}token_type_embeddings.weight"),
        Param("embed.position.table.weight", f"{e}position_embeddings.weight"),
        *pair("embed.norm", f"{e}LayerNorm"),
    ]
    # the fused projections first, each stacked by `normalise`
    layer = [(f"attn.{n}_proj", f"attention.self.{n}") for n in layout.fused] + list(LAYER)
    for i in range(cfg.n_layers):
        ours, theirs = f"layers.{i}.", f"{layout.prefix}encoder.layer.{i}."
        for name, hf in layer:
            out += pair(ours + name, theirs + hf)
    dense, norm = layout.transform
    return out + [
        *pair("head_transform.dense", head + dense),
        *pair("head_transform.norm", head + norm),
        Param("lm_head.weight", words if cfg.tie_embeddings else f"{head}decoder.weight"),
        Param("lm_head.bias", f"{head}bias"),
    ]


def _renamed(key: str, layout: Layout) -> str:
    """A checkpoint name as the whole masked LM spells it: with the encoder's prefix (a save
    of the bare encoder has none), LayerNorm's weight and bias for TensorFlow's gamma and beta
    where the layout reads them."""
    if layout.tf_norms:
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
    return key if key.startswith(layout.unprefixed) else layout.prefix + key


def normalise(
    weights: dict[str, Tensor], cfg: ModelConfig, layout: Layout = BERT
) -> dict[str, Tensor]:
    """The checkpoint's tensors under the names `params` spells: each layer's fused
    projections stacked into one (3D, D) matrix each; the decoder's copy of the tied matrix
    dropped."""
    named = {_renamed(k, layout): v for k, v in weights.items()}
    # the bias the decoder adds: the head's bias itself when tied (saved once, under either
    # name), a parameter of its own when a BERT's tie_word_embeddings is false
    head = layout.head
    decoder_bias = named.pop(f"{head}decoder.bias", None)
    if decoder_bias is not None and not (layout.tied_bias and f"{head}bias" in named):
        named[f"{head}bias"] = decoder_bias
    if cfg.tie_embeddings:
        named.pop(f"{head}decoder.weight", None)
    for i in range(cfg.n_layers):
        for fused, parts in layout.fused.items():
            fuse(named, f"{layout.prefix}encoder.layer.{i}.attention.self.", fused, parts)
    return named


def denormalise(
    tensors: dict[str, Tensor], cfg: ModelConfig, layout: Layout = BERT
) -> dict[str, Tensor]:
    """The inverse of `normalise` on export: each fused matrix split into its three; the
    decoder's bias written under its own name too where it is one of its own or tied."""
    out = dict(tensors)
    if layout.tied_bias or not cfg.tie_embeddings:
        out[f"{layout.head}decoder.bias"] = out[f"{layout.head}bias"].clone()
    for i in range(cfg.n_layers):
        for fused, parts in layout.fused.items():
            split(out, f"{layout.prefix}encoder.layer.{i}.attention.self.", fused, parts)
    return out


FAMILY = Family(
    name="bert",
    architectures=("BertForMaskedLM",),
    model_type="bert",
    model_config=model_config,
    params=params,
    hf_config=hf_config,
    defaults=DEFAULTS,
    # the pooler and next-sentence head of BertForPreTraining saves; old position-id buffers
    ignored=re.compile(r"^(bert\.)?pooler\.|^cls\.seq_relationship\.|_ids$"),
    special_tokens=("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    normalise=normalise,
    denormalise=denormalise,
    arch="encoder",
)
