"""Passkey retrieval (Mohtashami & Jaggi 2023, "Landmark Attention", arXiv 2305.16300, §4.2).

A random number (the pass key) is hidden at a chosen depth of filler text, and the sequence
ends by asking for it; the model must copy its digits from wherever it was. The text is bytes
(ids 0..255), as in the paper's prompt less its opening instructions, which a model trained
from scratch has no use for and which would fill a short context:

    <filler> The pass key is 71432. <filler> What is the pass key? The pass key is 71432

The filler is the paper's ("The grass is green. The sky is blue. ..."), repeated from a random
phase and cut to length. Only the digits after the question are scored, and a sequence counts
as right when all of them are. Depth is the share of the filler before the key: 0 puts it
first, 1 just before the question. The held-out points are every pair of `eval_lengths` and
`eval_depths`. Training draws the depth uniformly from [0, 1] and the length uniformly from
`eval_lengths` (train.seq_len when none are listed), right-padded to train.seq_len with byte 0
(which the text never holds): the answer then sits at the positions it is scored at, so a
model with absolute positions is not asked for a key at positions it never answered from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from formers.data.probes.base import IGNORE, Probe, ProbeConfig, Sample, floats, ints
from formers.errors import ConfigError

FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
KEY = "The pass key is {key}. "
QUESTION = "What is the pass key? The pass key is {key}"
MIN_FILLER = 32
PAD = 0  # the NUL byte: never in the text


@dataclass(frozen=True)
class PasskeyConfig(ProbeConfig):
    """Options of passkey retrieval.

    Args:
        digits: digits of the pass key.
        eval_depths: held-out depths, shares of the filler before the key, in [0, 1].
        eval_lengths: held-out sequence lengths, each at most train.seq_len; () = train.seq_len.
            Training draws its lengths from these too (module doc).
    """

    kind: str = "passkey"
    digits: int = 5
    eval_depths: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    eval_lengths: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "eval_depths", floats(self.eval_depths, "train.probe.eval_depths"))
        eval_lengths = ints(self.eval_lengths, "train.probe.eval_lengths")
        object.__setattr__(self, "eval_lengths", eval_lengths)
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or self.digits < 1:
            raise ConfigError(f"train.probe.digits={self.digits!r} must be a positive integer")
        if not self.eval_depths or not all(0 <= d <= 1 for d in self.eval_depths):
            raise ConfigError(
                f"train.probe.eval_depths={list(self.eval_depths)} must be shares of the filler "
                "in [0, 1], e.g. 0,0.5,1"
            )

    @property
    def overhead(self) -> int:
        """Bytes of a sequence that are not filler (key sentence, question, answer)."""
        key = "0" * self.digits
        return len(KEY.format(key=key)) + len(QUESTION.format(key=key))

    def shortest(self) -> int:
        """The shortest sequence: MIN_FILLER bytes of filler, so that depth means something."""
        return self.overhead + MIN_FILLER

    def lengths(self, seq_len: int) -> tuple[int, ...]:
        """The held-out lengths at train.seq_len `seq_len`."""
        return self.eval_lengths or (seq_len,)

    def validate(self, seq_len: int) -> None:
        super().validate(seq_len)
        for length in (seq_len, *self.lengths(seq_len)):
            if length < self.shortest():
                raise ConfigError(
                    f"passkey: a sequence of {length} tokens leaves less than {MIN_FILLER} "
                    f"bytes of filler beside the {self.overhead} of key and question: use "
                    f"train.seq_len and train.probe.eval_lengths of at least {self.shortest()}"
                )
            if length > seq_len:
                raise ConfigError(
                    f"train.probe.eval_lengths: {length} is longer than the trained sequence "
                    f"(train.seq_len={seq_len}): list lengths up to {seq_len}"
                )


class Passkey(Probe):
    """Passkey retrieval's generator (module doc)."""

    vocab_size = 256
    pad_id = PAD  # right padding of the sequences shorter than train.seq_len
    axis = "depth"
    whole_sample = True
    cfg: PasskeyConfig

    def sample(self, rng: random.Random, seq_len: int) -> Sample:
        length = rng.choice(self.cfg.lengths(seq_len))
        return self._sample(rng, length, rng.random())

    def eval_points(self, seq_len: int) -> list[dict[str, Any]]:
        return [
            {"length": length, "depth": depth}
            for length in self.cfg.lengths(seq_len)
            for depth in self.cfg.eval_depths
        ]

    def eval_sample(self, rng: random.Random, seq_len: int, point: dict[str, Any]) -> Sample:
        return self._sample(rng, point["length"], point["depth"])

    def _sample(self, rng: random.Random, length: int, depth: float) -> Sample:
        key = "".join(rng.choice("0123456789") for _ in range(self.cfg.digits))
        # length + 1 bytes: inputs are the first `length`, targets the next byte of each
        n_filler = length + 1 - self.cfg.overhead
        phase = rng.randrange(len(FILLER))
        repeats = (phase + n_filler) // len(FILLER) + 1
        filler = (FILLER * repeats)[phase : phase + n_filler]
        at = round(depth * n_filler)
        text = filler[:at] + KEY.format(key=key) + filler[at:] + QUESTION.format(key=key)
        tokens = list(text.encode("ascii"))
        targets = [IGNORE] * length
        for t in range(length - self.cfg.digits, length):  # the answer: the last digits
            targets[t] = tokens[t + 1]
        return Sample(tokens[:length], targets)
