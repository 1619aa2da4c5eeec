"""The candidates of benchmarks/peers.py: the same decoder-only byte LM as each library builds it.

`FAMILIES` maps a family (vanilla, transformer-xl, ...) to its candidates, each a pair: whether
its library is installed, and how to build it at a `Shape`. peers.py's docstring says what each
candidate is; `peer_step` says how every one of them is timed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import formers
from formers.train.config import TrainConfig
from formers.train.optim import make_optimizer


@dataclass(frozen=True)
class Shape:
    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    vocab: int
    seq_len: int
    batch: int
    mem_len: int
    top_k: int = 8
    n_experts: int = 8
    window: int = 256


# ---------------------------------------------------------------------------- the bare model


class BareBlock(nn.Module):
    """Pre-LN block: x + attn(LN(x)), then x + FFN(LN(x)); SDPA with is_causal, fused qkv."""

    def __init__(self, s: Shape):
        super().__init__()
        self.heads = s.n_heads
        self.ln1, self.ln2 = nn.LayerNorm(s.d_model), nn.LayerNorm(s.d_model)
        self.qkv = nn.Linear(s.d_model, 3 * s.d_model)
        self.out = nn.Linear(s.d_model, s.d_model)
        self.ff1, self.ff2 = nn.Linear(s.d_model, s.d_ff), nn.Linear(s.d_ff, s.d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class BareLM(nn.Module):
    """The least a decoder-only LM can be in PyTorch: the yardstick for every other candidate."""

    def __init__(self, s: Shape):
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.d_model)
        self.pos = nn.Parameter(torch.randn(s.seq_len, s.d_model) * 0.02)
        self.blocks = nn.ModuleList(BareBlock(s) for _ in range(s.n_layers))
        self.ln = nn.LayerNorm(s.d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.ln(x) @ self.embed.weight.t()


# ------------------------------------------------------------------------------ candidates


@dataclass
class Candidate:
    """A model, its optimizer and a loss function that may carry state (memory) across steps.

    Every candidate takes the same optimizer step: AdamW (the peers: torch's; formers: its own,
    with decay groups) and gradient clipping at norm 1.0, as `formers train` does by default.
    """

    model: nn.Module
    loss: Callable[[Tensor, Tensor], Tensor]
    optimizer: torch.optim.Optimizer | None = None
    clip: float = 1.0
    note: str = ""  # how it was built, where that can differ (the attention implementation)


def lm_loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def bare(s: Shape) -> Candidate:
    model = BareLM(s)
    return Candidate(model, lambda x, y: lm_loss(model(x), y))


def formers_model(s: Shape, preset: str) -> Candidate:
    """formers as a user trains it: its own optimizer (AdamW, decay groups) and grad clipping."""
    overrides: dict[str, Any] = dict(
        n_layers=s.n_layers, d_model=s.d_model, n_heads=s.n_heads, d_ff=s.d_ff,
        vocab_size=s.vocab, dropout=0.0, norm="pre",
    )  # fmt: skip
    if preset in ("vanilla", "sparse-topk", "switch", "longformer"):  # x-transformers' model
        overrides.update({"ffn.activation": "gelu", "position": "learned", "max_len": s.seq_len})
    if preset == "sparse-topk":
        overrides["attention.top_k"] = s.top_k
    if preset == "switch":
        overrides["ffn.n_experts"] = s.n_experts
    if preset == "longformer":
        overrides["attention.window"] = s.window
    if formers.config(preset).recurrent:
        overrides["attention.mem_len"] = s.mem_len
    model = formers.build(formers.config(preset, **overrides))
    optimizer = make_optimizer(model, TrainConfig())
    if model.recurrent:
        memory: list[Any] = [None]

        def loss(x: Tensor, y: Tensor) -> Tensor:
            out = model(x, y, memory=memory[0])
            memory[0] = out.memory
            return out.loss

        return Candidate(model, loss, optimizer)
    return Candidate(model, lambda x, y: model(x, y).loss, optimizer)


def x_transformers(s: Shape, xl: str | None = None, sparse_topk: int | None = None) -> Candidate:
    """x-transformers' decoder; with `xl`, memory and relative ("t5" bias) or rotary positions;
    with `sparse_topk`, its explicit sparse attention (keep the k best keys of each query).

    Its flash path takes neither the T5 relative bias nor top-k, so those variants run unfused.
    """
    from x_transformers import Decoder, TransformerWrapper

    sparse = {"attn_sparse_topk": sparse_topk} if sparse_topk else {}
    layers = Decoder(
        dim=s.d_model, depth=s.n_layers, heads=s.n_heads, attn_dim_head=s.d_model // s.n_heads,
        ff_mult=s.d_ff / s.d_model, attn_flash=xl != "t5" and not sparse_topk,
        rel_pos_bias=xl == "t5", rotary_pos_emb=xl == "rotary", **sparse,
    )  # fmt: skip
    model = TransformerWrapper(
        num_tokens=s.vocab, max_seq_len=s.seq_len, attn_layers=layers,
        max_mem_len=s.mem_len if xl else 0, use_abs_pos_emb=not xl, tie_embedding=True,
    )  # fmt: skip
    if not xl:
        return Candidate(model, lambda x, y: lm_loss(model(x), y))
    mems: list[Any] = [None]

    def loss(x: Tensor, y: Tensor) -> Tensor:
        logits, mems[0] = model(x, mems=mems[0], return_mems=True)
        return lm_loss(logits, y)

    return Candidate(model, loss)


def hf_gpt2(s: Shape) -> Candidate:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=s.vocab, n_positions=s.seq_len, n_embd=s.d_model, n_layer=s.n_layers,
        n_head=s.n_heads, n_inner=s.d_ff, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    try:  # GPT-2 on torch's fused attention, where this transformers has it (4.48+)
        model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    except (TypeError, ValueError, ImportError):
        model = GPT2LMHeadModel(cfg)
    note = f"attention: {getattr(model.config, '_attn_implementation', 'eager')}"
    return Candidate(model, lambda x, y: lm_loss(model(x).logits, y), note=note)


def hf_transfo_xl(s: Shape) -> Candidate:
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel

    cfg = TransfoXLConfig(
        vocab_size=s.vocab, cutoffs=[], d_model=s.d_model, d_embed=s.d_model, n_head=s.n_heads,
        d_head=s.d_model // s.n_heads, d_inner=s.d_ff, n_layer=s.n_layers, mem_len=s.mem_len,
        tgt_len=s.seq_len, adaptive=False, div_val=1, dropout=0.0, dropatt=0.0,
    )  # fmt: skip
    model = TransfoXLLMHeadModel(cfg)
    mems: list[Any] = [None]

    def loss(x: Tensor, y: Tensor) -> Tensor:
        # without labels it returns log-probabilities; with labels its loss path fails under
        # bf16 autocast (an fp32 buffer filled from bf16)
        out = model(x, mems=mems[0])
        mems[0] = out.mems
        log_probs = out.prediction_scores.float()
        return F.nll_loss(log_probs.reshape(-1, log_probs.shape[-1]), y.reshape(-1))

    return Candidate(model, loss)


def labml(s: Shape, kind: str) -> Candidate:
    """labml-nn's layers assembled as in its experiments (sequence-first tensors)."""
    from labml_nn.transformers.feed_forward import FeedForward

    def ffn(activation: nn.Module) -> FeedForward:
        return FeedForward(s.d_model, s.d_ff, dropout=0.0, activation=activation)

    if kind == "transformer-xl":
        return labml_xl(s, ffn(nn.ReLU()))
    from labml_nn.transformers import Encoder, TransformerLayer
    from labml_nn.transformers.mha import MultiHeadAttention
    from labml_nn.transformers.models import EmbeddingsWithLearnedPositionalEncoding
    from labml_nn.transformers.utils import subsequent_mask

    if kind == "primer-ez":
        from labml_nn.transformers.primer_ez import MultiDConvHeadAttention, SquaredReLU

        attn, act = MultiDConvHeadAttention(s.n_heads, s.d_model, 0.0), SquaredReLU()
    else:
        attn, act = MultiHeadAttention(s.n_heads, s.d_model, 0.0), nn.GELU()
    layer = TransformerLayer(
        d_model=s.d_model, self_attn=attn, src_attn=None, feed_forward=ffn(act), dropout_prob=0.0
    )
    model = nn.ModuleDict(
        {
            "embed": EmbeddingsWithLearnedPositionalEncoding(s.d_model, s.vocab, s.seq_len),
            "encoder": Encoder(layer, s.n_layers),
            "head": nn.Linear(s.d_model, s.vocab),
        }
    )
    mask = subsequent_mask(s.seq_len)

    def loss(x: Tensor, y: Tensor) -> Tensor:
        h = model["encoder"](model["embed"](x.t()), mask)  # (T, B, D)
        return lm_loss(model["head"](h).transpose(0, 1), y)

    return Candidate(model, loss)


def labml_xl(s: Shape, feed_forward: nn.Module) -> Candidate:
    from labml_nn.transformers.utils import subsequent_mask
    from labml_nn.transformers.xl import TransformerXL, TransformerXLLayer
    from labml_nn.transformers.xl.relative_mha import RelativeMultiHeadAttention

    layer = TransformerXLLayer(
        d_model=s.d_model,
        self_attn=RelativeMultiHeadAttention(s.n_heads, s.d_model, 0.0),
        feed_forward=feed_forward,
        dropout_prob=0.0,
    )
    model = nn.ModuleDict(
        {
            "embed": nn.Embedding(s.vocab, s.d_model),
            "xl": TransformerXL(layer, s.n_layers),
            "head": nn.Linear(s.d_model, s.vocab),
        }
    )
    causal = subsequent_mask(s.seq_len)  # (T, T, 1)
    mems: list[Any] = [[]]

    def loss(x: Tensor, y: Tensor) -> Tensor:
        # as labml-nn's XL experiment: memory fully visible, then the causal segment
        mem = mems[0]
        mask = causal
        if mem:
            mask = torch.cat([causal.new_ones(s.seq_len, len(mem[0]), 1), causal], dim=1)
        h, new = model["xl"](model["embed"](x.t()), mem, mask)
        if mem:
            new = [torch.cat([m, n], 0)[-s.mem_len :] for m, n in zip(mem, new, strict=True)]
        mems[0] = new
        return lm_loss(model["head"](h).transpose(0, 1), y)

    return Candidate(model, loss)


def formers_switch(s: Shape) -> Candidate:
    """The switch preset; its loss adds the layers' load-balancing loss, as `formers train`."""
    candidate = formers_model(s, "switch")
    model = candidate.model

    def loss(x: Tensor, y: Tensor) -> Tensor:
        out = model(x, y)
        return out.loss + out.aux_loss

    return Candidate(model, loss, candidate.optimizer)


def labml_switch(s: Shape) -> Candidate:
    """labml-nn's Switch layers where the switch preset has them (layers 1, 3, ...), its dense
    TransformerLayer elsewhere, and the load-balancing loss of its Switch experiment."""
    from labml_nn.transformers import TransformerLayer
    from labml_nn.transformers.feed_forward import FeedForward
    from labml_nn.transformers.mha import MultiHeadAttention
    from labml_nn.transformers.models import EmbeddingsWithLearnedPositionalEncoding
    from labml_nn.transformers.switch import SwitchFeedForward, SwitchTransformerLayer
    from labml_nn.transformers.utils import subsequent_mask

    layers = []
    for index in range(s.n_layers):
        attn = MultiHeadAttention(s.n_heads, s.d_model, 0.0)
        ffn = FeedForward(s.d_model, s.d_ff, dropout=0.0, activation=nn.GELU())
        if index % 2:
            switch = SwitchFeedForward(
                capacity_factor=1.25, drop_tokens=True, is_scale_prob=True,
                n_experts=s.n_experts, expert=ffn, d_model=s.d_model,
            )  # fmt: skip
            layers.append(SwitchTransformerLayer(
                d_model=s.d_model, attn=attn, feed_forward=switch, dropout_prob=0.0
            ))  # fmt: skip
        else:
            layers.append(TransformerLayer(
                d_model=s.d_model, self_attn=attn, src_attn=None, feed_forward=ffn,
                dropout_prob=0.0,
            ))  # fmt: skip
    model = nn.ModuleDict(
        {
            "embed": EmbeddingsWithLearnedPositionalEncoding(s.d_model, s.vocab, s.seq_len),
            "layers": nn.ModuleList(layers),
            "norm": nn.LayerNorm(s.d_model),
            "head": nn.Linear(s.d_model, s.vocab),
        }
    )
    mask = subsequent_mask(s.seq_len)

    def loss(x: Tensor, y: Tensor) -> Tensor:
        h, balance = model["embed"](x.t()), 0.0  # (T, B, D)
        for layer in model["layers"]:
            if isinstance(layer, SwitchTransformerLayer):
                h, counts, route_prob, _, _ = layer(x=h, mask=mask)
                total = counts.sum()
                balance = balance + s.n_experts * (counts / total * route_prob / total).sum()
            else:
                h = layer(x=h, mask=mask)
        logits = model["head"](model["norm"](h)).transpose(0, 1)
        return lm_loss(logits, y) + 0.01 * balance

    return Candidate(model, loss)


class LocalAttentionBlock(BareBlock):
    """The bare block with lucidrains' LocalAttention in place of causal SDPA."""

    def __init__(self, s: Shape):
        from local_attention import LocalAttention

        super().__init__(s)
        self.local = LocalAttention(window_size=s.window, causal=True, autopad=True)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        a = self.local(q, k, v)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


def local_attention_lm(s: Shape) -> Candidate:
    model = BareLM(s)
    model.blocks = nn.ModuleList(LocalAttentionBlock(s) for _ in range(s.n_layers))
    return Candidate(model, lambda x, y: lm_loss(model(x), y))


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def hf_has_transfo_xl() -> bool:
    if not available("transformers"):
        return False
    import transformers

    return hasattr(transformers, "TransfoXLLMHeadModel")


FAMILIES: dict[str, dict[str, tuple[Callable[[], bool], Callable[[Shape], Candidate]]]] = {
    "vanilla": {
        "bare": (lambda: True, bare),
        "formers": (lambda: True, lambda s: formers_model(s, "vanilla")),
        "x-transformers": (lambda: available("x_transformers"), x_transformers),
        "hf-gpt2": (lambda: available("transformers"), hf_gpt2),
        "labml-nn": (lambda: available("labml_nn"), lambda s: labml(s, "vanilla")),
    },
    "transformer-xl": {
        "formers": (lambda: True, lambda s: formers_model(s, "transformer-xl")),
        "x-transformers-t5": (
            lambda: available("x_transformers"),
            lambda s: x_transformers(s, "t5"),
        ),
        "x-transformers-rotary": (
            lambda: available("x_transformers"),
            lambda s: x_transformers(s, "rotary"),
        ),
        "hf-transfo-xl": (hf_has_transfo_xl, hf_transfo_xl),
        "labml-nn": (lambda: available("labml_nn"), lambda s: labml(s, "transformer-xl")),
    },
    "primer-ez": {
        "formers": (lambda: True, lambda s: formers_model(s, "primer-ez")),
        "labml-nn": (lambda: available("labml_nn"), lambda s: labml(s, "primer-ez")),
    },
    "sparse-topk": {
        "formers": (lambda: True, lambda s: formers_model(s, "sparse-topk")),
        "x-transformers": (
            lambda: available("x_transformers"),
            lambda s: x_transformers(s, sparse_topk=s.top_k),
        ),
    },
    "switch": {
        "formers": (lambda: True, formers_switch),
        "labml-nn": (lambda: available("labml_nn"), labml_switch),
    },
    "longformer": {
        "bare": (lambda: True, bare),
        "formers": (lambda: True, lambda s: formers_model(s, "longformer")),
        "local-attention": (lambda: available("local_attention"), local_attention_lm),
    },
}
