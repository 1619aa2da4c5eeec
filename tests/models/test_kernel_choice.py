"""One rule picks the fused or the explicit attention kernel, for every attention kind.

`formers.kernels.attention.masked_attention` runs torch's fused kernel except on CPU in
bf16/fp16 with at most CPU_LOW_PRECISION_EXPLICIT_MAX_KEYS keys (or one query a row, a decoding
step), where two matmuls and a softmax are faster. Every kind with vanilla scores and weights
reaches attention through it, whatever its pattern (the full (T, S) problem, Longformer's band
blocks, Routing's cluster and local blocks); XL and top-k compute their own scores or weights
and never take the fused kernel.
"""

from __future__ import annotations

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.kernels import attention as kernels
from formers.registry import ATTENTION

LIMIT = kernels.CPU_LOW_PRECISION_EXPLICIT_MAX_KEYS
SHORT, LONG = 16, LIMIT + 16

# A preset per kind, with windows as long as the sequence so that the long case's kernel calls
# see more than LIMIT keys.
KINDS = {
    "vanilla": ("vanilla", lambda t: {}),
    "mdha": ("dconv", lambda t: {}),
    "xl": ("transformer-xl", lambda t: {"attention.mem_len": 0}),
    "primer_xl": ("primer-xl", lambda t: {"attention.mem_len": 0}),
    "topk": ("sparse-topk", lambda t: {}),
    "linformer": ("linformer", lambda t: {"attention.proj_len": t}),
    "routing": (
        "routing",
        lambda t: {
            "attention.n_clusters": 1,
            "attention.window": 2 * t,
            "attention.local_window": t,
        },
    ),
    "longformer": ("longformer", lambda t: {"attention.window": t}),
}
OWN_WEIGHTS = {"xl", "primer_xl", "topk"}  # scores or weights of their own: always explicit


def test_every_attention_kind_is_covered():
    assert set(KINDS) == set(ATTENTION)


def kernel_calls(kind: str, dtype: torch.dtype, length: int, monkeypatch) -> list[tuple]:
    """(path, number of keys) of every kernel call in one forward of a one-layer model."""
    calls = []
    for path in ("fused", "explicit"):
        original = getattr(kernels, f"{path}_attention")

        def spy(q, k, *args, path=path, original=original, **kwargs):
            calls.append((path, k.shape[-2]))
            return original(q, k, *args, **kwargs)

        monkeypatch.setattr(kernels, f"{path}_attention", spy)
    preset, options = KINDS[kind]
    cfg = tiny_config(preset, n_layers=1, d_model=16, n_heads=2, max_len=LONG, **options(length))
    torch.manual_seed(0)
    model = formers.build(cfg).to(dtype).eval()
    tokens = random_tokens(1, length, cfg.vocab_size)
    with torch.no_grad():
        if cfg.arch == "encoder_decoder":
            model(tokens, tokens)
        else:
            model(tokens)
    return calls


@pytest.mark.parametrize("length", [SHORT, LONG], ids=["short", "long"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_one_rule_picks_the_kernel(kind, dtype, length, monkeypatch):
    calls = kernel_calls(kind, dtype, length, monkeypatch)
    if kind in OWN_WEIGHTS:
        assert calls == []
        return
    assert calls, "attention never reached the shared kernel"
    if length == LONG:
        assert max(keys for _, keys in calls) > LIMIT
    for path, keys in calls:
        fused = dtype == torch.float32 or keys > LIMIT
        assert path == ("fused" if fused else "explicit"), (path, keys)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_one_query_a_row_takes_the_explicit_path_at_any_length_in_low_precision(dtype):
    # a decoding step: its explicit weights are one row per head, no memory for the fused
    # kernel to save, and the explicit path is several times faster
    keys = torch.zeros(1, 2, 4 * LIMIT, 8, dtype=dtype)
    assert not kernels.fused_kernel_is_faster(torch.zeros(1, 2, 1, 8, dtype=dtype), keys)
    assert kernels.fused_kernel_is_faster(torch.zeros(1, 2, 2, 8, dtype=dtype), keys)
    assert kernels.fused_kernel_is_faster(torch.zeros(1, 2, 1, 8), keys.float())
