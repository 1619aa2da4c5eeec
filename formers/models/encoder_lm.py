"""Bidirectional encoder with a token-prediction head (masked language model).

Every position sees every non-padding position, so this model is not causal; it serves the
variants that cannot be (Linformer).
Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor

from formers.layers.mask import AttentionMask, padding_mask
from formers.models.output import ModelOutput
from formers.models.stack import BlockStackLM


class EncoderLM(BlockStackLM):
    """p(x_t | x_≠t) for masked positions, from a stack of bidirectional blocks.

    Args:
        cfg: the model config (arch="encoder").
    """

    stack = "encoder"

    def forward(
        self,
        tokens: Tensor,
        targets: Tensor | None = None,
        *,
        key_valid: Tensor | None = None,
        token_types: Tensor | None = None,
    ) -> ModelOutput:
        """Score (B, T) tokens; targets are -100 except at the positions to predict.

        Args:
            tokens: (B, T) token ids.
            targets: (B, T) ids to predict, -100 (or `pad_id`) where nothing is predicted.
            key_valid: (B, T) bool, False at padding; derived from `pad_id` when None.
            token_types: (B, T) ids of the token-type table (`type_vocab_size`), e.g. the
                segment of each token; None: every position is type 0.
        """
        self.diagnostics.reset()
        x = self.embed(tokens, token_types=token_types)  # (B, T, D)
        if key_valid is None:
            key_valid = padding_mask(tokens, self.cfg.pad_id)
        mask = AttentionMask(causal=False, key_valid=key_valid)
        for layer in self.layers:
            x = layer(x, mask, None, key_valid)
        return self.output(x, tokens, targets)
