"""Language-model batching: contiguous training streams and exact evaluation.

Transformer-XL carries memory from one segment to the next, so row b of batch i+1 must continue
the text exactly where row b of batch i stopped (Dai et al. 2019, §3.2; LMOrderedIterator in
kimiyoung/transformer-xl). Evaluation scores every token of a split exactly once.

Shapes: B batch rows (per rank), T segment length, L window length (context + scored).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from formers.data.errors import DataError

IGNORE_INDEX = -100  # target of unscored positions; F.cross_entropy's default ignore_index


def _check_tokens(tokens: torch.Tensor) -> torch.Tensor:
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor of ids, got shape {tuple(tokens.shape)}")
    return tokens.long()


class StreamBatcher:
    """Infinite iterator of `(inputs, targets)`, each [B, T], over contiguous token streams.

    The tokens are cut into `batch_size * world_size` equal streams (the remainder at the end
    is dropped, as in Transformer-XL); rank r owns rows [r*B, (r+1)*B). Batch i holds positions
    [i*T, (i+1)*T) of each stream, targets shifted by one. Each epoch has `len(self)` batches of
    the same shape; the last < T positions of each stream that do not fill a batch are skipped.
    After the last batch it wraps to the start, and `stream_restarted` is True for the first
    batch of every epoch, so the trainer resets memory there. After `load_state_dict` the next
    batch is exactly the one the saved run would have produced (the model's memory is not part
    of this state: reset it when resuming mid-epoch).
    """

    def __init__(
        self,
        tokens: torch.Tensor,
        batch_size: int,
        seq_len: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        """
        Args:
            tokens: 1-D int64 ids of one split, shape (N,).
            batch_size: rows per batch on this rank (B).
            seq_len: tokens per row per batch (T).
            rank, world_size: DDP position; each rank gets disjoint rows.
        """
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} must be in [0, world_size={world_size})")
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size={batch_size} and seq_len={seq_len} must be >= 1")
        tokens = _check_tokens(tokens)
        n_streams = batch_size * world_size
        stream_len = len(tokens) // n_streams
        if stream_len < seq_len + 1:
            raise DataError(
                f"{len(tokens):,} tokens are too few for {n_streams} streams (batch_size="
                f"{batch_size} x world_size={world_size}) of at least seq_len+1={seq_len + 1} "
                "tokens; lower batch_size or seq_len, or use a larger split."
            )
        streams = tokens[: n_streams * stream_len].view(n_streams, stream_len)
        self.data = streams[rank * batch_size : (rank + 1) * batch_size]  # (B, stream_len)
        self.batch_size, self.seq_len = batch_size, seq_len
        self.rank, self.world_size = rank, world_size
        self.n_tokens = len(tokens)
        self.batches_done = 0
        self.stream_restarted = False

    def __len__(self) -> int:
        """Batches per epoch."""
        return (self.data.shape[1] - 1) // self.seq_len

    @property
    def epoch(self) -> int:
        """The epoch of the batch most recently returned (0 before the first)."""
        return max(self.batches_done - 1, 0) // len(self)

    @property
    def position(self) -> int:
        """Offset within each stream at which the next batch starts."""
        return (self.batches_done % len(self)) * self.seq_len

    def __iter__(self) -> StreamBatcher:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        p, t = self.position, self.seq_len
        self.stream_restarted = p == 0
        self.batches_done += 1
        inputs = self.data[:, p : p + t].clone()  # (B, T); clone: never hand out corpus views
        targets = self.data[:, p + 1 : p + 1 + t].clone()  # (B, T)
        return inputs, targets

    @property
    def n_streams(self) -> int:
        """Streams over all processes (B×W)."""
        return self.batch_size * self.world_size

    def state_dict(self) -> dict[str, Any]:
        return {
            "batches_done": self.batches_done,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "world_size": self.world_size,
            "n_tokens": self.n_tokens,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Any rank loads rank 0's state: every process is at the same batch of its streams.
        for key in ("seq_len", "n_tokens"):
            if state[key] != getattr(self, key):
                raise DataError(
                    f"cannot resume the batcher: saved {key}={state[key]} but this run has "
                    f"{key}={getattr(self, key)}; resume with the same data and batch settings."
                )
        saved_streams = state["batch_size"] * state["world_size"]
        if saved_streams != self.n_streams:
            raise DataError(
                f"cannot resume the batcher: the run read {saved_streams} streams "
                f"({state['world_size']} processes x batch_size {state['batch_size']}), this "
                f"one {self.n_streams} ({self.world_size} x {self.batch_size}); set "
                f"train.batch_size to {saved_streams} / processes to continue every stream"
            )
        self.batches_done = int(state["batches_done"])
        self.stream_restarted = False


@dataclass
class EvalBatch:
    """One evaluation batch; only positions with `score_mask` count toward the loss.

    `targets` is `IGNORE_INDEX` (-100) wherever `score_mask` is False (context and padding), so
    `F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")` sums exactly the
    scored positions. `stream_restarted` says a memory-carrying model must reset its memory.
    """

    inputs: torch.Tensor  # (B, L) token ids, 0 at padding
    targets: torch.Tensor  # (B, L) next-token ids, IGNORE_INDEX where not scored
    score_mask: torch.Tensor  # (B, L) bool
    n_scored: int
    stream_restarted: bool


def _stack(rows: list[tuple[torch.Tensor, torch.Tensor, int]], restarted: bool) -> EvalBatch:
    """Right-pad (inputs, targets, first scored index) rows to one [B, L] batch."""
    width = max(len(x) for x, _, _ in rows)
    inputs = torch.zeros(len(rows), width, dtype=torch.long)
    targets = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for b, (x, y, first) in enumerate(rows):
        inputs[b, : len(x)] = x
        targets[b, first : len(y)] = y[first:]
    mask = targets != IGNORE_INDEX
    return EvalBatch(inputs, targets, mask, int(mask.sum()), restarted)


def eval_segments(
    tokens: torch.Tensor, seq_len: int, context_len: int = 0, batch_size: int = 1
) -> Iterator[EvalBatch]:
    """Independent windows that together score every target position 1..N-1 exactly once.

    Token 0 has no prediction (nothing precedes it), so N tokens give N-1 scored targets. Window
    k scores targets [1 + k*T, 1 + (k+1)*T) and sees up to `context_len` earlier tokens as
    unscored context (a sliding-window evaluation); windows are right-padded to the longest in
    the batch. No memory is carried: every batch has `stream_restarted=True`.

    Args:
        tokens: 1-D ids of the split, shape (N,).
        seq_len: scored tokens per window (T).
        context_len: extra tokens of left context per window (C); windows are up to T + C long.
        batch_size: windows per batch (B).
    """
    tokens = _check_tokens(tokens)
    n = len(tokens)
    if n < 2:
        raise DataError(f"a split of {n} token(s) has nothing to score; it needs at least 2.")
    rows = []
    for start in range(1, n, seq_len):  # first scored target position of each window
        end = min(start + seq_len, n)
        ctx = min(context_len, start - 1)
        x = tokens[start - 1 - ctx : end - 1]  # (L,)
        y = tokens[start - ctx : end]  # (L,)
        rows.append((x, y, ctx))
        if len(rows) == batch_size:
            yield _stack(rows, True)
            rows = []
    if rows:
        yield _stack(rows, True)


def eval_streams(tokens: torch.Tensor, seq_len: int, batch_size: int = 1) -> Iterator[EvalBatch]:
    """Contiguous streams for memory-carrying models, scoring targets 1..N-1 exactly once.

    Like StreamBatcher the N-1 (input, target) pairs are cut into B contiguous rows of
    m = (N-1) // B, but nothing is dropped: the r = (N-1) % B < B leftover pairs extend the last
    row, which they continue. Batches step through the rows T positions at a time (the last is
    shorter); once a row is exhausted its remaining positions are padding with
    `score_mask=False`. Padding always comes after a row's last real token, so even with memory
    it cannot affect a scored prediction. Memory is reset only at the first batch.

    Args:
        tokens: 1-D ids of the split, shape (N,).
        seq_len: positions per batch (T).
        batch_size: number of streams (B); lowered to N-1 for tiny splits.
    """
    tokens = _check_tokens(tokens)
    n_pairs = len(tokens) - 1
    if n_pairs < 1:
        raise DataError(f"a split of {len(tokens)} token(s) has nothing to score; it needs 2+.")
    b = min(batch_size, n_pairs)
    m = n_pairs // b
    starts = [i * m for i in range(b)]
    lengths = [m] * (b - 1) + [n_pairs - (b - 1) * m]
    for p in range(0, max(lengths), seq_len):
        rows = []
        for s, length in zip(starts, lengths, strict=True):
            lo, hi = s + min(p, length), s + min(p + seq_len, length)
            rows.append((tokens[lo:hi], tokens[lo + 1 : hi + 1], 0))
        yield _stack(rows, p == 0)  # width min(T, remaining): the last row is the longest
