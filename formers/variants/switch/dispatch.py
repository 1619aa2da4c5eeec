"""Moving tokens to their experts and back, and the experts themselves (Fedus et al. 2021 §2.2).

The experts are one batched network, weights (E, D, F) and (E, F, D). Each kept token gets a
slot in an (E, M, D) buffer, its expert's row of M slots, in the order of the flattened batch;
the buffer goes through both projections as two batched matmuls (one `baddbmm` each over all
experts: no loop over experts), and each token reads its expert's output back from its slot.
Dispatch and combine are gathers by an index of N or E·M entries, so no (N, E, D) one-hot
product is ever formed.

M is the busiest expert's number of kept tokens, not the capacity bound, so balanced routing
leaves few empty slots to compute (where values may not be read back, `host_reads_allowed`: under
`torch.compile` and in a GPU training step, it is the static bound instead, which keeps the
shapes fixed). Empty slots read token 0 and their outputs are never read.

Shapes: N tokens, D model width, F expert inner width, E experts, M slots per expert,
S = E·M slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from formers.variants.switch.routing import expert_capacity, one_hot


@dataclass
class Slots:
    """Where each token sits in the (E, M) buffer of expert slots.

    Attributes:
        slot_N: (N,) the slot of each kept token; 0 for a token that no expert takes.
        source_S: (S,) the token in each slot; 0 for an empty slot.
        kept_N: (N,) bool, whether the token has a slot.
        occupied_S: (S,) bool, whether the slot holds a token.
        per_expert: M, slots per expert.
        load_E: (E,) tokens each expert takes.
    """

    slot_N: Tensor
    source_S: Tensor
    kept_N: Tensor
    occupied_S: Tensor
    per_expert: int
    load_E: Tensor

    def dispatch(self, x_ND: Tensor) -> Tensor:
        """(N, D) tokens -> (S, D) slots (an empty slot holds a copy of token 0)."""
        return GatherRows.apply(x_ND, self.source_S, self.slot_N, self.kept_N)

    def combine(self, y_SD: Tensor) -> Tensor:
        """(S, D) slot outputs -> (N, D): each token's own slot (slot 0 for a dropped token,
        whose caller must weigh it by zero)."""
        return GatherRows.apply(y_SD, self.slot_N, self.source_S, self.occupied_S)


class GatherRows(torch.autograd.Function):
    """rows = source[index], whose gradient is gathered back through the inverse map instead of
    scatter-added (index_select's own backward, several times slower on CPU).

    Exact when `index` is one-to-one on the rows the caller's result depends on: row r of
    `source` is read by out[inverse[r]] and by nothing else that gets a gradient, and rows
    with `has_inverse` False get none. Dispatch and combine are each other's inverse on the
    kept tokens and occupied slots; an empty slot's output is never read, so its input (a copy
    of token 0) gets no gradient, and a dropped token's read of slot 0 is weighed by zero.
    """

    @staticmethod
    def forward(ctx, source: Tensor, index: Tensor, inverse: Tensor, has_inverse: Tensor):
        ctx.save_for_backward(inverse, has_inverse)
        return source.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: Tensor):
        inverse, has_inverse = ctx.saved_tensors
        back = grad.index_select(0, inverse)
        return torch.where(has_inverse[:, None], back, 0.0), None, None, None


def assign_slots(expert_N: Tensor, keep_N: Tensor, n_experts: int, bound: int | None) -> Slots:
    """Slots for the kept tokens, in token order within each expert.

    Args:
        expert_N: (N,) each token's expert.
        keep_N: (N,) bool, whether its expert takes it.
        n_experts: E.
        bound: M when given (a static bound on any expert's load, for compiled graphs and
            steps without host reads); None takes M from the busiest expert (one
            device-to-host read).
    """
    kept_NE = one_hot(expert_N, n_experts) * keep_N[:, None]
    rank_N = (kept_NE.cumsum(0) - kept_NE).gather(1, expert_N[:, None]).squeeze(1)
    load_E = kept_NE.sum(0)
    per_expert = max(1, bound if bound is not None else int(load_E.max()))
    n_slots = n_experts * per_expert
    slot_N = torch.where(keep_N, expert_N * per_expert + rank_N, n_slots)  # dropped: past the end
    source_S = torch.zeros(n_slots + 1, dtype=torch.long, device=expert_N.device)
    tokens_N = torch.arange(len(expert_N), device=expert_N.device)
    source_S = source_S.scatter(0, slot_N, tokens_N)[:n_slots]  # the extra slot soaks up drops
    slots_EM = torch.arange(per_expert, device=expert_N.device).expand(n_experts, -1)
    occupied_S = (slots_EM < load_E[:, None]).reshape(-1)
    return Slots(torch.where(keep_N, slot_N, 0), source_S, keep_N, occupied_S, per_expert, load_E)


def static_bound(tokens_per_row: int, rows: int, factor: float, n_experts: int) -> int:
    """The most tokens any expert can take from `rows` rows of `tokens_per_row` tokens each."""
    per_row = min(tokens_per_row, expert_capacity(tokens_per_row, factor, n_experts))
    return max(1, rows * per_row)


class Experts(nn.Module):
    """E feed-forward networks act(x W₁ᵢ + b₁ᵢ) W₂ᵢ + b₂ᵢ (Vaswani Eq. 2), run as one batch.

    Args:
        n_experts: E.
        d_model: D.
        d_ff: F, each expert's inner width.
        activation: act.
        dropout: expert dropout, on act's output.
        bias: whether the projections have biases.
    """

    def __init__(
        self,
        n_experts: int,
        d_model: int,
        d_ff: int,
        activation: Callable[[Tensor], Tensor],
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        self.w_in = nn.Parameter(torch.empty(n_experts, d_model, d_ff))  # (E, D, F)
        self.w_out = nn.Parameter(torch.empty(n_experts, d_ff, d_model))  # (E, F, D)
        # biases are stored flat, (E·F,) and (E·D,): 1-d, so AdamW leaves them undecayed
        # like every other bias (formers.train.optim decays parameters of 2 or more dims)
        self.b_in = nn.Parameter(torch.zeros(n_experts * d_ff)) if bias else None
        self.b_out = nn.Parameter(torch.zeros(n_experts * d_model)) if bias else None
        self.activation = activation
        self.dropout = dropout

    def forward(self, x_EMD: Tensor, keep_EMF: Tensor | None = None) -> Tensor:
        """(E, M, D) tokens in their experts' slots -> (E, M, D) outputs.

        Args:
            x_EMD: (E, M, D) the buffer.
            keep_EMF: (E, M, F) bool, the units expert dropout keeps (scaled by 1/(1−p) here);
                None: no dropout.
        """
        h_EMF = _project(x_EMD, self.w_in, self.b_in)
        h_EMF = self.activation(h_EMF)
        if keep_EMF is not None:
            h_EMF = h_EMF * keep_EMF / (1.0 - self.dropout)
        return _project(h_EMF, self.w_out, self.b_out)


def _project(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x (E, M, I) @ weight (E, I, O) (+ bias (E·O,)), batched over experts: (E, M, O)."""
    if bias is None:
        return torch.bmm(x, weight)
    return torch.baddbmm(bias.view(weight.shape[0], 1, -1), x, weight)
