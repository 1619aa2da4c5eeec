"""Token embeddings plus absolute positions, Vaswani et al. 2017 §3.4–3.5.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError
from formers.layers.adaptive import AdaptiveEmbedding
from formers.layers.position import build_position
from formers.layers.tokens import check_tokens


class TokenEmbedding(nn.Embedding):
    """A (V, D) table; ids are checked so a bad id fails with a message, not an index error.

    Args:
        vocab_size: V.
        d_model: D.
        std: the entries' initial standard deviation (`ModelConfig.embedding_std`; the paper
            states none).
    """

    def __init__(self, vocab_size: int, d_model: int, std: float | None = None):
        super().__init__(vocab_size, d_model)
        nn.init.normal_(self.weight, std=d_model**-0.5 if std is None else std)

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, D)."""
        check_tokens(tokens, self.num_embeddings)
        return super().forward(tokens)


def token_table(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    """The token embedding `cfg` asks for: one (V, D) table, or adaptive (`adaptive_input`)."""
    if not cfg.adaptive_input:
        return TokenEmbedding(vocab_size, cfg.d_model, cfg.embedding_std)

    d_embed = cfg.adaptive_d_embed or cfg.d_model
    return AdaptiveEmbedding(
        vocab_size,
        cfg.d_model,
        cfg.adaptive_cutoffs,
        cfg.adaptive_div_value,
        d_embed,
        cfg.embedding_std,
    )


class InputEmbedding(nn.Module):
    """Dropout(Norm(E[token] · s + T[type] + PE[position])), Vaswani §3.4 and §5.4, with s =
    `ModelConfig.embedding_scale`: by default 1 / the table's initial standard deviation, so the
    input has unit variance, which is the paper's s = √D when the table starts at D^-1/2.

    The token-type table T (`type_vocab_size` rows) and the LayerNorm (`embed_norm`) are
    there only when the config asks; without them the input is the paper's."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, token: TokenEmbedding | None = None):
        super().__init__()
        if token is None:
            token = token_table(cfg, vocab_size)
        self.token = token
        self.token_type = None
        if cfg.type_vocab_size:
            self.token_type = TokenEmbedding(cfg.type_vocab_size, cfg.d_model, cfg.embedding_std)
        self.position = build_position(cfg)
        self.scale = cfg.embedding_scale
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if cfg.embed_norm else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, tokens: Tensor, offset: int = 0, token_types: Tensor | None = None) -> Tensor:
        """(B, T) ids starting at absolute position `offset` -> (B, T, D); `token_types` (B, T)
        ids of the token-type table, None: all type 0."""
        x = self.token(tokens) * self.scale  # (B, T, D)
        x = self.add_types(x, tokens, token_types)
        position = self.position(tokens.shape[1], offset)  # (T, D) or None
        if position is not None:
            x = x + position.to(x.dtype)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)

    def add_types(self, x: Tensor, tokens: Tensor, token_types: Tensor | None) -> Tensor:
        """x (B, T, D) plus the token-type embeddings of `token_types` (type 0 when None)."""
        if self.token_type is None:
            if token_types is not None:
                raise InputError(
                    "token_types were given, but the model has no token-type embeddings "
                    "(type_vocab_size=0): call it without token_types"
                )
            return x
        if token_types is None:
            return x + self.token_type.weight[0].to(x.dtype)  # every position type 0
        if token_types.shape != tokens.shape:
            raise InputError(
                f"token_types have shape {tuple(token_types.shape)} but the tokens "
                f"{tuple(tokens.shape)}: give one type id per token"
            )
        check_tokens(token_types, self.token_type.num_embeddings, "token_types")
        return x + F.embedding(token_types, self.token_type.weight)  # (B, T, D)
