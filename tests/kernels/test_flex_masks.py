"""The block masks of the FlexAttention twins let through exactly the pairs the explicit kernels
attend to: the tiles (which the CUDA kernel computes and the CPU reference ignores) with their
mask_mod, against the weights the explicit kernel records (a key is seen iff its weight > 0).

Lengths are not multiples of the 128-wide tiles, and windows wide enough to make full tiles."""

from __future__ import annotations

import pytest
import torch
from flex_helpers import (
    Captured,
    assert_backward_lists_transpose,
    effective_mask,
    tiles_computed,
    tiles_with_a_pair,
)

from formers.kernels import blocks, clusters, flex, flex_clusters, flex_scores, flex_window, window
from formers.kernels.record import AttentionRecorder

B, H, T, K = 2, 4, 300, 16
needs_flex = pytest.mark.skipif(
    flex.flex_attention is None, reason="this torch has no torch.nn.attention.flex_attention"
)
pytestmark = needs_flex


def recorded(kernel, *args, **kwargs) -> torch.Tensor:
    """(B, H, T, S) bool: the keys the explicit kernel gives weight."""
    with AttentionRecorder() as recorder:
        kernel(*args, **kwargs)
    return recorder.pending[-1] > 0


def captured(monkeypatch, twin, *args, **kwargs) -> dict:
    capture = Captured()
    monkeypatch.setattr(flex, "attend", capture)
    twin(*args, **kwargs)
    (call,) = capture.calls
    assert_backward_lists_transpose(call["mask"])
    return call


def qkv():
    return tuple(torch.randn(B, H, T, K, dtype=torch.float64) for _ in range(3))


def padding() -> torch.Tensor:
    valid = torch.rand(B, T) > 0.2
    valid[1, 250:] = False  # a padded tail: rows that see nothing
    return valid


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("width, dilation", [(260, 1), (37, 3), (41, (1, 2, 3, 1))])
@pytest.mark.parametrize("padded", [False, True])
def test_band_tiles_see_the_explicit_window(monkeypatch, causal, width, dilation, padded):
    q, k, v = qkv()
    options = dict(window=width, causal=causal, dilation=dilation)
    options["key_valid"] = padding() if padded else None
    expected = recorded(window.sliding_window_attention, q, k, v, **options)
    mask = captured(monkeypatch, flex_window.sliding_window_attention, q, k, v, **options)["mask"]
    assert torch.equal(effective_mask(mask, B, H, T, T), expected)
    if not padded:  # O(T·window): only tiles that hold a visible pair are computed
        assert torch.equal(
            tiles_computed(mask)[0].expand(H, -1, -1), tiles_with_a_pair(expected[0])
        )
    if not padded and width == 260:  # the band's inside is computed without a mask_mod
        assert mask.full_kv_num_blocks.sum() > 0


@pytest.mark.parametrize("causal", [True, False])
def test_global_keys_join_every_tile_row_once(monkeypatch, causal):
    q, k, v = qkv()
    valid = padding()
    positions = torch.tensor([[0, 5, 150], [3, 299, 260]])  # 260 and 299: padding in row 1
    index = positions[:, None, :, None].expand(-1, H, -1, K)
    global_keys = (k.gather(2, index), v.gather(2, index), valid.gather(1, positions))
    options = dict(window=37, causal=causal, dilation=(1, 2, 3, 1), key_valid=valid)
    options.update(global_keys=global_keys, global_positions=positions)
    expected = recorded(window.sliding_window_attention, q, k, v, **options)
    call = captured(monkeypatch, flex_window.sliding_window_attention, q, k, v, **options)
    key_len = call["k"].shape[2]
    start = key_len - positions.shape[1]  # the global keys follow the first tile boundary
    assert start % flex.BLOCK == 0 and start >= T
    seen = effective_mask(call["mask"], B, H, T, key_len)
    assert not seen[..., T:start].any()
    # each global key at its position, as the recorder shows it
    by_position = seen[..., :T].clone()
    for g in range(positions.shape[1]):
        for b in range(B):
            by_position[b, :, :, positions[b, g]] |= seen[b, :, :, start + g]
    assert torch.equal(by_position, expected)
    assert torch.equal(call["k"][:, :, start:], global_keys[0])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("size", [50, 128])
def test_local_block_tiles_see_the_explicit_blocks(monkeypatch, causal, size):
    q, k, v = qkv()
    valid = padding()
    expected = recorded(blocks.local_attention, q, k, v, size, causal=causal, key_valid=valid)
    call = captured(
        monkeypatch, flex_window.local_attention, q, k, v, size, causal=causal, key_valid=valid
    )
    assert torch.equal(effective_mask(call["mask"], B, H, T, T), expected)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("exclude_self", [True, False])
@pytest.mark.parametrize("n_clusters, size", [(5, 8), (2, 70)])
def test_cluster_tiles_see_the_explicit_clusters(
    monkeypatch, causal, exclude_self, n_clusters, size
):
    q, _, v = qkv()
    valid = padding()
    ids = torch.randint(0, n_clusters, (B, H, T))
    ids = torch.where(valid[:, None], ids, n_clusters)  # padding: in no cluster
    # … but invalid keys inside a cluster are not seen either: token 121 of row 1 has only
    # invalid keys of its cluster within its (causal) window, so it attends to itself
    ids[1, :, 100:122] = 0
    valid[1, 100:121], valid[1, 121] = False, True
    ids[0, 0, :40] = 0  # a crowded start: a cluster over several blocks
    ids[0, 1, 7] = n_clusters - 1 if n_clusters > 1 else 0
    options = dict(causal=causal, exclude_self=exclude_self, key_valid=valid)
    args = (q, q, v, ids, n_clusters, size)
    expected = recorded(clusters.cluster_attention, *args, **options)
    call = captured(monkeypatch, flex_clusters.cluster_attention, *args, **options)
    seen_sorted = effective_mask(call["mask"], B, H, T, T)  # by place in (cluster, position)
    order = torch.argsort(ids * T + torch.arange(T), dim=-1)
    rows = order[..., :, None].expand(-1, -1, -1, T)
    seen = torch.zeros_like(seen_sorted).scatter_(2, rows, seen_sorted)  # queries back
    seen = torch.zeros_like(seen).scatter_(3, order[..., None, :].expand(-1, -1, T, -1), seen)
    assert torch.equal(seen, expected)
    # the sorted queries are the tokens in that order
    assert torch.equal(call["q"], q.gather(2, order[..., None].expand(-1, -1, -1, K)))


@pytest.mark.parametrize("memory, reach", [(0, None), (70, None), (70, 100), (300, 128)])
def test_causal_prefix_tiles_see_the_memory_mask(memory, reach):
    """Query i at position M + i sees key j iff 0 <= M + i − j (<= reach)."""
    kv_len = T + memory
    mask = flex.block_mask(flex_scores.causal_prefix(memory, reach), T, kv_len, torch.device("cpu"))
    distance = memory + torch.arange(T)[:, None] - torch.arange(kv_len)[None, :]
    expected = distance >= 0
    if reach is not None:
        expected &= distance <= reach
    assert_backward_lists_transpose(mask)
    assert torch.equal(effective_mask(mask, 1, 1, T, kv_len)[0, 0], expected)
    assert torch.equal(tiles_computed(mask)[0, 0], tiles_with_a_pair(expected))


def test_a_refinement_keeps_every_tile_and_masks_inside_them():
    static = flex_scores.causal_prefix(0)
    cpu = torch.device("cpu")
    mask = flex.block_mask(static, T, T, cpu)
    valid = torch.rand(B, T) > 0.5
    refined = flex.block_mask(static, T, T, cpu, refine=lambda b, h, q, kv: valid[b, kv])
    assert mask.full_kv_num_blocks.sum() > 0 and refined.full_kv_num_blocks is None
    assert torch.equal(tiles_computed(refined), tiles_computed(mask))  # the same tiles, partial
    assert_backward_lists_transpose(refined)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    expected = causal & valid[:, None, None, :]
    assert torch.equal(effective_mask(refined, B, 1, T, T), expected)
    # the next call's refinement reuses the cached tile lists: nothing is rebuilt or re-sorted
    again = flex.block_mask(static, T, T, cpu, refine=lambda b, h, q, kv: ~valid[b, kv])
    for name in ("kv_num_blocks", "kv_indices", "q_num_blocks", "q_indices"):
        assert getattr(again, name) is getattr(refined, name)
    assert torch.equal(effective_mask(again, B, 1, T, T), causal & ~valid[:, None, None, :])


def test_block_masks_are_built_once_per_shape_and_options():
    static = flex_scores.causal_prefix(16)
    cpu = torch.device("cpu")
    first = flex.block_mask(static, T, T + 16, cpu)
    assert flex.block_mask(flex_scores.causal_prefix(16), T, T + 16, cpu) is first
    assert flex.block_mask(flex_scores.causal_prefix(17), T, T + 17, cpu) is not first
    assert flex.block_mask(static, T + 1, T + 17, cpu) is not first


def test_block_masks_built_a_row_of_tiles_at_a_time_are_the_same(monkeypatch):
    """Long sequences build their tiles in chunks of rows (bounded memory): same tiles."""
    static = flex_window._band(37, True, (1, 2, 3, 1), torch.device("cpu"))
    whole = flex.block_mask(static, 700, 700, torch.device("cpu"))
    monkeypatch.setattr(flex, "_CACHE", {})
    monkeypatch.setattr(flex, "_BUILD_CHUNK", 1)
    chunked = flex.block_mask(static, 700, 700, torch.device("cpu"))
    assert chunked is not whole
    assert torch.equal(tiles_computed(chunked), tiles_computed(whole))
    for name in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        assert torch.equal(getattr(chunked, name), getattr(whole, name))
