"""Autoregressive generation from a decoder-only language model, one token per step.

What is carried from step to step depends on what the model offers:
  cache    `model.new_cache()`: the prompt is encoded once, then each step feeds one token and
           every layer extends its own decoding state (a key/value cache, a convolution tail,
           a segment memory that keeps its most recent states, ...);
  (none)   each step re-encodes the whole context, cropped to the window.
`use_cache=False` forces the second form: slow, but a reference for the first.

The window: learned absolute positions stop at `cfg.max_len`, so the model sees at most the
last max_len tokens. A cached generation that would pass max_len falls back to re-encoding
the last max_len tokens (at positions 0 … max_len-1) on every remaining step, exactly as the
uncached path does, so both give the same tokens. Sinusoidal positions extrapolate and need no
window; `max_context` sets one by hand (for the cache and recompute paths alike).

Shapes: B batch, T prompt length, N new tokens, W window, V vocabulary.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import torch
from torch import Tensor, nn

from formers.errors import InputError
from formers.infer.sampling import check_sampling, sample_next

Carry = Literal["cache", "none"]


def iter_generate(
    model: nn.Module,
    prompt: Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    max_context: int | None = None,
    stop_token: int | None = None,
) -> Iterator[Tensor]:
    """Yield the next (B,) batch of token ids, step by step; see `generate` for the arguments.

    Arguments are checked at the call, before the first token. The model stays in eval mode
    while the iterator is unfinished and gets its modes back when the iterator ends or is
    closed (`close()`, or garbage collection of an abandoned iterator).
    """
    _, stream = _start(
        model,
        prompt,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        use_cache=use_cache,
        max_context=max_context,
        stop_token=stop_token,
    )
    return stream


@torch.no_grad()
def generate(
    model: nn.Module,
    prompt: Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    use_cache: bool = True,
    max_context: int | None = None,
    stop_token: int | None = None,
) -> Tensor:
    """Continue `prompt` by up to `max_new_tokens` tokens; returns (B, T + n) token ids.

    The model runs in eval mode for the call, and every submodule gets its mode back after.

    Args:
        model: a decoder-only LM: `model(tokens)` returns `.logits` of shape (B, T, V).
        prompt: (B, T) or (T,) token ids, or a list of ids; at least one token.
        max_new_tokens: how many tokens to add (fewer if every row hits `stop_token`).
        temperature: softmax temperature; 0 is greedy decoding.
        top_k: sample only among the k most likely tokens.
        top_p: nucleus sampling: only among the most likely tokens holding mass top_p.
        seed: seeds a private torch.Generator, so the same seed repeats the same tokens and
            the global RNG is left untouched; None draws from the global RNG.
        use_cache: carry the model's decoding state (`new_cache()`) between steps; False
            re-encodes the context every step.
        max_context: feed the model at most this many most recent tokens (cache and recompute
            paths; learned positions already cap it at cfg.max_len).
        stop_token: stop once every row has produced this id; rows that finished earlier
            repeat it until then.
    """
    prompt_batch, stream = _start(
        model,
        prompt,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        use_cache=use_cache,
        max_context=max_context,
        stop_token=stop_token,
    )
    new = list(stream)  # n × (B,)
    if not new:
        return prompt_batch
    return torch.cat([prompt_batch, torch.stack(new, dim=1)], dim=1)  # (B, T + n)


def _start(
    model: nn.Module,
    prompt: Tensor | Sequence[int],
    max_new_tokens: int,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    seed: int | None,
    use_cache: bool,
    max_context: int | None,
    stop_token: int | None,
) -> tuple[Tensor, Iterator[Tensor]]:
    """Check every argument now (not at the first `next`); return the (B, T) prompt and stream."""
    check_sampling(temperature, top_k, top_p)
    _check_count("max_new_tokens", max_new_tokens, minimum=0)
    if max_context is not None:
        _check_count("max_context", max_context, minimum=1)
    if seed is not None:
        _check_count("seed", seed, minimum=0)
    core = _unwrap(model)
    cfg = getattr(core, "cfg", None)
    arch = getattr(cfg, "arch", "decoder")
    if arch != "decoder":
        raise InputError(
            f"generate() continues a decoder-only LM, but this model has arch={arch!r}: "
            "build one with arch='decoder' (e.g. the 'vanilla' preset)"
        )
    vocab_size = getattr(cfg, "vocab_size", None)
    if stop_token is not None:
        _check_count("stop_token", stop_token, minimum=0)
        if vocab_size is not None and stop_token >= vocab_size:
            raise InputError(
                f"stop_token={stop_token} is outside the vocabulary [0, {vocab_size}), "
                "so it could never be produced"
            )
    tokens = _prompt_batch(prompt, _device(model, prompt))

    carry: Carry = "cache" if use_cache and callable(getattr(core, "new_cache", None)) else "none"
    window = max_context
    if getattr(cfg, "position", None) == "learned":
        window = cfg.max_len if window is None else min(window, cfg.max_len)

    generator = None
    if seed is not None:
        generator = torch.Generator(device=tokens.device).manual_seed(seed)
    sample = functools.partial(
        sample_next, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
    )
    stream = _decode(model, core, tokens, max_new_tokens, carry, window, stop_token, sample)
    return tokens, stream


def _last_position_only(core: nn.Module) -> dict[str, bool]:
    """The keyword that asks `core` for the last position's logits alone, if it takes one:
    every step reads only those, and a prompt's (T, V) scores can cost more than its layers."""
    accepts = "only_last" in inspect.signature(core.forward).parameters
    return {"only_last": True} if accepts else {}


@torch.no_grad()
def _decode(
    model: nn.Module,
    core: nn.Module,
    prompt: Tensor,
    max_new_tokens: int,
    carry: Carry,
    window: int | None,
    stop_token: int | None,
    sample: Callable[[Tensor], Tensor],
) -> Iterator[Tensor]:
    """The decoding loop behind `iter_generate`; arguments already checked."""
    if max_new_tokens == 0:
        return
    batch, length = prompt.shape
    # one buffer instead of a torch.cat per step: O(1) copies per token.
    tokens = prompt.new_empty(batch, length + max_new_tokens)  # (B, T + N)
    tokens[:, :length] = prompt
    done = torch.zeros(batch, dtype=torch.bool, device=prompt.device)  # (B,)
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    last = _last_position_only(core)
    try:
        cache = None
        if carry == "cache" and (window is None or length <= window):
            cache = core.new_cache()
            out = model(prompt, cache=cache, **last)
        else:
            out = model(_crop(prompt, window), **last)
        for end in range(length + 1, length + max_new_tokens + 1):
            next_token = sample(out.logits[:, -1])  # (B,)
            if stop_token is not None:
                next_token = next_token.masked_fill(done, stop_token)
                done |= next_token == stop_token
            tokens[:, end - 1] = next_token
            yield next_token
            if end == tokens.shape[1] or (stop_token is not None and bool(done.all())):
                return
            if cache is not None and (window is None or end <= window):
                out = model(tokens[:, end - 1 : end], cache=cache, **last)  # at position end-1
            else:
                # no cache, or the cache would pass the window: re-encode the last W tokens
                # from position 0 on every remaining step (see the module docstring).
                cache = None
                out = model(_crop(tokens[:, :end], window), **last)
    finally:
        for module, training in modes:
            module.training = training


def decodes_in_a_window(model: nn.Module) -> bool:
    """Whether every layer of `model` decodes from a bounded window of the latest positions
    (`LayerState.bounded`: a sliding-window attention's rolling cache). A longer text then
    changes nothing such a model attends to, only the absolute positions it is fed."""
    new_cache = getattr(_unwrap(model), "new_cache", None)
    if not callable(new_cache):
        return False
    states = new_cache().layers
    return bool(states) and all(state is not None and state.bounded for state in states)


def _crop(tokens: Tensor, window: int | None) -> Tensor:
    """The last `window` tokens of (B, L) ids, (B, min(L, W))."""
    return tokens if window is None else tokens[:, -window:]


def _unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP / DataParallel and torch.compile wrappers (for its attributes)."""
    if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    return getattr(model, "_orig_mod", model)


def _device(model: nn.Module, prompt: Tensor | Sequence[int]) -> torch.device:
    """Where the model's weights live; a weightless model runs where the prompt is."""
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    if tensor is not None:
        return tensor.device
    return prompt.device if isinstance(prompt, Tensor) else torch.device("cpu")


def _prompt_batch(prompt: Tensor | Sequence[int], device: torch.device) -> Tensor:
    """A (B, T) int64 tensor on `device` from a tensor or list of ids."""
    empty = (
        "the prompt is empty: give at least one token to continue from, e.g. the tokenizer's "
        "newline or BOS id"
    )
    if not isinstance(prompt, Tensor):
        prompt = list(prompt)
        if not prompt:
            raise InputError(empty)
        prompt = torch.as_tensor(prompt)
    if prompt.dim() == 1:
        prompt = prompt[None]  # (1, T)
    if prompt.dim() != 2:
        shape = tuple(prompt.shape)
        raise InputError(f"prompt must have shape (batch, seq) or (seq,), got {shape}")
    if prompt.dtype.is_floating_point or prompt.is_complex() or prompt.dtype == torch.bool:
        raise InputError(f"prompt must hold integer token ids, got {prompt.dtype}")
    if prompt.shape[1] == 0:
        raise InputError(empty)
    if prompt.shape[0] == 0:
        raise InputError("the prompt batch is empty: give at least one sequence")
    return prompt.to(device=device, dtype=torch.long)


def _check_count(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name}={value!r} must be an integer >= {minimum}")
