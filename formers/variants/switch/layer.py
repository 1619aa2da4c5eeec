"""Switch Transformer's feed-forward layer, Fedus et al. 2021, "Switch Transformers: Scaling to
Trillion Parameter Models with Simple and Efficient Sparsity" (https://arxiv.org/abs/2101.03961).

E feed-forward networks ("experts") instead of one; a router sends each token to one of them,
so the parameters grow E-fold while each token's compute stays that of one network (§2.1):

    p(x) = softmax(W_r · x)                         router, in float32 (Eq. 1, §2.4)
    i(x) = argmax p(x)                              top-1: the Switch layer
    y    = p_i(x) · FFN_i(x)                        scaled by the gate (Eq. 2), so W_r learns
    y    = 0 when expert i is full                  the token skips the layer (§2.2)
    loss += α · E · Σᵢ fᵢ · Pᵢ                      load balancing (Eq. 4), per layer

Diff from vanilla:
  - `SwitchFeedForward` replaces `FeedForward` in the layers `ffn.layers` selects (`ffn.kind =
    "switch"`); blocks, attention and the rest of the model are untouched.
  - It reports its balancing (and optional z-) loss as `aux_loss`, which the model sums over
    layers into `out.aux_loss` and the trainer adds to the loss, and its diagnostics as
    `metrics`: tokens dropped, the busiest and idlest expert's load, router entropy, losses.
Our choices:
  - capacity groups are the rows of the batch, priority by position (`routing.py`): a causal
    LM stays causal, and rows never compete; evaluation judges token t by its own prefix, so
    cached decoding keeps per-row expert counts in the network's own decoding state
    (`ExpertCounts`) and agrees with a full pass exactly;
  - padding (`valid` False) is not routed and counts in neither capacity nor losses;
  - the load-balancing loss of each layer is added as is (α each): the model sums over layers,
    as the paper's code does (so its size grows with the number of Switch layers);
  - the router has no bias (as in the paper's code) and is initialised like the experts.

Shapes: B batch, T length, N = B·T tokens, D model width, F expert inner width, E experts,
M slots per expert.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.kernels.host_reads import host_reads_allowed
from formers.layers.cache import LayerState
from formers.layers.diagnostics import Reports
from formers.layers.feedforward import ACTIVATION
from formers.variants.switch.config import SwitchConfig
from formers.variants.switch.dispatch import Experts, Slots, assign_slots, static_bound
from formers.variants.switch.routing import (
    balance,
    expert_capacity,
    one_hot,
    queue_positions,
    router_logits,
    z_loss,
)


class ExpertCounts(LayerState):
    """What cached decoding keeps of the tokens before: per row, how many chose each expert
    (B, E) and how many were routed (B,); None before the first call. Its size is fixed."""

    bounded = True

    def __init__(self) -> None:
        self.routed: Tensor | None = None  # (B, E)
        self.tokens: Tensor | None = None  # (B,)


class SwitchFeedForward(Reports, nn.Module):
    """A top-1 mixture of E feed-forward experts with capacity, as in the Switch Transformer.

    Args:
        d_model: model width D.
        d_ff: each expert's inner width F.
        options: the layer's `SwitchConfig`, kept as `self.options`.
        dropout: the model's ffn_dropout, the expert dropout (between the projections) unless
            `options.expert_dropout` sets one; the one in use is `self.dropout`.
    """

    config_class: ClassVar[type[SwitchConfig]] = SwitchConfig

    def __init__(self, d_model: int, d_ff: int, options: SwitchConfig, dropout: float = 0.0):
        super().__init__()
        self.options = options
        self.dropout = dropout if options.expert_dropout is None else options.expert_dropout
        n_experts, activation = options.n_experts, ACTIVATION[options.activation]
        self.router = nn.Parameter(torch.empty(n_experts, d_model))  # W_r, (E, D)
        self.experts = Experts(n_experts, d_model, d_ff, activation, self.dropout, options.bias)
        self.clear_reports()
        self.reset_parameters(options.init_scale)

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: SwitchConfig) -> SwitchFeedForward:
        """Build one layer's network from the model config and that layer's `SwitchConfig`."""
        return cls(cfg.d_model, cfg.d_ff, options, cfg.ffn_dropout)

    @torch.no_grad()
    def reset_parameters(self, scale: float) -> None:
        """Truncated normal, σ = √(scale / fan_in), cut at 2σ (§2.4); zero biases."""
        for weight, fan_in in (
            (self.router, self.router.shape[1]),
            (self.experts.w_in, self.experts.w_in.shape[1]),
            (self.experts.w_out, self.experts.w_out.shape[1]),
        ):
            std = math.sqrt(scale / fan_in)
            nn.init.trunc_normal_(weight, std=std, a=-2 * std, b=2 * std)

    def new_state(self) -> ExpertCounts:
        """Empty expert counts, for cached decoding."""
        return ExpertCounts()

    def matmul_params_per_token(self) -> int:
        """Parameters one token multiplies: the router and one expert (for FLOP counts)."""
        experts = sum(p.numel() for p in self.experts.parameters())
        return self.router.numel() + experts // self.options.n_experts

    def forward(
        self, x: Tensor, valid: Tensor | None = None, state: ExpertCounts | None = None
    ) -> Tensor:
        """(B, T, D) -> (B, T, D), zero for padding and for tokens no expert took.

        Args:
            x: (B, T, D) the layer's input.
            valid: (B, T) bool, False at padding; None: no padding.
            state: this network's `new_state()` when decoding (the expert counts of the tokens
                before x, extended in place); None for a pass over whole sequences.
        """
        batch, length, d_model = x.shape
        options, n_experts = self.options, self.options.n_experts
        x_ND = x.reshape(-1, d_model)
        valid_BT = valid if valid is not None else x.new_ones(batch, length, dtype=torch.bool)
        valid_N = valid_BT.reshape(-1)
        jitter = options.jitter if self.training else 0.0
        logits_NE = router_logits(x_ND, self.router, jitter)  # float32
        probs_NE = torch.softmax(logits_NE, dim=-1)
        gate_N, expert_N = probs_NE.max(dim=-1)  # top-1 (§2.1)
        routed_NE = one_hot(expert_N, n_experts) * valid_N[:, None]
        keep_N = self.within_capacity(routed_NE, expert_N, valid_BT, state).reshape(-1)

        bound = None
        if not host_reads_allowed() and state is None:
            factor = options.capacity_factor if self.training else options.eval_capacity_factor
            bound = static_bound(length, batch, factor, n_experts)
        slots = assign_slots(expert_N, keep_N, n_experts, bound)
        y_ND = self.run_experts(x_ND, slots)
        weight_N = torch.where(keep_N, gate_N, 0.0)  # dropped tokens: exactly zero (§2.2)
        # the gate stays float32; the output returns to the input's precision
        out_ND = (y_ND * weight_N[:, None]).to(x.dtype)

        self.report(logits_NE, probs_NE, routed_NE, valid_N, keep_N)
        return out_ND.view(batch, length, d_model)

    def within_capacity(
        self, routed_NE: Tensor, expert_N: Tensor, valid_BT: Tensor, state: ExpertCounts | None
    ) -> Tensor:
        """(B, T) bool: whether each token's expert has room for it (see `routing.py`)."""
        batch, length = valid_BT.shape
        options, n_experts = self.options, self.options.n_experts
        routed_BTE = routed_NE.view(batch, length, n_experts)
        history = state if state is not None and state.tokens is not None else None
        before_BE = history.routed if history is not None else None
        seen_B1 = history.tokens[:, None] if history is not None else 0
        queue_BT = queue_positions(routed_BTE, expert_N.view(batch, length), before_BE)
        if self.training:  # the row is the group (Eq. 3)
            group = seen_B1 + valid_BT.sum(1, keepdim=True)  # (B, 1)
            capacity = expert_capacity(group, options.capacity_factor, n_experts)
        else:  # each token's prefix is its group
            prefix_BT = seen_B1 + valid_BT.cumsum(1)
            capacity = expert_capacity(prefix_BT, options.eval_capacity_factor, n_experts)
        if state is not None:
            routed_BE = routed_BTE.sum(1)
            tokens_B = valid_BT.sum(1)
            if history is not None:
                routed_BE, tokens_B = routed_BE + history.routed, tokens_B + history.tokens
            state.routed, state.tokens = routed_BE, tokens_B
        return valid_BT & (queue_BT < capacity)

    def run_experts(self, x_ND: Tensor, slots: Slots) -> Tensor:
        """Dispatch to the (E, M, D) buffer, run the experts, and read each token's slot back:
        (N, D)."""
        x_EMD = slots.dispatch(x_ND).view(self.options.n_experts, slots.per_expert, -1)
        keep_EMF = None
        if self.training and self.dropout > 0:
            # drawn per token, in token order, as a dense network's dropout would be, so a
            # token's noise does not depend on where the other tokens sit in the buffer
            d_ff = self.experts.w_in.shape[-1]
            noise_NF = torch.empty(x_ND.shape[0], d_ff, device=x_ND.device)
            keep_NF = noise_NF.bernoulli_(1.0 - self.dropout).bool()
            keep_EMF = keep_NF.index_select(0, slots.source_S).view(*x_EMD.shape[:2], d_ff)
        y_EMD = self.experts(x_EMD, keep_EMF)
        return slots.combine(y_EMD.reshape(-1, y_EMD.shape[-1]))

    def report(
        self,
        logits_NE: Tensor,
        probs_NE: Tensor,
        routed_NE: Tensor,
        valid_N: Tensor,
        keep_N: Tensor,
    ) -> None:
        """This pass's auxiliary loss and diagnostics (the model collects both)."""
        n_tokens = valid_N.sum()
        probs_NE = probs_NE * valid_N[:, None]
        balance_loss = balance(probs_NE, routed_NE, n_tokens)
        z = z_loss(logits_NE, valid_N, n_tokens)
        self.aux_loss = self.options.balance_coef * balance_loss + self.options.z_loss_coef * z
        with torch.no_grad():
            n = n_tokens.clamp(min=1).to(probs_NE.dtype)
            load_E = routed_NE.sum(0).to(n.dtype) * self.options.n_experts / n  # 1 = an even share
            entropy = torch.special.entr(probs_NE).sum(-1).sum() / n
            self.metrics = {
                "dropped": (n_tokens - keep_N.sum()).to(n.dtype) / n,
                "load_max": load_E.max(),
                "load_min": load_E.min(),
                "router_entropy": entropy,
                "balance": balance_loss.detach(),
                "z_loss": z.detach(),
                "aux_loss": self.aux_loss.detach(),
            }
