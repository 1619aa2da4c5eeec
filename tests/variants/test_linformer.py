"""Linformer (Wang et al. 2020, Eq. 7) against a float64 reference that slices E, F and zeroes
padded keys explicitly, head by head; its degenerate case (k = n, E = F = I is full two-sided
attention); the sharing modes' parameter counts (§4); the refusals (causal use, inputs longer
than n_max); the encoder's padding invariance for every attention kind it accepts."""

import math

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.bench import flops
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.registry import ATTENTION
from formers.variants.linformer import LinformerAttention, LinformerConfig


def reference(attn: LinformerAttention, x: torch.Tensor, key_valid: torch.Tensor | None):
    """Eq. 7 head by head in float64: K_i, V_i projected, padded rows zeroed, E_i[:n]ᵀ K_i and
    F_i[:n]ᵀ V_i, softmax over the k compressed keys, concat, W^O."""
    batch, n, d = x.shape
    heads, dk = attn.n_heads, attn.d_head
    w, b = attn.qkv_proj.weight.double(), attn.qkv_proj.bias.double()
    out = torch.zeros(batch, n, d, dtype=torch.float64)
    for bi in range(batch):
        xb = x[bi].double()
        keep = torch.ones(n, 1, dtype=torch.float64)
        if key_valid is not None:
            keep = key_valid[bi].double()[:, None]
        concat = []
        for h in range(heads):
            rows = slice(h * dk, (h + 1) * dk)
            q = xb @ w[:d][rows].T + b[:d][rows]
            k = (xb @ w[d : 2 * d][rows].T + b[d : 2 * d][rows]) * keep
            v = (xb @ w[2 * d :][rows].T + b[2 * d :][rows]) * keep
            e = attn.e_proj[h if attn.e_proj.shape[0] > 1 else 0, :n].double()
            f_param = attn.f_proj if attn.f_proj is not None else attn.e_proj
            f = f_param[h if f_param.shape[0] > 1 else 0, :n].double()
            weights = torch.softmax(q @ (e.T @ k).T / math.sqrt(dk), dim=-1)
            concat.append(weights @ (f.T @ v))
        out[bi] = torch.cat(concat, -1) @ attn.out_proj.weight.double().T
        out[bi] += attn.out_proj.bias.double()
    return out


def perturb(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))  # no zero biases


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv", "layerwise"])
@pytest.mark.parametrize("length", [5, 9, 16])  # shorter than n_max, and n_max itself
@pytest.mark.parametrize("padded", [False, True])
def test_output_equals_the_float64_reference(sharing, length, padded):
    torch.manual_seed(length)
    attn = (
        LinformerAttention(16, 4, 16, LinformerConfig(proj_len=6, sharing=sharing)).double().eval()
    )
    perturb(attn)
    x = torch.randn(3, length, 16, dtype=torch.float64)
    key_valid = None
    if padded:
        key_valid = torch.ones(3, length, dtype=torch.bool)
        key_valid[0, -2:] = False
        key_valid[2, 1:] = False  # one real token
    got = attn(x, mask=AttentionMask(causal=False, key_valid=key_valid))
    torch.testing.assert_close(got, reference(attn, x, key_valid), atol=1e-12, rtol=1e-12)


def test_a_padded_input_equals_the_unpadded_one():
    torch.manual_seed(1)
    attn = LinformerAttention(16, 2, 12, LinformerConfig(proj_len=4)).double().eval()
    perturb(attn)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    padded = torch.cat([x, 100 * torch.randn(2, 5, 16, dtype=torch.float64)], dim=1)
    key_valid = torch.arange(12)[None].expand(2, 12) < 7
    got = attn(padded, mask=AttentionMask(key_valid=key_valid))[:, :7]
    torch.testing.assert_close(got, attn(x), atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("sharing", ["none", "headwise", "kv"])
def test_identity_projections_with_k_equal_n_are_full_two_sided_attention(sharing):
    torch.manual_seed(2)
    n = 10
    vanilla = MultiHeadAttention(16, 4).double().eval()
    perturb(vanilla)
    low_rank = (
        LinformerAttention(16, 4, n, LinformerConfig(proj_len=n, sharing=sharing)).double().eval()
    )
    low_rank.load_state_dict(vanilla.state_dict(), strict=False)
    with torch.no_grad():
        for p in (low_rank.e_proj, low_rank.f_proj):
            if p is not None:
                p.copy_(torch.eye(n).expand_as(p))
    x = torch.randn(2, n, 16, dtype=torch.float64)
    mask = AttentionMask(causal=False)
    torch.testing.assert_close(low_rank(x, mask=mask), vanilla(x, mask=mask), atol=1e-12, rtol=0)
    with torch.no_grad():  # and the projection is real: another E changes the output
        low_rank.e_proj.add_(0.1 * torch.randn_like(low_rank.e_proj))
    assert not torch.allclose(low_rank(x, mask=mask), vanilla(x, mask=mask), atol=1e-6)


@pytest.mark.parametrize(
    ("sharing", "per_stack"),
    [
        ("none", lambda L, H, n, k: 2 * H * n * k * L),
        ("headwise", lambda L, H, n, k: 2 * n * k * L),
        ("kv", lambda L, H, n, k: n * k * L),
        ("layerwise", lambda L, H, n, k: n * k),
    ],
)
def test_sharing_modes_have_the_papers_parameter_counts(sharing, per_stack):
    layers, heads, n, k = 3, 4, 40, 8
    attention = {"kind": "linformer", "proj_len": k, "max_len": n, "sharing": sharing}
    model = formers.build(tiny_config("bert", n_layers=layers, attention=attention))
    projections = {
        id(p): p.numel()
        for name, p in model.named_parameters(remove_duplicate=False)
        if name.endswith(("e_proj", "f_proj"))
    }
    assert sum(projections.values()) == per_stack(layers, heads, n, k)
    plain = formers.build(tiny_config("bert", n_layers=layers))
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(p.numel() for p in plain.parameters()) + per_stack(layers, heads, n, k)


def test_layerwise_sharing_trains_one_matrix():
    attention = {"kind": "linformer", "proj_len": 4, "max_len": 16, "sharing": "layerwise"}
    model = formers.build(tiny_config("bert", attention=attention))
    first, second = (layer.attn for layer in model.layers)
    assert first.e_proj is second.e_proj and first.f_proj is None
    model(random_tokens(2, 10, 50)).logits.sum().backward()
    assert first.e_proj.grad[:, :10].abs().sum() > 0
    assert (first.e_proj.grad[:, 10:] == 0).all()  # rows past the input are not used


@pytest.mark.parametrize(
    "overrides",
    [
        ("vanilla", {"attention": {"kind": "linformer"}}),
        ("transformer", {"attention": {"kind": "linformer"}}),  # the decoder's self-attention
        ("vanilla", {"attention": {"kind": "linformer", "layers": "0"}}),
    ],
)
def test_causal_use_fails_at_config_time_saying_why_and_what_instead(overrides):
    preset, extra = overrides
    with pytest.raises(formers.ConfigError, match="not causal.*future.*encoder"):
        formers.config(preset, **extra)


def test_the_encoder_of_an_encoder_decoder_can_use_it():
    cfg = tiny_config("transformer", encoder_attention={"kind": "linformer", "proj_len": 4})
    model = formers.build(cfg).eval()
    assert isinstance(model.encoder[0].attn, LinformerAttention)
    assert not isinstance(model.decoder[0].attn, LinformerAttention)
    src = random_tokens(2, 9, 50)
    padded = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], 1)  # pad_id 0
    tgt = random_tokens(2, 5, 50)
    torch.testing.assert_close(model(padded, tgt).logits, model(src, tgt).logits)


def test_a_causal_mask_at_run_time_is_an_error():
    attn = LinformerAttention(16, 2, 8, LinformerConfig(proj_len=4))
    with pytest.raises(formers.InputError, match="causal"):
        attn(torch.randn(1, 5, 16), mask=AttentionMask(causal=True))


def test_an_input_longer_than_n_max_names_both_lengths():
    model = formers.build(
        tiny_config("linformer", **{"attention.max_len": 16, "attention.proj_len": 8})
    )
    model(random_tokens(1, 16, 50))
    with pytest.raises(formers.InputError, match=r"17 positions.*max_len=16"):
        model(random_tokens(1, 17, 50))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("proj_len", 0, "proj_len"), ("sharing", "heads", "sharing"), ("proj_len", 600, "longer")],
)
def test_bad_options_fail_naming_the_field(field, value, match):
    with pytest.raises(formers.ConfigError, match=match):
        formers.config("linformer", **{f"attention.{field}": value})


def encoder_kinds() -> list[str]:
    """Every registered attention kind that a bidirectional encoder accepts."""
    accepted = []
    for kind in ATTENTION:
        try:
            tiny_config("bert", attention={"kind": kind})
        except formers.ConfigError:
            continue
        accepted.append(kind)
    return accepted


def test_the_encoder_accepts_the_non_causal_kinds():
    assert {"vanilla", "topk", "linformer"} <= set(encoder_kinds())


@pytest.mark.parametrize("kind", encoder_kinds())
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_encoder_padding_is_invisible_for_every_kind_it_accepts(kind, norm):
    torch.manual_seed(3)
    cfg = tiny_config("bert", pad_id=0, norm=norm, attention={"kind": kind})
    model = formers.build(cfg).eval()
    perturb(model)
    tokens = random_tokens(3, 11, 50)
    lengths = [11, 6, 1]
    padded = tokens.clone()
    for row, length in enumerate(lengths):
        padded[row, length:] = 0
    out = model(torch.cat([padded, torch.zeros(3, 4, dtype=torch.long)], 1)).logits
    for row, length in enumerate(lengths):
        alone = model(tokens[row : row + 1, :length]).logits[0]
        torch.testing.assert_close(out[row, :length], alone, atol=1e-5, rtol=1e-5)


def test_cost_model_counts_k_keys_and_the_compressions():
    cfg = tiny_config("linformer", **{"attention.proj_len": 8})
    vanilla = tiny_config("bert")
    assert flops.keys_per_query(cfg, 100) == 8
    # per layer: scores and weighted sum over k keys, plus Eᵀ K and Fᵀ V: 8·k·D
    assert flops.attention_flops_per_token(cfg, 100) == 2 * 8 * 8 * 32
    # E, F are not weights every token multiplies whole
    assert flops.matmul_params(cfg) == flops.matmul_params(vanilla)
