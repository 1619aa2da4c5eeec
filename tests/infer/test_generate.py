"""Generation: cached == recomputed decoding, the learned-position window, sampling rules,
stop tokens, argument checks, and the decoding-state protocol (`new_cache`)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import random_tokens, tiny_config
from torch import nn

import formers
from formers.infer import generate, iter_generate, sample_next
from formers.layers.cache import Cache, LayerState

V = 50


def vanilla(**overrides) -> nn.Module:
    return formers.build(tiny_config("vanilla", **overrides)).eval()


@torch.no_grad()
def reference_greedy(model: nn.Module, prompt: torch.Tensor, n: int, window: int | None = None):
    """Greedy decoding the obvious way: a full forward over the (cropped) context per token."""
    tokens = prompt
    for _ in range(n):
        context = tokens if window is None else tokens[:, -window:]
        next_token = model(context).logits[:, -1].argmax(-1)  # (B,)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
    return tokens


def record_calls(model: nn.Module) -> list[tuple[int, bool]]:
    """(input length, whether a cache was passed) for every forward of `model`."""
    calls = []

    def hook(module, args, kwargs):
        calls.append((args[0].shape[1], kwargs.get("cache") is not None))

    model.register_forward_pre_hook(hook, with_kwargs=True)
    return calls


# --- cached vs recomputed ------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_greedy_with_cache_equals_without(norm):
    # untied: with tied embeddings an untrained model's greedy choice is the last token again
    # and again, which would hide a broken cache.
    model = vanilla(norm=norm, tie_embeddings=False)
    prompt = random_tokens(2, 6, V)
    cached = generate(model, prompt, 40, temperature=0)
    uncached = generate(model, prompt, 40, temperature=0, use_cache=False)
    assert cached.shape == (2, 46)
    assert torch.equal(cached[:, :6], prompt)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached, reference_greedy(model, prompt, 40))
    assert cached[:, 6:].unique().numel() > 5  # a non-degenerate continuation


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "recomputed"])
def test_the_output_layer_scores_only_the_last_position(use_cache):
    # the prompt's pass needs the next token's scores alone, not (T, V) of them
    model = vanilla(tie_embeddings=False)
    rows = []
    model.lm_head.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[1]))
    tokens = generate(model, random_tokens(2, 12, V), 5, temperature=0, use_cache=use_cache)
    assert rows == [1] * 5
    assert torch.equal(tokens, reference_greedy(model, tokens[:, :12], 5))
    full = model(tokens).logits
    torch.testing.assert_close(model(tokens, only_last=True).logits, full[:, -1:])


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_seeded_sampling_with_cache_equals_without(norm, position):
    # sampling visits many more states than greedy decoding of an untrained model, and a
    # draw only flips if the two paths' probabilities differ by more than float noise.
    model = vanilla(norm=norm, position=position, max_len=16)
    prompt = random_tokens(2, 6, V)
    cached = generate(model, prompt, 40, seed=5)
    assert torch.equal(cached, generate(model, prompt, 40, seed=5, use_cache=False))
    assert cached[:, 6:].unique().numel() > 10


@pytest.mark.parametrize("prompt_len", [6, 20])
def test_learned_positions_fall_back_to_a_window_of_max_len(prompt_len):
    max_len, n = 16, 30
    model = vanilla(position="learned", max_len=max_len, tie_embeddings=False)
    prompt = random_tokens(2, prompt_len, V)
    calls = record_calls(model)
    cached = generate(model, prompt, n, temperature=0)
    cached_calls = list(calls)
    uncached = generate(model, prompt, n, temperature=0, use_cache=False)
    assert cached.shape == (2, prompt_len + n)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached, reference_greedy(model, prompt, n, window=max_len))
    with pytest.raises(formers.InputError, match="max_len"):
        model(cached)  # the whole sequence does not fit: the window was needed
    # the cache serves steps up to max_len positions; then every step re-encodes max_len tokens
    incremental = max(0, max_len - prompt_len)
    expected = [(prompt_len, True)] if prompt_len <= max_len else [(max_len, False)]
    expected += [(1, True)] * incremental
    expected += [(max_len, False)] * (n - 1 - incremental)
    assert cached_calls == expected


def test_max_context_crops_cached_and_uncached_alike():
    model = vanilla(tie_embeddings=False)
    prompt = random_tokens(2, 5, V)
    cached = generate(model, prompt, 25, temperature=0, max_context=8)
    uncached = generate(model, prompt, 25, temperature=0, max_context=8, use_cache=False)
    assert torch.equal(cached, uncached)
    assert torch.equal(cached, reference_greedy(model, prompt, 25, window=8))


def test_iter_generate_streams_what_generate_returns():
    model = vanilla()
    prompt = random_tokens(2, 4, V)
    steps = list(iter_generate(model, prompt, 12, seed=3))
    assert len(steps) == 12 and all(step.shape == (2,) for step in steps)
    assert torch.equal(torch.stack(steps, 1), generate(model, prompt, 12, seed=3)[:, 4:])


def test_list_and_1d_prompts_are_one_sequence():
    model = vanilla()
    out = generate(model, [3, 1, 4], 5, temperature=0)
    assert out.shape == (1, 8)
    assert torch.equal(out, generate(model, torch.tensor([3, 1, 4]), 5, temperature=0))
    assert torch.equal(out, generate(model, torch.tensor([[3, 1, 4]]), 5, temperature=0))
    assert torch.equal(generate(model, [3, 1, 4], 0), torch.tensor([[3, 1, 4]]))


# --- sampling ------------------------------------------------------------------------------


def test_same_seed_repeats_other_seed_differs_and_global_rng_untouched():
    model = vanilla()
    prompt = random_tokens(2, 4, V)
    state = torch.get_rng_state()
    first = generate(model, prompt, 30, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(first, generate(model, prompt, 30, seed=1))
    assert not torch.equal(first, generate(model, prompt, 30, seed=2))


def test_top_k_1_and_tiny_top_p_are_greedy():
    model = vanilla()
    prompt = random_tokens(2, 4, V)
    greedy = generate(model, prompt, 30, temperature=0)
    assert torch.equal(generate(model, prompt, 30, top_k=1, seed=0), greedy)
    assert torch.equal(generate(model, prompt, 30, top_p=1e-6, seed=0), greedy)
    assert torch.equal(generate(model, prompt, 30, temperature=5.0, top_k=1, seed=0), greedy)


LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
N_SAMPLES = 200_000


def frequencies(**kwargs) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    samples = sample_next(LOGITS.expand(N_SAMPLES, -1), generator=generator, **kwargs)
    assert samples.shape == (N_SAMPLES,) and samples.dtype == torch.long
    return torch.bincount(samples, minlength=len(LOGITS)).float() / N_SAMPLES


@pytest.mark.parametrize("temperature", [0.7, 1.0, 2.0])
def test_sample_next_follows_the_tempered_softmax(temperature):
    expected = torch.softmax(LOGITS / temperature, dim=-1)
    # 0.005 is > 4 standard deviations of a frequency from 200k draws
    torch.testing.assert_close(frequencies(temperature=temperature), expected, atol=5e-3, rtol=0)


def test_top_k_never_emits_excluded_tokens_and_renormalises():
    freq = frequencies(temperature=0.7, top_k=3)
    assert freq[3:].sum() == 0
    expected = torch.softmax(LOGITS[:3] / 0.7, dim=-1)
    torch.testing.assert_close(freq[:3], expected, atol=5e-3, rtol=0)
    # top_k >= V keeps everything: the very same draws as no top_k
    torch.testing.assert_close(frequencies(top_k=100), frequencies(), atol=0, rtol=0)


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.softmax(LOGITS, dim=-1)  # ≈ [0.56, 0.21, 0.13, 0.08, 0.03, 0.004]
    p = float(probs[0] + probs[1] / 2)  # token 0 alone falls short, tokens {0, 1} reach it
    freq = frequencies(top_p=p)
    assert freq[2:].sum() == 0
    torch.testing.assert_close(freq[:2], probs[:2] / probs[:2].sum(), atol=5e-3, rtol=0)
    # k first, then p: top_k=3 renormalises so token 0 alone reaches p=0.6
    assert torch.equal(frequencies(top_k=3, top_p=0.6), torch.tensor([1.0, 0, 0, 0, 0, 0]))


def test_temperature_zero_is_argmax_in_any_dtype():
    logits = torch.randn(4, V).to(torch.bfloat16)
    torch.testing.assert_close(sample_next(logits, temperature=0), logits.float().argmax(-1))
    # a nucleus holding only the top token is argmax too, whatever the dtype of the logits
    logits[:, 7] = 50.0
    assert sample_next(logits, top_p=0.9).tolist() == [7] * 4


# --- stop token, modes, errors -------------------------------------------------------------


def first_index(row: torch.Tensor, token: int) -> int | None:
    hits = (row == token).nonzero()
    return int(hits[0]) if len(hits) else None


def test_stop_token_halts_a_row_and_finished_rows_repeat_it():
    model = vanilla(tie_embeddings=False)  # a tied untrained model repeats any token anyway
    prompt = random_tokens(2, 5, V)
    free = generate(model, prompt, 30, temperature=0)[:, 5:]  # (2, 30)
    stop = int(free[0, 0])
    assert not (free[0] == stop).all()  # row 0 alone would go on to other tokens
    # one row alone halts right after its stop token
    alone = generate(model, prompt[:1], 30, temperature=0, stop_token=stop)
    assert torch.equal(alone, torch.cat([prompt[:1], free[:1, :1]], dim=1))
    assert len(list(iter_generate(model, prompt[:1], 30, temperature=0, stop_token=stop))) == 1
    # in a batch, a finished row repeats the stop token while the others go on undisturbed
    both = generate(model, prompt, 30, temperature=0, stop_token=stop)[:, 5:]
    first1 = first_index(free[1], stop)
    assert both.shape[1] == (30 if first1 is None else first1 + 1)
    assert (both[0] == stop).all()
    assert torch.equal(both[1], free[1, : both.shape[1]])


def test_stop_token_halts_when_the_last_row_produces_it():
    model = CountingCachedLM()
    prompt = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    # rows continue 5, 10, 16, ... and 10, 15, 21, ...: 10 ends row 1 first, then row 0
    assert torch.equal(
        counting_reference(prompt, 3)[:, 4:], torch.tensor([[5, 10, 16], [10, 15, 21]])
    )
    out = generate(model, prompt, 20, temperature=0, stop_token=10)
    assert torch.equal(out[:, 4:], torch.tensor([[5, 10], [10, 10]]))
    assert len(model.calls) == 2  # no forward after the last token


def test_train_and_eval_modes_are_restored():
    model = formers.build(tiny_config("vanilla", dropout=0.3)).train()
    model.layers[0].eval()  # a mixed state must come back exactly
    before = [m.training for m in model.modules()]
    prompt = random_tokens(2, 4, V)
    first = generate(model, prompt, 10, temperature=0)
    assert [m.training for m in model.modules()] == before
    # generation ran without dropout, so greedy decoding repeats
    assert torch.equal(first, generate(model, prompt, 10, temperature=0))
    stream = iter_generate(model, prompt, 10)
    next(stream)
    assert not any(m.training for m in model.modules())
    stream.close()
    assert [m.training for m in model.modules()] == before
    model.eval()
    generate(model, prompt, 3)
    assert not any(m.training for m in model.modules())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=0), "top_k"),
        (dict(max_new_tokens=-1), "max_new_tokens"),
        (dict(max_context=0), "max_context"),
        (dict(stop_token=V), "stop_token"),
        (dict(prompt=[]), "at least one token"),
        (dict(prompt=torch.zeros(2, 0, dtype=torch.long)), "at least one token"),
        (dict(prompt=torch.ones(1, 3)), "integer"),
        (dict(prompt=torch.ones(1, 1, 3, dtype=torch.long)), "shape"),
    ],
)
def test_bad_arguments_raise_value_error_at_the_call(kwargs, match):
    model = vanilla()
    args = dict(prompt=[1, 2, 3], max_new_tokens=5) | kwargs
    prompt, n = args.pop("prompt"), args.pop("max_new_tokens")
    with pytest.raises(ValueError, match=match):
        iter_generate(model, prompt, n, **args)  # raised before the first next()
    with pytest.raises(ValueError, match=match):
        generate(model, prompt, n, **args)


@pytest.mark.parametrize(
    "kwargs", [dict(temperature=-0.5), dict(top_p=0.0), dict(top_p=2.0), dict(top_k=0)]
)
def test_sample_next_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        sample_next(torch.zeros(2, V), **kwargs)


def test_encoder_decoder_models_are_refused():
    model = formers.build(tiny_config("transformer"))
    with pytest.raises(ValueError, match="decoder-only"):
        generate(model, [1, 2], 3)


# --- models that carry a decoding state ------------------------------------------------------


class CountingLM(nn.Module):
    """Predicts (tokens seen so far + current token) mod V at every position, as one-hot logits.

    It learns how many tokens came before only from its input, so any mistake in what is fed
    (or carried) changes the prediction.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch.Tensor, Cache | None]] = []
        self.outputs: list[formers.ModelOutput] = []

    def predict(self, tokens: torch.Tensor, seen: torch.Tensor) -> formers.ModelOutput:
        count = seen[:, None] + torch.arange(1, tokens.shape[1] + 1)  # (B, T)
        logits = F.one_hot((count + tokens) % V, V).float()  # (B, T, V)
        out = formers.ModelOutput(logits, None, torch.zeros(()))
        self.outputs.append(out)
        return out

    def forward(self, tokens: torch.Tensor) -> formers.ModelOutput:
        self.calls.append((tokens.clone(), None))
        return self.predict(tokens, torch.zeros(tokens.shape[0], dtype=torch.long))


class SeenCount(LayerState):
    """A decoding state that only counts the tokens seen so far, (B,)."""

    def __init__(self) -> None:
        self.seen: torch.Tensor | None = None


class CountingCachedLM(CountingLM):
    """The same, but the count of earlier tokens arrives through its decoding state."""

    def new_cache(self) -> Cache:
        return Cache([SeenCount()])

    def forward(self, tokens: torch.Tensor, cache: Cache | None = None) -> formers.ModelOutput:
        self.calls.append((tokens.clone(), cache))
        if cache is None:
            return self.predict(tokens, torch.zeros(tokens.shape[0], dtype=torch.long))
        state = cache.layers[0]
        seen = state.seen if state.seen is not None else torch.zeros(tokens.shape[0]).long()
        state.seen = seen + tokens.shape[1]
        return self.predict(tokens, seen)


def counting_reference(prompt: torch.Tensor, n: int, window: int | None = None) -> torch.Tensor:
    tokens = prompt
    for _ in range(n):
        seen = tokens.shape[1] if window is None else min(tokens.shape[1], window)
        tokens = torch.cat([tokens, (seen + tokens[:, -1:]) % V], dim=1)
    return tokens


def test_the_cache_is_carried_and_only_the_new_token_is_fed():
    model = CountingCachedLM()
    prompt = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    out = generate(model, prompt, 12, temperature=0)
    assert torch.equal(out, counting_reference(prompt, 12))
    assert len(model.calls) == 12  # the prompt, then one call per token but the last
    cache = model.calls[0][1]
    assert torch.equal(model.calls[0][0], prompt) and isinstance(cache, Cache)
    for step in range(1, 12):
        tokens, carried = model.calls[step]
        assert torch.equal(tokens, out[:, 4 + step - 1 : 4 + step])
        assert carried is cache  # one state, extended in place
    assert cache.layers[0].seen.tolist() == [4 + 11, 4 + 11]


def test_a_cached_model_without_its_cache_recomputes_the_same_tokens():
    model = CountingCachedLM()
    prompt = torch.tensor([[3, 1, 4, 1], [5, 9, 2, 6]])
    out = generate(model, prompt, 12, temperature=0, use_cache=False)
    assert torch.equal(out, counting_reference(prompt, 12))
    assert [c[0].shape[1] for c in model.calls] == list(range(4, 16))
    assert all(cache is None for _, cache in model.calls)


def test_the_cache_reorders_every_layers_state_by_batch_row():
    cache = Cache([SeenCount(), None])
    cache.layers[0].seen = torch.tensor([10, 20, 30])
    cache.reorder(torch.tensor([2, 0, 0]))
    assert cache.layers[0].seen.tolist() == [30, 10, 10] and cache.layers[1] is None


def test_stateless_model_recomputes_a_cropped_context():
    model = CountingLM()  # no new_cache, no uses_memory attribute
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9]])
    out = generate(model, prompt, 10, temperature=0, max_context=4)
    assert torch.equal(out, counting_reference(prompt, 10, window=4))
    assert [c[0].shape[1] for c in model.calls] == [4] * 10


def test_top_p_drops_a_token_whose_predecessors_already_reach_p_exactly():
    # probabilities 1/2, 1/4, 1/4 (exact in binary): the first two hold exactly 3/4, so with
    # top_p = 3/4 the third token is outside the nucleus
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]])).repeat(2000, 1)
    drawn = sample_next(logits, top_p=0.75, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {0, 1}
    drawn = sample_next(logits, top_p=0.76, generator=torch.Generator().manual_seed(0))
    assert set(drawn.tolist()) == {0, 1, 2}  # just above: the third joins
