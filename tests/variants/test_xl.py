"""Transformer-XL attention: rel_shift, A^rel against a term-by-term float64 reference, masks,
clamping, and the config rules."""

import math

import pytest
import torch
from helpers import tiny_config

import formers
from formers.variants.xl import RelativeMultiHeadAttention, XLConfig, rel_shift, xl_mask


def sinusoid(distance: float, d_model: int) -> torch.Tensor:
    """R_d = [sin(d·ω_0) … sin(d·ω_{D/2−1}), cos(d·ω_0) …], ω_i = 1 / 10000^(2i/D), float64."""
    omega = [1.0 / 10000 ** (2 * i / d_model) for i in range(d_model // 2)]
    values = [math.sin(distance * w) for w in omega] + [math.cos(distance * w) for w in omega]
    return torch.tensor(values, dtype=torch.float64)


def randomised(attn: RelativeMultiHeadAttention) -> RelativeMultiHeadAttention:
    """Large random u, v, so that terms (c) and (d) matter as much as (a) and (b)."""
    with torch.no_grad():
        attn.u.normal_()
        attn.v.normal_()
    return attn


# --- (a) the relative shift -------------------------------------------------------------------


@pytest.mark.parametrize("memory_len", [0, 1, 4])
@pytest.mark.parametrize("length", [1, 3, 6])
def test_rel_shift_equals_an_explicit_gather(length, memory_len):
    key_len = memory_len + length
    x = torch.randn(2, 3, length, key_len + 1)  # column c holds distance S − 1 − c
    shifted = rel_shift(x)
    assert shifted.shape == (2, 3, length, key_len)
    assert shifted.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view
    for i in range(length):
        for j in range(i + memory_len + 1):  # the causal region
            distance = i + memory_len - j
            torch.testing.assert_close(shifted[..., i, j], x[..., i, key_len - 1 - distance])


@pytest.mark.parametrize("memory_len", [0, 5])
def test_rel_shift_of_position_scores_equals_indexing_r_by_i_minus_j(memory_len):
    length, dim = 4, 8
    key_len = memory_len + length
    table = torch.randn(key_len + 1, dim)  # table[d + 1] = R_d, d = −1 … S−1
    q = torch.randn(2, 3, length, dim)
    by_distance = q @ table.flip(0).T  # against distances S−1 … −1, (B, H, T, S + 1)
    gathered = torch.zeros(2, 3, length, key_len)
    for i in range(length):
        for j in range(key_len):
            if j <= i + memory_len:
                gathered[..., i, j] = q[..., i, :] @ table[i + memory_len - j + 1]
    allowed = xl_mask(length, memory_len).allowed
    torch.testing.assert_close(rel_shift(by_distance) * allowed, gathered, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length, key_len", [(4, 7), (1, 3), (5, 5)])
def test_rel_shift_gradcheck(length, key_len):
    x = torch.randn(2, length, key_len + 1, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rel_shift, (x,))
    assert torch.autograd.gradgradcheck(rel_shift, (x,))
    # a non-contiguous incoming gradient (the scores are often transposed downstream)
    grad = torch.randn(2, key_len, length, dtype=torch.float64).transpose(1, 2)
    (got,) = torch.autograd.grad(rel_shift(x), x, grad)
    flat = x.detach().clone().view(2, -1).requires_grad_()
    window = flat[:, length - 1 : length - 1 + length * key_len].view(2, length, key_len)
    (want,) = torch.autograd.grad(window, flat, grad)
    torch.testing.assert_close(got, want.view_as(x))


# --- (b) A^rel against the paper's equation ----------------------------------------------------


def reference_attention(attn, x, memory, clamp_len=None, window=None):
    """Dai et al. §3.3 term by term in float64, with explicit i − j (query i at position M + i).

    Returns the scores (B, H, T, S), NaN where masked, and the attention output (B, T, D).
    """
    batch, length, d_model = x.shape
    memory_len = memory.shape[1]
    heads, k_dim = attn.n_heads, attn.d_head
    context = torch.cat([memory, x], dim=1)
    w_q, w_k, w_v = attn.qkv_proj.weight.split(d_model)
    q, k, v = x @ w_q.T, context @ w_k.T, context @ w_v.T  # (B, T, D), (B, S, D), (B, S, D)
    u, v_bias = attn.u, attn.v
    table = torch.full((batch, heads, length, memory_len + length), math.nan, dtype=torch.float64)
    out = torch.zeros(batch, length, d_model, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            hd = slice(h * k_dim, (h + 1) * k_dim)
            for i in range(length):
                scores, values = [], []
                for j in range(memory_len + length):
                    distance = memory_len + i - j
                    if distance < 0 or (window is not None and distance > window):
                        continue
                    if clamp_len is not None:
                        distance = min(distance, clamp_len)
                    r = attn.r_proj.weight @ sinusoid(distance, d_model)  # W_{k,R} R_{i−j}
                    a = q[b, i, hd] @ k[b, j, hd]
                    b_term = q[b, i, hd] @ r[hd]
                    c = u[hd] @ k[b, j, hd]
                    d = v_bias[hd] @ r[hd]
                    table[b, h, i, j] = (a + b_term + c + d) / math.sqrt(k_dim)
                    scores.append(table[b, h, i, j])
                    values.append(v[b, j, hd])
                probs = torch.softmax(torch.stack(scores), dim=0)
                out[b, i, hd] = (probs[:, None] * torch.stack(values)).sum(0)
    return table, out @ attn.out_proj.weight.T


@pytest.mark.parametrize(
    ("memory_len", "clamp_len", "window"),
    [(0, None, None), (4, None, None), (4, 2, None), (4, None, 3), (6, 3, 2)],
)
def test_relative_attention_equals_the_papers_equation_float64(memory_len, clamp_len, window):
    torch.manual_seed(memory_len)
    attn = (
        randomised(RelativeMultiHeadAttention(16, 2, XLConfig(clamp_len=clamp_len))).double().eval()
    )
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    memory = torch.randn(2, memory_len, 16, dtype=torch.float64)
    context = torch.cat([memory, x], dim=1)
    want_scores, want = reference_attention(attn, x, memory, clamp_len, window)
    q, k, _, _ = attn.project(x, context)
    mask = xl_mask(5, memory_len, window)
    scores = attn.scores(q, k, mask)  # (B, H, T, S)
    visible = ~want_scores.isnan()
    torch.testing.assert_close(scores[visible], want_scores[visible], atol=1e-12, rtol=1e-12)
    assert (scores[~visible] <= torch.finfo(scores.dtype).min / 4).all()  # the mask is in
    got = attn(x, context=context, mask=mask)
    # the softmax runs in fp32 whatever the input dtype (MultiHeadAttention.weights)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_relative_attention_in_half_precision_matches_float32(dtype):
    # bf16 adds the mask as a bias; fp16 fills it after the sum (its range is too narrow)
    torch.manual_seed(5)
    attn = randomised(RelativeMultiHeadAttention(16, 2, XLConfig())).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    context = torch.cat([memory, x], dim=1)
    mask = xl_mask(5, 3, same_length_window=2)
    want = attn(x, context=context, mask=mask)
    half = attn.to(dtype)
    got = half(x.to(dtype), context=context.to(dtype), mask=mask)
    torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=5e-2)
    q, k, _, _ = half.project(x.to(dtype), context.to(dtype))
    scores = half.scores(q, k, mask)
    assert torch.isfinite(scores).all()
    assert (scores[..., ~mask.allowed] < -1e4).all()


def test_relative_keys_clamp_distances():
    attn = RelativeMultiHeadAttention(16, 2, XLConfig(clamp_len=3)).double()
    r = attn.relative_keys(7, torch.device("cpu"))  # (H, S + 1, K), distances 6 … −1, cap 3
    table = torch.stack([attn.r_proj.weight @ sinusoid(min(d, 3), 16) for d in range(6, -2, -1)])
    torch.testing.assert_close(r.transpose(0, 1).reshape(8, 16), table, atol=1e-12, rtol=0)


# --- (e) masks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "memory_len"), [(4, 0), (4, 3), (3, 8), (6, 2)])
@pytest.mark.parametrize("window", [None, 0, 2, 5])
def test_mask_against_an_explicit_table(length, memory_len, window):
    allowed = xl_mask(length, memory_len, window).allowed
    assert allowed.shape == (length, memory_len + length)
    for i in range(length):
        for j in range(memory_len + length):
            position, key = memory_len + i, j  # absolute positions
            want = key <= position and (window is None or position - key <= window)
            assert bool(allowed[i, j]) == want, (i, j)


def test_same_length_gives_every_query_mem_len_plus_one_keys():
    allowed = xl_mask(5, 8, same_length_window=8).allowed
    assert allowed.sum(-1).tolist() == [9] * 5
    allowed = xl_mask(5, 8).allowed  # without: the span grows along the segment
    assert allowed.sum(-1).tolist() == [9, 10, 11, 12, 13]


# --- config -----------------------------------------------------------------------------------


def test_preset_is_vanilla_plus_relative_attention_and_no_positions():
    cfg = formers.config("transformer-xl")
    vanilla = formers.config("vanilla")
    assert cfg.attention.kind == "xl" and cfg.position == "none" and cfg.norm == "post"
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff) == (6, 512, 8, 2048)
    assert cfg.dropout == vanilla.dropout
    assert formers.config("transformer-xl", norm="pre").norm == "pre"


def test_enwik8_preset_has_the_papers_41m_parameters():
    cfg = formers.config("transformer-xl-enwik8")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.attention.mem_len) == (
        12,
        512,
        8,
        2048,
        512,
    )
    model = formers.build(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    assert 40_500_000 < n_params < 41_500_000


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"arch": "encoder"}, "arch='decoder'"),
        ({"position": "sinusoidal"}, "position='none'"),
        ({"attention.clamp_len": 0}, "clamp_len"),
        ({"attention.mem_len": -1}, "mem_len"),
        ({"adaptive_cutoffs": [20, 10], "tie_embeddings": False}, "increasing"),
        ({"adaptive_cutoffs": [20, 60], "tie_embeddings": False}, "vocab_size"),
        ({"adaptive_cutoffs": [20]}, "tie_embeddings=False"),
    ],
)
def test_bad_configs_fail_with_a_named_fix(overrides, message):
    with pytest.raises(formers.ConfigError, match=message):
        tiny_config("transformer-xl", **overrides)


def test_config_round_trips_through_a_dict_and_strings():
    cfg = tiny_config(
        "transformer-xl",
        tie_embeddings=False,
        adaptive_cutoffs="10,30",
        **{"attention.clamp_len": "-1", "attention.same_length": "true"},
    )
    assert cfg.adaptive_cutoffs == (10, 30)
    assert cfg.attention.max_distance is None and cfg.attention.same_length
    assert formers.config_from_dict(cfg.to_dict()) == cfg
