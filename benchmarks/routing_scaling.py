"""Routing attention against sequence length: time and peak memory of one training step of one
attention layer, beside full attention, a blocked sliding window, Linformer and lucidrains'
routing-transformer, timed interleaved in one run (medians).

Candidates (D = --d-model, H = --n-heads, K = D / H, batch 1, fp32, train mode, no dropout; a
step is forward, a loss (the output against a fixed random direction, plus the aux loss where
there is one) and backward):
  formers routing     RoutingAttention: H/2 local heads (window --local-window), H/2 routed heads
                      in T / --window clusters, blocks of --window members, centroids fitted
  formers full        MultiHeadAttention, causal, torch's fused kernel
  formers window      every head a causal local window of --local-window (routing's local-head
                      kernel, `local_attention`: blocks of W attend to themselves and the block
                      before)
  linformer (lucid.)  lucidrains `linformer` LinformerSelfAttention, k = --linformer-k; not causal
                      (Linformer mixes all positions), its cost for reference
  lucidrains routing  lucidrains `routing-transformer` SelfAttention, the same heads, clusters
                      (T / window) and windows, causal, shared q/k, no relative positions,
                      k-means updated on backward (`update_kmeans_on_backwards`)

Prints a table, writes JSON (and a PNG with --plot):

    python benchmarks/routing_scaling.py --lengths 1024 2048 4096 8192 16384 32768 \\
        --json benchmarks/results/routing_scaling.json --plot docs/images/routing-scaling.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.bench.hardware import machine_info
from formers.bench.memory import peak_bytes
from formers.bench.plots import pyplot, save_figure
from formers.bench.timing import interleaved, median
from formers.kernels.blocks import local_attention
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.routing import RoutingAttention, RoutingConfig

CAUSAL = AttentionMask(causal=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--window", type=int, default=128, help="routed members per block/cluster")
    p.add_argument("--local-window", type=int, default=128)
    p.add_argument("--linformer-k", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-full", type=int, default=16384, help="longest length for full")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", nargs="*", default=None, help="candidate names to keep")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--plot", type=Path, default=None)
    return p.parse_args(argv)


class LocalWindow(nn.Module):
    """Every head a causal local window: projections around `local_attention`."""

    def __init__(self, d_model: int, n_heads: int, window: int):
        super().__init__()
        self.inner = MultiHeadAttention(d_model, n_heads)
        self.window = window

    def forward(self, x: Tensor) -> Tensor:
        q, k, v, _ = self.inner.project(x)
        out = local_attention(q, k, v, self.window, causal=True)  # (B, H, T, K)
        return self.inner.out_proj(out.transpose(1, 2).flatten(2))


def candidates(args: argparse.Namespace, length: int) -> dict[str, tuple[nn.Module, Callable]]:
    """name -> (module, forward returning (output, aux loss))."""
    d, h = args.d_model, args.n_heads
    clusters = max(1, length // args.window)
    out: dict[str, tuple[nn.Module, Callable]] = {}
    options = RoutingConfig(
        n_clusters=clusters, window=args.window, local_heads=h // 2, local_window=args.local_window
    )
    routing = RoutingAttention(d, h, options)

    def run_routing(x: Tensor) -> tuple[Tensor, Tensor]:
        y = routing(x, mask=CAUSAL)
        return y, routing.aux_loss if routing.aux_loss is not None else y.new_zeros(())

    out["formers routing"] = (routing, run_routing)
    if length <= args.max_full:
        full = MultiHeadAttention(d, h)
        out["formers full"] = (full, lambda x: (full(x, mask=CAUSAL), x.new_zeros(())))
    window = LocalWindow(d, h, args.local_window)
    out["formers window"] = (window, lambda x: (window(x), x.new_zeros(())))
    try:
        from linformer import LinformerSelfAttention

        lin = LinformerSelfAttention(dim=d, seq_len=length, heads=h, k=args.linformer_k)
        out["linformer (lucidrains)"] = (lin, lambda x: (lin(x), x.new_zeros(())))
    except ImportError:
        print("linformer not installed: bash benchmarks/install_peers.sh", file=sys.stderr)
    try:
        from routing_transformer.routing_transformer import (
            SelfAttention,
            update_kmeans_on_backwards,
        )

        peer = SelfAttention(
            d,
            1,
            length,
            h,
            h // 2,
            args.window,
            local_attn_window_size=args.local_window,
            causal=True,
            rel_pos_emb=False,
            shared_qk=True,
        )
        update_kmeans_on_backwards(peer)
        out["lucidrains routing"] = (peer, peer)
    except ImportError:
        print(
            "routing-transformer not installed: bash benchmarks/install_peers.sh", file=sys.stderr
        )
    if args.only:
        out = {k: v for k, v in out.items() if k in args.only}
    return out


def step_fn(module: nn.Module, forward: Callable, x: Tensor, direction: Tensor) -> Callable:
    def step() -> None:
        y, aux = forward(x)
        ((y * direction).sum() + aux).backward()
        module.zero_grad(set_to_none=True)

    return step


def measure(args: argparse.Namespace, length: int) -> dict[str, dict[str, Any]]:
    torch.manual_seed(0)
    device = torch.device(args.device)
    x = torch.randn(1, length, args.d_model, device=device)
    direction = torch.randn(1, length, args.d_model, device=device) / length
    found = candidates(args, length)
    steps = {}
    for name, (module, forward) in found.items():
        module.to(device).train()
        steps[name] = step_fn(module, forward, x, direction)
    # one step each first: fits routing's centroids (its first step initialises them)
    seconds = interleaved(steps, repeats=args.repeats, warmup=1, device=device)
    results = {}
    for name, (module, _) in found.items():
        live = [*module.parameters(), *module.buffers(), x, direction]
        peak = peak_bytes(steps[name], live, device)
        results[name] = {
            "median_s": median(seconds[name]),
            "seconds": seconds[name],
            "peak_bytes": peak,
        }
    return results


def table(results: dict[int, dict[str, dict[str, Any]]]) -> str:
    names = sorted({n for per in results.values() for n in per}, key=_order)
    lines = [
        "| T | " + " | ".join(f"{n} s (MiB)" for n in names) + " | routing vs lucidrains "
        "| routing vs full |",
        "|---" * (len(names) + 3) + "|",
    ]
    for length, per in sorted(results.items()):
        cells = []
        for n in names:
            r = per.get(n)
            cells.append("—" if r is None else f"{r['median_s']:.3f} ({_mib(r['peak_bytes'])})")
        ratios = [_ratio(per, other) for other in ("lucidrains routing", "formers full")]
        lines.append(f"| {length:,} | " + " | ".join(cells + ratios) + " |")
    return "\n".join(lines)


def memory_growth(results: dict[int, dict[str, dict[str, Any]]], name: str) -> str:
    lengths = sorted(results)
    steps = []
    for a, b in zip(lengths, lengths[1:], strict=False):
        pa, pb = (results[n].get(name, {}).get("peak_bytes") for n in (a, b))
        if pa and pb and b == 2 * a:
            steps.append(f"{a:,}→{b:,}: {pb / pa:.2f}×")
    return f"{name} peak memory per doubling: " + ", ".join(steps)


def _order(name: str) -> int:
    known = ["formers routing", "lucidrains routing", "formers full", "formers window"]
    return known.index(name) if name in known else len(known)


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / 2**20:,.0f}"


def _ratio(per: dict[str, dict[str, Any]], other: str) -> str:
    if other not in per or "formers routing" not in per:
        return "—"
    return f"{per[other]['median_s'] / per['formers routing']['median_s']:.2f}×"


def plot(results: dict[int, dict[str, dict[str, Any]]], path: Path, device: str) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = sorted({n for per in results.values() for n in per}, key=_order)
    for name in names:
        lengths = [n for n in sorted(results) if name in results[n]]
        axes[0].plot(
            lengths, [results[n][name]["median_s"] for n in lengths], marker=".", label=name
        )
        axes[1].plot(
            lengths,
            [(results[n][name]["peak_bytes"] or 0) / 2**20 for n in lengths],
            marker=".",
            label=name,
        )
    for ax, label in zip(axes, ("seconds per training step", "peak MiB"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="sequence length T", ylabel=label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"One attention layer, fwd + bwd, {device} fp32, batch 1")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results: dict[int, dict[str, dict[str, Any]]] = {}
    for length in args.lengths:
        results[length] = measure(args, length)
        print(
            f"T={length:,}: "
            + ", ".join(f"{n} {r['median_s']:.3f}s" for n, r in results[length].items()),
            flush=True,
        )
    print(table(results))
    print(memory_growth(results, "formers routing"))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "args": {k: str(v) for k, v in vars(args).items()},
            "machine": machine_info(torch.device(args.device)),
            "results": {str(k): v for k, v in results.items()},
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        plot(results, args.plot, args.device.upper())
    return 0


if __name__ == "__main__":
    sys.exit(main())
