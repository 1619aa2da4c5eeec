"""Typed, frozen model configurations.

A `ModelConfig` holds the shape of the network plus one small config per pluggable axis
(attention pattern, feed-forward). Variants subclass `AttentionConfig` or `FFNConfig` next to
their module and are listed by `kind` in `formers.config_kinds` (their modules in
`formers.registry`), so the model config never grows a field per variant.

Per layer and per stack: a kind config's `layers` says which layers of its stack use it (the
others use its `fallback()`, the vanilla part with the same shared options), and an
encoder–decoder's encoder may have its own `encoder_attention` / `encoder_ffn`. So "Switch in
every other layer" is `ffn=SwitchConfig(layers="odd")`, and "Linformer in the encoder only" is
`encoder_attention=LinformerConfig()`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from formers.errors import ConfigError

Arch = Literal["decoder", "encoder_decoder", "encoder"]
ARCHS: tuple[str, ...] = ("decoder", "encoder_decoder", "encoder")
Stack = Literal["decoder", "encoder"]
NORMS: tuple[str, ...] = ("post", "pre")
# The token embeddings' initial standard deviation, by name: 4 / d_model, or the paper's
# d_model**-0.5 (see ModelConfig.embed_init).
EMBED_INITS: tuple[str, ...] = ("small", "paper")
ACTIVATIONS: tuple[str, ...] = ("relu", "gelu", "gelu_tanh", "squared_relu", "silu")
POSITIONS: tuple[str, ...] = ("sinusoidal", "sinusoidal_halves", "learned", "none")


@dataclass(frozen=True)
class AttentionConfig:
    """Options of the attention pattern; `kind` picks the module (vanilla = Vaswani §3.2.2).

    Args:
        kind: the attention module, a key of `formers.registry.ATTENTION`.
        bias: biases on the q/k/v and output projections.
        layers: which layers of the stack use this kind: "all", "even", "odd", or indices and
            slices such as "0,2,5" or "-2:" (Python's, negatives from the top); the other
            layers use `fallback()`.
    """

    kind: str = "vanilla"
    bias: bool = True
    layers: str = "all"

    # fields `formers eval` may change on a trained run: they change how the model runs, not
    # its weights (Transformer-XL's memory length, say)
    runtime_fields: ClassVar[tuple[str, ...]] = ()

    def validate(self, model: ModelConfig, causal: bool) -> None:
        """Raise ConfigError if this attention cannot serve `model` in a stack that is (or is not)
        `causal`. Variants extend this."""

    def fallback(self) -> AttentionConfig:
        """What the layers that `layers` leaves out use: vanilla attention."""
        return AttentionConfig(bias=self.bias)

    def for_layer(self, index: int, n_layers: int) -> AttentionConfig:
        """This config as layer `index` of a stack of `n_layers` uses it; a variant with values
        per layer (a window that grows with depth) returns a copy with that layer's values."""
        return self

    def memory_tokens(self) -> int:
        """Past positions this attention carries from one segment to the next (its memory)."""
        return 0

    @property
    def recurrent(self) -> bool:
        """Whether the layer keeps a memory between consecutive segments of a text."""
        return False


@dataclass(frozen=True)
class FFNConfig:
    """Options of the position-wise feed-forward network (Vaswani §3.3).

    Args:
        kind: the feed-forward module, a key of `formers.registry.FFN`.
        activation: "relu", "gelu" (exact), "gelu_tanh" (its tanh approximation),
            "squared_relu" or "silu" (x·σ(x), also called swish).
        bias: biases on the projections.
        layers: which layers of the stack use this kind (see `AttentionConfig.layers`); the
            others use `fallback()`.
    """

    kind: str = "dense"
    activation: str = "relu"
    bias: bool = True
    layers: str = "all"

    def validate(self, model: ModelConfig, causal: bool) -> None:
        """Raise ConfigError if this feed-forward cannot serve `model`. Variants extend this."""
        choice("ffn.activation", self.activation, ACTIVATIONS)

    def fallback(self) -> FFNConfig:
        """What the layers that `layers` leaves out use: the dense network, same activation."""
        return FFNConfig(activation=self.activation, bias=self.bias)

    def for_layer(self, index: int, n_layers: int) -> FFNConfig:
        """This config as layer `index` of a stack of `n_layers` uses it (see
        `AttentionConfig.for_layer`)."""
        return self


def select_layers(spec: str, n_layers: int, name: str = "layers") -> list[int]:
    """The layer indices in [0, n_layers) that a `layers` selector names, sorted.

    "all", "even", "odd", or a comma-separated list of indices and slices ("0,2", "-2:",
    "1::2"), with Python's meaning for negative numbers.
    """
    text = str(spec).replace(" ", "")
    chosen: set[int] = set()
    if text == "all":
        chosen.update(range(n_layers))
    elif text in ("even", "odd"):
        chosen.update(range(0 if text == "even" else 1, n_layers, 2))
    else:
        for part in text.split(","):
            chosen.update(_selected(part, spec, n_layers, name))
    if not chosen:
        raise ConfigError(f"{name}={spec!r} selects none of the {n_layers} layers")
    return sorted(chosen)


def _selected(part: str, spec: str, n_layers: int, name: str) -> range | list[int]:
    """The layers one comma-separated part of a selector names: an index or a slice."""
    try:
        bounds = [int(b) if b else None for b in part.split(":")]
        if len(bounds) > 3 or (len(bounds) == 1 and bounds[0] is None):
            raise ValueError(part)
        if len(bounds) > 1:
            return range(n_layers)[slice(*bounds)]
    except ValueError:
        raise ConfigError(
            f"{name}={spec!r} is not a layer selector: write 'all', 'even', 'odd', or indices "
            "and slices such as '0,2' or '-2:'"
        ) from None
    index = bounds[0]
    if not -n_layers <= index < n_layers:
        raise ConfigError(
            f"{name}={spec!r} names layer {index}, but the stack has {n_layers} layers "
            f"(0 … {n_layers - 1}, or negative from the top)"
        )
    return [index % n_layers]


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
        norm_eps: the ε every LayerNorm adds to the variance (PyTorch's 1e-5; a checkpoint
            trained with another must keep its own).
        position: "sinusoidal", "sinusoidal_halves" (the same sinusoids with every sine in the
            first half of the channels and every cosine in the second, not interleaved),
            "learned" or "none" (relative variants encode positions inside attention).
        max_len: longest sequence; sizes the learned position table.
        position_offset: rows of the learned position table before position 0's: position
            p reads row p + position_offset, and the table has max_len + position_offset rows
            (RoBERTa-style checkpoints number positions from padding_idx + 1); 0: none.
        embed_init: how the token embeddings start: "small", standard deviation 4 / d_model, or
            "paper", d_model**-0.5 (fairseq's). With the tied output a fresh model gives the
            token each position reads a logit of up to about std · d_model: ≈ √d_model with
            "paper", so the first loss is far above ln V and samples repeat their input; at most
            about 4 with "small", whatever the width, which starts within 10% of ln V for
            vocabularies of a few dozen tokens or more (docs/architecture.md, "Initialisation").
        embed_init_std: a standard deviation for the token embeddings instead of `embed_init`'s
            (and for an untied output layer, else d_model**-0.5).
        embed_scale: what token embeddings are multiplied by on the way in; None: 1 / their
            initial standard deviation, so the input has unit variance (the paper's √d_model,
            §3.4, with "paper").
        scale_tied_output: with tied embeddings, multiply the hidden states by d_model**-0.5
            before the output projection (Mesh TensorFlow and T5 do): another way to start near
            ln V, measured slower to learn (docs/architecture.md).
        tie_embeddings: share the input embedding with the pre-softmax projection (and, for
            encoder-decoders with one vocabulary, between source and target).
        embed_norm: a LayerNorm (ε = norm_eps) over the summed token, token-type and position
            embeddings, before their dropout.
        type_vocab_size: rows of a token-type (segment) embedding table added to the input; 0:
            none. The encoder LM takes the types as `token_types=`; where none are given,
            every position is type 0.
        head_transform: between the last layer and the output projection, a dense D -> D layer,
            the feed-forward network's activation and a LayerNorm (ε = norm_eps).
        output_bias: a bias on the output projection (its own parameter, also when the
            weight is tied to the embedding).
        pad_id: padding token; keys equal to it are masked and targets equal to it ignored.
        attention: the attention pattern (a subclass of AttentionConfig for variants) of every
            self-attention stack, or of the decoder of an encoder-decoder.
        ffn: the feed-forward network (a subclass of FFNConfig for variants), likewise.
        encoder_attention: the encoder's self-attention of an encoder-decoder; None: `attention`.
        encoder_ffn: the encoder's feed-forward network of an encoder-decoder; None: `ffn`.
        adaptive_cutoffs: vocabulary cutoffs of an adaptive softmax output layer (Grave et al.
            2017, `torch.nn.AdaptiveLogSoftmaxWithLoss`), e.g. (20000, 40000, 200000) for
            WikiText-103; None: a plain softmax. Needs tie_embeddings=False.
        adaptive_div_value: each adaptive-softmax cluster is this much narrower than the last.
        adaptive_d_embed: with adaptive_cutoffs, the projected adaptive softmax of Dai et al.'s
            reference code: the head too projects D to this width, and every cluster scores
            with a bias; None: `torch.nn.AdaptiveLogSoftmaxWithLoss`. Also the first width of
            the adaptive input (None there: d_model).
        adaptive_input: adaptive input embeddings (Baevski & Auli 2019) with the same cutoffs
            and div value: one table per cluster, each projected to d_model.
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
    position_offset: int = 0
    embed_init: str = "small"
    embed_init_std: float | None = None
    embed_scale: float | None = None
    scale_tied_output: bool = False
    tie_embeddings: bool = True
    embed_norm: bool = False
    type_vocab_size: int = 0
    head_transform: bool = False
    output_bias: bool = False
    pad_id: int | None = None
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    ffn: FFNConfig = field(default_factory=FFNConfig)
    encoder_attention: AttentionConfig | None = None
    encoder_ffn: FFNConfig | None = None
    adaptive_cutoffs: tuple[int, ...] | None = None
    adaptive_div_value: float = 4.0
    adaptive_d_embed: int | None = None
    adaptive_input: bool = False
    # Fields of earlier versions, each with what replaces it (saved configs are translated).
    removed_fields: ClassVar[dict[str, str]] = {
        "scale_embeddings": "embeddings are multiplied by embed_scale (1 / their initial standard "
        "deviation unless set): set embed_scale to 1 for no scaling, or embed_init to paper for "
        "the paper's table and √d_model",
    }

    def __post_init__(self) -> None:
        # in this order, so that of several mistakes the same one is reported first
        self._check_finite()
        object.__setattr__(self, "adaptive_cutoffs", _as_cutoffs(self.adaptive_cutoffs))
        self._check_shape()
        self._check_embedding()
        self._check_rates_and_choices()
        self._check_arch_fields()
        self._check_layers()
        if self.adaptive_cutoffs is not None:
            self._validate_adaptive()
        elif self.adaptive_input or self.adaptive_d_embed is not None:
            raise ConfigError(
                "adaptive_input and adaptive_d_embed shape the clusters of adaptive_cutoffs, "
                "and it is not set: set adaptive_cutoffs, or leave them at False / None"
            )

    def _check_finite(self) -> None:
        """No NaN or infinity in any float field, the per-axis configs' included."""
        check_finite(self)
        for name in ("attention", "ffn", "encoder_attention", "encoder_ffn"):
            if getattr(self, name) is not None:
                check_finite(getattr(self, name), prefix=f"{name}.")

    def _check_shape(self) -> None:
        """The architecture, positive sizes, and heads that divide d_model."""
        choice("arch", self.arch, ARCHS)
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_len"):
            positive(name, getattr(self, name))
        for name in ("tgt_vocab_size", "n_encoder_layers"):
            if getattr(self, name) is not None:
                positive(name, getattr(self, name))
        non_negative("type_vocab_size", self.type_vocab_size, "0: no token-type embeddings")
        non_negative("position_offset", self.position_offset, "0: position 0 reads row 0")
        if self.position_offset and self.position != "learned":
            raise ConfigError(
                f"position_offset={self.position_offset} skips rows of a learned position "
                f"table, and position={self.position!r} has none: set position_offset=0"
            )
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose d_model as a multiple of n_heads (e.g. d_model="
                f"{self.n_heads * max(1, round(self.d_model / self.n_heads))}) "
                "or n_heads as a divisor of d_model"
            )

    def _check_embedding(self) -> None:
        """The embeddings' initial scale and input scale, and the tied output's scaling."""
        if self.scale_tied_output and (not self.tie_embeddings or self.adaptive_cutoffs):
            raise ConfigError(
                "scale_tied_output scales the tied output projection, and this model has none "
                "(tie_embeddings is false or adaptive_cutoffs is set): leave it false"
            )
        if self.embed_init_std is not None and not self.embed_init_std > 0:
            raise ConfigError(
                f"embed_init_std={self.embed_init_std} must be positive, or None for embed_init's"
            )
        if self.embed_scale is not None and not self.embed_scale > 0:
            raise ConfigError(
                f"embed_scale={self.embed_scale} must be positive, or None for 1 / the "
                "embeddings' initial standard deviation"
            )

    def _check_rates_and_choices(self) -> None:
        """Dropout rates in [0, 1), the LayerNorm's ε, and the norm, embed_init and position by
        name."""
        if not self.norm_eps > 0:
            raise ConfigError(
                f"norm_eps={self.norm_eps} must be positive (the LayerNorm's ε, 1e-5 by default)"
            )
        for name in ("dropout", "attn_dropout", "ffn_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}={value} must be in [0, 1)")
        choice("norm", self.norm, NORMS)
        choice("embed_init", self.embed_init, EMBED_INITS)
        choice("position", self.position, POSITIONS)

    def _check_arch_fields(self) -> None:
        """pad_id inside the vocabulary, and fields that only an encoder-decoder uses."""
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
        for name in ("encoder_attention", "encoder_ffn"):
            if getattr(self, name) is not None and self.arch != "encoder_decoder":
                raise ConfigError(
                    f"{name} configures the encoder of arch='encoder_decoder', not of "
                    f"arch={self.arch!r}: set attention / ffn instead"
                )

    def _check_layers(self) -> None:
        """Each layer's attention and feed-forward config, against this model and its stack."""
        for stack in self.stacks:
            for index in range(self.stack_layers(stack)):
                self.attention_at(stack, index).validate(self, self.stack_causal(stack))
                self.ffn_at(stack, index).validate(self, self.stack_causal(stack))

    def _validate_adaptive(self) -> None:
        cutoffs = self.adaptive_cutoffs
        if list(cutoffs) != sorted(set(cutoffs)) or cutoffs[0] < 1:
            raise ConfigError(
                f"adaptive_cutoffs={list(cutoffs)} must be strictly increasing positive token ids"
            )
        if cutoffs[-1] >= self.target_vocab_size:
            raise ConfigError(
                f"adaptive_cutoffs={list(cutoffs)} must all be below "
                f"vocab_size={self.target_vocab_size}: drop the cutoffs at or above it"
            )
        if self.output_bias:
            raise ConfigError(
                "output_bias: an adaptive softmax has its own output projections, with biases: "
                "set output_bias=False"
            )
        if self.tie_embeddings:
            raise ConfigError(
                "adaptive_cutoffs: an adaptive softmax has its own output projections and cannot "
                "share the input embedding: set tie_embeddings=False"
            )
        if self.adaptive_div_value <= 0:
            raise ConfigError(f"adaptive_div_value={self.adaptive_div_value} must be positive")
        width = self.adaptive_d_embed or self.d_model
        if width < 1 or width // self.adaptive_div_value ** len(cutoffs) < 1:
            raise ConfigError(
                f"adaptive_d_embed={width} leaves the last adaptive cluster no width after "
                f"{len(cutoffs)} divisions by {self.adaptive_div_value}: raise adaptive_d_embed "
                "or lower adaptive_div_value"
            )

    @property
    def stacks(self) -> tuple[Stack, ...]:
        """The model's stacks of layers: ("decoder",), ("encoder",) or both."""
        if self.arch == "encoder_decoder":
            return ("encoder", "decoder")
        return ("encoder",) if self.arch == "encoder" else ("decoder",)

    def stack_layers(self, stack: Stack) -> int:
        """How many layers `stack` has."""
        if stack == "encoder" and self.arch == "encoder_decoder":
            return self.n_encoder_layers or self.n_layers
        return self.n_layers

    def stack_causal(self, stack: Stack) -> bool:
        """Whether `stack`'s self-attention is masked to the past."""
        return stack == "decoder"

    def stack_attention(self, stack: Stack) -> AttentionConfig:
        """The attention config `stack` is built from (before `layers` picks per layer)."""
        if stack == "encoder" and self.encoder_attention is not None:
            return self.encoder_attention
        return self.attention

    def stack_ffn(self, stack: Stack) -> FFNConfig:
        """The feed-forward config `stack` is built from (before `layers` picks per layer)."""
        if stack == "encoder" and self.encoder_ffn is not None:
            return self.encoder_ffn
        return self.ffn

    def attention_at(self, stack: Stack, index: int) -> AttentionConfig:
        """The attention config of layer `index` of `stack`."""
        options = self.stack_attention(stack)
        if not self._selects(options, stack, index):
            return options.fallback()
        return options.for_layer(index, self.stack_layers(stack))

    def ffn_at(self, stack: Stack, index: int) -> FFNConfig:
        """The feed-forward config of layer `index` of `stack`."""
        options = self.stack_ffn(stack)
        if not self._selects(options, stack, index):
            return options.fallback()
        return options.for_layer(index, self.stack_layers(stack))

    def _selects(self, options: AttentionConfig | FFNConfig, stack: Stack, index: int) -> bool:
        axis = "attention" if isinstance(options, AttentionConfig) else "ffn"
        prefix = "encoder_" if stack == "encoder" and self.arch == "encoder_decoder" else ""
        name = f"{prefix}{axis}.layers"
        return index in select_layers(options.layers, self.stack_layers(stack), name)

    @property
    def recurrent(self) -> bool:
        """Whether some layer carries a memory from one segment of a text to the next."""
        return any(
            self.attention_at(stack, i).recurrent
            for stack in self.stacks
            for i in range(self.stack_layers(stack))
        )

    @property
    def memory_tokens(self) -> int:
        """The most past positions any layer carries between segments (0: no memory)."""
        return max(
            self.attention_at(stack, i).memory_tokens()
            for stack in self.stacks
            for i in range(self.stack_layers(stack))
        )

    @property
    def embedding_std(self) -> float:
        """The token embeddings' initial standard deviation (see `embed_init_std`)."""
        if self.embed_init_std is not None:
            return self.embed_init_std
        return 4.0 / self.d_model if self.embed_init == "small" else self.d_model**-0.5

    @property
    def embedding_scale(self) -> float:
        """What token embeddings are multiplied by on the way in (see `embed_scale`)."""
        return self.embed_scale if self.embed_scale is not None else 1.0 / self.embedding_std

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


def _as_cutoffs(value: Any) -> tuple[int, ...] | None:
    """Cutoffs from a tuple, a list or a command-line string "2000,10000"; None stays None."""
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
    if value is None:
        return None
    try:
        cutoffs = tuple(int(c) for c in value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"adaptive_cutoffs={value!r} must be a list of increasing token ids, e.g. [2000, 10000]"
        ) from None
    return cutoffs or None


def check_finite(cfg: Any, prefix: str = "") -> None:
    """Raise ConfigError for a NaN or infinite value in a float field of the dataclass `cfg`.

    No float setting means anything at NaN or infinity, and NaN slips past every range check
    written as a comparison (`nan < 0` is false), so it is refused here, once for all fields.
    """
    for item in dataclasses.fields(cfg):
        value = getattr(cfg, item.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{prefix}{item.name}={value} must be a finite number")


def positive(name: str, value: Any, hint: str = "") -> None:
    """Refuse anything but a positive integer, naming the option as the user wrote it; `hint`
    (e.g. "the keys each query keeps (8 in the paper)") follows the message after a colon."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"{name}={value!r} must be a positive integer" + (f": {hint}" if hint else "")
        )


def non_negative(name: str, value: Any, zero: str) -> None:
    """Refuse anything but an integer >= 0, naming the option and what 0 means."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name}={value!r} must be a non-negative integer ({zero})")


def choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Refuse a value outside `choices`, naming the option and listing what it accepts."""
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def did_you_mean(word: str, options: list[str] | tuple[str, ...]) -> str:
    """A ' (did you mean ...?)' hint for an unknown name, or ''."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
