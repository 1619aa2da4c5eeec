"""Training throughput of formers against a bare SDPA model and the popular libraries.

Every candidate trains the same decoder-only byte LM (by default 6 layers, d_model 512, 8 heads,
d_ff 2048, sequences of 512, batch 4, no dropout) on the same random batch: forward, loss,
backward, clipping and an AdamW step. Candidates of one family are timed in interleaved rounds (the
first candidate changes every round) so they share the machine's noise, and each reports the
median of its step times. Ratios are against the bare model of the same precision.

Families and candidates:
  vanilla          bare (written below: fused qkv, SDPA, pre-LN, GELU), formers, x-transformers
                   (attn_flash=True), HF GPT-2 (transformers), labml-nn
  transformer-xl   formers, x-transformers (memory with T5 relative bias, and with rotary
                   positions), HF TransfoXL (transformers < 4.40), labml-nn; all with a full
                   memory of --mem-len states
  primer-ez        formers, labml-nn (its Primer EZ: squared ReLU + multi-DConv-head attention)
  sparse-topk      formers, x-transformers (attn_sparse_topk): explicit sparse attention with
                   --top-k keys per query, on the vanilla family's model
  switch           formers (the switch preset: --n-experts experts of d_ff each in every other
                   layer, capacity factor 1.25), labml-nn (its SwitchFeedForward and
                   SwitchTransformerLayer in the same layers, its TransformerLayer in the
                   others), on the vanilla family's model; both losses add their layers'
                   load-balancing loss (α = 0.01)
  longformer       formers (causal sliding window of --window keys), lucidrains local-attention
                   (LocalAttention(window_size=--window, causal=True) in the bare model's
                   blocks: each query sees its block of --window and the one before), on the
                   vanilla family's model
With --compile, bare and formers also run with torch.compile (`bare+compile`,
`formers+compile`); with --compile all, every candidate does. Every candidate runs with the
malloc setting of formers commands (formers/cpu_allocator.py) unless --default-malloc is given:
one process, the same for all.

On a GPU (--device cuda) every candidate takes the same step under bf16 autocast with torch's
fused AdamW (formers' own optimizer is fused there too), timed by CUDA events. --shape gpt2-small
is GPT-2 small's shape (12 layers, d_model 768, 12 heads, d_ff 3,072, vocabulary 50,257, batch
16 × 1,024 tokens). --rows times named rows, each alone in a fresh process of its own
(benchmarks/peer_rows.py), with its compile seconds and the process's peak GPU memory:

    python benchmarks/peers.py --device cuda --shape gpt2-small --precision bf16 \
        --rows vanilla:bare vanilla:formers vanilla:hf-gpt2 vanilla:x-transformers \
        vanilla:formers+compile --repeats 10 --warmup 3 --json runs/peers-gpu.json

The peers are optional: `pip install -e '.[peers]'`; a library that is not installed is skipped.

    python benchmarks/peers.py --families vanilla transformer-xl --precision fp32 bf16 \
        --repeats 7 --json bench-results/peers.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peer_rows
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import formers
from formers.bench.hardware import machine_info, resolve_device
from formers.bench.timing import interleaved, median
from formers.cpu_allocator import keep_freed_memory
from formers.errors import FormersError
from formers.train.config import TrainConfig
from formers.train.optim import fusable, make_optimizer


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


# ------------------------------------------------------------------------------- the timing


def train_step(
    c: Candidate, x: Tensor, y: Tensor, precision: str, device: torch.device | None = None
) -> Callable[[], None]:
    """The step every candidate takes: forward and loss (under bf16 autocast when asked),
    backward, clipping, AdamW (fused wherever torch has it for these parameters)."""
    device = device or torch.device("cpu")
    if c.optimizer is None:
        params = list(c.model.parameters())
        c.optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fusable(params))
    bf16 = torch.autocast(device.type, torch.bfloat16)
    autocast = bf16 if precision == "bf16" else nullcontext()

    def step() -> None:
        with autocast:
            loss = c.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(c.model.parameters(), c.clip)
        c.optimizer.step()
        c.optimizer.zero_grad(set_to_none=True)

    return step


OURS = ("bare", "formers")  # always run; the rest are the peers
COMPILED = "+compile"


def compiled(c: Candidate, backend: str = "inductor") -> Candidate:
    """The same candidate with its model's forward wrapped in torch.compile (memory intact)."""
    c.model.forward = torch.compile(c.model.forward, backend=backend)
    return c


def run_family(
    family: str,
    s: Shape,
    precision: str,
    repeats: int,
    warmup: int,
    only: list[str] | None,
    compile_ours: bool = False,
    profile: bool = False,
    device: torch.device | None = None,
    compile_peers: bool = False,
    backend: str = "inductor",
) -> dict[str, Any]:
    device = device or torch.device("cpu")
    x, y = batch(s, device)
    makers = dict(FAMILIES[family])
    if compile_ours or compile_peers:
        for name in list(makers):
            if name in OURS or compile_peers:
                present, make = makers[name]
                makers[name + COMPILED] = (
                    present,
                    lambda s, make=make: compiled(make(s), backend),
                )
    steps, params, skipped, failed, notes = {}, {}, [], {}, {}
    for name, (present, make) in makers.items():
        if only and name.removesuffix(COMPILED) not in (*only, *OURS):
            continue
        if not present():
            skipped.append(name)
            continue
        torch.manual_seed(0)
        try:  # a peer that breaks is a row marked failed, never the end of the run
            candidate = make(s)
            candidate.model.to(device).train()
            step = train_step(candidate, x, y, precision, device)
            step()  # one trial step: errors surface here, not inside the timing rounds
        except Exception as error:  # noqa: BLE001 (any failure of a third-party library)
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            continue
        params[name] = sum(p.numel() for p in candidate.model.parameters())
        steps[name] = step
        if candidate.note:
            notes[name] = candidate.note
    # warmup >= 2 when there is memory (the first step runs without it), 3 when compiled (the
    # step with memory compiles a second graph)
    least = 3 if compile_ours or compile_peers else 2
    seconds = interleaved(steps, repeats=repeats, warmup=max(warmup, least), device=device)
    tokens = s.batch * s.seq_len
    rates = {name: tokens / median(times) for name, times in seconds.items()}
    reference = rates.get("bare") or rates["formers"]
    peers = [rate for name, rate in rates.items() if name.removesuffix(COMPILED) not in OURS]
    fastest = max(peers) if peers else None
    return {
        "family": family,
        "precision": precision,
        "tokens_per_s": rates,
        "ratio_to_reference": {name: rate / reference for name, rate in rates.items()},
        "formers_vs_fastest_peer": rates["formers"] / fastest if fastest else None,
        "compiled_formers_vs_fastest_peer": (
            rates["formers" + COMPILED] / fastest if fastest and compile_ours else None
        ),
        "params": params,
        "seconds": seconds,
        "skipped": skipped,
        "failed": failed,
        "notes": notes,
        "profile": profile_step(steps["formers"]) if profile else None,
    }


def batch(s: Shape, device: torch.device) -> tuple[Tensor, Tensor]:
    """The random (inputs, targets) every candidate trains on, the same in every process."""
    torch.manual_seed(0)
    x = torch.randint(0, s.vocab, (s.batch, s.seq_len))
    y = torch.randint(0, s.vocab, (s.batch, s.seq_len))
    return x.to(device), y.to(device)


LINEAR_OPS = ("aten::mm", "aten::addmm")
ATTENTION_MATMUL_OPS = ("aten::bmm", "aten::baddbmm", "aten::baddbmm_")


def profile_step(step: Callable[[], None], steps: int = 3) -> dict[str, float]:
    """Where one training step's time goes, by torch.profiler: linear layers (2-D matmuls),
    batched matmuls (attention), and everything else (norms, softmax, activations, casts, loss,
    optimizer, and the profiler's own overhead). Milliseconds per step; GFLOP/s from the
    profiler's FLOP counts."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall_ms = (time.perf_counter() - start) * 1e3 / steps
    events = {e.key: e for e in prof.key_averages()}

    def ms_and_flops(ops: tuple[str, ...]) -> tuple[float, float]:
        found = [events[op] for op in ops if op in events]
        ms = sum(e.self_cpu_time_total for e in found) / 1e3 / steps
        return ms, sum(e.flops for e in found) / steps

    linear_ms, linear_flops = ms_and_flops(LINEAR_OPS)
    attention_ms, attention_flops = ms_and_flops(ATTENTION_MATMUL_OPS)
    return {
        "step_ms": wall_ms,
        "linear_ms": linear_ms,
        "linear_gflop_per_s": linear_flops / linear_ms / 1e6 if linear_ms else 0.0,
        "attention_matmul_ms": attention_ms,
        "attention_matmul_gflop_per_s": (
            attention_flops / attention_ms / 1e6 if attention_ms else 0.0
        ),
        "other_ms": wall_ms - linear_ms - attention_ms,
    }


def print_table(result: dict[str, Any]) -> None:
    reference = "bare" if "bare" in result["tokens_per_s"] else "formers"
    print(f"\n{result['family']} ({result['precision']}), ratio to {reference}")
    print(f"{'candidate':16s} {'params':>12s} {'tokens/s':>10s} {'ratio':>7s}")
    for name, rate in sorted(result["tokens_per_s"].items(), key=lambda kv: -kv[1]):
        ratio = result["ratio_to_reference"][name]
        print(f"{name:16s} {result['params'][name]:12,d} {rate:10,.0f} {ratio:7.2f}")
    if result["formers_vs_fastest_peer"] is not None:
        print(f"formers / fastest peer: {result['formers_vs_fastest_peer']:.2f}")
    if result["compiled_formers_vs_fastest_peer"] is not None:
        print(f"formers{COMPILED} / fastest peer: {result['compiled_formers_vs_fastest_peer']:.2f}")
    for name, reason in result.get("failed", {}).items():
        print(f"{name:16s} failed: {reason}")
    if result["skipped"]:
        print(f"not installed: {', '.join(result['skipped'])}")
    if result.get("profile"):
        p = result["profile"]
        print(
            f"formers step under torch.profiler: {p['step_ms']:.0f} ms = linear layers "
            f"{p['linear_ms']:.0f} ms ({p['linear_gflop_per_s']:.0f} GFLOP/s) + attention "
            f"matmuls {p['attention_matmul_ms']:.0f} ms ({p['attention_matmul_gflop_per_s']:.0f} "
            f"GFLOP/s) + the rest {p['other_ms']:.0f} ms"
        )


SHAPES: dict[str, dict[str, int]] = {
    # the decoder-only byte LM of `formers bench`
    "matched": dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048, vocab=256, seq_len=512,
                    batch_size=4),
    # GPT-2 small (Radford et al. 2019) at its context, batch 16
    "gpt2-small": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab=50257,
                       seq_len=1024, batch_size=16),
}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--only", nargs="+", help="peers to time (bare and formers always run)")
    p.add_argument(
        "--rows",
        nargs="+",
        metavar="FAMILY:CANDIDATE[+compile]",
        help="instead of --families: time exactly these rows, in this order, each alone in a "
        "fresh process of its own (e.g. vanilla:hf-gpt2 vanilla:formers+compile)",
    )
    p.add_argument(
        "--row-time-limit",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --rows: most seconds one row's process may take (default: 600)",
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="ours",
        choices=["ours", "all"],
        help="also time bare and formers with torch.compile (bare+compile, formers+compile); "
        "--compile all: every candidate",
    )
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend")
    p.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile formers' step: linear layers, attention matmuls, the rest",
    )
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument(
        "--shape",
        choices=list(SHAPES),
        default="matched",
        help="the sizes below unless given: matched (6 × 512, batch 4 × 512) or gpt2-small",
    )
    for name in SHAPES["matched"]:
        p.add_argument("--" + name.replace("_", "-"), type=int)
    p.add_argument("--mem-len", type=int, default=512, help="Transformer-XL memory")
    p.add_argument("--top-k", type=int, default=8, help="keys per query of sparse-topk")
    p.add_argument("--n-experts", type=int, default=8, help="experts per Switch layer")
    p.add_argument("--window", type=int, default=256, help="keys per query of longformer")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per candidate")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate first")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc malloc as it is; by default every candidate runs with the setting "
        "formers commands use (formers/cpu_allocator.py)",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    for name, value in SHAPES[args.shape].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def library_versions() -> dict[str, str | None]:
    """The installed version of torch and of each peer library (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "x-transformers", "labml-nn", "local-attention"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
        rows = peer_rows.parse_rows(args.rows, FAMILIES) if args.rows else None
    except FormersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tuned = False if args.default_malloc else keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = Shape(
        args.n_layers, args.d_model, args.n_heads, args.d_ff, args.vocab,
        args.seq_len, args.batch_size, args.mem_len, args.top_k, args.n_experts, args.window,
    )  # fmt: skip
    machine = {
        **machine_info(device),
        "processor": platform.processor(),
        "libraries": library_versions(),
        "keep_freed_memory": tuned,
        "threads": torch.get_num_threads(),
    }
    if rows is not None:
        settings = peer_rows.RowSettings(
            vars(s), tuple(args.precision), str(device), args.repeats, args.warmup,
            args.compile_backend, args.row_time_limit,
        )  # fmt: skip
        peer_rows.run_rows(rows, settings, machine, args.json)
        return 0
    results = []
    for precision in args.precision:
        for family in args.families:
            result = run_family(
                family,
                s,
                precision,
                args.repeats,
                args.warmup,
                args.only,
                compile_ours=args.compile is not None,
                profile=args.profile,
                device=device,
                compile_peers=args.compile == "all",
                backend=args.compile_backend,
            )
            print_table(result)
            results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": machine, "shape": vars(s), "results": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
