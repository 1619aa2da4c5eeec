"""Sliding-window attention (Longformer §3.1): the blocked kernel and the rolling decode cache
against a dense float64 twin, plus causality, empty rows in every dtype and the O(n·w) promise.

Shapes: B batch, H heads, T sequence length, K head dim, G global keys.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from formers.errors import InputError
from formers.kernels import attention as kernels
from formers.kernels.rolling_window import RollingKVCache, rolling_window_attention
from formers.kernels.window import sliding_window_attention

HEADS, DIM = 4, 8
PER_HEAD = (1, 2, 3, 2)


def reference_attention(
    q,
    k,
    v,
    *,
    window,
    causal,
    dilation=1,
    key_valid=None,
    global_keys=None,
    global_positions=None,
    scale=None,
):
    """The slow, obviously correct twin: a dense (T, T + G) mask from the definition, a plain
    masked softmax in float64, zero weights on rows that see nothing."""
    q, k, v = q.double(), k.double(), v.double()
    batch, heads, length, dim = q.shape
    dilations = [dilation] * heads if isinstance(dilation, int) else list(dilation)
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    bands = []
    for d in dilations:
        if causal:
            distance = i - j
            bands.append((distance >= 0) & (distance % d == 0) & (distance <= (window - 1) * d))
        else:
            distance = (i - j).abs()
            bands.append((distance % d == 0) & (distance <= (window // 2) * d))
    allowed = torch.stack(bands)[None].expand(batch, heads, length, length).clone()
    if key_valid is not None:
        allowed &= key_valid[:, None, None, :]
    keys, values = k, v
    if global_keys is not None:
        k_g, v_g, valid_g = global_keys
        n_global = k_g.shape[2]
        if valid_g is None:
            valid_g = torch.ones(batch, n_global, dtype=torch.bool)
        sees = valid_g[:, None, None, :].expand(batch, heads, length, n_global).clone()
        if global_positions is not None:
            for b in range(batch):
                for g in range(n_global):
                    if not valid_g[b, g]:
                        continue
                    p = int(global_positions[b, g])
                    if 0 <= p < length:
                        allowed[b, :, :, p] = False  # seen through the global copy only
                    if causal:
                        sees[b, :, : max(0, min(p, length)), g] = False  # queries i < p
        keys = torch.cat([k, k_g.double()], dim=2)
        values = torch.cat([v, v_g.double()], dim=2)
        allowed = torch.cat([allowed, sees], dim=-1)
    scale = 1 / math.sqrt(dim) if scale is None else scale
    scores = (q @ keys.transpose(-1, -2)) * scale
    has_key = allowed.any(-1, keepdim=True)
    scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
    weights = torch.softmax(scores, dim=-1) * has_key
    return weights @ values


def random_qkv(batch, length, dtype=torch.float64, heads=HEADS, dim=DIM, requires_grad=False):
    return [
        torch.randn(batch, heads, length, dim, dtype=dtype, requires_grad=requires_grad)
        for _ in range(3)
    ]


def random_padding(batch, length):
    """Random holes, a padded tail on row 1, and (row 0) a run long enough to empty windows."""
    valid = torch.rand(batch, length) > 0.3
    valid[1, length // 2 :] = False
    valid[0, length // 3 : length // 3 + 4] = False
    return valid


def random_globals(batch, length, n_global=3, dtype=torch.float64, requires_grad=False):
    """Global keys at random positions (so inside many bands), one slot invalid on row 0."""
    k_g, v_g = (
        torch.randn(batch, HEADS, n_global, DIM, dtype=dtype, requires_grad=requires_grad)
        for _ in range(2)
    )
    valid_g = torch.ones(batch, n_global, dtype=torch.bool)
    valid_g[0, -1] = False
    positions = torch.stack(
        [torch.randperm(max(length, n_global))[:n_global] for _ in range(batch)]
    )
    return (k_g, v_g, valid_g), positions


def assert_same_forward_and_gradients(kwargs, length, batch=2, block_size=None, with_globals=False):
    q, k, v = random_qkv(batch, length, requires_grad=True)
    leaves = [q, k, v]
    if with_globals:
        global_keys, positions = random_globals(batch, length, requires_grad=True)
        kwargs = dict(kwargs, global_keys=global_keys, global_positions=positions)
        leaves += list(global_keys[:2])
    out = sliding_window_attention(q, k, v, block_size=block_size, **kwargs)
    expected = reference_attention(q, k, v, **kwargs)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad(out, leaves, upstream)
    expected_grads = torch.autograd.grad(expected, leaves, upstream)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("length", [1, 2, 7, 33, 100])
@pytest.mark.parametrize("window", [1, 2, 3, 8, 16])
@pytest.mark.parametrize("dilation", [1, 2, 3, PER_HEAD], ids=["d1", "d2", "d3", "per_head"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two_sided"])
def test_matches_dense_reference_forward_and_gradients(length, window, dilation, causal):
    kwargs = dict(window=window, causal=causal, dilation=dilation)
    # The default block and a small one that divides neither T nor the window, so queries
    # reach across several neighbouring blocks.
    for block_size in (None, 3):
        assert_same_forward_and_gradients(kwargs, length, block_size=block_size)
    padded = dict(kwargs, key_valid=random_padding(2, length))
    assert_same_forward_and_gradients(padded, length, block_size=5, with_globals=True)
    assert_same_forward_and_gradients(kwargs, length, with_globals=True)


@pytest.mark.parametrize("length", [7, 33])
@pytest.mark.parametrize("window", [3, 8])
@pytest.mark.parametrize("dilation", [1, PER_HEAD], ids=["d1", "per_head"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two_sided"])
def test_explicit_block_attention_matches_dense_reference(
    monkeypatch, length, window, dilation, causal
):
    """The matmul + masked softmax path (CPU bf16/fp16) checked in float64 like the fused one."""
    monkeypatch.setattr(kernels, "fused_kernel_is_faster", lambda q, k: False)
    kwargs = dict(window=window, causal=causal, dilation=dilation)
    assert_same_forward_and_gradients(kwargs, length, block_size=3)
    padded = dict(kwargs, key_valid=random_padding(2, length))
    assert_same_forward_and_gradients(padded, length, block_size=5, with_globals=True)


@pytest.mark.parametrize("causal", [True, False])
def test_global_keys_without_positions_are_seen_by_every_query(causal):
    length = 20
    q, k, v = random_qkv(2, length)
    k_g, v_g = torch.randn(2, 2, HEADS, 2, DIM, dtype=torch.float64)
    kwargs = dict(window=3, causal=causal, global_keys=(k_g, v_g, None))
    out = sliding_window_attention(q, k, v, block_size=4, **kwargs)
    torch.testing.assert_close(out, reference_attention(q, k, v, **kwargs), rtol=1e-9, atol=1e-11)


def test_a_global_position_in_the_band_is_counted_once():
    """Global key = the band key at its position: the output is the plain windowed one."""
    length, position = 12, 5
    q, k, v = random_qkv(1, length)
    global_keys = (k[:, :, [position]], v[:, :, [position]], None)
    out = sliding_window_attention(
        q,
        k,
        v,
        window=5,
        causal=False,
        block_size=4,
        global_keys=global_keys,
        global_positions=torch.tensor([[position]]),
    )
    # Far queries now see position 5 as well; near ones must see it exactly once.
    plain = sliding_window_attention(q, k, v, window=5, causal=False)
    near = slice(position - 2, position + 3)
    torch.testing.assert_close(out[:, :, near], plain[:, :, near], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("length", [1, 5, 33])
def test_window_covering_the_sequence_is_full_attention(length):
    q, k, v = random_qkv(2, length)
    causal = sliding_window_attention(q, k, v, window=length, causal=True, block_size=4)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(causal, expected, rtol=1e-10, atol=1e-12)
    two_sided = sliding_window_attention(q, k, v, window=2 * length - 1, causal=False)
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(two_sided, expected, rtol=1e-10, atol=1e-12)
    huge = sliding_window_attention(q, k, v, window=10_000, causal=False, block_size=3)
    torch.testing.assert_close(huge, expected, rtol=1e-10, atol=1e-12)


def test_an_empty_sequence_gives_an_empty_output():
    q, k, v = random_qkv(2, 0)
    out = sliding_window_attention(q, k, v, window=4, causal=True, dilation=PER_HEAD)
    assert out.shape == q.shape


@pytest.mark.parametrize("dilation", [1, 3, PER_HEAD], ids=["d1", "d3", "per_head"])
def test_later_keys_never_change_earlier_outputs(dilation):
    length, window = 40, 6
    q, k, v = random_qkv(2, length, dtype=torch.float32)
    global_keys, positions = random_globals(2, length, dtype=torch.float32)
    kwargs = dict(
        window=window,
        causal=True,
        dilation=dilation,
        key_valid=random_padding(2, length),
        global_keys=global_keys,
        global_positions=positions,
        block_size=7,
    )
    before = sliding_window_attention(q, k, v, **kwargs)
    for t in (0, 9, 17, 38):
        k2, v2 = k.clone(), v.clone()
        k2[:, :, t + 1 :] = torch.randn_like(k2[:, :, t + 1 :]) * 10
        v2[:, :, t + 1 :] = torch.randn_like(v2[:, :, t + 1 :]) * 10
        # a global key placed after t may change too
        later = positions > t
        k_g, v_g, valid_g = (x.clone() for x in global_keys)
        k_g[later[:, None, :].expand_as(k_g[..., 0])] = 50.0
        v_g[later[:, None, :].expand_as(v_g[..., 0])] = 50.0
        after = sliding_window_attention(q, k2, v2, **dict(kwargs, global_keys=(k_g, v_g, valid_g)))
        torch.testing.assert_close(after[:, :, : t + 1], before[:, :, : t + 1], rtol=0, atol=0)
        if t < 30:  # the perturbation reaches later queries (so the test can fail)
            assert not torch.equal(after[:, :, t + 1 :], before[:, :, t + 1 :])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [True, False])
def test_rows_that_see_no_key_are_zero_in_every_dtype(dtype, causal):
    length = 30
    q, k, v = random_qkv(2, length, dtype=dtype, requires_grad=True)
    key_valid = torch.ones(2, length, dtype=torch.bool)
    key_valid[0, 4:22] = False  # queries in the middle of this run see no key
    key_valid[1] = False  # a row of nothing but padding
    kwargs = dict(window=5, causal=causal, dilation=2, key_valid=key_valid)
    expected = reference_attention(q, k, v, **kwargs)
    empty = expected.abs().sum(-1) == 0  # (B, H, T)
    assert empty[0, :, 14].all() and empty[1].all()
    with torch.no_grad():  # extreme scores: no overflow to inf or NaN in half precision
        q[:, :, :3] *= 300
    expected = reference_attention(q, k, v, **kwargs)
    out = sliding_window_attention(q, k, v, block_size=4, **kwargs)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert (out[empty] == 0).all()
    tolerance = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(out.double(), expected, rtol=tolerance, atol=tolerance)
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))
    assert (k.grad[1] == 0).all() and (v.grad[1] == 0).all()


def test_the_fused_kernel_never_gets_a_row_without_keys(monkeypatch):
    """torch before 2.5 (and some GPU backends) return NaN for a fully masked row; torch 2.13 on
    CPU returns zeros, so the zero-output test above cannot see this guard go missing."""
    fused = F.scaled_dot_product_attention

    def checked(q, k, v, attn_mask=None, **kwargs):
        assert attn_mask.any(-1).all(), "a query row with no visible key reached the kernel"
        return fused(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", checked)
    q, k, v = random_qkv(2, 30)
    key_valid = torch.ones(2, 30, dtype=torch.bool)
    key_valid[0, 4:22] = False
    for causal in (True, False):
        out = sliding_window_attention(q, k, v, window=3, causal=causal, key_valid=key_valid)
        assert (out[0, :, 12] == 0).all()
    cache = RollingKVCache(window=3)
    cache.append(k, v, key_valid)
    assert (rolling_window_attention(q[:, :, -20:], cache)[0, :, 12 - 10] == 0).all()


def test_rolling_cache_holds_at_most_the_span():
    window, dilation = 4, (1, 3, 2, 1)
    cache = RollingKVCache(window, dilation)
    assert cache.span == (window - 1) * 3 + 1
    k, v = random_qkv(1, 5 * cache.span, dtype=torch.float32)[:2]
    storage_bytes = set()
    for t in range(k.shape[2]):
        cache.append(k[:, :, t : t + 1], v[:, :, t : t + 1])
        assert cache.keys.shape[2] == cache.values.shape[2] == min(t + 1, cache.span)
        storage_bytes.add(cache.keys.untyped_storage().nbytes())
    assert max(storage_bytes) <= cache.span * HEADS * DIM * 4
    torch.testing.assert_close(cache.keys, k[:, :, -cache.span :], rtol=0, atol=0)
    cache.append(k[:, :, :7], v[:, :, :7])  # a chunk: span − 1 older positions plus the chunk
    assert cache.keys.shape[2] == cache.span - 1 + 7


@pytest.mark.parametrize("chunks", [[1], [3, 1, 5, 2]], ids=["one_by_one", "mixed_chunks"])
@pytest.mark.parametrize("dilation", [1, 2, PER_HEAD], ids=["d1", "d2", "per_head"])
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "padding_and_globals"])
def test_rolling_cache_decoding_equals_the_full_kernel(chunks, dilation, extras):
    window = 5
    span = (window - 1) * (max(dilation) if isinstance(dilation, tuple) else dilation) + 1
    length = 3 * span + 2
    q, k, v = random_qkv(2, length)
    kwargs = dict(window=window, dilation=dilation)
    key_valid = None
    if extras:
        key_valid = random_padding(2, length)
        global_keys, positions = random_globals(2, length)
        kwargs.update(global_keys=global_keys, global_positions=positions)
    full = sliding_window_attention(q, k, v, causal=True, key_valid=key_valid, **kwargs)
    cache = RollingKVCache(window, dilation)
    start, step, outputs = 0, 0, []
    while start < length:
        end = min(start + chunks[step % len(chunks)], length)
        valid = None if key_valid is None else key_valid[:, start:end]
        cache.append(k[:, :, start:end], v[:, :, start:end], valid)
        decode_kwargs = {
            name: kwargs[name] for name in ("global_keys", "global_positions") if name in kwargs
        }
        outputs.append(rolling_window_attention(q[:, :, start:end], cache, **decode_kwargs))
        assert cache.keys.shape[2] <= span - 1 + (end - start)
        start, step = end, step + 1
    torch.testing.assert_close(torch.cat(outputs, dim=2), full, rtol=1e-10, atol=1e-12)


class LargestTensor(TorchDispatchMode):
    """Records every operator's name and the most elements of any tensor it returns."""

    def __init__(self):
        super().__init__()
        self.largest, self.ops = 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops.add(str(func))
        for x in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(x, torch.Tensor):
                self.largest = max(self.largest, x.numel())
        return out


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(causal=True),
        dict(causal=False, dilation=2),
        dict(causal=True, globals=True),
        dict(causal=True, dtype=torch.bfloat16),  # the explicit path
    ],
    ids=["causal", "two_sided_dilated", "causal_globals", "causal_bf16"],
)
def test_no_tensor_grows_with_the_square_of_the_length(kwargs):
    length, window = 2048, 64
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", torch.float32)
    q, k, v = random_qkv(1, length, dtype=dtype, heads=2, dim=16, requires_grad=True)
    if kwargs.pop("globals", False):
        k_g, v_g = torch.randn(2, 1, 2, 4, 16, dtype=dtype)
        kwargs.update(
            global_keys=(k_g, v_g, None), global_positions=torch.tensor([[0, 7, 900, 1500]])
        )
    with LargestTensor() as record:
        out = sliding_window_attention(
            q, k, v, window=window, key_valid=torch.rand(1, length) > 0.1, **kwargs
        )
        out.sum().backward()
    assert record.largest < length * length // 4, record.largest
    fused = any("scaled_dot_product" in op for op in record.ops)
    # attention.py's rule: two matmuls beat the fused kernel for short keys on CPU bf16/fp16
    assert fused == (dtype == torch.float32 or q.device.type != "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fused", "explicit"])
def test_dropout_is_drawn_from_the_seed_and_spares_empty_rows(dtype):
    q, k, v = random_qkv(1, 20, dtype=dtype)
    key_valid = torch.ones(1, 20, dtype=torch.bool)
    key_valid[0, 10:] = False
    kwargs = dict(window=3, causal=True, key_valid=key_valid)
    plain = sliding_window_attention(q, k, v, **kwargs)
    torch.manual_seed(1)
    dropped = sliding_window_attention(q, k, v, dropout=0.5, **kwargs)
    torch.manual_seed(1)
    again = sliding_window_attention(q, k, v, dropout=0.5, **kwargs)
    assert not torch.allclose(dropped, plain) and torch.equal(dropped, again)
    assert (dropped[:, :, 12:] == 0).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(window=0), "window=0"),
        (dict(window=True), "window=True"),
        (dict(window=3, dilation=0), "dilation 0"),
        (dict(window=3, dilation=(1, 2)), "2 entries for 4 heads"),
        (dict(window=3, key_valid=torch.ones(2, 9, dtype=torch.bool)), "key_valid"),
        (dict(window=3, key_valid=torch.ones(2, 10)), "key_valid must be a torch.bool"),
        (dict(window=3, global_positions=torch.zeros(2, 1, dtype=torch.long)), "global_keys"),
        (dict(window=3, global_keys=(torch.ones(2, 3, 1, 8),) * 2 + (None,)), "global keys"),
    ],
)
def test_bad_arguments_name_the_problem(kwargs, message):
    q, k, v = random_qkv(2, 10)
    with pytest.raises(InputError, match=message):
        sliding_window_attention(q, k, v, causal=True, **kwargs)
