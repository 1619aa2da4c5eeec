"""The routing kernels (cluster blocks, local blocks, the dense ranked twin) against a float64
reference that walks every query and lists the keys it sees, by the definition in
formers/kernels/clusters.py; and the degenerate cases that are full causal attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from formers.kernels.blocks import local_attention
from formers.kernels.clusters import (
    cluster_attention,
    cluster_layout,
    cluster_ranks,
    max_blocks,
    ranked_attention,
)
from formers.kernels.host_reads import no_host_reads


def visible_keys(clusters, key_valid, window, causal, exclude_self, none):
    """For one (row, head): the key indices each query sees. clusters: list of ids; key_valid:
    list of bools. Ranks count every member of a cluster in order of position."""
    length = len(clusters)
    rank, seen = [], {}
    for c in clusters:
        rank.append(seen.get(c, 0))
        seen[c] = seen.get(c, 0) + 1
    out = []
    for i in range(length):
        keys = []
        if clusters[i] != none:
            for j in range(length):
                if clusters[j] != clusters[i] or not key_valid[j]:
                    continue
                bi, bj = rank[i] // window, rank[j] // window
                ok = rank[j] <= rank[i] and bj >= bi - 1 if causal else abs(bj - bi) <= 1
                if ok and not (exclude_self and j == i):
                    keys.append(j)
            if exclude_self and not keys and key_valid[i]:
                keys = [i]
        out.append(keys)
    return out


def reference(q, k, v, clusters, window, causal, exclude_self, key_valid, none):
    """Float64, query by query: softmax over the visible keys, zeros when there are none."""
    batch, heads, length, dim = q.shape
    valid = torch.ones(batch, length, dtype=torch.bool) if key_valid is None else key_valid
    rows = []
    for b in range(batch):
        per_head = []
        for h in range(heads):
            keys = visible_keys(
                clusters[b, h].tolist(), valid[b].tolist(), window, causal, exclude_self, none
            )
            outs = []
            for i in range(length):
                if not keys[i]:
                    outs.append(torch.zeros(v.shape[-1], dtype=v.dtype))
                    continue
                idx = torch.tensor(keys[i])
                scores = k[b, h, idx] @ q[b, h, i] / math.sqrt(dim)
                outs.append(torch.softmax(scores, 0) @ v[b, h, idx])
            per_head.append(torch.stack(outs))
        rows.append(torch.stack(per_head))
    return torch.stack(rows)


def random_case(seed, shared=False):
    gen = torch.Generator().manual_seed(seed)
    batch, heads = 2, 3
    length = int(torch.randint(1, 26, (), generator=gen))
    window = int(torch.randint(1, 7, (), generator=gen))
    n_clusters = int(torch.randint(1, 5, (), generator=gen))
    q = torch.randn(batch, heads, length, 4, dtype=torch.float64, generator=gen)
    k = q if shared else torch.randn(batch, heads, length, 4, dtype=torch.float64, generator=gen)
    v = torch.randn(batch, heads, length, 5, dtype=torch.float64, generator=gen)
    clusters = torch.randint(0, n_clusters, (batch, heads, length), generator=gen)
    key_valid = None
    if seed % 3:
        key_valid = torch.rand(batch, length, generator=gen) > 0.25
        key_valid[0, : length // 2] = False
        clusters = clusters.masked_fill(~key_valid[:, None], n_clusters)  # padding: no cluster
    return q, k, v, clusters, n_clusters, window, key_valid


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("exclude_self", [True, False])
@pytest.mark.parametrize("blocks", ["exact", "static"])
def test_cluster_blocks_equal_the_float64_reference(seed, causal, exclude_self, blocks):
    q, k, v, clusters, n_clusters, window, key_valid = random_case(seed, shared=exclude_self)
    for x in (q, k, v):
        x.requires_grad_(True)
    with no_host_reads(blocks == "static"):  # static: as many blocks as any clusters could need
        got = cluster_attention(
            q,
            k,
            v,
            clusters,
            n_clusters,
            window,
            causal=causal,
            exclude_self=exclude_self,
            key_valid=key_valid,
        )
    want = reference(q, k, v, clusters, window, causal, exclude_self, key_valid, n_clusters)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    grad = torch.randn_like(got)
    got_grads = torch.autograd.grad(got, (q, v), grad)
    want_grads = torch.autograd.grad(want, (q, v), grad)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("length", [1, 2, 7, 16, 33])
@pytest.mark.parametrize("n_clusters", [1, 3, 8])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_the_static_number_of_blocks_is_what_the_worst_clusters_need(length, n_clusters, window):
    # worst case: as many clusters as possible hold one member each (a nearly empty block
    # apiece), the rest share cluster 0
    worst = torch.zeros(1, 1, length, dtype=torch.long)
    used = min(n_clusters + 1, length)
    worst[..., length - used + 1 :] = torch.arange(1, used)
    exact = cluster_layout(worst, n_clusters, window).block_cluster.shape[-1]
    assert exact == max_blocks(length, n_clusters, window)
    with no_host_reads():
        static = cluster_layout(worst, n_clusters, window)
    assert static.block_cluster.shape[-1] == exact
    gen = torch.Generator().manual_seed(length * 100 + n_clusters * 10 + window)
    for _ in range(20):  # and any other clusters need no more
        clusters = torch.randint(0, n_clusters + 1, (2, 3, length), generator=gen)
        needed = cluster_layout(clusters, n_clusters, window).block_cluster.shape[-1]
        assert needed <= max_blocks(length, n_clusters, window)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("causal", [True, False])
def test_local_blocks_equal_the_reference_with_one_cluster(seed, causal):
    q, k, v, _, _, window, key_valid = random_case(seed)
    got = local_attention(q, k, v, window, causal=causal, key_valid=key_valid)
    ones = torch.zeros(q.shape[:-1], dtype=torch.long)  # padding keeps its position here
    want = reference(q, k, v, ones, window, causal, False, key_valid, none=-1)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("causal", [True, False])
def test_the_dense_ranked_twin_equals_the_reference(seed, causal):
    q, k, v, clusters, n_clusters, window, key_valid = random_case(seed, shared=True)
    ranks = cluster_ranks(clusters, n_clusters).rank
    ok = torch.ones(q.shape[0], q.shape[2], dtype=torch.bool) if key_valid is None else key_valid
    want = reference(q, k, v, clusters, window, causal, True, key_valid, n_clusters)
    got = ranked_attention(
        q,
        k,
        v,
        clusters,
        ranks,
        clusters,
        ranks,
        ok[:, None],
        window,
        causal=causal,
        exclude_self=True,
    )
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    # decoding: the last queries alone against every key give their rows of the full result
    tail = max(1, q.shape[2] // 3)
    part = ranked_attention(
        q[:, :, -tail:],
        k,
        v,
        clusters[..., -tail:],
        ranks[..., -tail:],
        clusters,
        ranks,
        ok[:, None],
        window,
        causal=causal,
        exclude_self=True,
    )
    torch.testing.assert_close(part, want[:, :, -tail:], atol=1e-12, rtol=1e-12)


def test_ranks_count_earlier_members_of_the_same_cluster():
    clusters = torch.tensor([[[2, 0, 2, 1, 0, 2, 3]]])  # 3 = no cluster when n_clusters = 3
    ranks = cluster_ranks(clusters, 3)
    assert ranks.rank.tolist() == [[[0, 0, 1, 0, 1, 2, 0]]]
    assert ranks.counts.tolist() == [[[2, 1, 3, 1]]]


@pytest.mark.parametrize("length", [1, 7, 16])
def test_one_cluster_covering_every_token_is_full_causal_attention(length):
    torch.manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, 8, dtype=torch.float64) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    one = torch.zeros(2, 3, length, dtype=torch.long)
    routed = cluster_attention(q, k, v, one, 1, length, causal=True, exclude_self=False)
    torch.testing.assert_close(routed, full, atol=1e-12, rtol=1e-12)
    local = local_attention(q, k, v, length, causal=True)
    torch.testing.assert_close(local, full, atol=1e-12, rtol=1e-12)
    both_ways = cluster_attention(q, k, v, one, 1, length, causal=False, exclude_self=False)
    torch.testing.assert_close(
        both_ways, F.scaled_dot_product_attention(q, k, v), atol=1e-12, rtol=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_query_alone_in_its_cluster_attends_to_itself_and_padding_to_nothing(dtype):
    q = torch.randn(2, 2, 6, 8, dtype=dtype, requires_grad=True)
    v = torch.randn(2, 2, 6, 8, dtype=dtype, requires_grad=True)
    alone = torch.arange(6).repeat(2, 2, 1)  # every token its own cluster
    key_valid = torch.ones(2, 6, dtype=torch.bool)
    key_valid[1] = False  # a row of padding only: no cluster
    alone = alone.masked_fill(~key_valid[:, None], 6)
    out = cluster_attention(
        q, q, v, alone, 6, 2, causal=True, exclude_self=True, key_valid=key_valid
    )
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], v[0].detach())  # itself, exactly its value
    assert (out[1] == 0).all()
    out.float().sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(v.grad).all()


def test_no_tensor_grows_with_the_square_of_the_length():
    """Blocks of 8 over 512 tokens: nothing allocated may hold T² = 262,144 elements."""
    length, window = 512, 8
    q = torch.randn(1, 1, length, 4)
    clusters = torch.randint(0, 8, (1, 1, length))
    seen = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                seen.append(out.numel())
            return out

    with Spy():
        cluster_attention(q, q, q, clusters, 8, window, causal=True, exclude_self=True)
    assert max(seen) < length * length // 4


def test_routed_dropout_is_drawn_per_pair_of_positions_so_later_tokens_cannot_move_it():
    torch.manual_seed(5)
    length, t = 40, 17
    q, v = torch.randn(2, 2, length, 8), torch.randn(2, 2, length, 8)
    clusters = torch.randint(0, 3, (2, 2, length))
    later = clusters.clone()
    later[..., t + 1 :] = torch.randint(0, 3, (2, 2, length - t - 1))  # other blocks after t

    def run(c):
        torch.manual_seed(9)
        return cluster_attention(q, q, v, c, 3, 4, causal=True, exclude_self=True, dropout=0.5)

    base = run(clusters)
    torch.testing.assert_close(run(later)[:, :, : t + 1], base[:, :, : t + 1], atol=1e-6, rtol=0)
    plain = cluster_attention(q, q, v, clusters, 3, 4, causal=True, exclude_self=True)
    assert not torch.allclose(base, plain, atol=1e-3)  # dropout did act
    keep = routed_dropout_keep_fraction(0.3)
    assert abs(keep - 0.7) < 0.01


def routed_dropout_keep_fraction(p):
    from formers.kernels.clusters import pair_dropout

    positions = torch.arange(64 * 64).view(1, 1, 64, 64)
    return pair_dropout(123, positions, positions.flip(-1), p).float().mean().item()
