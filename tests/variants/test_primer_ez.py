"""Primer EZ: the depthwise causal convolution, MDHA, its cache, and the presets."""

import dataclasses

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.infer import generate
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.primer_ez import DepthwiseCausalConv, MDHAConfig, MultiDConvHeadAttention


def randomise(module, seed=0):
    """Random taps and biases, so no test passes by the symmetry of the initialisation."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if "dconv" in name or isinstance(module, DepthwiseCausalConv):
                param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return module


def reference_conv(conv, x, prefix):
    """y[b,h,t,c] = bias[h,c] + Σ_j w_j[h,c] · x[b,h,t−j,c], x before t=0 from prefix, else 0."""
    batch, heads, length, dim = x.shape
    past = prefix.shape[2] if prefix is not None else 0
    full = x if prefix is None else torch.cat([prefix, x], dim=2)
    out = torch.zeros_like(x)
    for b in range(batch):
        for h in range(heads):
            for t in range(length):
                for c in range(dim):
                    channel = h * dim + c
                    total = conv.bias[channel].item() if conv.bias is not None else 0.0
                    for j in range(conv.kernel_size):
                        source = past + t - j
                        if source >= 0:
                            total += conv.taps[j][channel].item() * full[b, h, source, c].item()
                    out[b, h, t, c] = total
    return out


@pytest.mark.parametrize("kernel_size", [1, 3, 4])
@pytest.mark.parametrize("prefix_len", [None, 0, 1, 2, 5])
@pytest.mark.parametrize("bias", [True, False])
def test_depthwise_conv_matches_loop_reference_float64(kernel_size, prefix_len, bias):
    torch.manual_seed(kernel_size)
    conv = randomise(DepthwiseCausalConv(3, 4, kernel_size, bias=bias).double())
    x = torch.randn(2, 3, 6, 4, dtype=torch.float64)
    prefix = None if prefix_len is None else torch.randn(2, 3, prefix_len, 4, dtype=torch.float64)
    torch.testing.assert_close(conv(x, prefix), reference_conv(conv, x, prefix), rtol=0, atol=1e-12)


def test_official_initialisation():
    conv = DepthwiseCausalConv(2, 4, kernel_size=3)
    assert [tap.shape for tap in conv.taps] == [(8,)] * 3
    assert torch.equal(conv.taps[0], torch.full((8,), 0.5))
    assert torch.equal(conv.taps[1], torch.full((8,), 0.5 / 3))
    assert torch.equal(conv.taps[2], torch.full((8,), 0.5 / 3))
    assert torch.equal(conv.bias, torch.zeros(8))


def test_conv_is_causal():
    conv = randomise(DepthwiseCausalConv(2, 4, kernel_size=3).double())
    x = torch.randn(1, 2, 10, 4, dtype=torch.float64)
    base = conv(x)
    for t in (0, 4, 9):
        changed = x.clone()
        changed[:, :, t] += 1.0
        out = conv(changed)
        torch.testing.assert_close(out[:, :, :t], base[:, :, :t], rtol=0, atol=0)
        # t, t+1, t+2 see the change; t+3 and later do not (kernel 3)
        assert (out[:, :, t : t + 3] != base[:, :, t : t + 3]).all()
        torch.testing.assert_close(out[:, :, t + 3 :], base[:, :, t + 3 :], rtol=0, atol=0)


@pytest.mark.parametrize("padded", [False, True])
def test_delta_kernel_and_zero_bias_equal_vanilla_attention(padded):
    torch.manual_seed(0)
    vanilla = MultiHeadAttention(16, 4).double()
    mdha = MultiDConvHeadAttention(16, 4, MDHAConfig(kernel_size=3)).double()
    missing, unexpected = mdha.load_state_dict(vanilla.state_dict(), strict=False)
    assert not unexpected and all("dconv" in name for name in missing)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    key_valid = torch.ones(2, 7, dtype=torch.bool)
    if padded:
        key_valid[1, 5:] = False
    mask = AttentionMask(causal=True, key_valid=key_valid if padded else None)
    # the official initialisation really convolves: not vanilla
    assert not torch.allclose(mdha(x, mask=mask), vanilla(x, mask=mask))
    with torch.no_grad():
        for conv in (mdha.q_dconv, mdha.k_dconv, mdha.v_dconv):
            for shift, tap in enumerate(conv.taps):
                tap.fill_(1.0 if shift == 0 else 0.0)
            conv.bias.zero_()
    torch.testing.assert_close(mdha(x, mask=mask), vanilla(x, mask=mask), rtol=0, atol=1e-12)


def test_mdha_runs_on_the_fused_attention_kernel(monkeypatch):
    # MDHA changes only `project`, so its scores and weights are vanilla: the fused kernel runs
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counting)
    mdha = MultiDConvHeadAttention(16, 2, MDHAConfig())
    mdha(torch.randn(2, 7, 16), mask=AttentionMask(causal=True))
    assert calls == [(2, 2, 7, 8)]


@pytest.mark.parametrize("name", ["primer-ez", "dconv"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_model_is_causal(name, norm):
    torch.manual_seed(0)
    model = randomise(formers.build(tiny_config(name, norm=norm))).eval()
    tokens = random_tokens(2, 12, 50)
    base = model(tokens).logits
    for t in (0, 5, 10):
        changed = tokens.clone()
        changed[:, t + 1 :] = random_tokens(2, 12 - t - 1, 50)
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=1e-6)
        assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :])


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
def test_cached_decoding_equals_full_pass(kernel_size):
    torch.manual_seed(0)
    cfg = tiny_config("primer-ez", **{"attention.kernel_size": kernel_size})
    model = randomise(formers.build(cfg)).eval()
    tokens = random_tokens(2, 13, 50)
    full = model(tokens).logits
    cache = model.new_cache()
    # chunks shorter and longer than kernel−1 exercise partial and full left contexts
    chunks = [(0, 1), (1, 2), (2, 6), (6, 7), (7, 8), (8, 13)]
    steps = [model(tokens[:, a:b], cache=cache).logits for a, b in chunks]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    state = cache.layers[0].attn.tails
    assert sorted(state) == ["k", "q", "v"]
    assert state["q"].shape == (2, 4, kernel_size - 1, 8)


def test_cached_decoding_needs_the_conv_state():
    torch.manual_seed(0)
    model = randomise(formers.build(tiny_config("primer-ez"))).eval()
    tokens = random_tokens(2, 9, 50)
    full = model(tokens).logits
    cache = model.new_cache()
    model(tokens[:, :8], cache=cache)
    for layer in cache.layers:
        layer.attn.tails.clear()  # forget the pre-conv projections: the step sees zeros instead
    last = model(tokens[:, 8:], cache=cache).logits
    assert not torch.allclose(last, full[:, 8:], atol=1e-3)


@pytest.mark.parametrize("name", ["primer-ez", "dconv"])
def test_cached_greedy_generation_equals_uncached(name):
    torch.manual_seed(0)
    # untied: a tiny random model with tied embeddings mostly repeats its input token
    model = randomise(formers.build(tiny_config(name, tie_embeddings=False)), seed=1)
    prompt = random_tokens(2, 5, 50)
    cached = generate(model, prompt, 16, temperature=0, use_cache=True)
    uncached = generate(model, prompt, 16, temperature=0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert len(set(cached[0, 5:].tolist())) > 1  # a real continuation, not one repeated token


@pytest.mark.parametrize("kernel_size", [1, 3, 4])
@pytest.mark.parametrize("conv_bias", [True, False])
def test_parameter_count_differs_from_vanilla_by_the_conv_weights_and_biases(
    kernel_size, conv_bias
):
    def count(model):
        return sum(p.numel() for p in model.parameters())

    vanilla = formers.build(tiny_config("vanilla", n_layers=3))
    attention = {"attention.kernel_size": kernel_size, "attention.conv_bias": conv_bias}
    for name in ("dconv", "primer-ez"):
        model = formers.build(tiny_config(name, n_layers=3, **attention))
        # per layer: q, k and v each have kernel_size taps of D channels, plus D biases
        expected = 3 * 3 * 32 * (kernel_size + int(conv_bias))
        assert count(model) - count(vanilla) == expected
    assert count(formers.build(tiny_config("squared-relu", n_layers=3))) == count(vanilla)


def test_presets_are_vanilla_plus_their_diffs():
    vanilla = formers.config("vanilla")
    primer = formers.config("primer-ez")
    assert primer.ffn.activation == "squared_relu"
    assert primer.attention == MDHAConfig(kernel_size=3)
    as_vanilla = dataclasses.replace(primer, ffn=vanilla.ffn, attention=formers.AttentionConfig())
    assert as_vanilla == vanilla
    assert formers.config("squared-relu") == dataclasses.replace(vanilla, ffn=primer.ffn)
    assert formers.config("dconv") == dataclasses.replace(vanilla, attention=primer.attention)
    # the ablations are also one-line overrides of vanilla
    assert formers.config("vanilla", **{"ffn.activation": "squared_relu"}) == formers.config(
        "squared-relu"
    )
    assert formers.config("vanilla", attention="mdha") == formers.config("dconv")


def test_config_round_trips_and_rejects_bad_kernels():
    cfg = formers.config("primer-ez", **{"attention.kernel_size": "5"})  # CLI strings coerced
    assert cfg.attention.kernel_size == 5
    assert formers.config_from_dict(cfg.to_dict()) == cfg
    for bad in (0, -1, True, 2.5):
        with pytest.raises(formers.ConfigError, match="attention.kernel_size"):
            formers.config("primer-ez", **{"attention.kernel_size": bad})


def test_memory_context_gives_the_convolution_its_left_context():
    """Transformer-XL contract: project(x, cat(memory, x)) == the x rows of one pass."""
    torch.manual_seed(0)
    mdha = randomise(MultiDConvHeadAttention(16, 4, MDHAConfig(kernel_size=3))).double()
    memory, x = torch.randn(2, 5, 16).double(), torch.randn(2, 4, 16).double()
    whole = mdha.project(torch.cat([memory, x], 1))
    q, k, v, _ = mdha.project(x, context=torch.cat([memory, x], 1))
    torch.testing.assert_close(q, whole[0][:, :, 5:], rtol=0, atol=1e-12)
    torch.testing.assert_close(k, whole[1], rtol=0, atol=1e-12)
    torch.testing.assert_close(v, whole[2], rtol=0, atol=1e-12)
    alone = mdha.project(x)[0]  # without memory the first queries see zero padding
    assert not torch.allclose(alone[:, :, :2], q[:, :, :2])
    torch.testing.assert_close(alone[:, :, 2:], q[:, :, 2:], rtol=0, atol=1e-12)
    with pytest.raises(formers.InputError, match="cat\\(memory, x\\)"):
        mdha.project(x, context=memory[:, :3])
