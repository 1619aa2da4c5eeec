"""Embeddings, a stack of Blocks and a token head: what every single-stack LM is made of.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor, nn

from formers.config import ModelConfig, Stack
from formers.errors import InputError
from formers.layers.block import final_norm
from formers.layers.diagnostics import Diagnostics
from formers.layers.embedding import InputEmbedding
from formers.layers.output import check_targets, head_transform, output_layer, token_loss
from formers.models.output import ModelOutput
from formers.registry import build_stack


class BlockStackLM(nn.Module):
    """Token + position embeddings, a stack of Blocks, a final norm, the head transform (when
    configured) and the (tied) output layer.

    Subclasses decide how the Blocks are masked and called (causal with a cache and memory,
    bidirectional), and which of the config's stacks they are (`stack`).
    """

    stack: ClassVar[Stack] = "decoder"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = InputEmbedding(cfg, cfg.vocab_size)
        self.layers = build_stack(cfg, self.stack)
        self.final_norm = final_norm(cfg)
        self.head_transform = head_transform(cfg)
        self.lm_head = output_layer(cfg, self.embed.token)
        self.diagnostics = Diagnostics(self)

    def output(
        self, hidden: Tensor, tokens: Tensor, targets: Tensor | None, only_last: bool = False
    ) -> ModelOutput:
        """Logits (B, T, V) of the last states (B, T, D), the loss when targets are given, and
        the auxiliary losses and metrics the layers reported; with `only_last`, the logits of
        the last position alone, (B, 1, V)."""
        if only_last:
            if targets is not None:
                raise InputError("only_last=True scores one position: call it without targets")
            # decoding reads the last position alone: the output layer over a 512-token
            # prompt (50,257 ids) costs more than the whole stack of 6 layers of 512
            hidden = hidden[:, -1:]  # (B, 1, D)
        logits = self.lm_head(self.head_transform(self.final_norm(hidden)))  # (B, T, V)
        loss = None
        if targets is not None:
            check_targets(targets, tokens, self.cfg.vocab_size)
            loss = token_loss(logits, targets, self.cfg.pad_id)
        return ModelOutput(
            logits=logits,
            loss=loss,
            aux_loss=self.diagnostics.aux_loss(logits),
            metrics=self.diagnostics.metrics(),
        )
