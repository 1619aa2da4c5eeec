"""Transformer layers, Vaswani et al. 2017 §3.1.

Norm placement is a swapped module, not a flag:
  PostNorm:  x ← LayerNorm(x + Dropout(Sublayer(x)))     (the paper, §3.1 and §5.4)
  PreNorm:   x ← x + Dropout(Sublayer(LayerNorm(x)))     (Xiong et al. 2020; needs a final norm)
Each also says how the sub-layer sees any other input of the same stream (`branch_input`): a
layer that reads stored states of its own input (Transformer-XL's memory) normalises them
exactly as it normalises x.

Shapes: B batch, T length, S context length, D model width.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from torch import Tensor, nn

from formers.config import ModelConfig
from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import BlockState, block_parts
from formers.layers.cross_attention import CrossAttention
from formers.layers.mask import AttentionMask


class PostNorm(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, d_model: int, dropout: float, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return self.norm(x + self.dropout(sublayer(x)))

    def branch_input(self, x: Tensor) -> Tensor:
        """What the sub-layer sees of states of this stream: the states themselves."""
        return x

    @staticmethod
    def final_norm(d_model: int, eps: float) -> nn.Module:
        """Post-norm layers already end in a LayerNorm."""
        return nn.Identity()


class PreNorm(nn.Module):
    """x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, d_model: int, dropout: float, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        return x + self.dropout(sublayer(self.norm(x)))

    def branch_input(self, x: Tensor) -> Tensor:
        """What the sub-layer sees of states of this stream: their LayerNorm."""
        return self.norm(x)

    @staticmethod
    def final_norm(d_model: int, eps: float) -> nn.Module:
        """The residual stream of a pre-norm stack is never normalised: do it once at the end."""
        return nn.LayerNorm(d_model, eps=eps)


RESIDUAL = {"post": PostNorm, "pre": PreNorm}


def residual(cfg: ModelConfig) -> nn.Module:
    """The residual wrapper for `cfg.norm`."""
    return RESIDUAL[cfg.norm](cfg.d_model, cfg.dropout, cfg.norm_eps)


def final_norm(cfg: ModelConfig) -> nn.Module:
    """What follows the last layer: a LayerNorm for pre-norm stacks, nothing for post-norm."""
    return RESIDUAL[cfg.norm].final_norm(cfg.d_model, cfg.norm_eps)


class Block(nn.Module):
    """Self-attention then feed-forward: an encoder layer, or a decoder-only LM layer."""

    # a recurrent layer carries state from one segment of a text to the next (`out.memory`);
    # its `new_state(memory)` starts from what the previous segment carried
    recurrent: ClassVar[bool] = False

    def __init__(self, cfg: ModelConfig, attn: MultiHeadAttention, ffn: nn.Module):
        super().__init__()
        self.attn, self.ffn = attn, ffn
        self.attn_res, self.ffn_res = residual(cfg), residual(cfg)

    def new_state(self) -> BlockState:
        """This layer's empty decoding state: its attention's and its feed-forward network's."""
        return BlockState(self.attn.new_state(), self.ffn.new_state())

    def forward(
        self,
        x: Tensor,
        mask: AttentionMask = NO_MASK,
        state: BlockState | None = None,
        valid: Tensor | None = None,
    ) -> Tensor:
        """(B, T, D) -> (B, T, D).

        Args:
            x: (B, T, D) the layer's input.
            mask: which keys each position may attend to.
            state: the layer's decoding state (`new_state()`); each module reads and extends
                its own part in place.
            valid: (B, T) bool, False at padding positions (for the feed-forward network).
        """
        attn_state, ffn_state = block_parts(state)
        x = self.attn_res(x, lambda h: self.attn(h, mask=mask, state=attn_state))
        return self.ffn_res(x, lambda h: self.ffn(h, valid, ffn_state))


class DecoderBlock(nn.Module):
    """Masked self-attention, attention over the encoder output, then feed-forward (§3.1)."""

    def __init__(
        self,
        cfg: ModelConfig,
        attn: MultiHeadAttention,
        cross_attn: MultiHeadAttention,
        ffn: nn.Module,
    ):
        super().__init__()
        self.attn, self.cross_attn, self.ffn = attn, cross_attn, ffn
        self.attn_res, self.cross_res, self.ffn_res = residual(cfg), residual(cfg), residual(cfg)

    def new_state(self) -> BlockState:
        """This layer's empty decoding state: its self-attention's and feed-forward network's,
        and its cross-attention's keys and values of the context (a cross-attention that
        projects them anew each step keeps none)."""
        cross = self.cross_attn.new_state() if isinstance(self.cross_attn, CrossAttention) else None
        return BlockState(self.attn.new_state(), self.ffn.new_state(), cross)

    def forward(
        self,
        x: Tensor,
        context: Tensor,
        mask: AttentionMask = NO_MASK,
        context_mask: AttentionMask = NO_MASK,
        state: BlockState | None = None,
        valid: Tensor | None = None,
    ) -> Tensor:
        """(B, T, D) decoder states attending to (B, S, D) encoder states -> (B, T, D).

        With a decoding state (`new_state()`), `context` is read only at the first step, and
        its rows may be fewer than the decoding rows (see `ContextKV`)."""
        attn_state, ffn_state = block_parts(state)
        cross_state = state.cross if state is not None else None
        x = self.attn_res(x, lambda h: self.attn(h, mask=mask, state=attn_state))
        x = self.cross_res(
            x, lambda h: self.cross_attn(h, context=context, mask=context_mask, state=cross_state)
        )
        return self.ffn_res(x, lambda h: self.ffn(h, valid, ffn_state))
