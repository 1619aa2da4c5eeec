"""Linformer's options: the compressed length k, the longest input n_max and how E, F are shared
(Wang et al. 2020, §4)."""

from __future__ import annotations

from dataclasses import dataclass

from formers.config import AttentionConfig, ModelConfig, choice, positive
from formers.errors import ConfigError

SHARING: tuple[str, ...] = ("none", "headwise", "kv", "layerwise")


@dataclass(frozen=True)
class LinformerConfig(AttentionConfig):
    """Low-rank attention: keys and values compressed along the sequence to `proj_len` rows.

    Args:
        proj_len: k, the compressed length (128 or 256 in the paper's experiments).
        max_len: n_max, the longest input; E and F have n_max rows. None: the model's max_len.
        sharing: "none" (E_i, F_i per head), "headwise" (one E, F per layer), "kv" (one E = F
            per layer) or "layerwise" (one E for the whole stack), Wang et al. §4.
    """

    kind: str = "linformer"
    proj_len: int = 128
    max_len: int | None = None
    sharing: str = "headwise"

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        if causal:
            raise ConfigError(
                "linformer attention is not causal: its projections E, F mix every position of "
                "the sequence, the future included, into each compressed key: use it in an "
                "encoder (arch='encoder', preset 'linformer', or encoder_attention="
                "{'kind': 'linformer'} of an encoder-decoder), and a causal kind in a decoder"
            )
        positive("attention.proj_len", self.proj_len)
        if self.max_len is not None:
            positive("attention.max_len", self.max_len)
        choice("attention.sharing", self.sharing, SHARING)
        if self.proj_len > self.seq_len(model):
            raise ConfigError(
                f"attention.proj_len={self.proj_len} is longer than the {self.seq_len(model)} "
                "positions it compresses (attention.max_len, or the model's max_len): lower "
                "proj_len, or use vanilla attention"
            )

    def seq_len(self, model: ModelConfig) -> int:
        """n_max: the rows of E and F."""
        return self.max_len or model.max_len
