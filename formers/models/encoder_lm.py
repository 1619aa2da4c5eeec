"""Bidirectional encoder with a token-prediction head (masked language model).

Every position sees every non-padding position, so this model is not causal; it serves the
variants that cannot be (Linformer).
Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor, nn

from formers.config import ModelConfig
from formers.layers.block import Block, final_norm
from formers.layers.embedding import InputEmbedding
from formers.layers.mask import AttentionMask, padding_mask
from formers.models.common import AuxLosses, check_targets, language_model_loss, tied_output
from formers.models.output import ModelOutput
from formers.registry import build_attention, build_ffn


class EncoderLM(nn.Module):
    """p(x_t | x_≠t) for masked positions, from a stack of bidirectional blocks.

    Args:
        cfg: the model config (arch="encoder").
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

    def forward(
        self, tokens: Tensor, targets: Tensor | None = None, *, key_valid: Tensor | None = None
    ) -> ModelOutput:
        """Score (B, T) tokens; targets are -100 except at the positions to predict.

        Args:
            tokens: (B, T) token ids.
            targets: (B, T) ids to predict, -100 (or `pad_id`) where nothing is predicted.
            key_valid: (B, T) bool, False at padding; derived from `pad_id` when None.
        """
        x = self.embed(tokens)  # (B, T, D)
        if key_valid is None:
            key_valid = padding_mask(tokens, self.cfg.pad_id)
        mask = AttentionMask(causal=False, key_valid=key_valid)
        for layer in self.layers:
            x = layer(x, mask)
        logits = self.lm_head(self.final_norm(x))  # (B, T, V)
        loss = None
        if targets is not None:
            check_targets(targets, tokens, self.cfg.vocab_size)
            loss = language_model_loss(logits, targets, self.cfg.pad_id)
        return ModelOutput(logits=logits, loss=loss, aux_loss=self.aux_losses.total(logits))
