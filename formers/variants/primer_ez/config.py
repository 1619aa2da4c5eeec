"""Multi-DConv-head attention's options: the width of the causal convolutions and their bias."""

from __future__ import annotations

from dataclasses import dataclass

from formers.config import AttentionConfig, ModelConfig, positive


@dataclass(frozen=True)
class MDHAConfig(AttentionConfig):
    """Multi-DConv-head attention: vanilla attention plus a causal depthwise conv on q, k, v.

    Args:
        kernel_size: width of each convolution along the sequence (3 in the paper); position t
            sees t, t−1, …, t−kernel_size+1.
        conv_bias: give each convolution a per-channel bias (zero-initialised). The official code
            has none; set False to match its parameter count exactly.
    """

    kind: str = "mdha"
    kernel_size: int = 3
    conv_bias: bool = True

    def validate(self, model: ModelConfig, causal: bool) -> None:
        super().validate(model, causal)
        positive(
            "attention.kernel_size",
            self.kernel_size,
            "the width of the causal convolution along the sequence (3 in the Primer paper; 1 is a "
            "per-channel scale with no mixing over time)",
        )
