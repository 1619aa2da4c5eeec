"""Longformer attention (Beltagy et al. 2020 §3.1) against full attention and the peers.

Three tables, every number a median over interleaved rounds (candidates take turns, the first one
rotating), in one process:

  layers   one attention layer's forward + backward, (B, T, D) in and out, random inputs, per
           sequence length: time and the peak rise of live tensor bytes (formers.bench.memory);
           then, per candidate, the memory growth per doubling of n from 4k on (and the log-log
           slope), and the first n where each window beats full attention of the same
           direction. Candidates (each with q/k/v and output projections of width D):
             full-causal     formers' vanilla MultiHeadAttention, causal (fused SDPA)
             full            the same without a mask (two-sided)
             window-causal   formers' LongformerAttention, causal window w (w keys)
             window          the same, two-sided (w/2 each side: w + 1 keys)
             local-attention lucidrains' LocalAttention(window_size=w, causal=True,
                             autopad=True): blocks of w queries see their block and the one
                             before (w to 2w − 1 keys per query)
             hf-longformer   transformers' LongformerSelfAttention (attention_window=w,
                             two-sided, its sliding chunks), no global token, plus an output
                             projection like the others
  kernels  the same without the projections: q, k, v (B, H, T, K) in, attention out, for the
           candidates that have such an entry point (not HF, whose projections are inside)
  generate one decoding step of the `longformer` preset LM at a context of --context tokens:
           with its rolling cache (one token through every layer's window of w) and without a
           cache (the whole context re-encoded: what `generate(use_cache=False)` does), plus
           vanilla with its growing key/value cache for scale; and the decoding state's bytes.

A peer that is not installed is skipped (`pip install -e '.[peers]'`); one that fails is a row
marked failed. JSON (--json), a table on stdout, and a PNG of time and memory against n (--png).

    python benchmarks/longformer_attention.py layers --threads 2 \\
        --lengths 1024 2048 4096 8192 16384 --repeats 3 \\
        --json benchmarks/results/longformer_layers.json --png docs/images/longformer_layers.png
    python benchmarks/longformer_attention.py kernels --threads 2 \\
        --lengths 1024 2048 4096 8192 16384 32768 --repeats 3 \\
        --json benchmarks/results/longformer_kernels.json --png docs/images/longformer_kernels.png
    python benchmarks/longformer_attention.py generate --threads 2 --context 4096 \\
        --json benchmarks/results/longformer_generate.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import formers
from formers.bench.hardware import device_name
from formers.bench.memory import peak_rise_bytes
from formers.bench.plots import pyplot, save_figure
from formers.bench.timing import interleaved, median
from formers.cpu_allocator import keep_freed_memory
from formers.kernels.window import sliding_window_attention
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.longformer import LongformerAttention, LongformerConfig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# which full-attention row each window is compared with
DIRECTIONS = {"window-causal": "full-causal", "window": "full"}


class FormersLayer(nn.Module):
    """A formers attention module called with a fixed mask: (B, T, D) -> (B, T, D)."""

    def __init__(self, attn: nn.Module, causal: bool):
        super().__init__()
        self.attn, self.mask = attn, AttentionMask(causal=causal)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x, mask=self.mask)


class LocalAttentionLayer(nn.Module):
    """lucidrains' LocalAttention between the same projections as ours."""

    def __init__(self, d_model: int, n_heads: int, window: int):
        from local_attention import LocalAttention

        super().__init__()
        self.heads = n_heads
        self.qkv_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.attn = LocalAttention(window_size=window, causal=True, autopad=True)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        qkv = self.qkv_proj(x).view(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # (B, H, T, K)
        out = self.attn(q, k, v)  # (B, H, T, K)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class HFLongformerLayer(nn.Module):
    """transformers' LongformerSelfAttention (its own q, k, v projections) + an output
    projection; the mask says every token is local (0), as LongformerModel passes it."""

    def __init__(self, d_model: int, n_heads: int, window: int):
        from transformers import LongformerConfig
        from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

        super().__init__()
        config = LongformerConfig(
            hidden_size=d_model,
            num_attention_heads=n_heads,
            attention_window=[window],
            attention_probs_dropout_prob=0.0,
        )
        self.attn = LongformerSelfAttention(config, layer_id=0)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        mask = torch.zeros(x.shape[:2], dtype=x.dtype, device=x.device)  # (B, T): all local
        out = self.attn(
            x,
            attention_mask=mask,
            is_index_masked=mask < 0,
            is_index_global_attn=mask > 0,
            is_global_attn=False,
        )[0]
        return self.out_proj(out)


class Kernel(nn.Module):
    """An attention kernel as a module of one input: q, k, v stacked, (3, B, H, T, K)."""

    def __init__(self, fn: Callable[[Tensor, Tensor, Tensor], Tensor]):
        super().__init__()
        self.fn = fn

    def forward(self, qkv: Tensor) -> Tensor:
        return self.fn(*qkv.unbind(0))


def kernel_makers(w: int) -> dict[str, tuple[bool, Callable[[], nn.Module]]]:
    sdpa = F.scaled_dot_product_attention

    def local() -> nn.Module:
        from local_attention import LocalAttention

        attn = LocalAttention(window_size=w, causal=True, autopad=True)
        return Kernel(lambda q, k, v: attn(q, k, v))

    def window(causal: bool) -> nn.Module:
        return Kernel(lambda q, k, v: sliding_window_attention(q, k, v, window=w, causal=causal))

    return {
        "full-causal": (True, lambda: Kernel(lambda q, k, v: sdpa(q, k, v, is_causal=True))),
        "full": (True, lambda: Kernel(lambda q, k, v: sdpa(q, k, v))),
        "window-causal": (True, lambda: window(True)),
        "window": (True, lambda: window(False)),
        "local-attention": (available("local_attention"), local),
    }


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def layer_makers(d: int, h: int, w: int) -> dict[str, tuple[bool, Callable[[], nn.Module]]]:
    def window_layer() -> LongformerAttention:
        return LongformerAttention(d, h, LongformerConfig(window=w))

    return {
        "full-causal": (True, lambda: FormersLayer(MultiHeadAttention(d, h), causal=True)),
        "full": (True, lambda: FormersLayer(MultiHeadAttention(d, h), causal=False)),
        "window-causal": (True, lambda: FormersLayer(window_layer(), causal=True)),
        "window": (True, lambda: FormersLayer(window_layer(), causal=False)),
        "local-attention": (available("local_attention"), lambda: LocalAttentionLayer(d, h, w)),
        "hf-longformer": (available("transformers"), lambda: HFLongformerLayer(d, h, w)),
    }


def step(layer: nn.Module, x: Tensor) -> Callable[[], None]:
    def run() -> None:
        layer(x).sum().backward()
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    return run


def layers_table(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    dtype = DTYPES[args.dtype]
    if args.table == "kernels":
        makers = kernel_makers(args.window)
    else:
        makers = layer_makers(args.d_model, args.heads, args.window)
    rows: list[dict[str, Any]] = []
    skipped, failed = [], {}
    for length in args.lengths:
        torch.manual_seed(0)
        shape = (args.batch, length, args.d_model)
        if args.table == "kernels":
            shape = (3, args.batch, args.heads, length, args.d_model // args.heads)
        x = torch.randn(shape, device=device, dtype=dtype)
        x.requires_grad_(True)
        steps = {}
        for name, (present, make) in makers.items():
            if args.only and name not in args.only:
                continue
            if name.startswith("full") and args.full_max and length > args.full_max:
                continue
            if not present:
                skipped.append(name)
                continue
            try:  # a peer that breaks is a row marked failed, never the end of the run
                torch.manual_seed(0)
                fn = step(make().to(device=device, dtype=dtype), x)
                fn()
            except Exception as error:  # noqa: BLE001 (any failure of a third-party library)
                failed[f"{name} n={length}"] = f"{type(error).__name__}: {str(error)[:200]}"
                continue
            steps[name] = fn
        seconds = interleaved(steps, repeats=args.repeats, warmup=0, device=device)
        for name, fn in steps.items():
            peak = peak_rise_bytes(fn, device)
            row = {
                "n": length,
                "candidate": name,
                "ms": 1e3 * median(seconds[name]),
                "all_ms": [1e3 * s for s in seconds[name]],
                "peak_mib": None if peak is None else peak / 2**20,
            }
            rows.append(row)
            mib = "n/a" if row["peak_mib"] is None else f"{row['peak_mib']:10.1f}"
            print(f"n={length:6d} {name:16s} {row['ms']:11.1f} ms {mib} MiB", flush=True)
    summary = summarise(rows)
    print_summary(summary)
    return {"rows": rows, "summary": summary, "skipped": sorted(set(skipped)), "failed": failed}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Memory growth per doubling from 4k on, the n where each window overtakes full attention
    of its direction, and the time ratios the acceptance asks about."""
    by = {(r["candidate"], r["n"]): r for r in rows}
    names = sorted({r["candidate"] for r in rows})
    growth, slope = {}, {}
    for name in names:
        points = sorted(
            (n, by[(c, n)]["peak_mib"]) for c, n in by if c == name and by[(c, n)]["peak_mib"]
        )
        points = [(n, m) for n, m in points if n >= 4096]
        growth[name] = {
            f"{a}->{b}": mb / ma for (a, ma), (b, mb) in zip(points, points[1:], strict=False)
        }
        if len(points) >= 2:
            xs = [math.log2(n) for n, _ in points]
            ys = [math.log2(m) for _, m in points]
            mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
            cov = sum((a - mean_x) * (b - mean_y) for a, b in zip(xs, ys, strict=True))
            slope[name] = cov / sum((a - mean_x) ** 2 for a in xs)
    overtakes = {}
    for window, full in DIRECTIONS.items():
        lengths = sorted(n for c, n in by if c == window and (full, n) in by)
        faster = [n for n in lengths if by[(window, n)]["ms"] < by[(full, n)]["ms"]]
        overtakes[window] = faster[0] if faster else None
    ratios = {}
    for n in sorted({r["n"] for r in rows}):
        for a, b in (
            ("local-attention", "window-causal"),
            ("full-causal", "window-causal"),
            ("hf-longformer", "window"),
            ("full", "window"),
        ):
            if (a, n) in by and (b, n) in by:
                ratios[f"{a} / {b} @ {n}"] = by[(a, n)]["ms"] / by[(b, n)]["ms"]
    return {
        "memory_growth_per_doubling": growth,
        "memory_loglog_slope_from_4k": slope,
        "window_overtakes_full_at": overtakes,
        "time_ratios": ratios,
    }


def print_summary(summary: dict[str, Any]) -> None:
    print("\nmemory growth per doubling of n (from 4k), log-log slope:")
    for name, growth in summary["memory_growth_per_doubling"].items():
        steps = "  ".join(f"{k} {v:.2f}x" for k, v in growth.items())
        slope = summary["memory_loglog_slope_from_4k"].get(name)
        print(f"  {name:16s} {steps}  slope {slope:.2f}" if slope is not None else f"  {name}")
    for window, n in summary["window_overtakes_full_at"].items():
        print(f"{window} is faster than {DIRECTIONS[window]} from n = {n} on the grid")
    print("time ratios (> 1: the second is faster):")
    for key, ratio in summary["time_ratios"].items():
        print(f"  {key}: {ratio:.2f}x")


def generate_table(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Per-token decoding cost at a context of `args.context` tokens."""
    shape = dict(d_model=args.d_model, n_heads=args.heads, n_layers=args.n_layers, d_ff=args.d_ff)
    shape.update(vocab_size=256, dropout=0.0, max_len=args.context + 1024)
    torch.manual_seed(0)
    window = formers.build(
        formers.config("longformer", **shape, **{"attention.window": args.window})
    )
    vanilla = formers.build(formers.config("vanilla", **shape))
    context = torch.randint(0, 256, (1, args.context), device=device)
    steps, caches = {}, {}
    with torch.no_grad():
        for name, model in (("longformer", window), ("vanilla", vanilla)):
            model.to(device).eval()
            cache = model.new_cache()
            model(context, cache=cache)
            caches[name] = cache

            def cached(model=model, cache=cache) -> None:
                with torch.no_grad():
                    model(context[:, -1:], cache=cache)

            steps[f"{name} cached"] = cached

        def uncached() -> None:
            with torch.no_grad():
                window(context)  # generate(use_cache=False) re-encodes the context each step

        steps["longformer uncached"] = uncached
        seconds = interleaved(steps, repeats=args.repeats, warmup=1, device=device)
    ms = {name: 1e3 * median(times) for name, times in seconds.items()}
    state_mib = {name: state_bytes(cache) / 2**20 for name, cache in caches.items()}
    ratio = ms["longformer uncached"] / ms["longformer cached"]
    print(f"one decoding step at a context of {args.context} (grows by one token per round):")
    for name, value in ms.items():
        print(f"  {name:22s} {value:9.2f} ms/token")
    for name, mib in state_mib.items():
        print(f"  {name} decoding state: {mib:.1f} MiB")
    print(f"longformer: rolling cache {ratio:.1f}x faster than re-encoding the context")
    return {
        "ms_per_token": ms,
        "state_mib": state_mib,
        "cached_speedup": ratio,
        "all_ms": {name: [1e3 * s for s in times] for name, times in seconds.items()},
    }


def state_bytes(cache: Any) -> int:
    """Bytes of the tensors every layer's decoding state holds (buffers at their capacity), found
    through the states' attributes, tuples, lists and dicts; a storage shared by views counts
    once."""
    storages: dict[int, int] = {}

    def visit(value: Any) -> None:
        if isinstance(value, Tensor):
            storage = value.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(value, (tuple, list)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for item in vars(value).values():
                visit(item)

    for state in cache.layers:
        visit(state)
    return sum(storages.values())


def plot(result: dict[str, Any], path: Path, title: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = sorted({r["candidate"] for r in result["rows"]})
    for name in names:
        points = sorted(
            (r["n"], r["ms"], r["peak_mib"]) for r in result["rows"] if r["candidate"] == name
        )
        axes[0].plot([p[0] for p in points], [p[1] for p in points], marker=".", label=name)
        memory = [(p[0], p[2]) for p in points if p[2] is not None]
        axes[1].plot([n for n, _ in memory], [m for _, m in memory], marker=".", label=name)
    for ax, label in zip(axes, ("forward + backward (ms)", "peak memory rise (MiB)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="sequence length n", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("table", choices=["layers", "kernels", "generate"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768])
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--n-layers", type=int, default=6, help="generate: model depth")
    p.add_argument("--d-ff", type=int, default=2048, help="generate: feed-forward width")
    p.add_argument("--context", type=int, default=4096, help="generate: tokens already decoded")
    p.add_argument("--dtype", default="fp32", choices=list(DTYPES))
    p.add_argument("--only", nargs="+", help="layers, kernels: only these candidates")
    p.add_argument(
        "--full-max", type=int, default=None, help="layers, kernels: longest n for full rows"
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument(
        "--png", type=Path, default=None, help="layers, kernels: plot time and memory here"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tuned = keep_freed_memory()
    device = torch.device(args.device)
    header = (
        f"{device_name(device)}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"{args.dtype}; B={args.batch} D={args.d_model} H={args.heads} window={args.window}; "
        f"median of {args.repeats} interleaved rounds"
    )
    print(header)
    if args.table in ("layers", "kernels"):
        result = layers_table(args, device)
        if args.png:
            plot(result, args.png, header)
    else:
        result = generate_table(args, device)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        machine = {"platform": platform.platform(), "torch": torch.__version__}
        machine |= {"threads": torch.get_num_threads(), "keep_freed_memory": tuned}
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        report = {"machine": machine, "args": settings, "header": header} | result
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
