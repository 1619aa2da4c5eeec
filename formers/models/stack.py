"""Embeddings, a stack of Blocks and a token head: what every single-stack LM is made of.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor, nn

from formers.config import ModelConfig
from formers.layers.block import Block, final_norm
from formers.layers.embedding import InputEmbedding
from formers.models.common import AuxLosses, check_targets, language_model_loss, tied_output
from formers.models.output import ModelOutput
from formers.registry import build_attention, build_ffn


class BlockStackLM(nn.Module):
    """Token + position embeddings, `n_layers` Blocks, a final norm and the (tied) output layer.

    Subclasses decide how the Blocks are masked and called (causal with a cache, bidirectional).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = InputEmbedding(cfg, cfg.vocab_size)
        self.layers = nn.ModuleList(
            Block(cfg, build_attention(cfg), build_ffn(cfg)) for _ in range(cfg.n_layers)
        )
        self.final_norm = final_norm(cfg)
        self.lm_head = tied_output(self.embed.token, cfg.tie_embeddings)
        self.aux_losses = AuxLosses(self)

    def output(self, hidden: Tensor, tokens: Tensor, targets: Tensor | None) -> ModelOutput:
        """Logits (B, T, V) of the last states (B, T, D), and the loss when targets are given."""
        logits = self.lm_head(self.final_norm(hidden))  # (B, T, V)
        loss = None
        if targets is not None:
            check_targets(targets, tokens, self.cfg.vocab_size)
            loss = language_model_loss(logits, targets, self.cfg.pad_id)
        return ModelOutput(logits=logits, loss=loss, aux_loss=self.aux_losses.total(logits))
