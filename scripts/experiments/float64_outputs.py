"""Every preset's float64 outputs on a fixed input, saved for an exact before/after comparison.

A refactor that must not change the numerics (a kernel moved, a package split) runs this on the
commit before and the commit after and compares bit for bit:

    python scripts/experiments/float64_outputs.py save before.pt     # on the old commit
    python scripts/experiments/float64_outputs.py save after.pt      # on the new one
    python scripts/experiments/float64_outputs.py compare before.pt after.pt

Each case builds a preset at a tiny size (windows and clusters smaller than the sequence, so the
sparse kinds take their blocked paths), runs a forward on fixed tokens with padding where the
architecture allows it, one backward (the gradients of every parameter), and, for decoders,
cached decoding one token at a time.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import formers

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64, "vocab_size": 61, "max_len": 96}
TINY.update({"dropout": 0.0, "attn_dropout": 0.0, "ffn_dropout": 0.0})
LENGTH = 80
# The sparse kinds' windows, well below LENGTH; a second Longformer case adds dilation and a
# global token, a second Routing case an encoder with padding.
EXTRA = {
    "longformer": {"attention.window": 12},
    "routing": {"attention.n_clusters": 4, "attention.window": 10, "attention.local_window": 8},
    "linformer": {"attention.proj_len": 16},
    "sparse-topk": {"attention.top_k": 5},
}
CASES: dict[str, tuple[str, dict]] = {name: (name, EXTRA.get(name, {})) for name in formers.PRESETS}
CASES["longformer-encoder"] = (
    "bert",
    {
        "attention": "longformer",
        "attention.window": 9,
        "attention.dilation": "1,2,1,3",
        "attention.global_tokens": "0,5",
        "pad_id": 0,
    },
)
CASES["routing-encoder"] = (
    "bert",
    {
        "attention": "routing",
        "attention.n_clusters": 3,
        "attention.window": 8,
        "attention.local_window": 6,
        "pad_id": 0,
    },
)


def tokens(vocab: int, pad: bool) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1234)
    x = torch.randint(1, vocab, (2, LENGTH), generator=gen)
    if pad:
        x[1, LENGTH - 11 :] = 0  # trailing padding in the second row
    return x


def run_case(preset: str, overrides: dict) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    cfg = formers.config(preset, **TINY, **overrides)
    model = formers.build(cfg).double()
    model.train()  # routing updates its centroids in training; dropouts are 0
    out: dict[str, torch.Tensor] = {}
    x = tokens(cfg.vocab_size, cfg.pad_id is not None)
    res = model(x, x.flip(1), x) if cfg.arch == "encoder_decoder" else model(x, x)
    loss = res.loss + (res.aux_loss if res.aux_loss is not None else 0)
    loss.backward()
    out["logits"] = res.logits.detach()
    out["loss"] = loss.detach()
    for name, p in model.named_parameters():
        if p.grad is not None:
            out[f"grad.{name}"] = p.grad.detach()
    if cfg.arch == "decoder":
        out.update(decode(model, x))
    return out


def decode(model: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Cached decoding of the first row, one token at a time, in eval mode."""
    model.eval()
    with torch.no_grad():
        cache = model.new_cache()
        steps = [model(x[:1, t : t + 1], cache=cache).logits for t in range(LENGTH // 2)]
    return {"decode": torch.cat(steps, dim=1)}


def save(path: str) -> None:
    torch.set_num_threads(1)
    results = {}
    for case, (preset, overrides) in CASES.items():
        results[case] = run_case(preset, overrides)
        print(f"{case}: {len(results[case])} tensors")
    torch.save(results, path)


def compare(before_path: str, after_path: str) -> int:
    before, after = torch.load(before_path), torch.load(after_path)
    failures = 0
    for case in sorted(set(before) | set(after)):
        a, b = before.get(case), after.get(case)
        if a is None or b is None:
            print(f"{case}: only in {'after' if a is None else 'before'}")
            failures += 1
            continue
        differ = [k for k in a if k not in b or not torch.equal(a[k], b[k])]
        missing = sorted(set(b) - set(a))
        status = "bit-identical" if not differ and not missing else f"DIFFERS in {differ + missing}"
        failures += bool(differ or missing)
        print(f"{case}: {status} ({len(a)} tensors)")
    return failures


COMMANDS: dict[str, Callable] = {"save": save, "compare": compare}

if __name__ == "__main__":
    sys.exit(1 if COMMANDS[sys.argv[1]](*sys.argv[2:]) else 0)
