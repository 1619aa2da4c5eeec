"""Batches of sentence pairs for translation: length buckets under a token budget.

A batch is as many pairs as fit `max_tokens`, counted on each side separately as rows x the
longest padded row (the source as is; the target with its BOS or EOS), so padding, not just real
tokens, is paid for, as in fairseq's `--max-tokens` and Vaswani et al. §5.1 ("batched together
by approximate sequence length ... approximately 25000 source tokens and 25000 target tokens").

Training (`TranslationBatcher`): every epoch the pairs are sorted by (target length, source
length), ties in a random order, cut greedily into batches, and the batches shuffled; all of it
from a private generator seeded by (seed, epoch), never the global RNG. Ties have equal lengths,
so the cut points, and the number of batches, are the same in every epoch.

Evaluation (`eval_translation_batches`): every pair once, sorted by (source length, target
length, corpus index), each batch carrying the corpus index of its rows for `in_corpus_order`.

A pair too long for the budget on its own is an error (naming it and the flag to raise), never
skipped: skipping would silently change the training data and drop test sentences from BLEU.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch

from formers.data.errors import DataError

T = TypeVar("T")


@dataclass
class TranslationBatch:
    """Padded sentence pairs; every tensor has one row per pair.

    `tgt_in` is BOS + target and `tgt_out` is target + EOS, both padded with the pad id, so
    `F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=pad_id)` scores
    exactly the `n_tgt_tokens` real target tokens (EOS included).
    """

    src: torch.Tensor  # (B, S) source ids, pad after the sentence
    tgt_in: torch.Tensor  # (B, T) decoder input: BOS, target ids, pad
    tgt_out: torch.Tensor  # (B, T) decoder target: target ids, EOS, pad
    n_tgt_tokens: int  # (tgt_out != pad).sum()
    index: torch.Tensor  # (B,) position of each pair in the corpus lists

    @property
    def tokens(self) -> int:
        """Target tokens the loss scores (the trainer's throughput and `tokens_seen`)."""
        return self.n_tgt_tokens

    def to(self, device: torch.device | str) -> TranslationBatch:
        """The batch with its tensors on `device` (`index` stays where it is); the copies are
        queued without the host waiting for the device (non_blocking)."""
        return TranslationBatch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.n_tgt_tokens,
            self.index,
        )


class _Pairs:
    """Checked source/target id lists with their lengths, shared by training and evaluation."""

    def __init__(
        self,
        source: Sequence[torch.Tensor],
        target: Sequence[torch.Tensor],
        pad_id: int,
        bos_id: int,
        eos_id: int,
        max_tokens: int,
    ) -> None:
        if len(source) != len(target):
            raise DataError(
                f"{len(source):,} source sentences but {len(target):,} target sentences; give "
                "aligned lists (entry i of one translates entry i of the other)."
            )
        if not source:
            raise DataError("no sentence pairs to batch; give a non-empty split.")
        if max_tokens < 1:
            raise ValueError(f"max_tokens={max_tokens} must be >= 1")
        self.source = [_ids(s, i, "source") for i, s in enumerate(source)]
        self.target = [_ids(t, i, "target") for i, t in enumerate(target)]
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.max_tokens = max_tokens
        self.src_len = torch.tensor([len(s) for s in self.source], dtype=torch.int64)
        # A target row is one longer than the sentence: tgt_in has BOS, tgt_out has EOS.
        self.tgt_len = torch.tensor([len(t) + 1 for t in self.target], dtype=torch.int64)
        self._check_contents()

    def _check_contents(self) -> None:
        empty = torch.nonzero(self.src_len == 0).flatten()
        if len(empty):
            raise DataError(
                f"pair {int(empty[0])} has an empty source sentence ({len(empty)} such pairs); "
                "an encoder needs at least one source token, so drop those pairs."
            )
        for side, seqs in (("source", self.source), ("target", self.target)):
            if not bool((torch.cat(seqs) == self.pad_id).any()):  # one pass over all ids
                continue
            has_pad = [i for i, s in enumerate(seqs) if bool((s == self.pad_id).any())]
            raise DataError(
                f"{side} sentence {has_pad[0]} contains the pad id {self.pad_id} "
                f"({len(has_pad)} such sentences), which batching would mask out; encode "
                "the text with the tokenizer whose pad_id you pass."
            )
        too_long = torch.nonzero(
            (self.src_len > self.max_tokens) | (self.tgt_len > self.max_tokens)
        ).flatten()
        if len(too_long):
            i = int(too_long[0])
            need = int(torch.maximum(self.src_len, self.tgt_len).max())
            raise DataError(
                f"pair {i} has {int(self.src_len[i])} source and {int(self.tgt_len[i]) - 1} "
                f"target tokens (+1 for BOS/EOS), more than max_tokens={self.max_tokens} allows "
                f"on one side ({len(too_long)} such pairs); raise train.max_tokens to at least "
                f"{need}."
            )

    def fingerprint(self) -> int:
        """CRC-32 of all lengths: a resumed batcher must see the same pairs."""
        both = torch.stack([self.src_len, self.tgt_len]).numpy().astype(np.int64)
        return zlib.crc32(both.tobytes())

    def batch_sizes(self, order: torch.Tensor) -> list[int]:
        """Rows per batch when `order` is cut greedily: each batch takes pairs while both sides'
        rows x longest row stay within max_tokens."""
        sizes: list[int] = []
        n = longest_src = longest_tgt = 0
        for s, t in zip(self.src_len[order].tolist(), self.tgt_len[order].tolist(), strict=True):
            longest_s, longest_t = max(longest_src, s), max(longest_tgt, t)
            if (n + 1) * max(longest_s, longest_t) <= self.max_tokens:
                n, longest_src, longest_tgt = n + 1, longest_s, longest_t
            else:
                sizes.append(n)
                n, longest_src, longest_tgt = 1, s, t
        sizes.append(n)
        return sizes

    def collate(self, index: torch.Tensor) -> TranslationBatch:
        rows = index.tolist()
        b = len(rows)
        src = torch.full((b, int(self.src_len[index].max())), self.pad_id, dtype=torch.int64)
        width = int(self.tgt_len[index].max())
        tgt_in = torch.full((b, width), self.pad_id, dtype=torch.int64)
        tgt_out = torch.full((b, width), self.pad_id, dtype=torch.int64)
        tgt_in[:, 0] = self.bos_id
        for row, i in enumerate(rows):
            s, t = self.source[i], self.target[i]
            src[row, : len(s)] = s
            tgt_in[row, 1 : len(t) + 1] = t
            tgt_out[row, : len(t)] = t
            tgt_out[row, len(t)] = self.eos_id
        n_tgt = int(self.tgt_len[index].sum())
        return TranslationBatch(src, tgt_in, tgt_out, n_tgt, index.clone())


def _ids(seq: torch.Tensor, i: int, side: str) -> torch.Tensor:
    if seq.dim() != 1 or seq.dtype.is_floating_point or seq.dtype == torch.bool:
        raise DataError(
            f"{side} entry {i} is a {seq.dtype} tensor of shape {tuple(seq.shape)}; give 1-D "
            "integer token ids per sentence."
        )
    return seq.long()


def _sort_order(first: torch.Tensor, second: torch.Tensor, tie_order: torch.Tensor) -> torch.Tensor:
    """Indices sorted by (first, second); pairs with equal lengths keep `tie_order`'s order."""
    key = first * (int(second.max()) + 1) + second
    return tie_order[torch.sort(key[tie_order], stable=True).indices]


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A private generator for one epoch, from numpy's SeedSequence over (seed, epoch).

    SeedSequence mixes the pair into well-separated 64-bit seeds, so neighbouring seeds or
    epochs do not give related streams.
    """
    if seed < 0:
        raise ValueError(f"seed={seed} must be >= 0")
    state = np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


class TranslationBatcher:
    """Infinite iterator of training `TranslationBatch`es, length-bucketed under `max_tokens`.

    Each epoch re-sorts the pairs with random tie order, cuts them into batches (the same cut
    points every epoch) and shuffles the batches, all from `epoch_generator(seed, epoch)`. With
    DDP, the shuffled batches are truncated to a multiple of `world_size` and rank r takes
    batches r, r + world_size, ...; so every rank takes `len(self)` batches an epoch and the
    ranks never share a pair. After `load_state_dict` the next batch is exactly the one the saved
    batcher would have returned next.
    """

    def __init__(
        self,
        source: Sequence[torch.Tensor],
        target: Sequence[torch.Tensor],
        pad_id: int,
        bos_id: int,
        eos_id: int,
        max_tokens: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        """
        Args:
            source, target: aligned lists of 1-D int64 ids per sentence, without BOS/EOS.
            pad_id, bos_id, eos_id: the tokenizer's special ids.
            max_tokens: per side, rows x longest padded row of a batch may not exceed this.
            rank, world_size: DDP position; ranks take disjoint batches.
            seed: seeds the per-epoch shuffles (with the epoch number).
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        self.pairs = _Pairs(source, target, pad_id, bos_id, eos_id, max_tokens)
        self.rank, self.world_size, self.seed = rank, world_size, seed
        epoch_generator(seed, 0)  # reject a bad seed now, not at the first batch
        # Cut points depend only on the sorted length sequence, which ties do not change.
        any_order = torch.arange(len(self.pairs.source))
        self.sizes = self.pairs.batch_sizes(
            _sort_order(self.pairs.tgt_len, self.pairs.src_len, any_order)
        )
        if len(self.sizes) < world_size:
            raise DataError(
                f"max_tokens={max_tokens} packs the {len(any_order):,} pairs into only "
                f"{len(self.sizes)} batches, fewer than world_size={world_size}; lower "
                "train.max_tokens or use fewer processes."
            )
        self.batches_done = 0
        self._epoch_batches: tuple[int, list[torch.Tensor]] | None = None

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return len(self.sizes) // self.world_size

    @property
    def epoch(self) -> int:
        """The epoch of the batch most recently returned (0 before the first)."""
        return max(self.batches_done - 1, 0) // len(self)

    def batches_of_epoch(self, epoch: int) -> list[torch.Tensor]:
        """This rank's batches of `epoch`, in order, as index tensors into the corpus lists."""
        if self._epoch_batches is None or self._epoch_batches[0] != epoch:
            g = epoch_generator(self.seed, epoch)
            ties = torch.randperm(len(self.pairs.source), generator=g)
            order = _sort_order(self.pairs.tgt_len, self.pairs.src_len, ties)
            batches = order.split(self.sizes)
            shuffled = torch.randperm(len(batches), generator=g)[: len(self) * self.world_size]
            mine = [batches[int(k)] for k in shuffled[self.rank :: self.world_size]]
            self._epoch_batches = (epoch, mine)
        return self._epoch_batches[1]

    def __iter__(self) -> TranslationBatcher:
        return self

    def __next__(self) -> TranslationBatch:
        epoch, position = divmod(self.batches_done, len(self))
        index = self.batches_of_epoch(epoch)[position]
        self.batches_done += 1
        return self.pairs.collate(index)

    def state_dict(self) -> dict[str, Any]:
        return {
            "batches_done": self.batches_done,
            "seed": self.seed,
            "max_tokens": self.pairs.max_tokens,
            "world_size": self.world_size,
            "n_pairs": len(self.pairs.source),
            "lengths_crc32": self.pairs.fingerprint(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # The rank may differ (every rank may load rank 0's state); data and layout may not.
        mine = self.state_dict()
        for key in ("seed", "max_tokens", "world_size", "n_pairs", "lengths_crc32"):
            if state[key] != mine[key]:
                raise DataError(
                    f"cannot resume the translation batcher: saved {key}={state[key]} but this "
                    f"run has {key}={mine[key]}; resume with the same data and batch settings."
                )
        self.batches_done = int(state["batches_done"])


def eval_translation_batches(
    source: Sequence[torch.Tensor],
    target: Sequence[torch.Tensor],
    pad_id: int,
    bos_id: int,
    eos_id: int,
    max_tokens: int,
) -> Iterator[TranslationBatch]:
    """Every pair exactly once, sorted by (source length, target length, index), for evaluation.

    Sorting by the source first suits generation, which sees only the source. Each batch's
    `index` says where its rows sit in the corpus; `in_corpus_order` puts outputs back.

    Args:
        source, target: aligned lists of 1-D int64 ids per sentence, without BOS/EOS.
        pad_id, bos_id, eos_id: the tokenizer's special ids.
        max_tokens: per side, rows x longest padded row of a batch may not exceed this.
    """
    pairs = _Pairs(source, target, pad_id, bos_id, eos_id, max_tokens)
    order = _sort_order(pairs.src_len, pairs.tgt_len, torch.arange(len(pairs.source)))
    for index in order.split(pairs.batch_sizes(order)):
        yield pairs.collate(index)


def in_corpus_order(indices: Sequence[int], items: Sequence[T]) -> list[T]:
    """Put per-pair outputs gathered batch by batch back in corpus order.

    Args:
        indices: the concatenated `batch.index` values of the batches, in the order they came.
        items: one output per pair, in the same order as `indices`.
    """
    indices = [int(i) for i in indices]
    if len(indices) != len(items) or sorted(indices) != list(range(len(items))):
        raise ValueError(
            f"{len(items)} outputs for indices that are not a permutation of 0..{len(items) - 1}; "
            "gather exactly one output per pair of every batch."
        )
    out: list[Any] = [None] * len(items)
    for i, item in zip(indices, items, strict=True):
        out[i] = item
    return out
