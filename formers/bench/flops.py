"""Model FLOPs per token, after Kaplan et al. 2020 (arXiv:2001.08361), Table 1.

Forward, per token:  C_forward = 2·N + attention,  training: C = 3·C_forward = 6·N + 3·attention
(the backward pass costs twice the forward).

N counts the parameters each token multiplies: every weight except the input lookup tables
(token and learned position embeddings cost no multiplies), plus the output projection d_model ×
vocab, which is a matmul per token even when it shares the embedding's weights. Kaplan's Table 1
leaves out the de-embedding; we keep it, as a small-vocabulary model spends a real share there.

The attention term counts the products a query has with every key it sees, q·kᵀ and the
weighted sum of values, 2 FLOPs per multiply-add each: 4·n_layers·keys·d_model forward, the
count of Chowdhery et al. 2022 (arXiv:2204.02311, App. B: 6N + 12·L·H·Q·T in training). No
causal halving: the masked half is counted as if computed, as PaLM counts it. Kaplan's
2·n_layers·n_ctx·d_attn equals this count halved for the causal mask. Each attention module
reports its own count (`MultiHeadAttention.score_flops_per_token`): a variant that scores a
query against more keys (a memory), fewer (a window) or with more products (relative
positions) says so there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from formers.config import ModelConfig
from formers.models import build


def _meta_model(cfg: ModelConfig) -> nn.Module:
    """The model of `cfg` on the meta device: shapes and settings, no memory, no init work."""
    with torch.device("meta"):
        return build(cfg)


def _attention_layers(model: nn.Module) -> list[nn.Module]:
    """The modules that score queries against keys (each says what that costs)."""
    return [m for m in model.modules() if callable(getattr(m, "score_flops_per_token", None))]


def keys_per_query(cfg: ModelConfig, seq_len: int) -> int:
    """Keys a query is scored against (the most of any layer): the segment, plus any memory,
    or fewer for attention that sees only some keys."""
    layers = _attention_layers(_meta_model(cfg))
    return max((m.keys_per_query(seq_len) for m in layers), default=0)


def attention_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token of the attention scores and weighted sums, all layers; each
    attention module reports its own (`score_flops_per_token`)."""
    layers = _attention_layers(_meta_model(cfg))
    return sum(m.score_flops_per_token(seq_len) for m in layers)


def matmul_params(cfg: ModelConfig) -> int:
    """N: the parameters a token multiplies once each in the forward pass (see module doc).

    Skipped: lookup tables, and parameters a module multiplies once per sequence rather than
    per token (`per_segment_parameters`, e.g. Transformer-XL's W_{k,R}, which projects the S
    relative sinusoids once per segment, shared by the whole batch: 2·S·d² a segment). A module
    that routes each token through part of its weights (a mixture of experts) says how many a
    token multiplies (`matmul_params_per_token`), and that count replaces its parameters.
    """
    model = _meta_model(cfg)
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    skip = set(lookups)
    n = 0
    for module in model.modules():
        skip.update(id(p) for p in getattr(module, "per_segment_parameters", list)())
        per_token = getattr(module, "matmul_params_per_token", None)
        if callable(per_token) and not any(id(p) in skip for p in module.parameters()):
            n += per_token()
            skip.update(id(p) for p in module.parameters())
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) not in skip and id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
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
