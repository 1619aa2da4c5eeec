"""The options of Longformer attention (formers/variants/longformer/attention.py): the window, per
layer; the dilation, per head; the global token positions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from formers.config import AttentionConfig, ModelConfig, positive
from formers.errors import ConfigError


@dataclass(frozen=True)
class LongformerConfig(AttentionConfig):
    """Sliding-window + global attention (Longformer §3.1).

    Args:
        window: keys a query sees: causal stacks the last `window` positions, itself included;
            two-sided stacks window // 2 on each side plus itself. One int for every layer, or
            one per layer of the stack (e.g. "64,128,256" on the command line).
        dilation: gap between window keys (1: none), one int or one per head.
        global_tokens: positions that attend to every token and that every token attends to,
            e.g. (0,) for a [CLS] token; () for none.
        global_projections: give every layer the global projections Q_g, K_g, V_g even
            when `global_tokens` is empty (with global tokens it always has them): a model
            whose weights hold them, such as an imported checkpoint, then loads, exports and
            runs with any global tokens, none included.
    """

    kind: str = "longformer"
    window: int | tuple[int, ...] = 256
    dilation: int | tuple[int, ...] = 1
    global_tokens: tuple[int, ...] = ()
    global_projections: bool = False

    def __post_init__(self) -> None:
        # the command line and saved JSON give strings and lists: store ints and tuples
        for name in ("window", "dilation", "global_tokens"):
            value = _ints(getattr(self, name), f"attention.{name}")
            if name == "global_tokens" and isinstance(value, int):
                value = (value,)
            object.__setattr__(self, name, value)

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        windows = self.window if isinstance(self.window, tuple) else (self.window,)
        for window in windows or (self.window,):  # () is no window either
            positive("attention.window", window)
        dilations = self.dilation if isinstance(self.dilation, tuple) else (self.dilation,)
        if isinstance(self.dilation, tuple) and len(dilations) != model.n_heads:
            raise ConfigError(
                f"attention.dilation has {len(dilations)} entries for n_heads={model.n_heads}: "
                "give one int, or one per head"
            )
        for dilation in dilations:
            positive("attention.dilation", dilation, "the step between attended keys (1: no gaps)")
        tokens = self.global_tokens
        if any(p < 0 for p in tokens) or len(set(tokens)) != len(tokens):
            raise ConfigError(
                f"attention.global_tokens={list(tokens)} must be distinct positions >= 0, "
                "e.g. [0] for a leading [CLS] token"
            )

    def for_layer(self, index: int, n_layers: int) -> LongformerConfig:
        """Layer `index`'s config: its own window when `window` is given per layer."""
        if not isinstance(self.window, tuple):
            return self
        if len(self.window) != n_layers:
            raise ConfigError(
                f"attention.window has {len(self.window)} entries for a stack of {n_layers} "
                "layers: give one window per layer, or one int for all"
            )
        return dataclasses.replace(self, window=self.window[index])


def _ints(value: Any, name: str) -> int | tuple[int, ...]:
    """An int, or a tuple of ints from a list, a tuple or a string such as "64,128" or "[0]"."""
    if isinstance(value, str):
        parts = [p for p in value.strip("[]() ").replace(" ", "").split(",") if p]
        if value.strip().lower() in ("none", "null"):
            parts = []
        bracketed = value.strip().startswith(("[", "("))
        value = parts[0] if len(parts) == 1 and not bracketed else parts
    try:
        if isinstance(value, list | tuple):
            return tuple(_int(v) for v in value)
        return _int(value)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name}={value!r} must be an integer or a list of integers, e.g. 256 or 64,128"
        ) from None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(value)
    return int(value)
