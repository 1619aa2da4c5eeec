"""Typed, frozen model configurations.

A `ModelConfig` holds the shape of the network plus one small config per pluggable axis
(attention pattern, feed-forward). Variants subclass `AttentionConfig` or `FFNConfig` next to
their module and are listed by `kind` in `formers.registry`, so the model config never grows a
field per variant.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from formers.errors import ConfigError

Arch = Literal["decoder", "encoder_decoder", "encoder"]
ARCHS: tuple[str, ...] = ("decoder", "encoder_decoder", "encoder")
NORMS: tuple[str, ...] = ("post", "pre")
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "squared_relu")
POSITIONS: tuple[str, ...] = ("sinusoidal", "learned", "none")


@dataclass(frozen=True)
class AttentionConfig:
    """Options of the attention pattern; `kind` picks the module (vanilla = Vaswani §3.2.2)."""

    kind: str = "vanilla"
    bias: bool = True

    def validate(self, model: ModelConfig) -> None:
        """Raise ConfigError if this attention cannot serve `model`. Variants extend this."""


@dataclass(frozen=True)
class FFNConfig:
    """Options of the position-wise feed-forward network (Vaswani §3.3)."""

    kind: str = "dense"
    activation: str = "relu"
    bias: bool = True

    def validate(self, model: ModelConfig) -> None:
        """Raise ConfigError if this feed-forward cannot serve `model`. Variants extend this."""
        _check_choice("ffn.activation", self.activation, ACTIVATIONS)


@dataclass(frozen=True)
class ModelConfig:
    """The whole model: shape, regularisation, and one config per pluggable axis.

    Args:
        arch: "decoder" (causal LM), "encoder_decoder" (translation) or "encoder" (masked LM).
        vocab_size: token vocabulary (the source vocabulary for encoder-decoder models).
        tgt_vocab_size: target vocabulary of an encoder-decoder; None shares `vocab_size`.
        d_model: width of the residual stream; must be divisible by `n_heads`.
        n_heads: attention heads, each of width d_model / n_heads.
        n_layers: decoder layers (or encoder layers of an encoder-only model).
        n_encoder_layers: encoder layers of an encoder-decoder; None uses `n_layers`.
        d_ff: inner width of the feed-forward network.
        dropout: residual dropout on sub-layer outputs and on embedding + position sums.
        attn_dropout: dropout on attention weights.
        ffn_dropout: dropout between the two feed-forward projections.
        norm: "post" (residual then LayerNorm, the paper) or "pre" (LayerNorm inside the branch).
        norm_eps: LayerNorm epsilon.
        position: "sinusoidal", "learned" or "none" (relative variants encode positions inside
            attention).
        max_len: longest sequence; sizes the learned position table.
        scale_embeddings: multiply token embeddings by sqrt(d_model) (Vaswani §3.4).
        tie_embeddings: share the input embedding with the pre-softmax projection (and, for
            encoder-decoders with one vocabulary, between source and target).
        pad_id: padding token; keys equal to it are masked and targets equal to it ignored.
        attention: the attention pattern (a subclass of AttentionConfig for variants).
        ffn: the feed-forward network (a subclass of FFNConfig for variants).
    """

    arch: Arch = "decoder"
    vocab_size: int = 256
    tgt_vocab_size: int | None = None
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6
    n_encoder_layers: int | None = None
    d_ff: int = 2048
    dropout: float = 0.1
    attn_dropout: float = 0.0
    ffn_dropout: float = 0.0
    norm: str = "post"
    norm_eps: float = 1e-5
    position: str = "sinusoidal"
    max_len: int = 1024
    scale_embeddings: bool = True
    tie_embeddings: bool = True
    pad_id: int | None = None
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    ffn: FFNConfig = field(default_factory=FFNConfig)

    def __post_init__(self) -> None:
        _check_choice("arch", self.arch, ARCHS)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            _check_positive(name, getattr(self, name))
        for name in ("tgt_vocab_size", "n_encoder_layers"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose d_model as a multiple of n_heads (e.g. d_model="
                f"{self.n_heads * max(1, round(self.d_model / self.n_heads))}) "
                "or n_heads as a divisor of d_model"
            )
        for name in ("dropout", "attn_dropout", "ffn_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}={value} must be in [0, 1)")
        _check_choice("norm", self.norm, NORMS)
        _check_choice("position", self.position, POSITIONS)
        if self.pad_id is not None and not 0 <= self.pad_id < self.vocab_size:
            raise ConfigError(
                f"pad_id={self.pad_id} is outside the vocabulary [0, {self.vocab_size}): "
                "set pad_id to a token id below vocab_size, or None"
            )
        if self.arch != "encoder_decoder" and self.tgt_vocab_size is not None:
            raise ConfigError(
                f"tgt_vocab_size is only used by arch='encoder_decoder', not arch={self.arch!r}: "
                "leave it None"
            )
        self.attention.validate(self)
        self.ffn.validate(self)

    @property
    def d_head(self) -> int:
        """Width of one attention head (d_k = d_v = d_model / h in the paper)."""
        return self.d_model // self.n_heads

    @property
    def causal(self) -> bool:
        """Whether the (decoder) self-attention is masked to the past."""
        return self.arch != "encoder"

    @property
    def target_vocab_size(self) -> int:
        """The vocabulary the output layer predicts."""
        return self.tgt_vocab_size or self.vocab_size

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict that `config_from_dict` turns back into this config."""
        return dataclasses.asdict(self)


def _check_positive(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}={value!r} must be a positive integer")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def did_you_mean(word: str, options: list[str] | tuple[str, ...]) -> str:
    """A ' (did you mean ...?)' hint for an unknown name, or ''."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
