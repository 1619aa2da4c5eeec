"""The recorded attention map of every attention kind: its non-zero pattern is the kind's mask.

Each case reads a short text with a tiny fresh model inside the recorder, whatever path its
kernels take (blocks, residues of a dilation, clusters, compressed rows, memory), and compares
which keys got a weight with the keys that kind lets each query see, built here from its rule.
"""

from __future__ import annotations

import pytest
import torch

from formers.infer.attention_map import preset_model, record_attention
from formers.kernels.clusters import cluster_ranks, ranked_mask
from formers.kernels.record import AttentionRecorder, recording, report, take
from formers.registry import ATTENTION
from formers.variants.xl.mask import xl_mask

TEXT = "ROMEO: What, ho! apothecary! Come hither, man."  # 46 bytes
TINY = {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64}


def tril(length: int) -> torch.Tensor:
    return torch.ones(length, length, dtype=torch.bool).tril()


def recorded(preset: str, overrides: dict, layer: int = 1, text: str = TEXT):
    model, tokenizer = preset_model(preset, {**TINY, **overrides})
    return model, record_attention(model, tokenizer, text, layer)


def visible(weights: torch.Tensor) -> torch.Tensor:
    return weights != 0


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [("vanilla", {}), ("primer-ez", {}), ("switch", {})],
)
def test_full_causal_attention_sees_the_lower_triangle(preset, overrides):
    _, found = recorded(preset, overrides)
    length = len(found.queries)
    assert found.weights.shape == (4, length, length)
    assert torch.equal(visible(found.weights), tril(length).expand(4, -1, -1))


def test_primer_keys_reach_the_tokens_of_their_convolution():
    _, found = recorded("primer-ez", {"attention.kernel_size": 3})
    from formers.infer.attention_map import token_reach

    reach = token_reach(found.weights, found.tokens_per_key)
    length = len(found.queries)
    # key j reads tokens j − 2 … j: a causal query i reaches tokens 0 … i, no further
    assert found.tokens_per_key == 3
    assert torch.equal(visible(reach), tril(length).expand(4, -1, -1))
    # token 0 gets the weights of keys 0, 1 and 2
    assert torch.allclose(reach[..., 0], found.weights[..., :3].sum(-1))


@pytest.mark.parametrize("preset", ["transformer-xl", "primer-xl"])
def test_xl_sees_its_memory_and_the_causal_segment(preset):
    _, found = recorded(preset, {"attention.mem_len": 8})
    length = len(found.queries)  # the second segment
    memory = found.weights.shape[-1] - length
    assert memory == 8
    expected = xl_mask(length, memory).allowed
    assert torch.equal(visible(found.weights), expected.expand(4, -1, -1))


def test_topk_keeps_exactly_k_keys_of_every_row_that_has_k():
    k = 3
    _, found = recorded("sparse-topk", {"attention.top_k": k})
    length = len(found.queries)
    kept = visible(found.weights)
    assert not (kept & ~tril(length)).any()  # only causal keys
    expected = torch.arange(length).add(1).clamp(max=k)  # rows with fewer keys keep them all
    assert torch.equal(kept.sum(-1), expected.expand(4, -1))


def test_linformer_weighs_every_compressed_row():
    _, found = recorded("linformer", {"attention.proj_len": 5, "max_len": 64})
    assert found.weights.shape == (4, len(found.queries), 5)
    assert found.keys == ["0", "1", "2", "3", "4"]
    assert visible(found.weights).all()
    assert torch.allclose(found.weights.sum(-1), torch.ones(4, len(found.queries)))


def band(length: int, window: int, dilation: int, causal: bool) -> torch.Tensor:
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    steps = (i - j) // dilation
    on_grid = (i - j) % dilation == 0
    if causal:
        return on_grid & (steps >= 0) & (steps < window)
    return on_grid & (steps.abs() <= window // 2)


@pytest.mark.parametrize(("preset", "causal"), [("longformer", True), ("bert", False)])
def test_longformer_sees_its_dilated_band_and_the_global_tokens(preset, causal):
    window, dilations, globals_ = 4, [1, 2, 1, 3], [0, 5]
    overrides = {
        "attention": "longformer",
        "attention.window": window,
        "attention.dilation": ",".join(map(str, dilations)),
        "attention.global_tokens": "0,5",
    }
    _, found = recorded(preset, overrides)
    length = len(found.queries)
    key_sees = torch.ones(length, length, dtype=torch.bool)
    if causal:
        key_sees = tril(length)
    for head, d in enumerate(dilations):
        expected = band(length, window, d, causal)
        for g in globals_:
            expected[:, g] = key_sees[:, g]  # every query sees a global key (causal: from g on)
            expected[g] = key_sees[g]  # and a global query sees every key
        assert torch.equal(visible(found.weights[head]), expected), f"head {head}"


@pytest.mark.parametrize(("preset", "causal"), [("routing", True), ("bert", False)])
def test_routing_sees_its_cluster_and_local_window(preset, causal):
    overrides = {
        "attention": "routing",
        "attention.n_clusters": 3,
        "attention.window": 6,
        "attention.local_window": 4,
    }
    model, tokenizer = preset_model(preset, {**TINY, **overrides})
    attn = model.layers[1].attn
    torch.manual_seed(1)
    attn.kmeans.centroids.normal_()  # fitted centroids: several clusters, not all in one
    attn.kmeans.initialised.fill_(True)
    routed = {}
    route = attn.route

    def keep_clusters(x, valid):
        routed["clusters"] = route(x, valid)
        return routed["clusters"]

    attn.route = keep_clusters
    found = record_attention(model, tokenizer, TEXT, 1)
    length = len(found.queries)
    clusters = routed["clusters"]  # (1, R, T)
    assert clusters.unique().numel() > 1
    rank = cluster_ranks(clusters, 3).rank
    key_ok = torch.ones(1, 1, length, dtype=torch.bool)
    shared = {"causal": causal}
    routed_mask = ranked_mask(
        clusters, rank, clusters, rank, key_ok, attn.block, exclude_self=True, **shared
    )
    positions = torch.arange(length).expand(1, 2, -1)
    one = torch.zeros_like(positions)
    local_mask = ranked_mask(
        one, positions, one, positions, key_ok, 4, exclude_self=False, **shared
    )
    expected = torch.cat([local_mask, routed_mask], dim=1)[0]  # local heads first
    assert torch.equal(visible(found.weights), expected)


# Kinds the cases above cover; a new kind in the registry must bring its own case.
COVERED = {"vanilla", "mdha", "xl", "primer_xl", "topk", "linformer", "longformer", "routing"}


def test_every_attention_kind_has_a_mask_case():
    assert set(ATTENTION) == COVERED


def test_recording_leaves_the_outputs_alone_and_nothing_is_kept_outside_it():
    model, _ = preset_model("longformer", {**TINY, "attention.window": 4})
    tokens = torch.tensor([list(TEXT.encode())])
    with torch.no_grad():
        plain = model(tokens).logits
        with AttentionRecorder() as recorder:
            assert recording()
            seen = model(tokens).logits
    assert not recording()
    report(torch.ones(2, 2))  # ignored: no recorder
    torch.testing.assert_close(seen, plain)
    assert set(recorder.maps) == {layer.attn for layer in model.layers}
    assert recorder.pending == []


def test_the_rolling_window_records_each_step_as_the_whole_sequence_does():
    from formers.kernels.rolling_window import RollingKVCache, rolling_window_attention
    from formers.kernels.window import sliding_window_attention

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 12, 8).unbind(0)  # (B, H, T, K) each
    window, dilation, prompt = 3, [1, 2], 5
    with AttentionRecorder():
        sliding_window_attention(q, k, v, window=window, causal=True, dilation=dilation)
        whole = take()  # (1, 2, 12, 12)
        cache = RollingKVCache(window, dilation)
        cache.append(k[:, :, :prompt], v[:, :, :prompt])
        for t in range(prompt, 12):
            cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
            rolling_window_attention(q[:, :, t : t + 1], cache)
            step = take()  # (1, 2, 1, S): the stored keys, the oldest at position t + 1 − S
            first = t + 1 - step.shape[-1]
            torch.testing.assert_close(step[:, :, 0], whole[:, :, t, first : t + 1])
            assert not whole[:, :, t, :first].any()  # nothing the window forgot was seen


def test_routing_records_a_decoding_step_as_the_whole_sequence_does():
    overrides = {"attention.n_clusters": 3, "attention.window": 6, "attention.local_window": 4}
    model, _ = preset_model("routing", {**TINY, **overrides})
    torch.manual_seed(1)
    for layer in model.layers:
        layer.attn.kmeans.centroids.normal_()
        layer.attn.kmeans.initialised.fill_(True)
    tokens = torch.tensor([list(TEXT.encode())])
    attn = model.layers[1].attn
    with torch.no_grad(), AttentionRecorder() as recorder:
        model(tokens)
        whole = recorder.maps[attn]  # (1, H, T, T)
        cache = model.new_cache()
        model(tokens[:, :-1], cache=cache)
        model(tokens[:, -1:], cache=cache)
        step = recorder.maps[attn]  # (1, H, 1, T): local heads first, like the whole map's
    torch.testing.assert_close(step[:, :, 0], whole[:, :, -1])
