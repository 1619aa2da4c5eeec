"""The FlexAttention twins on CUDA, where they run: forward and backward equal the explicit
kernels in fp32 and bf16, models give the same loss and gradients on either path, every causal
preset stays causal, the twins compile as one graph and make no host sync; top-k keeps every key
that reaches the k-th under the fused kernel's rounding, a training step follows an
inference-mode evaluation at the same shape, a cached band serves any head count.

Marked `gpu`: `bash scripts/test.sh -m gpu tests/kernels` on a machine with CUDA and torch >= 2.6
(they skip elsewhere). Head dims are 16 or more, the twins' minimum."""

from __future__ import annotations

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.kernels import (
    blocks,
    clusters,
    flex,
    flex_clusters,
    flex_scores,
    flex_window,
    sparse,
    window,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(
        flex.flex_attention is None or flex.torch_version() < flex.MIN_TORCH,
        reason=f"needs torch >= {'.'.join(map(str, flex.MIN_TORCH))} for the FlexAttention twins",
    ),
]
CUDA = torch.device("cuda")
B, H, T, K = 2, 4, 300, 32
DECODER_PRESETS = [n for n, f in formers.PRESETS.items() if f().arch == "decoder"]


def inputs(dtype, length=T):
    torch.manual_seed(0)
    return [
        torch.randn(B, H, length, K, device=CUDA, dtype=dtype, requires_grad=True) for _ in range(3)
    ]


def padding():
    valid = torch.rand(B, T, device=CUDA) > 0.2
    valid[1, 250:] = False
    return valid


# Each case prepares its inputs from leaves q, k, v (B, H, T, K) and returns the call of a
# kernel on them: everything that copies from the host happens before the call.


def window_case(causal):
    def prepare(q, k, v):
        valid = padding()
        positions = torch.tensor([[0, 5, 150], [3, 299, 260]], device=CUDA)
        index = positions[:, None, :, None].expand(-1, H, -1, K)
        options = dict(window=37, causal=causal, dilation=(1, 2, 3, 1), key_valid=valid)
        options["global_keys"] = (
            k.gather(2, index),
            v.gather(2, index),
            valid.gather(1, positions),
        )
        options["global_positions"] = positions
        return lambda kernel: kernel(q, k, v, **options)

    return prepare


def local_case(q, k, v):
    valid = padding()
    return lambda kernel: kernel(q, k, v, 50, causal=True, key_valid=valid)


def cluster_case(causal):
    def prepare(q, k, v):
        valid = padding()
        ids = torch.where(valid[:, None], torch.randint(0, 5, (B, H, T), device=CUDA), 5)
        options = dict(causal=causal, exclude_self=True, key_valid=valid)
        return lambda kernel: kernel(q, q, v, ids, 5, 8, **options)

    return prepare


def relative_case(q, k, v):
    """XL's layout: 40 memory keys, a position term q·r against every distance (so its gradient
    reaches q: q's gradient checks the bias's, which the fused backward sums into the captured
    (B, H, T, S + 1) tensor), a same-length window of 100."""
    r = torch.randn(T + 41, K, device=CUDA, dtype=q.dtype) * 0.1
    bias = q @ r.T  # (B, H, T, S + 1)
    k, v = torch.cat([k[:, :, :40], k], 2), torch.cat([v[:, :, :40], v], 2)
    return lambda kernel: kernel(q, k, v, bias, window=100, scale=0.2)


def explicit_relative(q, k, v, bias, *, window, scale):
    q_len, kv_len = q.shape[2], k.shape[2]
    i = torch.arange(q_len, device=CUDA)[:, None]
    j = torch.arange(kv_len, device=CUDA)[None, :]
    column = (j + q_len - 1 - i).clamp(max=kv_len).expand(B, H, -1, -1)
    distance = kv_len - q_len + i - j
    allowed = (distance >= 0) & (distance <= window)
    scores = (q @ k.transpose(-2, -1)) * scale + bias.gather(-1, column)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, -1) @ v


def on_a_grid(x):
    """x rounded to multiples of 1/4, its gradient passed straight through: every score, and so
    every selection, is exact in fp32 whatever order the products are added in (scale 1/4)."""
    return x + ((x * 4).round() / 4 - x).detach()


def topk_case(q, k, v):
    """Exact scores: the twin's threshold counts scores within its computations' rounding of the
    k-th as tied, and on random scores a near tie kept by one path only would differ by a whole
    key's weight (test_top_k_twin_keeps_every_key_that_reaches_the_kth covers rounding)."""
    q, k = on_a_grid(q), on_a_grid(k)
    return lambda kernel: kernel(q, k, v, 8, causal=True, key_valid=None, scale=0.25)


def explicit_topk(q, k, v, top_k, *, causal, key_valid, scale):
    from formers.variants.topk import keep_top_k

    scores = (q * scale) @ k.transpose(-2, -1)
    allowed = torch.ones(T, T, dtype=torch.bool, device=CUDA).tril()
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    return torch.softmax(keep_top_k(scores, top_k), -1) @ v


CASES = {
    "window-causal": (
        window_case(True),
        flex_window.sliding_window_attention,
        window.sliding_window_attention,
    ),
    "window-two-sided": (
        window_case(False),
        flex_window.sliding_window_attention,
        window.sliding_window_attention,
    ),
    "local": (local_case, flex_window.local_attention, blocks.local_attention),
    "clusters-causal": (
        cluster_case(True),
        flex_clusters.cluster_attention,
        clusters.cluster_attention,
    ),
    "clusters-two-sided": (
        cluster_case(False),
        flex_clusters.cluster_attention,
        clusters.cluster_attention,
    ),
    "relative": (relative_case, flex_scores.offset_bias_attention, explicit_relative),
    "top-k": (topk_case, flex_scores.threshold_attention, explicit_topk),
}


def forward_backward(case, kernel, dtype, check_syncs=False):
    """The kernel's output and the gradients of q, k, v, all as fp32."""
    q, k, v = inputs(dtype)
    torch.manual_seed(2)
    call = case(q, k, v)
    grad = torch.randn(B, H, T, K, device=CUDA, dtype=dtype)
    torch.cuda.synchronize()
    if check_syncs:
        torch.cuda.set_sync_debug_mode("error")
    try:
        out = call(kernel)
        out.backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return out.float(), [x.grad.float() for x in (q, k, v)]


@pytest.mark.parametrize("name", CASES)
def test_twin_equals_the_explicit_kernel_in_fp32(name):
    case, twin, explicit = CASES[name]
    out, grads = forward_backward(case, twin, torch.float32)
    ref, ref_grads = forward_backward(case, explicit, torch.float32)
    assert torch.isfinite(out).all()
    for got, want in zip([out, *grads], [ref, *ref_grads], strict=True):
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("name", CASES)
def test_twin_in_bf16_is_as_close_to_fp32_as_the_explicit_kernel(name):
    """bf16 rounds differently in each; each must be as near the fp32 result as the other."""
    case, twin, explicit = CASES[name]
    ref, ref_grads = forward_backward(case, explicit, torch.float32)
    out, grads = forward_backward(case, twin, torch.bfloat16)
    low, low_grads = forward_backward(case, explicit, torch.bfloat16)
    for got, base, want in zip([out, *grads], [low, *low_grads], [ref, *ref_grads], strict=True):
        assert torch.isfinite(got).all()
        error, baseline = (got - want).abs().mean(), (base - want).abs().mean()
        assert error <= 2 * baseline + 1e-4, f"{error:.2e} vs explicit bf16 {baseline:.2e}"


def model(name, **overrides):
    options = {
        "longformer": {"attention.window": 40, "attention.dilation": "1,2,1,1"},
        "routing": {
            "attention.n_clusters": 4,
            "attention.window": 16,
            "attention.local_window": 32,
        },
        "transformer-xl": {"attention.mem_len": 24},
        "sparse-topk": {"attention.top_k": 8},
    }.get(name, {})
    cfg = tiny_config(name, d_model=64, n_heads=4, **{**options, **overrides})
    return formers.build(cfg).to(CUDA)


@pytest.mark.parametrize("name", ["longformer", "routing", "transformer-xl", "sparse-topk"])
def test_training_step_gradients_equal_on_either_path(name):
    torch.manual_seed(0)
    net = model(name).eval()  # eval: the same clusters in both passes (no k-means update)
    tokens, targets = random_tokens(2, T, 50).to(CUDA), random_tokens(2, T, 50).to(CUDA)
    calls = []
    original = flex.attend
    flex.attend = lambda *a, **kw: calls.append(1) or original(*a, **kw)
    try:
        loss = net(tokens, targets).loss
    finally:
        flex.attend = original
    assert calls, "the twins did not run"
    loss.backward()
    flex_grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
    net.zero_grad()
    with sparse.explicit_kernels():
        explicit = net(tokens, targets).loss
        explicit.backward()
    torch.testing.assert_close(loss, explicit, atol=1e-4, rtol=1e-4)
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    for got, want in zip(flex_grads, grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("name", DECODER_PRESETS)
def test_every_causal_preset_is_causal_on_cuda(name):
    """Changing the tokens after t leaves the logits at and before t as they were."""
    torch.manual_seed(0)
    net = model(name).eval()
    tokens = random_tokens(2, T, 50).to(CUDA)
    later = tokens.clone()
    t = 170
    later[:, t + 1 :] = random_tokens(2, T - t - 1, 50).to(CUDA)
    with torch.no_grad():
        before, after = net(tokens).logits, net(later).logits
    torch.testing.assert_close(after[:, : t + 1], before[:, : t + 1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(after[:, t + 1 :], before[:, t + 1 :])


@pytest.mark.parametrize("name", ["window-causal", "clusters-causal", "relative", "top-k"])
def test_twins_compile_as_one_graph_without_host_syncs(name):
    case, twin, _ = CASES[name]
    eager_out, eager_grads = forward_backward(case, twin, torch.bfloat16)
    compiled = torch.compile(twin, fullgraph=True)
    forward_backward(case, compiled, torch.bfloat16)  # compiles, fills the block-mask cache
    out, grads = forward_backward(case, compiled, torch.bfloat16, check_syncs=True)
    for got, want in zip([out, *grads], [eager_out, *eager_grads], strict=True):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    "dtype, top_k", [(torch.bfloat16, 1), (torch.bfloat16, 8), (torch.float32, 8)]
)
def test_top_k_twin_keeps_every_key_that_reaches_the_kth(dtype, top_k, monkeypatch):
    """Head dim 128 (scale 1/√128, not a power of two) and, in fp32, TF32 allowed: the fused
    kernel's scores round otherwise than the search for the k-th; no key whose exact score
    reaches the exact k-th may be dropped, and no row left empty. Values one-hot per key, so
    the output is the weights (a key is kept iff its weight > 0)."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", dtype == torch.float32)
    torch.manual_seed(0)
    length, dim = 256, 128
    q, k = (torch.randn(1, 4, length, dim, device=CUDA).to(dtype) for _ in range(2))
    scale = dim**-0.5
    kept = []
    for half in torch.eye(length, device=CUDA, dtype=dtype).split(dim, dim=1):
        v = half.expand(1, 4, length, dim).contiguous()
        with torch.no_grad():
            out = flex_scores.threshold_attention(q, k, v, top_k, causal=True, scale=scale)
        kept.append(out > 0)
    kept = torch.cat(kept, dim=-1)  # (1, 4, T, S)
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    visible = torch.ones(length, length, dtype=torch.bool, device=CUDA).tril()
    kth = scores.masked_fill(~visible, float("-inf")).topk(top_k, dim=-1).values[..., -1:]
    must_keep = visible & (scores >= kth)
    assert (kept | ~must_keep).all(), f"{(must_keep & ~kept).any(-1).sum()} rows lost a key"
    assert not (kept & ~visible).any()
    assert (kept.sum(-1) >= visible.sum(-1).clamp(max=top_k)).all()


@pytest.mark.parametrize("name", CASES)
def test_a_training_step_after_an_inference_mode_eval_at_the_same_shape(name, monkeypatch):
    """The eval fills the block-mask cache under torch.inference_mode(); the training step at
    the same shape reads it, and its backward saves the masks' tensors."""
    case, twin, _ = CASES[name]
    monkeypatch.setattr(flex, "_CACHE", {})
    q, k, v = inputs(torch.float32)
    with torch.inference_mode():
        case(q.detach(), k.detach(), v.detach())(twin)
    assert flex._CACHE
    out, grads = forward_backward(case, twin, torch.float32)
    monkeypatch.setattr(flex, "_CACHE", {})
    fresh, fresh_grads = forward_backward(case, twin, torch.float32)
    for got, want in zip([out, *grads], [fresh, *fresh_grads], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)  # atomic adds: any order


@torch.no_grad()
def test_a_cached_band_serves_layers_with_any_head_count(monkeypatch):
    """One dilation for every head: a cached band must not read per-head options past the end
    (Triton does not check the index)."""
    monkeypatch.setattr(flex, "_CACHE", {})
    for heads in (2, 4):
        q, k, v = (torch.randn(1, heads, T, K, device=CUDA) for _ in range(3))
        options = dict(window=9, causal=True, dilation=2)
        torch.testing.assert_close(
            flex_window.sliding_window_attention(q, k, v, **options),
            window.sliding_window_attention(q, k, v, **options),
            atol=2e-4,
            rtol=2e-4,
        )
