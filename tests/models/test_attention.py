"""Multi-head attention against an explicit float64 reference (Vaswani Eq. 1 and §3.2.2)."""

import math

import pytest
import torch

from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask


def reference_attention(mha, x, context, allowed):
    """Loops over batch and heads; explicit matmul, masked softmax, zero rows with no key."""
    w, b = mha.qkv_proj.weight.double(), mha.qkv_proj.bias.double()
    d, h = mha.d_model, mha.n_heads
    dk = d // h
    x, context = x.double(), (x if context is None else context).double()
    q = x @ w[:d].T + b[:d]
    k = context @ w[d : 2 * d].T + b[d : 2 * d]
    v = context @ w[2 * d :].T + b[2 * d :]
    batch, t, s = x.shape[0], x.shape[1], context.shape[1]
    out = torch.zeros(batch, t, d, dtype=torch.float64)
    for bi in range(batch):
        for hi in range(h):
            cols = slice(hi * dk, (hi + 1) * dk)
            scores = q[bi, :, cols] @ k[bi, :, cols].T / math.sqrt(dk)  # (T, S)
            for i in range(t):
                keep = allowed[bi, i] if allowed is not None else torch.ones(s, dtype=torch.bool)
                if not keep.any():
                    continue  # no visible key: the output row stays zero
                row = scores[i].masked_fill(~keep, -math.inf)
                weights = torch.exp(row - row.max())
                weights = weights / weights.sum()
                out[bi, i, cols] = weights @ v[bi, :, cols]
    return out @ mha.out_proj.weight.double().T + mha.out_proj.bias.double()


def allowed_matrix(batch, t, s, causal, key_valid):
    allowed = torch.ones(batch, t, s, dtype=torch.bool)
    if causal:
        for i in range(t):
            allowed[:, i, i + (s - t) + 1 :] = False
    if key_valid is not None:
        allowed &= key_valid[:, None, :]
    return allowed


class ExplicitAttention(MultiHeadAttention):
    """Vanilla math on the explicit scores/weights path (overriding a hook disables SDPA)."""

    def weights(self, scores, mask):
        return super().weights(scores, mask)


@pytest.mark.parametrize("cls", [MultiHeadAttention, ExplicitAttention])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_attention_matches_float64_reference(cls, causal, padded, cross):
    torch.manual_seed(1)
    batch, t, d, h = 3, 7, 24, 4
    s = 9 if cross else t
    mha = cls(d, h).eval()
    torch.nn.init.normal_(mha.qkv_proj.bias)
    torch.nn.init.normal_(mha.out_proj.bias)
    x = torch.randn(batch, t, d)
    context = torch.randn(batch, s, d) if cross else None
    key_valid = None
    if padded:
        key_valid = torch.ones(batch, s, dtype=torch.bool)
        key_valid[0, -3:] = False
        key_valid[1, 0] = False  # a causal row 0 of batch 1 sees no key: must give zeros
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    got = mha(x, context=context, mask=mask)
    want = reference_attention(mha, x, context, allowed_matrix(batch, t, s, causal, key_valid))
    assert cls.fused == (cls is MultiHeadAttention)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_fully_masked_rows_are_zero_without_nan_in_any_dtype():
    mha = MultiHeadAttention(16, 2)
    x = torch.randn(2, 5, 16)
    key_valid = torch.zeros(2, 5, dtype=torch.bool)
    key_valid[1] = True
    for cls in (MultiHeadAttention, ExplicitAttention):
        layer = cls(16, 2)
        layer.load_state_dict(mha.state_dict())
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            layer = layer.to(dtype)
            out = layer(x.to(dtype), mask=AttentionMask(key_valid=key_valid))
            assert torch.isfinite(out).all()
            # batch 0 has no visible key: attention output 0, so only the output bias remains
            torch.testing.assert_close(out[0], layer.out_proj.bias.expand(5, 16))
            out.float().sum().backward()
            grads = [p.grad for p in layer.parameters()]
            assert all(torch.isfinite(g).all() for g in grads)
            layer.zero_grad()


def test_half_precision_masking_matches_float32():
    torch.manual_seed(2)
    mha = ExplicitAttention(32, 4)
    x = torch.randn(2, 6, 32)
    mask = AttentionMask(causal=True, key_valid=torch.tensor([[1, 1, 1, 1, 0, 0]] * 2).bool())
    want = mha(x, mask=mask)
    got = mha.to(torch.bfloat16)(x.bfloat16(), mask=mask)
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)


def test_cache_extends_keys_like_one_pass():
    torch.manual_seed(3)
    from formers.layers.cache import KVCache

    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 10, 16)
    full = mha(x, mask=AttentionMask(causal=True))
    cache = KVCache()
    pieces = [mha(x[:, :4], mask=AttentionMask(causal=True), state=cache)]
    for i in range(4, 10):
        pieces.append(mha(x[:, i : i + 1], mask=AttentionMask(causal=True), state=cache))
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-5, rtol=1e-5)


def test_low_precision_weights_are_the_softmax_rounded_once():
    # `weights` takes no fp32 copy of the (T, S) scores: it relies on torch's bf16 softmax
    # accumulating in fp32 and rounding only its output. Each weight must then be within one
    # bf16 ulp of the exact value; a softmax accumulated in bf16 would be several ulps off.
    torch.manual_seed(3)
    scores = (torch.randn(1, 1, 64, 700) * 8).to(torch.bfloat16)
    mask = AttentionMask(causal=False, key_valid=torch.ones(1, 700, dtype=torch.bool))
    got = ExplicitAttention(16, 2).weights(scores, mask).double()
    exact = torch.softmax(scores.double(), dim=-1)
    torch.testing.assert_close(got, exact, rtol=2**-7, atol=1e-30)


@pytest.mark.parametrize(
    "dtype, keys, fused",
    [(torch.float32, 16, True), (torch.bfloat16, 16, False), (torch.bfloat16, 1100, True)],
)
def test_cpu_kernel_choice_and_agreement(dtype, keys, fused):
    from formers.kernels.attention import fused_kernel_is_faster

    q = torch.randn(1, 2, 4, 8, dtype=dtype)
    k = torch.randn(1, 2, keys, 8, dtype=dtype)
    assert fused_kernel_is_faster(q, k) is fused
    # whichever runs, the vanilla layer agrees with the explicit one in that dtype
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 2).to(dtype)
    explicit = ExplicitAttention(16, 2).to(dtype)
    explicit.load_state_dict(mha.state_dict())
    x = torch.randn(2, keys, 16, dtype=dtype)
    mask = AttentionMask(causal=True)
    torch.testing.assert_close(mha(x, mask=mask), explicit(x, mask=mask), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [
        (torch.float16, -30000.0, 3000.0),
        (torch.bfloat16, -1e30, 1e30),
        (torch.float32, -1e30, 1e30),
    ],
)
def test_masking_holds_for_extreme_scores(dtype, low, high):
    # fp16's range ends at 65504: a bias there could overflow a masked score to -inf (NaN rows)
    # or leave a high masked score above low visible ones; the mask must hold in every dtype
    layer = ExplicitAttention(8, 2)
    key_valid = torch.tensor([[False] * 4, [True, True, False, False]])
    scores = torch.full((2, 2, 3, 4), high, dtype=dtype)
    scores[0] = 1.3 * low  # a row with no visible key, every score very low
    scores[1, ..., :2] = low  # visible keys far below the masked ones
    scores.requires_grad_()
    weights = layer.weights(scores, AttentionMask(causal=False, key_valid=key_valid))
    assert torch.isfinite(weights).all()
    assert (weights[0] == 0).all()  # no visible key: zeros
    assert (weights[1, ..., 2:] == 0).all()  # masked keys get nothing, however high
    torch.testing.assert_close(weights[1].float().sum(-1), torch.ones(2, 3))
    (weights * torch.randn_like(weights)).sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("cls", [MultiHeadAttention, ExplicitAttention])
def test_attention_dropout_acts_in_training_only(cls):
    torch.manual_seed(5)
    dropped = cls(16, 2, dropout=0.5)
    plain = cls(16, 2, dropout=0.0)
    plain.load_state_dict(dropped.state_dict())
    x = torch.randn(2, 9, 16)
    mask = AttentionMask(causal=True)
    dropped.eval(), plain.eval()
    torch.testing.assert_close(dropped(x, mask=mask), plain(x, mask=mask), atol=0, rtol=0)
    dropped.train()
    torch.manual_seed(6)
    first = dropped(x, mask=mask)
    torch.manual_seed(7)
    assert not torch.allclose(first, dropped(x, mask=mask))
    assert not torch.allclose(first, plain(x, mask=mask))
