"""Longformer attention (Beltagy et al. 2020, §3.1) as a layer and in every model shape: against a
float64 dense twin written from the definition (band + global keys, global rows with Q_g, K_g,
V_g), full attention when the window covers the sequence, causality, cached decoding with the
rolling window, padding invariance in the encoders, empty rows in every precision, the config.

Shapes: B batch, T length, D model width, H heads, K head dim.
"""

from __future__ import annotations

import math
import random

import pytest
import test_battery as battery
import torch
from helpers import random_tokens, tiny_config

import formers
from formers import cli
from formers.bench import flops
from formers.bench.flops import keys_per_query
from formers.infer import generate, iter_generate
from formers.infer.generate import decodes_in_a_window
from formers.kernels.host_reads import no_host_reads
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.longformer import LongformerAttention, LongformerCache, LongformerConfig

D, HEADS = 16, 4
PER_HEAD = (1, 2, 3, 1)


def reference(attn, x, causal, key_valid=None):
    """The layer from the paper's definition in float64, with dense (T, T) masks:
    query i sees key j if j is in i's window or j is a global token (causal: j <= i), and j is
    not padding; a global token's row is instead softmax(Q_g x_g (K_g X)ᵀ/√K) V_g X over every
    (causal: earlier) non-padding position. Rows that see nothing are zero."""
    x = x.double()
    batch, length, d = x.shape
    heads, dim = attn.n_heads, d // attn.n_heads

    def heads_of(proj, inputs):
        w, b = proj.weight.double(), proj.bias.double()
        return (inputs @ w.T + b).view(batch, length, 3, heads, dim).permute(2, 0, 3, 1, 4)

    def softmax_attend(q, k, v, allowed):
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dim)
        has_key = allowed.any(-1, keepdim=True)
        scores = scores.masked_fill(~allowed, float("-inf")).masked_fill(~has_key, 0.0)
        return (torch.softmax(scores, -1) * has_key) @ v

    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    options = attn.options
    dilation = options.dilation
    dilations = dilation if isinstance(dilation, tuple) else (dilation,) * heads
    bands = []
    for dil in dilations:
        gap = i - j if causal else (i - j).abs()
        reach = options.window - 1 if causal else options.window // 2
        bands.append((gap >= 0) & (gap % dil == 0) & (gap <= reach * dil))
    is_global = torch.zeros(batch, length, dtype=torch.bool)
    is_global[:, [p for p in options.global_tokens if p < length]] = True
    valid = torch.ones(batch, length, dtype=torch.bool) if key_valid is None else key_valid
    is_global &= valid
    past = (j <= i) if causal else torch.ones(length, length, dtype=torch.bool)
    allowed = torch.stack(bands)[None] | (is_global[:, None, None, :] & past)  # (B, H, T, T)
    allowed = allowed & valid[:, None, None, :]
    q, k, v = heads_of(attn.qkv_proj, x)
    out = softmax_attend(q, k, v, allowed)
    if attn.global_qkv_proj is not None:
        q_g, k_g, v_g = heads_of(attn.global_qkv_proj, x)
        out_g = softmax_attend(q_g, k_g, v_g, (past & valid[:, None, :])[:, None])
        out = torch.where(is_global[:, None, :, None], out_g, out)
    w_o, b_o = attn.out_proj.weight.double(), attn.out_proj.bias.double()
    return out.transpose(1, 2).reshape(batch, length, d) @ w_o.T + b_o


def random_padding(batch, length):
    valid = torch.rand(batch, length) > 0.25
    valid[1, length // 2 :] = False  # a padded tail
    valid[0, 2:9] = False  # a run that empties some windows
    return valid


def layer(window, dilation=1, global_tokens=(), seed=0):
    torch.manual_seed(seed)
    options = LongformerConfig(window=window, dilation=dilation, global_tokens=global_tokens)
    attn = LongformerAttention(D, HEADS, options).double()
    with torch.no_grad():  # non-zero biases, so a bias mix-up shows
        for p in attn.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return attn


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two_sided"])
@pytest.mark.parametrize("reads", ["allowed", "none"])  # none: as in a GPU training step
def test_layer_equals_the_dense_float64_twin_forward_and_gradients(seed, causal, reads):
    draw = random.Random(seed)
    length = draw.randint(1, 44)  # rarely a multiple of the window
    window = draw.randint(1, 11)
    dilation = [1, 2, PER_HEAD][seed % 3]
    global_tokens = tuple(draw.sample(range(50), draw.randint(0, 3)))
    attn = layer(window, dilation, global_tokens, seed)
    x = torch.randn(2, length, D, dtype=torch.float64, requires_grad=True)
    key_valid = random_padding(2, length) if seed % 2 else None
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    with no_host_reads(reads == "none"):
        got = attn(x, mask=mask)
    want = reference(attn, x, causal, key_valid)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    upstream = torch.randn_like(got)
    leaves = [x, *attn.parameters()]
    grads = torch.autograd.grad(got, leaves, upstream, allow_unused=True)
    expected = torch.autograd.grad(want, leaves, upstream, allow_unused=True)
    for leaf, grad, expected_grad in zip(leaves, grads, expected, strict=True):
        # a part that does not run (no global token inside the sequence) gets no gradient
        grad = torch.zeros_like(leaf) if grad is None else grad
        expected_grad = torch.zeros_like(leaf) if expected_grad is None else expected_grad
        torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two_sided"])
def test_global_tokens_see_and_are_seen_beyond_the_window(causal):
    """§3.1's symmetry: a far token changes the global row (two-sided: a later one too) and the
    global token changes far rows; without global tokens neither reaches past the window."""
    length, window = 40, 4
    for global_tokens, reaches in (((6,), True), ((), False)):
        attn = layer(window, 1, global_tokens).eval()
        x = torch.randn(1, length, D, dtype=torch.float64)
        base = attn(x, mask=AttentionMask(causal=causal))
        far = 0 if causal else 30  # a position the window of 6 does not reach
        moved = x.clone()
        moved[0, far] += 1.0
        row6 = attn(moved, mask=AttentionMask(causal=causal))[0, 6]
        assert (not torch.allclose(row6, base[0, 6])) == reaches
        moved = x.clone()
        moved[0, 6] += 1.0
        row30 = attn(moved, mask=AttentionMask(causal=causal))[0, 30]
        assert (not torch.allclose(row30, base[0, 30])) == reaches


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "two_sided"])
@pytest.mark.parametrize("padded", [False, True])
def test_a_window_covering_the_sequence_is_full_attention(causal, padded):
    vanilla = MultiHeadAttention(D, HEADS).double().eval()
    length = 23
    window = length if causal else 2 * (length - 1)
    attn = LongformerAttention(D, HEADS, LongformerConfig(window=window)).double().eval()
    attn.load_state_dict(vanilla.state_dict())
    x = torch.randn(2, length, D, dtype=torch.float64)
    key_valid = random_padding(2, length) if padded else None
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    torch.testing.assert_close(attn(x, mask=mask), vanilla(x, mask=mask), rtol=1e-10, atol=1e-12)
    attn.options = LongformerConfig(window=10_000)  # and past the sequence
    torch.testing.assert_close(attn(x, mask=mask), vanilla(x, mask=mask), rtol=1e-10, atol=1e-12)
    attn.options = LongformerConfig(window=5)  # the window is real below that
    assert not torch.allclose(attn(x, mask=mask), vanilla(x, mask=mask), atol=1e-6)


def test_global_projections_without_global_tokens_are_kept_and_change_nothing():
    """global_projections=True keeps Q_g, K_g, V_g with no global token (weights that hold
    them load); the layer is then the plain window, and the same weights with global tokens
    equal the dense twin."""
    plain = layer(5)
    options = LongformerConfig(window=5, global_projections=True)
    kept = LongformerAttention(D, HEADS, options).double()
    assert kept.global_qkv_proj is not None
    kept.load_state_dict(plain.state_dict(), strict=False)  # the window's weights
    x = torch.randn(2, 23, D, dtype=torch.float64)
    key_valid = random_padding(2, 23)
    for causal in (False, True):
        mask = AttentionMask(causal=causal, key_valid=key_valid)
        assert torch.equal(kept(x, mask=mask), plain(x, mask=mask))
        kept.options = LongformerConfig(window=5, global_tokens=(0, 7), global_projections=True)
        want = reference(kept, x, causal, key_valid)
        torch.testing.assert_close(kept(x, mask=mask), want, rtol=1e-9, atol=1e-10)
        kept.options = options


def small(arch="decoder", **overrides):
    """A tiny longformer whose window is far shorter than the battery's sequences."""
    attention = {
        "kind": "longformer",
        "window": "3,4",
        "dilation": ",".join(map(str, PER_HEAD)),
        "global_tokens": "0,3",
    }
    return tiny_config("longformer", arch=arch, attention=attention, **overrides)


ENCODERS = {
    "encoder": lambda: small("encoder"),
    "encoder_decoder": lambda: tiny_config(
        "transformer", pad_id=0, encoder_attention={"kind": "longformer", "window": 4}
    ),
    "encoder_decoder_globals": lambda: tiny_config(
        "transformer",
        pad_id=0,
        encoder_attention={"kind": "longformer", "window": 2, "global_tokens": (0,)},
    ),
}


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_the_language_model_never_sees_the_future(mode):
    battery.test_causal_models_never_see_the_future("longformer", small(), mode)


def test_cached_greedy_generation_equals_recomputation_far_past_the_window():
    torch.manual_seed(0)
    cfg = formers.presets.override(small(), {"tie_embeddings": False})
    model = formers.build(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    span = (4 - 1) * max(PER_HEAD) + 1  # the widest window reaches 10 positions
    for prompt_length in (1, 2 * span):
        prompt = random_tokens(2, prompt_length, battery.V)
        cached = generate(model, prompt, 4 * span, temperature=0)
        recomputed = generate(model, prompt, 4 * span, temperature=0, use_cache=False)
        assert torch.equal(cached, recomputed)
        assert len(set(cached[0, prompt_length:].tolist())) > 3  # a real continuation


def test_cached_logits_equal_the_full_pass_and_the_cache_stays_small():
    model = formers.build(small()).eval()
    tokens = random_tokens(2, 36, battery.V)
    full = model(tokens).logits
    cache = model.new_cache()
    pieces = [model(tokens[:, :7], cache=cache).logits]  # a prompt through the blocked kernel
    sizes = []
    for t in range(7, 36):
        pieces.append(model(tokens[:, t : t + 1], cache=cache).logits)
        sizes.append([state.attn.keys.shape[2] for state in cache.layers])
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)
    spans = [state.attn.span for state in cache.layers]
    assert spans == [(3 - 1) * 3 + 1, (4 - 1) * 3 + 1]
    assert sizes[-1] == spans and max(max(s) for s in sizes) <= max(spans)
    for state in cache.layers:  # K_g, V_g kept up to the last global position only
        assert state.attn.global_context_keys.shape[2] == 4


def test_beam_reordering_keeps_the_right_rows():
    model = formers.build(small()).eval()
    tokens = random_tokens(3, 30, battery.V)
    cache = model.new_cache()
    model(tokens[:, :20], cache=cache)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    got = model(tokens[index, 20:21], cache=cache).logits[:, -1]
    want = model(tokens[index, :21]).logits[:, -1]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(ENCODERS))
def test_padding_is_invisible_in_the_encoders(name):
    battery.test_padding_is_invisible_where_it_is_masked(name, ENCODERS[name]())


def test_the_encoder_window_is_two_sided():
    """One layer, window 4: position 10 sees 8 … 12, so 12 changes it and 13 does not."""
    cfg = tiny_config("longformer", arch="encoder", n_layers=1, attention={"window": 4})
    model = formers.build(cfg).eval()
    tokens = random_tokens(1, 20, battery.V)
    base = model(tokens).logits[0, 10]
    for position, reaches in ((8, True), (12, True), (13, False), (7, False)):
        changed = tokens.clone()
        changed[0, position] = changed[0, position] % (battery.V - 1) + 1
        assert (not torch.allclose(model(changed).logits[0, 10], base)) == reaches, position


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["decoder", "encoder", "encoder_decoder_globals"])
def test_rows_without_keys_stay_finite(name, dtype):
    cfg = small("decoder") if name == "decoder" else ENCODERS[name]()
    battery.test_rows_without_keys_stay_finite_in_every_precision(name, cfg, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_layer_with_no_visible_key_outputs_its_bias(dtype):
    options = LongformerConfig(window=3, dilation=PER_HEAD, global_tokens=(0, 5))
    attn = LongformerAttention(D, HEADS, options)
    attn = attn.to(dtype)
    x = torch.randn(2, 12, D, dtype=dtype, requires_grad=True)
    key_valid = torch.ones(2, 12, dtype=torch.bool)
    key_valid[0] = False  # no key at all, globals included
    key_valid[1, 3:] = False
    for causal in (True, False):
        out = attn(x, mask=AttentionMask(causal=causal, key_valid=key_valid))
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out[0], attn.out_proj.bias.expand(12, D))
        out.float().sum().backward()
        assert torch.isfinite(x.grad).all()


def test_every_parameter_learns_with_global_tokens():
    for cfg in (small(), ENCODERS["encoder_decoder_globals"]()):
        battery.test_every_parameter_learns_and_the_config_rebuilds_the_same_model("x", cfg)


def test_per_layer_windows_and_command_line_values():
    cfg = small()
    assert cfg.attention.window == (3, 4) and cfg.attention.dilation == PER_HEAD
    assert cfg.attention.global_tokens == (0, 3)
    assert [cfg.attention_at("decoder", i).window for i in range(2)] == [3, 4]
    assert [layer.attn.options.window for layer in formers.build(cfg).layers] == [3, 4]
    assert formers.config_from_dict(cfg.to_dict()) == cfg  # JSON lists back to tuples
    one = formers.config(
        "longformer", **{"attention.window": "64", "attention.global_tokens": "[0]"}
    )
    assert one.attention.window == 64 and one.attention.global_tokens == (0,)
    none = formers.config("longformer", **{"attention.global_tokens": "none"})
    assert none.attention.global_tokens == ()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"attention.window": 0}, "attention.window=0 must be a positive"),
        ({"attention.window": "3,4,5"}, "3 entries for a stack of 2 layers"),
        ({"attention.window": "a"}, "attention.window='a' must be an integer"),
        ({"attention.dilation": "1,2"}, "2 entries for n_heads=4"),
        ({"attention.dilation": 0}, "attention.dilation=0 must be a positive integer"),
        ({"attention.global_tokens": "0,0"}, "must be distinct positions"),
        ({"attention.global_tokens": -1}, "must be distinct positions >= 0"),
    ],
)
def test_bad_configs_name_the_field(overrides, message):
    with pytest.raises(formers.ConfigError, match=message):
        tiny_config("longformer", **overrides)


def test_preset_and_cost_model():
    cfg, vanilla = formers.config("longformer"), formers.config("vanilla")
    assert cfg.attention.kind == "longformer" and cfg.attention.window == 256
    assert cfg.attention.global_tokens == () and cfg.attention.dilation == 1
    assert cfg.ffn == vanilla.ffn and cfg.position == vanilla.position
    assert keys_per_query(cfg, 4096) == 256 and keys_per_query(cfg, 100) == 100
    assert keys_per_query(vanilla, 4096) == 4096
    with_globals = formers.config("longformer", **{"attention.global_tokens": "0,1"})
    assert keys_per_query(with_globals, 4096) == 258


def test_flops_count_the_window_and_the_global_projections():
    d, layers, seq = 32, 2, 64
    plain = tiny_config("longformer", **{"attention.window": 5})
    vanilla = tiny_config("vanilla")
    assert flops.matmul_params(plain) == flops.matmul_params(vanilla)
    assert flops.attention_flops_per_token(plain, seq) == 2 * 2 * layers * 5 * d
    assert flops.attention_flops_per_token(plain, 3) == 2 * 2 * layers * 3 * d  # n < window
    both = tiny_config("longformer", **{"attention.window": 5, "attention.global_tokens": "0,9"})
    # K_g and V_g project every token (two-sided use; Q_g only the two global ones)
    assert flops.matmul_params(both) == flops.matmul_params(vanilla) + layers * (2 * d * d + 2 * d)
    # each query sees 5 + 2 keys; the 2 global rows see all 64: 2 more keys per token
    assert flops.attention_flops_per_token(both, seq) == 2 * 2 * layers * (5 + 2 + 2) * d


def test_the_cache_is_a_layer_state_of_its_own():
    options = LongformerConfig(window=5, dilation=PER_HEAD, global_tokens=(2,))
    attn = LongformerAttention(D, HEADS, options)
    state = attn.new_state()
    assert isinstance(state, LongformerCache) and state.span == 4 * 3 + 1
    with pytest.raises(formers.InputError, match="without padding"):
        mask = AttentionMask(causal=True, key_valid=torch.ones(1, 4, dtype=torch.bool))
        attn(torch.randn(1, 4, D), mask=mask, state=state)


def test_only_a_model_windowed_in_every_layer_decodes_in_a_window():
    assert decodes_in_a_window(formers.build(small()))
    assert not decodes_in_a_window(formers.build(tiny_config("vanilla")))
    mixed = tiny_config("longformer", attention={"window": 4, "layers": "0"})  # layer 1 vanilla
    assert not decodes_in_a_window(formers.build(mixed))


def test_formers_generate_keeps_the_rolling_cache_past_the_training_length(
    tmp_path, monkeypatch, capsys
):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(200)))
    run = tmp_path / "run"
    sizes = "--model.n_layers 1 --model.d_model 32 --model.n_heads 2 --model.d_ff 64"
    flags = f"{sizes} --model.attention.window 4 --train.seq_len 16 --train.batch_size 2"
    flags += " --train.max_steps 2 --train.eval_every 0 --no-progress"
    argv = ["train", "--preset", "longformer", "--run-dir", str(run), "--train.corpus"]
    assert cli.main([*argv, str(corpus), *flags.split()]) == 0
    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return iter_generate(*args, **kwargs)

    monkeypatch.setattr(formers.infer, "iter_generate", spy)
    args = ["generate", str(run), "--max-new-tokens", "40", "--temperature", "0"]
    assert cli.main(args) == 0
    assert seen["max_context"] is None  # not the training length, 16
    assert cli.main([*args, "--max-context", "16"]) == 0 and seen["max_context"] == 16
    capsys.readouterr()
