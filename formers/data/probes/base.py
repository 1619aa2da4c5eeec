"""What a probe is: a seeded generator of sequences whose answers a model must find at a
distance, a held-out evaluation set of points (a distance, a depth), and its options.

A probe makes its data on the fly: training batch i of rank r draws from a generator seeded by
(train.seed, r, i), so a resumed run draws exactly the batches it would have drawn; evaluation
point p of split s draws from a generator seeded by (EVAL_SEED, s, p), which no training
batch uses, so every run of every arm is scored on the same held-out sequences.
"""

from __future__ import annotations

import json
import random
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from formers.errors import ConfigError

IGNORE = -100  # targets that are not scored
EVAL_SEED = 20230501  # fixed: the held-out sequences never depend on the run
SPLITS = ("valid", "test")  # each its own held-out set


def seeded_random(*key: int) -> random.Random:
    """A Python generator seeded from integers, well mixed (SeedSequence), so neighbouring keys
    (batch i and i + 1) give unrelated streams."""
    import numpy as np  # here: a command that only reads a probe's config imports no numpy

    seed = int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0])
    return random.Random(seed)


def point_key(split: str, point: dict[str, Any]) -> tuple[int, int, int]:
    """The seed key of an evaluation point: the same point draws the same sequences whatever
    the other points are."""
    if split not in SPLITS:
        raise ConfigError(f"a probe has the splits {' and '.join(SPLITS)}, not {split!r}")
    return EVAL_SEED, SPLITS.index(split), zlib.crc32(json.dumps(point, sort_keys=True).encode())


@dataclass
class Sample:
    """One sequence of a probe.

    Attributes:
        inputs: token ids, length T.
        targets: the id to predict at each position, IGNORE where nothing is scored (a causal
            probe), else empty.
        label: the class of the whole sequence (a classification probe), else None.
        point: coordinates the draw itself decides (ListOps: its depth, then its length bin).
    """

    inputs: list[int]
    targets: list[int] = field(default_factory=list)
    label: int | None = None
    point: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeConfig:
    """A probe's options; `kind` picks the probe (`formers.data.probes.PROBES`).

    Args:
        kind: "mqar", "passkey" or "listops".
        eval_samples: held-out sequences per evaluation point (ListOps: in all).
    """

    kind: str = ""
    eval_samples: int = 64

    def __post_init__(self) -> None:
        if isinstance(self.eval_samples, bool) or not isinstance(self.eval_samples, int):
            raise ConfigError(f"train.probe.eval_samples={self.eval_samples!r} is not an integer")
        if self.eval_samples < 1:
            raise ConfigError(
                f"train.probe.eval_samples={self.eval_samples} must be at least 1 (held-out "
                "sequences per evaluation point)"
            )

    def validate(self, seq_len: int) -> None:
        """Raise if the probe cannot be made at `seq_len` tokens (the message names the fix)."""
        if not self.kind:
            raise ConfigError(
                "train.probe has no kind: set train.probe.kind (or a spec's task:) to "
                "mqar, passkey or listops"
            )

    def check_arch(self, arch: str, preset: str) -> None:
        """Raise if a model of `arch` cannot be trained on this probe."""
        if arch != "decoder":
            raise ConfigError(
                f"{self.kind} is a causal probe (the answer is the next token) and {preset} is "
                f"an {arch} model, which would see the answer: use a decoder-only preset "
                f"({presets_of('decoder')})"
            )


def presets_of(arch: str) -> str:
    """The names of the presets whose models are `arch`, for a message, e.g. "bert, linformer"."""
    from formers.presets import PRESETS  # here, not at the top: presets need not load for data

    return ", ".join(name for name, make in PRESETS.items() if make().arch == arch)


class Probe(ABC):
    """A probe's generator: training sequences and held-out evaluation points.

    Attributes:
        vocab_size: the ids its sequences use.
        pad_id: the padding id of sequences shorter than the batch, None when all are full.
        axis: the coordinate its accuracy is read against, e.g. "distance".
        whole_sample: a sequence's answer tokens are one item (all must be right, e.g. the
            digits of a pass key); else each answer token is an item of its own.
    """

    vocab_size: ClassVar[int]
    pad_id: ClassVar[int | None] = None
    axis: ClassVar[str]
    whole_sample: ClassVar[bool] = False

    def __init__(self, cfg: ProbeConfig) -> None:
        self.cfg = cfg

    @abstractmethod
    def sample(self, rng: random.Random, seq_len: int) -> Sample:
        """One training sequence of `seq_len` tokens (or fewer, padded by the batcher)."""

    @abstractmethod
    def eval_points(self, seq_len: int) -> list[dict[str, Any]]:
        """The coordinates the held-out set is drawn at, e.g. [{"distance": 4}, ...]."""

    @abstractmethod
    def eval_sample(self, rng: random.Random, seq_len: int, point: dict[str, Any]) -> Sample:
        """One held-out sequence at `point`."""

    def causal(self, sample: Sample) -> Sample:
        """`sample` as a causal model reads it: inputs with next-token targets."""
        return sample

    def eval_set(self, split: str, seq_len: int) -> list[tuple[dict[str, Any], list[Sample]]]:
        """Each point with its `eval_samples` held-out sequences of `split`."""
        out = []
        for point in self.eval_points(seq_len):
            rng = seeded_random(*point_key(split, point))
            out.append((point, [self.eval_sample(rng, seq_len, point) for _ in range(self.n)]))
        return out

    @property
    def n(self) -> int:
        return self.cfg.eval_samples


def ints(value: Any, name: str) -> tuple[int, ...]:
    """A tuple of ints from a list, a tuple, an int or a string such as "8,16,32"."""
    return tuple(int(v) for v in _items(value, name, int))


def floats(value: Any, name: str) -> tuple[float, ...]:
    """A tuple of floats from a list, a tuple, a number or a string such as "0,0.5,1"."""
    return tuple(float(v) for v in _items(value, name, float))


def _items(value: Any, name: str, kind: type) -> list[Any]:
    if isinstance(value, str):
        value = [p for p in value.strip("[]() ").replace(" ", "").split(",") if p]
    elif isinstance(value, int | float) and not isinstance(value, bool):
        value = [value]
    try:
        items = [kind(v) if isinstance(v, str) else v for v in value]
    except (TypeError, ValueError):
        items = None
    ok = items is not None and all(
        isinstance(v, int | float) and not isinstance(v, bool) and (kind is float or v == int(v))
        for v in items
    )
    if not ok:
        example = "8,16,32" if kind is int else "0,0.5,1"
        raise ConfigError(f"{name}={value!r} must be a list of numbers, e.g. {example}")
    return items
