"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology", arXiv 2312.04927, §3.1).

A sequence holds `pairs` key–value pairs (k v) among filler tokens and, later, one query of
each key, followed by its value again (k v). Only the value after a query is scored: to predict
it, the model must find where that key appeared before and read the token after it. Every key
is queried once at a chosen distance (query position − pair position), so accuracy can be read
against how far back the answer lies.

Ids: 0 is the filler; keys are 1..K and values K+1..2K, K = (vocab − 1) // 2; a sequence's keys
are distinct and so are its values (Zoology's sampling without replacement).

Layout: pairs and queries are placed at random free positions, one pair at a time, each query
at its pair's position + its distance. Training draws each query's distance uniformly from
`distances`. A held-out sequence is drawn as in training except that one of its pairs, chosen
at random, is queried at the point's distance, and only that query is scored. (Putting every
query of a held-out sequence at one distance would query the pairs in the order they appeared,
and "the oldest value not yet asked for" would then answer every query without matching a key.)
Order still tells near the longest distance a sequence allows: a query that far from its pair
can only belong to an early pair, so the oldest value not yet asked for is most often its
answer (at the longest, always); scripts/experiments/mqar_floor.py gives what such rules score
at each held-out distance. At most half the sequence holds pairs and queries (8 · pairs ≤
seq_len), so a placement is always found quickly.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from formers.data.probes.base import IGNORE, Probe, ProbeConfig, Sample, ints
from formers.errors import ConfigError

FILLER = 0
MIN_DISTANCE = 2  # the query comes after its pair's value


@dataclass(frozen=True)
class MQARConfig(ProbeConfig):
    """Options of MQAR.

    Args:
        vocab: ids in all (filler, keys, values); keys and values take half of the rest each.
        pairs: key–value pairs per sequence, each queried once.
        distances: (lowest, highest) distance between a pair and its query in training;
            () = from 2 to the most the sequence allows, seq_len − 4 · pairs.
        eval_distances: the held-out points; () = the powers of two from 4 below the highest
            training distance (at the highest, order alone gives the answer: module doc), or
            the highest when it is 4 or less.
    """

    kind: str = "mqar"
    vocab: int = 256
    pairs: int = 8
    distances: tuple[int, ...] = ()
    eval_distances: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "distances", ints(self.distances, "train.probe.distances"))
        eval_distances = ints(self.eval_distances, "train.probe.eval_distances")
        object.__setattr__(self, "eval_distances", eval_distances)
        if len(self.distances) not in (0, 2) or list(self.distances) != sorted(self.distances):
            raise ConfigError(
                f"train.probe.distances={list(self.distances)} must be a range [lowest, highest], "
                "e.g. [2, 64] (or [] for all the sequence allows)"
            )
        for name in ("vocab", "pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"train.probe.{name}={value!r} must be a positive integer")
        if self.keys < self.pairs:
            raise ConfigError(
                f"train.probe.vocab={self.vocab} has {self.keys} keys, fewer than the "
                f"{self.pairs} distinct keys a sequence needs: raise train.probe.vocab to at "
                f"least {2 * self.pairs + 1} or lower train.probe.pairs"
            )

    @property
    def keys(self) -> int:
        """How many key ids (and value ids) the vocabulary has."""
        return (self.vocab - 1) // 2

    def longest(self, seq_len: int) -> int:
        """The longest distance `seq_len` tokens allow with `pairs` pairs and their queries."""
        return seq_len - 4 * self.pairs

    def train_range(self, seq_len: int) -> tuple[int, ...]:
        """(lowest, highest) training distance at `seq_len`."""
        return tuple(self.distances) if self.distances else (MIN_DISTANCE, self.longest(seq_len))

    def eval_distances_at(self, seq_len: int) -> tuple[int, ...]:
        """The held-out distances at `seq_len`."""
        if self.eval_distances:
            return self.eval_distances
        highest = self.train_range(seq_len)[1]
        return tuple(2**i for i in range(2, 31) if 2**i < highest) or (highest,)

    def validate(self, seq_len: int) -> None:
        super().validate(seq_len)
        if 8 * self.pairs > seq_len:
            raise ConfigError(
                f"train.probe.pairs={self.pairs}: pairs and queries take {4 * self.pairs} of the "
                f"train.seq_len={seq_len} tokens, and MQAR keeps that to half the sequence: lower "
                f"train.probe.pairs to {seq_len // 8} or raise train.seq_len to {8 * self.pairs}"
            )
        longest = self.longest(seq_len)
        lowest, highest = self.train_range(seq_len)
        for name, values in (
            ("distances", (lowest, highest)),
            ("eval_distances", self.eval_distances_at(seq_len)),
        ):
            for distance in values:
                if distance < MIN_DISTANCE:
                    raise ConfigError(
                        f"train.probe.{name}: distance {distance} puts a query before its pair's "
                        f"value: use distances of at least {MIN_DISTANCE}"
                    )
                if distance > longest:
                    beyond = "longer than the sequence" if distance >= seq_len else "too long"
                    raise ConfigError(
                        f"train.probe.{name}: distance {distance} is {beyond} (train.seq_len="
                        f"{seq_len} holds {self.pairs} pairs and their queries up to distance "
                        f"{longest}): lower it to {longest} or raise train.seq_len to "
                        f"{distance + 4 * self.pairs}"
                    )


class MQAR(Probe):
    """MQAR's generator (module doc)."""

    axis = "distance"
    cfg: MQARConfig

    def __init__(self, cfg: MQARConfig) -> None:
        super().__init__(cfg)
        self.vocab_size = cfg.vocab

    def sample(self, rng: random.Random, seq_len: int) -> Sample:
        lowest, highest = self.cfg.train_range(seq_len)
        return self._sample(rng, seq_len, lambda pair: rng.randint(lowest, highest))

    def eval_points(self, seq_len: int) -> list[dict[str, Any]]:
        return [{"distance": d} for d in self.cfg.eval_distances_at(seq_len)]

    def eval_sample(self, rng: random.Random, seq_len: int, point: dict[str, Any]) -> Sample:
        lowest, highest = self.cfg.train_range(seq_len)
        # pair 0 (placed first, so its distance always fits) is the scored one; keys, values
        # and positions are drawn at random, so which pair it is in the sequence is random too
        return self._sample(
            rng,
            seq_len,
            lambda pair: point["distance"] if pair == 0 else rng.randint(lowest, highest),
            scored=0,
        )

    def _sample(
        self,
        rng: random.Random,
        seq_len: int,
        distance: Callable[[int], int],
        scored: int | None = None,
    ) -> Sample:
        """A sequence whose pair i is queried `distance(i)` after it; every query scored, or
        only pair `scored`'s."""
        cfg = self.cfg
        keys = rng.sample(range(1, 1 + cfg.keys), cfg.pairs)
        values = rng.sample(range(1 + cfg.keys, 1 + 2 * cfg.keys), cfg.pairs)
        placed = _place(rng, seq_len, cfg.pairs, distance)
        # T + 1 tokens: inputs are the first T, targets the next token at each scored position
        tokens = [FILLER] * (seq_len + 1)
        targets = [IGNORE] * seq_len
        for i, (key, value, (pair, query)) in enumerate(zip(keys, values, placed, strict=True)):
            tokens[pair], tokens[pair + 1] = key, value
            tokens[query], tokens[query + 1] = key, value
            if scored is None or i == scored:
                targets[query] = value
        return Sample(tokens[:seq_len], targets)


def _place(
    rng: random.Random, seq_len: int, pairs: int, distance: Callable[[int], int]
) -> list[tuple[int, int]]:
    """(pair position, query position) of each pair, in order: two free slots of two tokens
    each, pair i's query `distance(i)` after it, inside seq_len + 1 tokens."""
    import numpy as np  # here: a command that only reads a probe's config imports no numpy

    end = seq_len + 1
    for _ in range(1000):
        free = np.ones(end, dtype=bool)
        placed = []
        for i in range(pairs):
            for _ in range(20):  # a distance with no free room left: draw another
                d = distance(i)
                # p is free where p, p + 1, p + d and p + d + 1 (the query's value, <= seq_len) are
                room = np.flatnonzero(
                    free[: end - d - 1] & free[1 : end - d] & free[d : end - 1] & free[d + 1 :]
                )
                if len(room):
                    break
            else:
                break  # a crowded draw: start the sequence again
            p = int(room[rng.randrange(len(room))])
            free[[p, p + 1, p + d, p + d + 1]] = False
            placed.append((p, p + d))
        if len(placed) == pairs:
            return placed
    raise ConfigError(  # unreachable within `validate`'s bounds; kept as a clear failure
        f"cannot place {pairs} MQAR pairs in {seq_len} tokens: lower train.probe.pairs"
    )
