"""Absolute position encodings, Vaswani et al. 2017 §3.5.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

"sinusoidal_halves" holds the same sinusoids with the sines in channels 0 … D/2 - 1 and the
cosines in D/2 … D - 1 (Marian's and fairseq's layout): PE'(pos, i) = sin(·), PE'(pos, D/2 + i)
= cos(·) with the same frequency 1 / 10000^(2i / D). The two layouts are a fixed permutation of
the channels apart, so each trains as well as the other; a checkpoint needs its own.
Relative encodings (Transformer-XL) live inside their attention module instead.
Shapes: T positions, D model width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError


def sinusoid_table(length: int, d_model: int, offset: int = 0) -> Tensor:
    """The (T, D) float64 table of PE(pos, ·) for pos = offset … offset + T - 1.

    Kept in float64 (a few MB): a model moved to float64 then adds exact sinusoids, and lower
    precisions round from the exact values once, when they add them.
    """
    position = torch.arange(offset, offset + length, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model)
    )  # (ceil(D/2),)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table


def sinusoid_halves_table(length: int, d_model: int, offset: int = 0) -> Tensor:
    """`sinusoid_table`'s values with the sines first, then the cosines, (T, D) float64; for an
    odd D the sines take the extra channel (ceil(D/2) sines, floor(D/2) cosines)."""
    interleaved = sinusoid_table(length, d_model, offset)  # (T, D)
    return torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1)


class SinusoidalPosition(nn.Module):
    """Fixed sinusoids; extrapolate to any length (the table grows on demand)."""

    table_of = staticmethod(sinusoid_table)

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.d_model = d_model
        self.register_buffer("table", self.table_of(max_len, d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """PE for positions offset … offset + length - 1, (T, D)."""
        end = offset + length
        if end > self.table.shape[0]:
            longer = self.table_of(max(end, 2 * self.table.shape[0]), self.d_model)
            self.table = longer.to(device=self.table.device, dtype=self.table.dtype)
        return self.table[offset:end]


class SinusoidalHalvesPosition(SinusoidalPosition):
    """The same sinusoids, sines in the first half of the channels, cosines in the second."""

    table_of = staticmethod(sinusoid_halves_table)


class LearnedPosition(nn.Module):
    """A trained table of max_len position vectors (Vaswani §3.5 reports the same quality),
    after `skip` rows that no position reads (`ModelConfig.position_offset`)."""

    def __init__(self, d_model: int, max_len: int, skip: int = 0):
        super().__init__()
        self.table = nn.Embedding(max_len + skip, d_model)
        self.skip = skip
        nn.init.normal_(self.table.weight, std=d_model**-0.5)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        """Learned vectors for positions offset … offset + length - 1, (T, D)."""
        end = offset + length
        max_len = self.table.num_embeddings - self.skip
        if end > max_len:
            raise InputError(
                f"a sequence reaching position {end} exceeds max_len={max_len} of the learned "
                "position table: use shorter sequences, build with a larger max_len, or use "
                "position='sinusoidal'"
            )
        return self.table.weight[self.skip + offset : self.skip + end]


class NoPosition(nn.Module):
    """No absolute position: for models that encode order inside attention."""

    def forward(self, length: int, offset: int = 0) -> None:
        return None


POSITION = {
    "sinusoidal": SinusoidalPosition,
    "sinusoidal_halves": SinusoidalHalvesPosition,
    "learned": LearnedPosition,
    "none": NoPosition,
}


def build_position(cfg: ModelConfig) -> nn.Module:
    """The absolute position module named by `cfg.position`."""
    if cfg.position == "none":
        return NoPosition()
    if cfg.position == "learned":
        return LearnedPosition(cfg.d_model, cfg.max_len, cfg.position_offset)
    return POSITION[cfg.position](cfg.d_model, cfg.max_len)
