"""Model FLOPs per token, after Kaplan et al. 2020 (arXiv:2001.08361), Table 1.

Forward, per token:  C_forward = 2·N + attention,  training: C = 3·C_forward = 6·N + 3·attention
(the backward pass costs twice the forward).

N counts the parameters each token multiplies: every weight except the input lookup tables
(token and learned position embeddings cost no multiplies), plus the output projection d_model ×
vocab, which is a matmul per token even when it shares the embedding's weights. Kaplan's Table 1
leaves out the de-embedding; we keep it, as a small-vocabulary model spends a real share there.

The attention term counts the two products a query has with every key it sees, q·kᵀ and the
weighted sum of values, 2 FLOPs per multiply-add each: 4·n_layers·keys·d_model forward, the
count of Chowdhery et al. 2022 (arXiv:2204.02311, App. B: 6N + 12·L·H·Q·T in training). No
causal halving: the masked half is counted as if computed, as PaLM counts it. Kaplan's
2·n_layers·n_ctx·d_attn equals this count halved for the causal mask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from formers.config import ModelConfig
from formers.models import build
from formers.variants.xl import RelativeMultiHeadAttention, XLConfig

# A variant whose attention does less work than every query against every key declares here
# how many keys a query is scored against, e.g. "longformer": lambda cfg, t: min(t, 2w + 1).
KEYS_PER_QUERY: dict[str, Callable[[ModelConfig, int], int]] = {}


def keys_per_query(cfg: ModelConfig, seq_len: int) -> int:
    """Keys each query is scored against: the segment plus any memory (Transformer-XL)."""
    rule = KEYS_PER_QUERY.get(cfg.attention.kind)
    if rule is not None:
        return rule(cfg, seq_len)
    return seq_len + getattr(cfg.attention, "mem_len", 0)


def score_products(cfg: ModelConfig) -> int:
    """Products per query–key pair: q·kᵀ and the value sum; relative attention adds a second
    score against the key's distance (Dai et al. 2019, Eq. 4 terms (b)+(d))."""
    return 3 if isinstance(cfg.attention, XLConfig) else 2


def attention_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the attention scores and weighted sums, all layers."""
    return 2.0 * score_products(cfg) * cfg.n_layers * keys_per_query(cfg, seq_len) * cfg.d_model


def matmul_params(cfg: ModelConfig) -> int:
    """N: the parameters a token multiplies once each in the forward pass (see module doc).

    The model is built on the meta device, so counting allocates nothing.
    """
    with torch.device("meta"):
        model = build(cfg)
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    # Transformer-XL's W_{k,R} projects the S relative sinusoids once per segment, shared by the
    # whole batch: a per-segment cost of 2·S·d², not a per-token one.
    per_segment = {
        id(p)
        for m in model.modules()
        if isinstance(m, RelativeMultiHeadAttention)
        for p in m.r_proj.parameters()
    }
    skip = lookups | per_segment
    n = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Linear) and id(head.weight) in lookups:
        n += head.weight.numel()  # tied: the lookup table is also the output matmul
    return n


def inference_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token: 2·N + attention."""
    return 2.0 * matmul_params(cfg) + attention_flops_per_token(cfg, seq_len)


def training_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward + backward FLOPs per token: 6·N + 3·attention."""
    return 3.0 * inference_flops_per_token(cfg, seq_len)


def flops_summary(
    cfg: ModelConfig, seq_len: int, train_tps: float, infer_tps: float, peak_rate: float
) -> dict[str, Any]:
    """FLOPs per token, achieved FLOP/s and their fraction of the measured matmul rate."""
    train = training_flops_per_token(cfg, seq_len)
    infer = inference_flops_per_token(cfg, seq_len)
    return {
        "matmul_params": matmul_params(cfg),
        "keys_per_query": keys_per_query(cfg, seq_len),
        "attention_forward_per_token": attention_flops_per_token(cfg, seq_len),
        "training_per_token": train,
        "inference_per_token": infer,
        "training_per_second": train * train_tps,
        "inference_per_second": infer * infer_tps,
        "training_fraction_of_matmul": train * train_tps / peak_rate,
        "inference_fraction_of_matmul": infer * infer_tps / peak_rate,
    }
