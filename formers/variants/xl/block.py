"""Transformer-XL's layer: segment-level recurrence, Dai et al. 2019 §3.2.

Layer n of segment τ+1 reads its own input together with the memory of segment τ, the inputs
of the same layer there, kept without gradient:

    h̃^{n−1}_{τ+1} = [SG(m^{n−1}_τ) ∘ h^{n−1}_{τ+1}]            memory ∘ segment, along time
    q, k, v = h^{n−1}_{τ+1} W_q,  h̃^{n−1}_{τ+1} W_{k,E},  h̃^{n−1}_{τ+1} W_v
    h^n_{τ+1} = Layer(q, k, v)                                   relative attention + FFN
    m^{n−1}_{τ+1} = last mem_len rows of [m^{n−1}_τ ∘ h^{n−1}_{τ+1}]

Diff from `Block`: the attention's keys and values come from cat(memory, x), where the memory
is the layer's `XLMemory` state; its mask is causal over memory and segment (`xl_mask`).
Our choices:
  - the memory holds the input of each layer (the reference code also keeps the last layer's
    output, which nothing reads);
  - the first segment has an empty memory (M = 0), not zeros;
  - the attention sees the memory as it sees x: normalised too in a pre-norm layer, with the
    current LayerNorm (the reference code's `pre_lnorm` normalises cat(memory, x));
  - padding is not masked: contiguous streams have none inside, and the evaluation streams only
    pad after a row's last scored token.
In generation the memory is the decoding state too: one token a step, mem_len states kept.

Shapes: B batch, T segment length, M memory length, D model width.
"""

from __future__ import annotations

import torch
from torch import Tensor

from formers.errors import InputError
from formers.layers.attention import NO_MASK
from formers.layers.block import Block
from formers.layers.cache import BlockState, LayerState
from formers.layers.mask import AttentionMask
from formers.variants.xl.mask import xl_mask


class XLMemory(LayerState):
    """The last `mem_len` inputs of one layer, without gradient (SG(·) in §3.2).

    Args:
        mem_len: how many positions to keep.
        memory: (B, M, D) states to start from (`out.memory` of the previous segment), or None
            at the start of a text.
    """

    def __init__(self, mem_len: int, memory: Tensor | None = None) -> None:
        self.mem_len = mem_len
        self.memory = memory

    def carried(self) -> Tensor | None:
        """The memory, handed to the next segment as this layer's entry of `out.memory`."""
        return self.memory

    def past(self, x: Tensor) -> Tensor:
        """The memory as (B, M, D) in x's dtype, checked against x (B, T, D); empty at first."""
        batch, _, d_model = x.shape
        if self.memory is None:
            return x.new_empty(batch, 0, d_model)
        if self.memory.dim() != 3 or (self.memory.shape[0], self.memory.shape[2]) != (
            batch,
            d_model,
        ):
            raise InputError(
                f"memory tensors must all be (batch={batch}, M, d_model={d_model}), got "
                f"{tuple(self.memory.shape)}: the memory belongs to another batch or model; "
                "pass None to start a new text"
            )
        return self.memory.to(x.dtype)

    def remember(self, x: Tensor) -> None:
        """Append the layer's input x (B, T, D), without its gradient, and keep the last mem_len
        positions."""
        # detach() rather than a no_grad decorator: torch.compile cannot trace a decorated
        # method of an object made inside the compiled step; the past too, in case the memory
        # passed in carries a graph (the next segment's memory must not)
        both = torch.cat([self.past(x).detach(), x.detach()], dim=1)  # (B, M + T, D)
        self.memory = both[:, max(0, both.shape[1] - self.mem_len) :]


class XLBlock(Block):
    """A Block whose self-attention also reads the layer's memory: keys and values over
    cat(memory, x), queries from x."""

    recurrent = True

    def new_state(self, memory: Tensor | None = None) -> BlockState:
        """An `XLMemory` of the attention's mem_len, starting from `memory` (or empty), as the
        attention's part; the feed-forward network's own state beside it."""
        return BlockState(XLMemory(self.attn.options.mem_len, memory), self.ffn.new_state())

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask = NO_MASK,
        state: BlockState | None = None,
        valid: Tensor | None = None,
    ) -> Tensor:
        """x (B, T, D) with the memory in `state.attn` (updated in place) -> (B, T, D).

        `mask` is the stack's causal mask; this layer builds its own over memory and segment.
        """
        state = state if state is not None else self.new_state()
        memory = state.attn
        past = memory.past(x)  # (B, M, D)
        options = self.attn.options
        window = None
        if options.same_length:
            window = options.mem_len - 1 if options.same_length_inclusive else options.mem_len
        allowed = xl_mask(x.shape[1], past.shape[1], window, x.device)

        def attend(h: Tensor) -> Tensor:
            context = torch.cat([self.attn_res.branch_input(past), h], dim=1)  # (B, M + T, D)
            return self.attn(h, context=context, mask=allowed)

        out = self.attn_res(x, attend)
        out = self.ffn_res(out, lambda h: self.ffn(h, valid, state.ffn))
        memory.remember(x)
        return out
