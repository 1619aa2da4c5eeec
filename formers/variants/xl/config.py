"""Transformer-XL's options (Dai et al. 2019, https://arxiv.org/abs/1901.02860)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from formers.config import AttentionConfig, ModelConfig
from formers.errors import ConfigError


@dataclass(frozen=True)
class XLConfig(AttentionConfig):
    """Transformer-XL: relative positional attention and segment-level recurrence.

    Args:
        mem_len: hidden states kept per layer as memory for the next segment (0: no memory).
        same_length: every query sees the same number of keys, itself and the `mem_len`
            positions before it (the reference code's evaluation setting).
        clamp_len: cap relative distances at this value, so a long evaluation memory reuses the
            farthest trained distance (None or -1: no cap).
        untie_rel_bias: give every layer its own u and v instead of one pair for all layers.
        same_length_inclusive: with same_length, count the query itself among its mem_len keys
            (the PyTorch reference code's and Hugging Face's mask, one key fewer than the
            TensorFlow code's).
    """

    kind: str = "xl"
    bias: bool = False  # the reference code's projections have no biases
    mem_len: int = 128
    same_length: bool = False
    clamp_len: int | None = None
    untie_rel_bias: bool = False
    same_length_inclusive: bool = False

    # the reference scripts evaluate with other lengths than they train with; none is a weight
    runtime_fields: ClassVar[tuple[str, ...]] = (
        "mem_len",
        "same_length",
        "clamp_len",
        "same_length_inclusive",
    )

    @property
    def max_distance(self) -> int | None:
        """The relative distance cap, or None."""
        return None if self.clamp_len is None or self.clamp_len < 0 else self.clamp_len

    @property
    def recurrent(self) -> bool:
        """Transformer-XL carries its memory from segment to segment (§3.2)."""
        return True

    def memory_tokens(self) -> int:
        """The memory holds the last `mem_len` inputs of each layer."""
        return self.mem_len

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        if model.arch != "decoder":
            raise ConfigError(
                f"attention.kind={self.kind!r} needs arch='decoder', not {model.arch!r}: its "
                "relative shift is exact only under the causal mask, and its memory only makes "
                "sense for a causal LM"
            )
        if model.position != "none":
            raise ConfigError(
                f"attention.kind={self.kind!r} encodes positions inside attention (relative "
                f"sinusoids): set position='none' instead of {model.position!r}"
            )
        if isinstance(self.mem_len, bool) or not isinstance(self.mem_len, int) or self.mem_len < 0:
            raise ConfigError(f"attention.mem_len={self.mem_len!r} must be an integer >= 0")
        if self.clamp_len is not None and (
            isinstance(self.clamp_len, bool)
            or not isinstance(self.clamp_len, int)
            or (self.clamp_len < 1 and self.clamp_len != -1)
        ):
            raise ConfigError(
                f"attention.clamp_len={self.clamp_len!r} must be a positive distance cap, or None "
                "(or -1) for no cap"
            )
