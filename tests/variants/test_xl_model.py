"""Transformer-XL model: memory equivalence, stop-gradient, causality, generation, adaptive
softmax and evaluation with other lengths than in training."""

import pytest
import torch
import torch.nn.functional as F
from helpers import random_tokens, tiny_config

import formers
from formers.infer import generate
from formers.models import DecoderLM, reconfigure
from formers.train.evaluate import evaluate
from formers.variants.xl import XLMask, block, xl_mask

V = 50


def xl(mem_len=16, **overrides):
    overrides = {"attention.mem_len": mem_len, **overrides}
    model = formers.build(tiny_config("transformer-xl", **overrides))
    with torch.no_grad():  # random u, v: zero-initialised-like biases would hide mistakes
        for layer in model.layers:
            layer.attn.u.normal_()
            layer.attn.v.normal_()
    return model.eval()


def run_segments(model, tokens, lengths):
    """Logits of consecutive segments of `tokens`, each fed with the previous memory."""
    logits, memory, start = [], None, 0
    for length in lengths:
        out = model(tokens[:, start : start + length], memory=memory)
        logits.append(out.logits)
        memory, start = out.memory, start + length
    return torch.cat(logits, dim=1), memory


# --- (c) memory equivalence -------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("untie", [False, True])
def test_segments_with_memory_equal_one_pass_when_memory_holds_everything(norm, untie):
    model = xl(mem_len=16, norm=norm, **{"attention.untie_rel_bias": untie})
    tokens = random_tokens(2, 14, V)
    full = model(tokens).logits
    for lengths in ([6, 8], [5, 5, 4], [1] * 14):
        logits, memory = run_segments(model, tokens, lengths)
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)
        assert [m.shape for m in memory] == [(2, 14, 32)] * 2


def one_pass_with_mask(model, tokens, allowed):
    """The model over all of `tokens` at once, with the (T, T) mask `allowed` in every layer."""
    original = block.xl_mask
    block.xl_mask = lambda query_len, memory_len, window, device: XLMask(
        causal=True, allowed=allowed
    )
    try:
        return model(tokens).logits
    finally:
        block.xl_mask = original


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("mem_len", [0, 1, 3])
def test_shorter_memory_equals_one_pass_with_the_matching_window(norm, mem_len):
    model = xl(mem_len=mem_len, norm=norm)
    tokens = random_tokens(2, 12, V)
    first = 7
    logits, memory = run_segments(model, tokens, [first, 5])
    assert [m.shape[1] for m in memory] == [mem_len] * 2
    # segment 2 (positions 7 … 11) sees the last mem_len positions of segment 1 and itself
    allowed = xl_mask(12, 0).allowed.clone()
    allowed[first:, : first - mem_len] = False
    want = one_pass_with_mask(model, tokens, allowed)
    torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)
    # and the window is real: a full pass differs
    assert not torch.allclose(logits[:, first:], model(tokens).logits[:, first:], atol=1e-4)


@pytest.mark.parametrize("mem_len", [2, 5, 9])
def test_same_length_segments_equal_one_same_length_pass(mem_len):
    model = xl(mem_len=mem_len, **{"attention.same_length": True})
    tokens = random_tokens(2, 15, V)
    logits, _ = run_segments(model, tokens, [5, 5, 5])
    torch.testing.assert_close(logits, model(tokens).logits, atol=1e-5, rtol=1e-5)
    # each query sees itself and mem_len keys before it
    allowed = xl_mask(15, 0).allowed.clone()
    for i in range(15):
        allowed[i, : max(0, i - mem_len)] = False
    torch.testing.assert_close(
        logits, one_pass_with_mask(model, tokens, allowed), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("mem_len", [3, 5])
def test_same_length_inclusive_shows_each_query_mem_len_keys_itself_included(mem_len):
    options = {"attention.same_length": True, "attention.same_length_inclusive": True}
    model = xl(mem_len=mem_len, **options)
    tokens = random_tokens(2, 15, V)
    logits, _ = run_segments(model, tokens, [5, 5, 5])
    allowed = xl_mask(15, 0).allowed.clone()
    for i in range(15):
        allowed[i, : max(0, i - mem_len + 1)] = False
    torch.testing.assert_close(
        logits, one_pass_with_mask(model, tokens, allowed), atol=1e-5, rtol=1e-5
    )


def test_clamp_len_caps_distances_in_the_model():
    tokens = random_tokens(2, 12, V)
    model = xl(mem_len=12)
    base = model(tokens).logits
    model = reconfigure(model, clamp_len=11)  # every distance in a 12-token pass is <= 11
    torch.testing.assert_close(model(tokens).logits, base, atol=0, rtol=0)
    model = reconfigure(model, clamp_len=3)
    clamped = model(tokens).logits
    torch.testing.assert_close(clamped[:, :4], base[:, :4], atol=1e-6, rtol=1e-6)
    assert not torch.allclose(clamped[:, 4:], base[:, 4:], atol=1e-4)
    model = reconfigure(model, clamp_len=-1)
    torch.testing.assert_close(model(tokens).logits, base, atol=0, rtol=0)


def test_reconfigure_validates_and_updates_the_config():
    model = xl(mem_len=4)
    model = reconfigure(model, mem_len=9, same_length=True)
    assert model.cfg.attention.mem_len == 9 and model.cfg.attention.same_length
    with pytest.raises(formers.ConfigError, match="mem_len"):
        reconfigure(model, mem_len=-2)
    with pytest.raises(formers.ConfigError, match="tgt_len"):
        reconfigure(model, tgt_len=3)


# --- (d) stop-gradient and causality ----------------------------------------------------------


def test_no_gradient_flows_into_memory():
    model = xl(mem_len=8, dropout=0.0).train()
    tokens, targets = random_tokens(2, 12, V), random_tokens(2, 12, V)
    out1 = model(tokens[:, :6], targets[:, :6])  # with a graph
    assert all(m.grad_fn is None and not m.requires_grad for m in out1.memory)
    model.zero_grad()
    model(tokens[:, 6:], targets[:, 6:], memory=out1.memory).loss.backward()
    with_graph = [p.grad.clone() for p in model.parameters()]
    with torch.no_grad():
        memory = model(tokens[:, :6]).memory
    model.zero_grad()
    model(tokens[:, 6:], targets[:, 6:], memory=memory).loss.backward()
    for got, want in zip(with_graph, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want)
    # a memory passed in with a graph of its own: the next memory still has none
    memory = [m.clone().requires_grad_() for m in memory]
    out = model(tokens[:, 6:], targets[:, 6:], memory=memory)
    assert all(m.grad_fn is None and not m.requires_grad for m in out.memory)


@pytest.mark.parametrize("same_length", [False, True])
def test_causal_with_memory(same_length):
    model = xl(mem_len=5, **{"attention.same_length": same_length})
    tokens = random_tokens(2, 16, V)
    memory = model(tokens[:, :8]).memory
    base = model(tokens[:, 8:], memory=memory)
    for t in (0, 3, 6):
        changed = tokens[:, 8:].clone()
        changed[:, t + 1 :] = random_tokens(2, 8 - t - 1, V)
        out = model(changed, memory=memory)
        torch.testing.assert_close(out.logits[:, : t + 1], base.logits[:, : t + 1])
        assert not torch.allclose(out.logits[:, t + 1 :], base.logits[:, t + 1 :])
        for new, old in zip(out.memory, base.memory, strict=True):  # last 5 of 16 positions
            kept = t + 1 - 3  # memory rows 0 … 4 are positions 11 … 15 = segment rows 3 … 7
            torch.testing.assert_close(new[:, : max(kept, 0)], old[:, : max(kept, 0)])


def test_memory_carries_information():
    model = xl(mem_len=8)
    tokens = random_tokens(2, 12, V)
    other = random_tokens(2, 6, V)
    with_memory = model(tokens[:, 6:], memory=model(tokens[:, :6]).memory).logits
    other_memory = model(tokens[:, 6:], memory=model(other).memory).logits
    assert not torch.allclose(with_memory, other_memory, atol=1e-4)


# --- memory contract --------------------------------------------------------------------------


def test_memory_starts_empty_grows_to_mem_len_then_slides():
    model = xl(mem_len=5)
    tokens = random_tokens(3, 9, V)
    assert model.recurrent and isinstance(model, DecoderLM)
    memory = []
    for t in range(9):
        out = model(tokens[:, t : t + 1], memory=memory)
        memory = out.memory
        assert len(memory) == 2 and all(m.shape == (3, min(t + 1, 5), 32) for m in memory)
    # the memory is the layer inputs: layer 0's input is the scaled token embedding
    embedded = model.embed(tokens[:, 4:])
    torch.testing.assert_close(memory[0], embedded)


def test_empty_memory_is_not_zeros():
    model = xl(mem_len=4)
    tokens = random_tokens(2, 5, V)
    zeros = [torch.zeros(2, 4, 32) for _ in range(2)]
    assert not torch.allclose(model(tokens).logits, model(tokens, memory=zeros).logits)
    torch.testing.assert_close(model(tokens).logits, model(tokens, memory=None).logits)


def test_bad_memory_is_a_clear_error():
    model = xl(mem_len=4)
    tokens = random_tokens(2, 5, V)
    memory = model(tokens).memory
    with pytest.raises(formers.InputError, match="layers"):
        model(tokens, memory=memory[:1])
    with pytest.raises(formers.InputError, match="batch=3"):
        model(random_tokens(3, 5, V), memory=memory)


def test_u_and_v_are_shared_unless_untied():
    shared = xl()
    assert shared.layers[0].attn.u is shared.layers[1].attn.u
    assert shared.layers[0].attn.v is shared.layers[1].attn.v
    untied = xl(**{"attention.untie_rel_bias": True})
    assert untied.layers[0].attn.u is not untied.layers[1].attn.u
    n_shared = sum(p.numel() for p in shared.parameters())
    assert sum(p.numel() for p in untied.parameters()) == n_shared + 2 * 32


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"norm": "pre"},
        {"attention.untie_rel_bias": True},
        {"tie_embeddings": False, "adaptive_cutoffs": [10, 30]},
    ],
)
def test_every_parameter_gets_a_gradient(overrides):
    model = xl(mem_len=4, **overrides).train()
    tokens = random_tokens(4, 16, V)
    targets = torch.randint(0, V, (4, 16))
    memory = model(tokens[:, :8]).memory
    loss = model(tokens[:, 8:], targets[:, 8:], memory=memory).loss
    assert torch.isfinite(loss)
    loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_eval_switches_dropout_off_and_training_uses_it():
    model = xl(dropout=0.3, attn_dropout=0.2)
    plain = xl()  # the same network without any dropout
    plain.load_state_dict(model.state_dict())
    tokens = random_tokens(2, 8, V)
    torch.testing.assert_close(model(tokens).logits, plain(tokens).logits, atol=0, rtol=0)
    model.train()
    assert not torch.equal(model(tokens).logits, model(tokens).logits)


# --- adaptive softmax -------------------------------------------------------------------------


def test_adaptive_softmax_loss_is_the_mean_negative_log_prob():
    model = xl(tie_embeddings=False, adaptive_cutoffs=[10, 30])
    tokens = random_tokens(2, 9, V)
    targets = torch.randint(0, V, (2, 9))
    targets[0, :3] = -100
    out = model(tokens, targets)
    assert out.logits.shape == (2, 9, V)
    torch.testing.assert_close(out.logits.logsumexp(-1), torch.zeros(2, 9), atol=1e-5, rtol=0)
    keep = targets != -100
    want = -out.logits[keep].gather(-1, targets[keep][:, None]).mean()
    torch.testing.assert_close(out.loss, want, atol=1e-5, rtol=1e-5)
    # cross-entropy of the log-probs (what evaluate() and label smoothing compute) agrees
    torch.testing.assert_close(
        F.cross_entropy(out.logits.flatten(0, 1), targets.flatten()), want, atol=1e-5, rtol=1e-5
    )


# --- (4) generation ---------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_generation_with_memory_equals_greedy_recomputation(norm):
    model = xl(mem_len=32, norm=norm)
    prompt = random_tokens(2, 5, V)
    carried = generate(model, prompt, 12, temperature=0)
    recomputed = generate(model, prompt, 12, temperature=0, use_cache=False)
    torch.testing.assert_close(carried, recomputed, atol=0, rtol=0)
    assert carried.shape == (2, 17)


def test_generation_feeds_one_token_per_step_with_memory():
    model = xl(mem_len=4)
    calls = []
    original = model.forward

    def spy(tokens, targets=None, *, memory=None, cache=None):
        held = None if cache is None else cache.layers[0].attn.memory  # the decoding state: memory
        calls.append((tokens.shape[1], 0 if held is None else held.shape[1]))
        return original(tokens, targets, memory=memory, cache=cache)

    model.forward = spy
    generate(model, random_tokens(1, 6, V), 5, temperature=0)
    assert calls == [(6, 0), (1, 4), (1, 4), (1, 4), (1, 4)]


# --- (3) evaluation ---------------------------------------------------------------------------


def test_evaluation_scores_every_token_once_and_long_memory_equals_one_pass():
    model = xl(mem_len=4)
    tokens = torch.randint(0, V, (61,))
    with torch.no_grad():
        logits = model(tokens[None, :-1]).logits[0]
    one_pass = F.cross_entropy(logits, tokens[1:]).item()
    for tgt_len, mem_len, batch in ((7, 64, 1), (16, 60, 1), (1, 60, 1)):
        model = reconfigure(model, mem_len=mem_len)
        result = evaluate(model, tokens, seq_len=tgt_len, batch_size=batch)
        assert result.tokens == 60
        assert result.loss == pytest.approx(one_pass, rel=1e-5)
    model = reconfigure(model, mem_len=4)
    for tgt_len, batch in ((7, 3), (5, 2), (60, 1)):
        assert evaluate(model, tokens, seq_len=tgt_len, batch_size=batch).tokens == 60
    short = evaluate(model, tokens, seq_len=7, batch_size=1).loss
    assert short != pytest.approx(one_pass, rel=1e-5)


def test_stream_evaluation_equals_a_hand_loop_that_carries_memory():
    model = xl(mem_len=6)
    tokens = torch.randint(0, V, (23,))
    with torch.no_grad():
        total, memory = 0.0, None
        for start in range(0, 22, 5):  # one stream, segments of 5 targets, memory carried
            out = model(tokens[None, start : min(start + 5, 22)], memory=memory)
            memory = out.memory
            targets = tokens[None, start + 1 : min(start + 6, 23)]
            total += F.cross_entropy(out.logits[0], targets[0], reduction="sum").item()
    result = evaluate(model, tokens, seq_len=5, batch_size=1)
    assert result.tokens == 22
    assert result.loss == pytest.approx(total / 22, rel=1e-6)
