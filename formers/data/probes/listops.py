"""ListOps (Nangia & Bowman 2018, arXiv 1804.06028), in the Long Range Arena's version (Tay et
al. 2021, arXiv 2011.04006, §3.1): nested lists of the digits 0-9 under MAX, MIN, MED (median,
rounded down) and SM (sum modulo 10), nesting depth at most 10; the answer is one digit.

    [MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]   ->   5

Trees are drawn as LRA's generator draws them (`lra_benchmarks/data/listops.py`): below the
maximum depth a node is an operator with probability 0.25, with 2 to `max_args` arguments,
else a digit; a tree is kept when its length (operators, digits and closing brackets; LRA's
parentheses are left out, they carry nothing) lies in [min_length, train.seq_len − 1]. A tree
longer than that is abandoned as soon as it is, which keeps the same distribution of kept
trees (each draw is independent) at a fraction of the cost.

An encoder reads it as sequence classification (`head="pooled"`: the class scores are averaged
over the positions); a decoder reads "expression =" and predicts the answer as the next token
(`head="next_token"`). Accuracy is read against the expression's length, in LENGTH_BINS equal
bins of the lengths kept: trees this long nearly all reach the maximum depth (263 of 300 drawn
at train.seq_len 256 nest 9 deep), so depth would not tell them apart.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any

from formers.data.probes.base import (
    IGNORE,
    Probe,
    ProbeConfig,
    Sample,
    point_key,
    presets_of,
    seeded_random,
)
from formers.errors import ConfigError

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END, EQUALS, PAD = "]", "=", "<pad>"
VOCAB = (*"0123456789", *OPERATORS, END, EQUALS, PAD)  # digit d has id d
ID = {token: i for i, token in enumerate(VOCAB)}
OPERATOR_P = 0.25  # LRA's VALUE_P: a node below the maximum depth is a digit with p = 0.75
HEADS = ("auto", "pooled", "next_token")
LENGTH_BINS = 4

Tree = int | tuple[str, list["Tree"]]


@dataclass(frozen=True)
class ListOpsConfig(ProbeConfig):
    """Options of ListOps.

    Args:
        max_depth: LRA's maximum tree depth (10): nodes at this depth are digits.
        max_args: the most arguments of an operator (LRA: 10).
        min_length: the shortest expression kept, in tokens; None = train.seq_len // 4 (LRA
            keeps 500 to 2,000 tokens).
        head: "pooled" (an encoder classifies the whole sequence), "next_token" (a decoder
            predicts the answer after "="), or "auto": the one the model's arch reads.
    """

    kind: str = "listops"
    max_depth: int = 10
    max_args: int = 10
    min_length: int | None = None
    head: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, low in (("max_depth", 1), ("max_args", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"train.probe.{name}={value!r} must be an integer >= {low}")
        if self.head not in HEADS:
            raise ConfigError(f"train.probe.head={self.head!r} is not one of {', '.join(HEADS)}")

    def length_range(self, seq_len: int) -> tuple[int, int]:
        """The lengths of the expressions kept at `seq_len` (room for "=" after them)."""
        low = self.min_length if self.min_length is not None else seq_len // 4
        return max(low, 1), seq_len - 1

    def validate(self, seq_len: int) -> None:
        super().validate(seq_len)
        low, high = self.length_range(seq_len)
        if low > high:
            raise ConfigError(
                f"train.probe.min_length={low} leaves no room at train.seq_len={seq_len} "
                f"(expressions end at {high} tokens): lower min_length or raise train.seq_len"
            )

    def resolved_head(self, arch: str) -> str:
        """The head a model of `arch` reads ListOps with."""
        if self.head != "auto":
            return self.head
        return "pooled" if arch == "encoder" else "next_token"

    def check_arch(self, arch: str, preset: str) -> None:
        head = self.resolved_head(arch)
        if arch == "decoder" and head == "pooled":
            raise ConfigError(
                f"train.probe.head=pooled (sequence classification) needs an encoder, and "
                f"{preset} is decoder-only: its positions see only their past, so formers reads "
                f"a decoder's answer as the next token; use an encoder preset "
                f"({presets_of('encoder')}) or train.probe.head=next_token"
            )
        if arch == "encoder" and head == "next_token":
            raise ConfigError(
                f"train.probe.head=next_token on {preset}, an encoder, which would see the "
                "answer: use train.probe.head=pooled (or auto)"
            )
        if arch not in ("encoder", "decoder"):
            raise ConfigError(
                f"listops trains an encoder (classification) or a decoder (next token), and "
                f"{preset} is {arch}: use an encoder preset ({presets_of('encoder')}) or a "
                f"decoder-only one ({presets_of('decoder')})"
            )


class TooLong(Exception):
    """A tree grew past the longest length kept: abandon it."""


class ListOps(Probe):
    """ListOps' generator (module doc)."""

    vocab_size = len(VOCAB)
    pad_id = ID[PAD]
    axis = "length"
    classes = tuple(range(10))  # the answer digits, which are also their token ids
    cfg: ListOpsConfig

    def sample(self, rng: random.Random, seq_len: int) -> Sample:
        low, high = self.cfg.length_range(seq_len)
        while True:
            try:
                tree = self.tree(rng, 1, [high])
            except TooLong:
                continue
            tokens = flatten(tree)
            if len(tokens) >= low:
                ids = [ID[t] for t in tokens]
                return Sample(ids, label=evaluate(tree), point={"depth": depth(tree)})

    def tree(self, rng: random.Random, level: int, room: list[int]) -> Tree:
        """LRA's `generate_tree` from `level` (the root is 1); `room` counts the tokens left."""
        if level < self.cfg.max_depth and rng.random() <= OPERATOR_P:
            operator = rng.choice(OPERATORS)
            n_args = rng.randint(2, self.cfg.max_args)
            _take(room, 2)  # the operator and its closing bracket
            return operator, [self.tree(rng, level + 1, room) for _ in range(n_args)]
        _take(room, 1)
        return rng.randrange(10)

    def causal(self, sample: Sample) -> Sample:
        """The expression, "=", and the answer as the target of "=" (a decoder's form)."""
        targets = [IGNORE] * len(sample.inputs) + [sample.label]
        return Sample([*sample.inputs, ID[EQUALS]], targets, sample.label, sample.point)

    def eval_points(self, seq_len: int) -> list[dict[str, Any]]:
        """The length bins, each named by its longest length."""
        low, high = self.cfg.length_range(seq_len)
        edges = [low - 1 + (high - low + 1) * k // LENGTH_BINS for k in range(1, LENGTH_BINS + 1)]
        return [{"length": edge} for edge in sorted(set(edges)) if edge >= low]

    def eval_sample(self, rng: random.Random, seq_len: int, point: dict[str, Any]) -> Sample:
        return self.sample(rng, seq_len)  # the length comes out of the draw (eval_set)

    def eval_set(self, split: str, seq_len: int) -> list[tuple[dict[str, Any], list[Sample]]]:
        """`eval_samples` held-out expressions drawn as in training, grouped into length bins
        (the bins that hold any)."""
        rng = seeded_random(*point_key(split, {"kind": "listops", "seq_len": seq_len}))
        samples = [self.sample(rng, seq_len) for _ in range(self.n)]
        points = self.eval_points(seq_len)
        groups: list[tuple[dict[str, Any], list[Sample]]] = [(p, []) for p in points]
        for sample in samples:
            point, group = next((p, g) for p, g in groups if len(sample.inputs) <= p["length"])
            sample.point = dict(point)
            group.append(sample)
        return [(p, g) for p, g in groups if g]


def _take(room: list[int], n: int) -> None:
    room[0] -= n
    if room[0] < 0:
        raise TooLong


def flatten(tree: Tree) -> list[str]:
    """The tokens of `tree`: "[MAX", its arguments, "]"."""
    if isinstance(tree, int):
        return [str(tree)]
    operator, args = tree
    return [operator, *(t for arg in args for t in flatten(arg)), END]


def evaluate(tree: Tree) -> int:
    """The value of `tree` (LRA's `to_value`)."""
    if isinstance(tree, int):
        return tree
    operator, args = tree
    values = [evaluate(arg) for arg in args]
    if operator == "[MIN":
        return min(values)
    if operator == "[MAX":
        return max(values)
    if operator == "[MED":
        return int(statistics.median(values))  # LRA: int(np.median), the mean of the middle two
    return sum(values) % 10


def depth(tree: Tree) -> int:
    """How deep the operators nest (0: a lone digit, 1: a flat list)."""
    if isinstance(tree, int):
        return 0
    return 1 + max(depth(arg) for arg in tree[1])
