"""Stream contiguity, exact resume, DDP slices, and every-token-once evaluation, by counting.

With tokens = arange(N) every id is its own position, so batches reveal where they came from.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from formers.data import IGNORE_INDEX, DataError, StreamBatcher, eval_segments, eval_streams


def test_stream_batches_are_contiguous_per_row() -> None:
    n, b, t = 1003, 4, 7
    batcher = StreamBatcher(torch.arange(n), batch_size=b, seq_len=t)
    stream_len = n // b  # 250; the last 3 tokens are dropped
    assert len(batcher) == (stream_len - 1) // t == 35
    prev = None
    for i in range(len(batcher)):
        x, y = next(batcher)
        assert x.shape == y.shape == (b, t)
        assert torch.equal(y, x + 1)  # targets are the inputs shifted by one
        assert batcher.stream_restarted == (i == 0) and batcher.epoch == 0
        if prev is None:
            assert x[:, 0].tolist() == [r * stream_len for r in range(b)]
        else:
            assert torch.equal(x[:, 0], prev[:, -1] + 1)  # row b continues where it stopped
        prev = x
    assert int(prev.max()) < b * stream_len


def test_stream_wraps_to_the_next_epoch() -> None:
    batcher = StreamBatcher(torch.arange(200), batch_size=2, seq_len=9)
    first = [next(batcher) for _ in range(len(batcher))]
    x, _ = next(batcher)
    assert batcher.stream_restarted and batcher.epoch == 1
    assert torch.equal(x, first[0][0])
    next(batcher)
    assert not batcher.stream_restarted and batcher.epoch == 1


def test_resume_from_state_dict_is_exact() -> None:
    tokens = torch.randint(0, 50, (5000,))
    a = StreamBatcher(tokens, batch_size=3, seq_len=16)
    for _ in range(len(a) + 5):  # into the second epoch
        next(a)
    state = a.state_dict()
    b = StreamBatcher(tokens, batch_size=3, seq_len=16)
    b.load_state_dict(state)
    assert (b.epoch, b.position) == (a.epoch, a.position) == (1, 5 * 16)
    for _ in range(2 * len(a)):
        (xa, ya), (xb, yb) = next(a), next(b)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert a.stream_restarted == b.stream_restarted
    with pytest.raises(DataError, match="saved seq_len=16 but this run has seq_len=8"):
        StreamBatcher(tokens, batch_size=3, seq_len=8).load_state_dict(state)


def test_ddp_ranks_get_disjoint_rows_that_cover_the_single_process_batch() -> None:
    tokens, b, w, t = torch.arange(10_000), 2, 3, 11
    whole = StreamBatcher(tokens, batch_size=b * w, seq_len=t)
    ranks = [StreamBatcher(tokens, batch_size=b, seq_len=t, rank=r, world_size=w) for r in range(w)]
    assert {len(r) for r in ranks} == {len(whole)}  # every rank takes the same number of steps
    for _ in range(len(whole)):
        x_all, y_all = next(whole)
        parts = [next(r) for r in ranks]
        assert torch.equal(torch.cat([x for x, _ in parts]), x_all)
        assert torch.equal(torch.cat([y for _, y in parts]), y_all)
    seen = [set(r.data.flatten().tolist()) for r in ranks]
    for s1, s2 in itertools.combinations(seen, 2):
        assert not s1 & s2


def test_stream_batcher_rejects_bad_settings() -> None:
    with pytest.raises(DataError, match="too few for 8 streams"):
        StreamBatcher(torch.arange(50), batch_size=4, seq_len=10, world_size=2)
    with pytest.raises(ValueError, match="rank=2"):
        StreamBatcher(torch.arange(50), batch_size=1, seq_len=4, rank=2, world_size=2)


def count_scored(batches) -> torch.Tensor:
    """How often each position is scored; also checks each row against its inputs."""
    counts = None
    for batch in batches:
        assert batch.inputs.shape == batch.targets.shape == batch.score_mask.shape
        assert torch.equal(batch.score_mask, batch.targets != IGNORE_INDEX)
        assert batch.n_scored == int(batch.score_mask.sum())
        scored = batch.targets[batch.score_mask]
        assert torch.equal(scored, batch.inputs[batch.score_mask] + 1)
        c = torch.bincount(scored, minlength=N)
        counts = c if counts is None else counts + c
    return counts


N = 997


@pytest.mark.parametrize(
    ("seq_len", "context_len", "batch_size"),
    [(10, 0, 1), (10, 5, 3), (7, 20, 4), (1000, 0, 2), (1, 1, 8), (33, 33, 5)],
)
def test_eval_segments_score_every_token_once(seq_len, context_len, batch_size) -> None:
    batches = list(eval_segments(torch.arange(N), seq_len, context_len, batch_size))
    counts = count_scored(batches)
    assert counts[0] == 0 and bool((counts[1:] == 1).all())  # token 0 has no prediction
    assert all(b.stream_restarted for b in batches)
    for batch in batches:
        for row_in, row_mask in zip(batch.inputs, batch.score_mask, strict=True):
            real = row_in[: int(row_mask.nonzero().max()) + 1]  # padding only at the right
            assert torch.equal(real, torch.arange(int(real[0]), int(real[0]) + len(real)))
            context = int(row_mask.long().argmax())  # unscored tokens before the first scored
            first_scored_input = int(real[context])
            assert context == min(context_len, first_scored_input)  # all context available
            assert int(row_mask.sum()) <= seq_len


def test_eval_segments_loss_sums_only_scored_positions() -> None:
    tokens = torch.randint(0, 11, (300,))
    n = 0
    for batch in eval_segments(tokens, 16, context_len=8, batch_size=4):
        logits = torch.randn(*batch.inputs.shape, 11)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="sum")
        logp = logits.log_softmax(-1).gather(-1, batch.targets.clamp(min=0)[..., None])[..., 0]
        assert torch.allclose(loss, -(logp[batch.score_mask]).sum())
        n += batch.n_scored
    assert n == 299


@pytest.mark.parametrize(
    ("seq_len", "batch_size"), [(10, 1), (10, 3), (7, 6), (50, 996), (3, 2000)]
)
def test_eval_streams_score_every_token_once_contiguously(seq_len, batch_size) -> None:
    batches = list(eval_streams(torch.arange(N), seq_len, batch_size))
    counts = count_scored(batches)
    assert counts[0] == 0 and bool((counts[1:] == 1).all())
    assert [b.stream_restarted for b in batches] == [True] + [False] * (len(batches) - 1)
    rows = min(batch_size, N - 1)
    assert {b.inputs.shape[0] for b in batches} == {rows}
    # Each row's real inputs, read batch after batch, form one contiguous run of the text.
    for r in range(rows):
        seq = torch.cat([b.inputs[r][b.score_mask[r]] for b in batches])
        assert torch.equal(seq, torch.arange(int(seq[0]), int(seq[0]) + len(seq)))
        # Padding only ever follows the row's last real token.
        flags = torch.cat([b.score_mask[r] for b in batches]).long()
        assert bool((flags[:-1] >= flags[1:]).all())


def test_eval_needs_two_tokens() -> None:
    with pytest.raises(DataError, match="nothing to score"):
        list(eval_segments(torch.arange(1), 4))
    with pytest.raises(DataError, match="nothing to score"):
        list(eval_streams(torch.arange(1), 4))
    (batch,) = eval_streams(torch.arange(2), 4, batch_size=3)
    assert batch.targets.tolist() == [[1]]
