"""Explicit Sparse attention's options: how many keys each query keeps."""

from __future__ import annotations

from dataclasses import dataclass

from formers.config import AttentionConfig, ModelConfig, positive


@dataclass(frozen=True)
class TopKConfig(AttentionConfig):
    """Explicit sparse attention: every query attends to its `top_k` highest-scoring keys.

    Args:
        top_k: keys each query keeps (8 in the paper's language-modelling experiments).
    """

    kind: str = "topk"
    top_k: int = 8

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        positive("attention.top_k", self.top_k, "the keys each query keeps (8 in the paper)")
