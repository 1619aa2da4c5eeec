"""Switch routing: each token's expert, whether that expert has room for it, and the losses that
keep the router balanced (Fedus et al. 2021 §2.1–2.2, §2.4; ST-MoE, Zoph et al. 2022 §3).

Capacity, by position. Tokens queue at their expert in the order of the text; token t is kept
when fewer than `capacity` tokens of its group went to the same expert before it, else it skips
the layer (the feed-forward outputs zero for it; the residual carries it). The group is one row
of the batch, so rows never compete (a row's output does not depend on the rest of the batch),
and a token's queue place depends only on earlier tokens, so a causal LM stays causal:
  training    capacity ⌈c · n / E⌉ for the row's n tokens (§2.2, Eq. 3), the paper's rule;
  evaluation  capacity ⌈c · (t+1) / E⌉ for token t, the paper's rule applied to the group that
              ends at t. A decoder generating the text sees exactly that group when it reaches
              t, so one pass over a text, cached decoding and re-encoding agree token for token.
Padding is never routed, takes no place in a queue and does not count in n or t+1.

Shapes: B batch, T length, N = B·T tokens, D model width, E experts.
"""

from __future__ import annotations

from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor


def router_logits(x_ND: Tensor, weight_ED: Tensor, jitter: float = 0.0) -> Tensor:
    """h(x) = W_r · x in float32 (or float64 for float64 inputs) whatever the model's precision,
    the paper's "selective precision" (§2.4): the softmax's exponent is where bf16 loses
    routing decisions.

    Args:
        x_ND: (N, D) the tokens.
        weight_ED: (E, D) the router's weights.
        jitter: ε of the multiplicative input noise x·U(1−ε, 1+ε) (training only; 0: none).
    """
    with torch.autocast(x_ND.device.type, enabled=False):
        dtype = torch.promote_types(x_ND.dtype, torch.float32)
        h_ND = x_ND.to(dtype)
        if jitter > 0:
            h_ND = h_ND * torch.empty_like(h_ND).uniform_(1.0 - jitter, 1.0 + jitter)
        return F.linear(h_ND, weight_ED.to(dtype))  # (N, E)


def one_hot(expert_N: Tensor, n_experts: int) -> Tensor:
    """(N, E) long, 1 at each token's expert: F.one_hot's values without its range check, which
    reads the ids back on the CPU (these come from an argmax over E and are always in range)."""
    return (expert_N[:, None] == torch.arange(n_experts, device=expert_N.device)).long()


def expert_capacity(tokens: Tensor | int, factor: float, n_experts: int) -> Tensor | int:
    """⌈factor · tokens / n_experts⌉ (Eq. 3), elementwise and exact: the factor is taken as the
    nearest fraction with a denominator up to 10⁴ (1.1 is 11/10), so 1.1 · 80 / 8 is 11, not
    the 12 that float rounding would give."""
    ratio = Fraction(factor).limit_denominator(10_000)
    denominator = ratio.denominator * n_experts
    return (tokens * ratio.numerator + denominator - 1) // denominator


def queue_positions(routed_BTE: Tensor, expert_BT: Tensor, before_BE: Tensor | None) -> Tensor:
    """(B, T) how many tokens of the same row went to each token's expert before it.

    Args:
        routed_BTE: (B, T, E) 1 where a (non-padding) token chose the expert, else 0.
        expert_BT: (B, T) the expert each token chose.
        before_BE: (B, E) tokens of each row that went to each expert in earlier calls (cached
            decoding), or None.
    """
    ahead_BTE = routed_BTE.cumsum(1) - routed_BTE  # exclusive: tokens before t
    if before_BE is not None:
        ahead_BTE = ahead_BTE + before_BE[:, None, :]
    return ahead_BTE.gather(2, expert_BT[..., None]).squeeze(2)


def balance(probs_NE: Tensor, routed_NE: Tensor, n_tokens: Tensor) -> Tensor:
    """E · Σᵢ fᵢ · Pᵢ (Eq. 4), the load-balancing loss before α: fᵢ the share of tokens whose
    top choice is expert i (Eq. 5, before any is dropped), Pᵢ the mean probability the router
    gives expert i (Eq. 6). It is 1 when either is uniform, up to E when one expert takes all;
    the gradient flows through Pᵢ only.

    Args:
        probs_NE: (N, E) router probabilities, zeros at padding.
        routed_NE: (N, E) 1 at each token's top expert, zeros at padding.
        n_tokens: () the number of non-padding tokens.
    """
    n = n_tokens.clamp(min=1).to(probs_NE.dtype)
    f_E = routed_NE.sum(0).to(probs_NE.dtype) / n
    p_E = probs_NE.sum(0) / n
    return probs_NE.shape[1] * (f_E * p_E).sum()


def z_loss(logits_NE: Tensor, valid_N: Tensor, n_tokens: Tensor) -> Tensor:
    """(1/n) Σ (log Σⱼ e^{xⱼ})² over the non-padding tokens (ST-MoE Eq. 5): it keeps the router's
    logits small, where the exponent stays exact."""
    squared_N = torch.logsumexp(logits_NE, dim=-1).square()
    return torch.where(valid_N, squared_N, 0.0).sum() / n_tokens.clamp(min=1)
