"""Routing attention as a layer and in models: shared layer-normalised q/k, the k-means centroids
(initialisation, EMA by hand, no gradient, commitment loss), causality in eval and train mode
with the centroids moving, cached decoding, checkpoints, the encoder, the preset and its errors."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import random_tokens, tiny_config

import formers
from formers.infer import generate
from formers.kernels.host_reads import no_host_reads
from formers.layers.mask import AttentionMask
from formers.layers.statistics import note_statistics
from formers.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from formers.variants.routing import RoutingAttention, RoutingConfig
from formers.variants.routing import kmeans as kmeans_module
from formers.variants.routing.kmeans import INIT_ITERATIONS

V = 50
SMALL = {"attention.window": 3, "attention.n_clusters": 4, "attention.local_window": 4}


def routing_model(**overrides):
    return formers.build(tiny_config("routing", **{**SMALL, **overrides}))


def train_step(model, tokens, optimizer=None):
    out = model(tokens, targets=torch.roll(tokens, -1, 1))
    (out.loss + out.aux_loss).backward()
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad()
    return out


def kmeans_layers(model):
    return [m for m in model.modules() if isinstance(m, RoutingAttention)]


def test_one_cluster_over_all_tokens_is_causal_attention_with_shared_normalised_qk():
    torch.manual_seed(0)
    attn = RoutingAttention(16, 2, RoutingConfig(n_clusters=1, window=9, local_heads=0)).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    got = attn(x, mask=AttentionMask(causal=True))
    # reference: q = k = LayerNorm(x W^Q) per head, causal, a query skips its own key except
    # at position 0, where it has no other
    q, _, v = attn.qkv_proj(x).split([16, 0, 16], dim=-1)
    q = F.layer_norm(q.view(2, 9, 2, 8).transpose(1, 2), (8,))
    v = v.view(2, 9, 2, 8).transpose(1, 2)
    scores = q @ q.transpose(-2, -1) / math.sqrt(8)
    allowed = torch.ones(9, 9, dtype=torch.bool).tril(-1)
    allowed[0, 0] = True
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1)
    want = attn.out_proj((weights @ v).transpose(1, 2).reshape(2, 9, 16))
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("reads", ["allowed", "none"])
def test_centroids_start_from_data_at_the_first_step_then_move_by_the_ema_formula(reads):
    # without host reads (a GPU training step) the update selects between its initialisation
    # and its moving average instead of branching on the flag: the same centroids
    with no_host_reads(reads == "none"):
        check_centroids_start_from_data_then_move_by_the_ema_formula()


def check_centroids_start_from_data_then_move_by_the_ema_formula():
    torch.manual_seed(1)
    attn = RoutingAttention(
        16, 4, RoutingConfig(n_clusters=3, window=4, local_heads=1, ema_decay=0.9)
    ).double()
    attn.train()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    valid = torch.ones(2, 10, dtype=torch.bool)
    valid[1, 7:] = False
    mask = AttentionMask(causal=True, key_valid=valid)
    kmeans = attn.kmeans
    assert not kmeans.ready and "kmeans.centroids" in dict(attn.named_buffers())
    assert all(p is not kmeans.centroids for p in attn.parameters())

    def routed_vectors():
        q, _, _, _ = attn.project(x)
        return q[:, 1:].detach()  # (B, R, T, K)

    attn(x, mask=mask)  # a forward alone moves nothing
    assert not kmeans.ready
    points = routed_vectors().transpose(0, 1)[:, valid]  # (R, N, K) the valid tokens
    attn(x, mask=mask).sum().backward()
    assert kmeans.ready and kmeans.centroids.grad is None
    # by hand: seeds evenly spaced over the valid tokens, then Lloyd iterations
    want = torch.stack([hand_lloyd(points[h]) for h in range(3)])
    torch.testing.assert_close(kmeans.centroids, want, atol=1e-12, rtol=0)

    # the next step on other tokens (on the same ones Lloyd's fixed point would not move)
    before = kmeans.centroids.clone()
    x = torch.randn(2, 10, 16, dtype=torch.float64)
    y = routed_vectors()
    attn(x, mask=mask).sum().backward()
    for h in range(3):
        for c in range(3):
            members = [
                y[b, h, t]
                for b in range(2)
                for t in range(10)
                if valid[b, t] and nearest(y[b, h, t], before[h]) == c
            ]
            expected = before[h, c]
            if members:
                expected = 0.9 * before[h, c] + 0.1 * torch.stack(members).mean(0)
            torch.testing.assert_close(kmeans.centroids[h, c], expected, atol=1e-12, rtol=0)
    assert (kmeans.centroids - before).abs().max() > 1e-3
    assert kmeans.centroids.grad is None and not kmeans.centroids.requires_grad


def test_without_host_reads_the_centroids_start_once_then_only_move(monkeypatch):
    # a step that may not read the flag learns it from the read after the step (the trainer's
    # log) and stops computing an initialisation it would throw away; loading a state forgets
    starts = []
    start = kmeans_module.initial_centroids
    monkeypatch.setattr(
        kmeans_module, "initial_centroids", lambda *args: starts.append(1) or start(*args)
    )
    model = routing_model().train()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    reference = routing_model().train()  # reads allowed: branches on the flag
    reference.load_state_dict(initial)
    batches = [random_tokens(2, 20, V) for _ in range(3)]
    after_first = []
    for tokens in batches:
        train_step(reference, tokens)
        after_first = after_first or [m.kmeans.centroids.clone() for m in kmeans_layers(reference)]
    layers = len(kmeans_layers(model))
    starts.clear()
    for tokens in batches:
        with no_host_reads():
            train_step(model, tokens)
        note_statistics(model)  # the read after the step
    assert len(starts) == layers  # the first step only
    for a, b in zip(kmeans_layers(model), kmeans_layers(reference), strict=True):
        assert a.kmeans.known_ready
        torch.testing.assert_close(a.kmeans.centroids, b.kmeans.centroids, atol=1e-6, rtol=0)
    model.load_state_dict(initial)  # not started: the next step starts them again
    with no_host_reads():
        train_step(model, batches[0])
    assert len(starts) == 2 * layers
    for a, want in zip(kmeans_layers(model), after_first, strict=True):
        torch.testing.assert_close(a.kmeans.centroids, want, atol=1e-6, rtol=0)


def nearest(point, centroids):
    return min(range(len(centroids)), key=lambda c: float(((point - centroids[c]) ** 2).sum()))


def hand_lloyd(points):
    count = len(points)
    seeds = [round(i * (count - 1) / 2) for i in range(3)]  # 3 clusters, evenly spaced
    centroids = [points[s].clone() for s in seeds]
    for _ in range(INIT_ITERATIONS):
        groups = [[] for _ in centroids]
        for p in points:
            groups[nearest(p, centroids)].append(p)
        centroids = [
            torch.stack(g).mean(0) if g else c for g, c in zip(groups, centroids, strict=True)
        ]
    return torch.stack(centroids)


def test_eval_passes_and_passes_without_gradient_leave_the_centroids_alone():
    model = routing_model()
    tokens = random_tokens(2, 16, V)
    train_step(model.train(), tokens)  # initialise
    before = [m.kmeans.centroids.clone() for m in kmeans_layers(model)]
    model.eval()
    model(tokens).logits.sum().backward()  # eval: no update even with a backward pass
    model.train()
    with torch.no_grad():
        model(tokens)
    model(tokens)  # no backward: no training step
    for m, b in zip(kmeans_layers(model), before, strict=True):
        assert torch.equal(m.kmeans.centroids, b)
    train_step(model, tokens)
    assert not all(
        torch.equal(m.kmeans.centroids, b)
        for m, b in zip(kmeans_layers(model), before, strict=True)
    )


def test_commitment_loss_is_its_formula_and_reaches_only_the_projections():
    torch.manual_seed(2)
    attn = RoutingAttention(
        16, 2, RoutingConfig(n_clusters=3, window=4, local_heads=0, commitment=0.25)
    )
    attn = attn.double().train()
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    valid = torch.ones(2, 8, dtype=torch.bool)
    valid[0, 5:] = False
    mask = AttentionMask(causal=True, key_valid=valid)
    attn(x, mask=mask).sum().backward()  # initialise
    assert attn.aux_loss.item() == 0  # no centroids yet, nothing to commit to
    assert attn.metrics["commitment"].item() == 0  # nor a distance to zero centroids to report
    attn.clear_reports()
    attn(x, mask=mask)
    q = attn.project(x)[0].detach()  # (B, R, T, K), q = k for routed heads
    total, count = 0.0, 0
    for b in range(2):
        for h in range(2):
            for t in range(8):
                if valid[b, t]:
                    mu = attn.kmeans.centroids[h, nearest(q[b, h, t], attn.kmeans.centroids[h])]
                    total += float(((q[b, h, t] - mu) ** 2).mean())
                    count += 1
    assert attn.aux_loss.item() == pytest.approx(0.25 * total / count, rel=1e-12)
    assert attn.metrics["commitment"].item() == pytest.approx(total / count, rel=1e-12)
    attn.zero_grad()
    before = attn.kmeans.centroids.clone()
    attn.aux_loss.backward()
    assert attn.qkv_proj.weight.grad.abs().sum() > 0 and attn.kmeans.centroids.grad is None
    torch.testing.assert_close(attn.kmeans.centroids, before)  # the aux loss alone is a step too
    # but only W^Q rows of routed heads feel it: the value rows get nothing
    assert attn.qkv_proj.weight.grad[16:].abs().sum() == 0


SEEDS = [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_no_logit_sees_the_future_while_the_centroids_train(seed, mode):
    torch.manual_seed(seed)
    model = formers.build(tiny_config("routing", dropout=0.1, attn_dropout=0.1, **SMALL))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    length = 24
    history = []
    for step in range(4):
        tokens = random_tokens(2, length, V)
        model.train(mode == "train")
        torch.manual_seed(100 + step)
        base = model(tokens).logits
        for t in (0, 6, 13, 22):
            changed = tokens.clone()
            changed[:, t + 1 :] = random_tokens(2, length - t - 1, V)
            torch.manual_seed(100 + step)  # the same dropout draws
            logits = model(changed).logits
            torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=1e-6)
            assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :], atol=1e-4)
        model.train()
        out = train_step(model, tokens, optimizer)  # the centroids move with the step
        history.append(torch.cat([m.kmeans.centroids.flatten() for m in kmeans_layers(model)]))
        if step:
            assert not torch.equal(history[-1], history[-2])
            largest = [v for k, v in out.metrics.items() if k.endswith("largest_cluster")]
            assert min(largest) < 1.0  # tokens are really spread over clusters


def test_cached_decoding_equals_recomputation_with_trained_centroids():
    torch.manual_seed(3)
    model = routing_model(tie_embeddings=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(3):
        train_step(model.train(), random_tokens(2, 30, V), optimizer)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.eval()
    tokens = random_tokens(2, 20, V)
    full = model(tokens).logits
    cache = model.new_cache()
    steps = [model(tokens[:, :5], cache=cache).logits]
    steps += [model(tokens[:, t : t + 1], cache=cache).logits for t in range(5, 20)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    prompt = random_tokens(2, 5, V)
    cached = generate(model, prompt, 16, temperature=0)
    assert torch.equal(cached, generate(model, prompt, 16, temperature=0, use_cache=False))
    assert len(set(cached[0, 5:].tolist())) > 2


def test_a_reordered_cache_continues_the_reordered_rows():
    model = routing_model().eval()
    train_step(model.train(), random_tokens(3, 20, V))
    model.eval()
    tokens = random_tokens(3, 12, V)
    cache = model.new_cache()
    model(tokens[:, :8], cache=cache)
    cache.reorder(torch.tensor([2, 0]))
    got = model(tokens[[2, 0], 8:], cache=cache).logits
    want = model(tokens[[2, 0]]).logits[:, 8:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_centroids_are_saved_and_restored_with_the_checkpoint(tmp_path):
    model = routing_model()
    train_step(model.train(), random_tokens(2, 20, V))
    save_checkpoint(tmp_path, model=model, optimizer=None, config={}, state=TrainState(step=1))
    fresh = routing_model()
    assert not any(m.kmeans.ready for m in kmeans_layers(fresh))
    load_checkpoint(tmp_path, model=fresh, restore_rng=False)
    for a, b in zip(kmeans_layers(model), kmeans_layers(fresh), strict=True):
        assert b.kmeans.ready and torch.equal(a.kmeans.centroids, b.kmeans.centroids)
    tokens = random_tokens(2, 20, V)
    torch.testing.assert_close(fresh.eval()(tokens).logits, model.eval()(tokens).logits)


def test_the_encoder_routes_both_ways_and_ignores_padding():
    cfg = tiny_config("routing", arch="encoder", pad_id=0, **SMALL)
    model = formers.build(cfg)
    train_step(model.train(), random_tokens(2, 20, V))
    model.eval()
    tokens = random_tokens(2, 13, V)
    base = model(tokens).logits
    padded = torch.cat([tokens, torch.zeros(2, 7, dtype=torch.long)], 1)
    torch.testing.assert_close(model(padded).logits[:, :13], base, atol=1e-5, rtol=1e-5)
    changed = tokens.clone()
    changed[:, -1] = (tokens[:, -1] % (V - 1)) + 1
    assert not torch.allclose(model(changed).logits[:, :4], base[:, :4], atol=1e-6)


def test_preset_splits_the_heads_between_local_and_routed():
    cfg = formers.config("routing")
    vanilla = formers.config("vanilla")
    assert isinstance(cfg.attention, RoutingConfig)
    assert (cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.ffn) == (512, 8, 6, vanilla.ffn)
    attn = formers.build(formers.config("routing", n_layers=1)).layers[0].attn
    assert (attn.local_heads, attn.n_heads - attn.local_heads) == (4, 4)
    assert attn.kmeans.centroids.shape == (4, 32, 64)


@pytest.mark.parametrize(
    ("field", "value"),
    [("local_heads", 8), ("n_clusters", 0), ("window", 0), ("ema_decay", 1.0), ("commitment", -1)],
)
def test_bad_options_name_the_field(field, value):
    with pytest.raises(formers.ConfigError, match=f"attention.{field}"):
        formers.config("routing", **{f"attention.{field}": value})


def test_a_cluster_without_members_keeps_its_centroid():
    from formers.variants.routing import OnlineKMeans

    kmeans = OnlineKMeans(1, 3, 2, decay=0.5).double()
    kmeans.centroids.copy_(torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]]))
    kmeans.initialised.fill_(True)
    sums = torch.tensor([[[4.0, 2.0], [0.0, 0.0], [-3.0, 3.0]]], dtype=torch.float64)
    counts = torch.tensor([[2.0, 0.0, 3.0]], dtype=torch.float64)
    kmeans.update(sums, counts, torch.zeros(1, 1, 1, 2, dtype=torch.float64), torch.ones(1, 1))
    want = torch.tensor([[[1.5, 0.5], [0.0, 1.0], [-1.0, 0.0]]], dtype=torch.float64)
    torch.testing.assert_close(kmeans.centroids, want, atol=1e-15, rtol=0)


def test_cost_model_counts_two_blocks_per_query_and_the_centroid_distances():
    attn = RoutingAttention(
        64, 4, RoutingConfig(n_clusters=8, window=10, local_heads=1, local_window=6)
    )
    # routed: 3 heads × 2 blocks of 5 slots; local: 1 head × 2 blocks of 6; 3 × 8 distances
    assert attn.score_flops_per_token(1000) == 2 * 16 * (2 * (3 * 10 + 1 * 12) + 3 * 8)
    assert attn.keys_per_query(1000) == 12 and attn.keys_per_query(5) == 5
