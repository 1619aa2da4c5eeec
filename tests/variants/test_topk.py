"""Explicit sparse (top-k) attention against a float64 row-by-row reference (Zhao et al. 2019,
Eq. 6–7), its degenerate case (k ≥ keys is vanilla attention), ties, and the preset."""

import math

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.topk import TopKAttention, TopKConfig, keep_top_k


def reference_weights(scores: torch.Tensor, allowed: torch.Tensor, k: int) -> torch.Tensor:
    """Row by row in float64: among the visible keys keep those >= the k-th largest visible
    score (all of them when fewer than k are visible), softmax over those, zeros elsewhere."""
    batch, heads, t, s = scores.shape
    out = torch.zeros(batch, heads, t, s, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            for i in range(t):
                visible = allowed[b, i]
                if not visible.any():
                    continue
                row = scores[b, h, i].double()
                values = sorted(row[visible].tolist(), reverse=True)
                kth = values[min(k, len(values)) - 1]
                keep = visible & (row >= kth)
                exp = torch.where(keep, torch.exp(row - row[keep].max()), torch.zeros(()))
                out[b, h, i] = exp / exp.sum()
    return out


def allowed_matrix(batch, t, s, causal, key_valid):
    allowed = torch.ones(batch, t, s, dtype=torch.bool)
    if causal:
        allowed &= torch.ones(t, s, dtype=torch.bool).tril(s - t)
    if key_valid is not None:
        allowed &= key_valid[:, None, :]
    return allowed


def random_key_valid(batch, s):
    valid = torch.rand(batch, s) > 0.3
    valid[0] = False  # a sequence that is all padding: every row sees nothing
    return valid


@pytest.mark.parametrize("seed", range(6))
def test_weights_equal_the_float64_reference(seed):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    batch, heads = 3, 2
    t = int(torch.randint(1, 12, (), generator=gen))
    s = t + int(torch.randint(0, 5, (), generator=gen))  # a cache-like prefix of extra keys
    k = int(torch.randint(1, s + 3, (), generator=gen))  # below, at and above the key count
    causal = bool(seed % 2)
    key_valid = random_key_valid(batch, s) if seed % 3 else None
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    scores = torch.randn(batch, heads, t, s, dtype=torch.float64) * 3
    attn = TopKAttention(8, heads, TopKConfig(top_k=k)).double()
    got = attn.weights(scores, mask)
    want = reference_weights(scores, allowed_matrix(batch, t, s, causal, key_valid), k)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)


def test_layer_output_equals_the_reference_weights_times_values():
    torch.manual_seed(3)
    attn = TopKAttention(16, 2, TopKConfig(top_k=3)).double().eval()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    mask = AttentionMask(causal=True, key_valid=torch.rand(2, 9) > 0.2)
    q, k, v, _ = attn.project(x)
    weights = reference_weights(
        q @ k.transpose(-2, -1) / math.sqrt(8), allowed_matrix(2, 9, 9, True, mask.key_valid), 3
    )
    heads = (weights @ v).transpose(1, 2).reshape(2, 9, 16)
    want = attn.out_proj(heads)
    torch.testing.assert_close(attn(x, mask=mask), want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_k_at_least_the_keys_is_vanilla_attention(causal):
    torch.manual_seed(4)
    vanilla = MultiHeadAttention(16, 4).double().eval()
    sparse = TopKAttention(16, 4, TopKConfig(top_k=11)).double().eval()
    sparse.load_state_dict(vanilla.state_dict())
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    key_valid = torch.ones(2, 11, dtype=torch.bool)
    key_valid[1, -4:] = False
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    torch.testing.assert_close(sparse(x, mask=mask), vanilla(x, mask=mask), atol=1e-12, rtol=0)
    scores = torch.randn(2, 4, 11, 11, dtype=torch.float64)
    torch.testing.assert_close(
        sparse.weights(scores, mask), vanilla.weights(scores, mask), atol=1e-12, rtol=0
    )
    # and the selection is real below that: k = 2 changes the output
    sparse.options = TopKConfig(top_k=2)
    assert not torch.allclose(sparse(x, mask=mask), vanilla(x, mask=mask), atol=1e-6)


def test_ties_at_the_threshold_are_all_kept():
    scores = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0]])
    kept = keep_top_k(scores, 2) > torch.finfo(torch.float32).min
    assert kept.tolist() == [[True, True, True, True, False]]  # 4 keys kept for k = 2
    assert (keep_top_k(scores, 5) == scores).all() and (keep_top_k(scores, 9) == scores).all()


def test_a_row_with_fewer_visible_keys_than_k_keeps_them_all():
    attn = TopKAttention(8, 1, TopKConfig(top_k=4))
    scores = torch.randn(1, 1, 3, 3)
    mask = AttentionMask(causal=True)  # rows see 1, 2 and 3 keys, all fewer than k = 4
    vanilla = MultiHeadAttention(8, 1)
    torch.testing.assert_close(attn.weights(scores, mask), vanilla.weights(scores, mask))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fully_masked_rows_are_zero_without_nan(dtype):
    attn = TopKAttention(16, 2, TopKConfig(top_k=2)).to(dtype)
    x = torch.randn(2, 6, 16, dtype=dtype)
    key_valid = torch.zeros(2, 6, dtype=torch.bool)
    key_valid[1, :3] = True
    out = attn(x, mask=AttentionMask(causal=True, key_valid=key_valid))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[0], attn.out_proj.bias.expand(6, 16))  # no key: bias only
    out.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in attn.parameters())


def test_dropped_scores_get_no_gradient():
    scores = torch.randn(1, 1, 1, 6, requires_grad=True)
    weights = TopKAttention(8, 1, TopKConfig(top_k=2)).weights(scores, AttentionMask())
    (weights * torch.randn(1, 1, 1, 6)).sum().backward()
    kept = weights[0, 0, 0] > 0
    assert kept.sum() == 2
    assert (scores.grad[0, 0, 0][~kept] == 0).all() and (scores.grad[0, 0, 0][kept] != 0).all()


def test_preset_is_vanilla_with_eight_keys_per_query():
    cfg, vanilla = formers.config("sparse-topk"), formers.config("vanilla")
    assert cfg.attention.kind == "topk" and cfg.attention.top_k == 8
    assert cfg.ffn == vanilla.ffn and (cfg.d_model, cfg.n_layers) == (vanilla.d_model, 6)
    with pytest.raises(formers.ConfigError, match="top_k"):
        formers.config("sparse-topk", **{"attention.top_k": 0})


def test_sparse_lm_is_causal_and_differs_from_vanilla():
    model = formers.build(tiny_config("sparse-topk", **{"attention.top_k": 2})).eval()
    tokens = random_tokens(2, 12, 50)
    base = model(tokens).logits
    changed = tokens.clone()
    changed[:, 7:] = random_tokens(2, 5, 50)
    torch.testing.assert_close(model(changed).logits[:, :7], base[:, :7], atol=1e-6, rtol=1e-6)
    vanilla = formers.build(tiny_config("vanilla")).eval()
    vanilla.load_state_dict(model.state_dict())
    assert not torch.allclose(vanilla(tokens).logits[:, 3:], base[:, 3:], atol=1e-4)
