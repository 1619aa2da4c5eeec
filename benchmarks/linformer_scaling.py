"""Time and peak memory of one bidirectional attention layer against sequence length.

Every candidate is one self-attention layer of width 512 with 8 heads (q/k/v and output
projections included) on a batch of one sequence; one call is its forward pass and the backward
pass of out.sum() into the input and the weights. Candidates, all in one interleaved run
(formers.bench.timing: rotating rounds, medians), fp32:

  full            formers MultiHeadAttention, two-sided: torch's fused SDPA, O(n²) time
  linformer k=K   formers LinformerAttention (sharing headwise, n_max = the longest length)
  sliding w=W     formers' sliding-window kernel, two-sided, if this checkout has it
  lucidrains k=K  linformer.LinformerSelfAttention (pip install linformer), the same k and
                  n_max, its default sharing (one E for keys and one F for values per layer)
  hf-longformer   transformers' LongformerSelfAttention, attention_window=W, no global tokens

Peak memory is formers.bench.memory's: bytes of the live tensors (weights, input) plus the
largest rise of allocated bytes during one call. Full attention stops at --full-max (its n²
time); a peer that is not installed is left out.

    python benchmarks/linformer_scaling.py --lengths 1024 2048 4096 8192 16384 32768 \
        --json bench-results/linformer_scaling.json --png docs/images/linformer-scaling.png
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.bench.memory import METHOD, peak_bytes
from formers.bench.plots import pyplot, save_figure
from formers.bench.timing import interleaved
from formers.cpu_allocator import keep_freed_memory
from formers.layers.attention import MultiHeadAttention
from formers.layers.mask import AttentionMask
from formers.variants.linformer import LinformerAttention, LinformerConfig

D_MODEL, HEADS = 512, 8


class Step:
    """One forward + backward of `layer` on a fixed (1, n, D) input."""

    def __init__(self, layer: nn.Module, length: int, call: Callable[[nn.Module, Tensor], Tensor]):
        self.layer, self.call = layer, call
        self.x = torch.randn(1, length, D_MODEL, requires_grad=True)

    def __call__(self) -> None:
        self.call(self.layer, self.x).sum().backward()
        self.x.grad = None
        self.layer.zero_grad(set_to_none=True)

    def live(self) -> list[Tensor]:
        return [*self.layer.parameters(), self.x]


def _plain(layer: nn.Module, x: Tensor) -> Tensor:
    return layer(x)


def formers_full(n_max: int) -> tuple[nn.Module, Callable]:
    layer = MultiHeadAttention(D_MODEL, HEADS)
    return layer, lambda m, x: m(x, mask=AttentionMask(causal=False))


def formers_linformer(k: int, n_max: int) -> tuple[nn.Module, Callable]:
    return LinformerAttention(D_MODEL, HEADS, n_max, LinformerConfig(proj_len=k)), _plain


def lucidrains_linformer(k: int, n_max: int) -> tuple[nn.Module, Callable]:
    from linformer import LinformerSelfAttention

    return LinformerSelfAttention(D_MODEL, n_max, k=k, heads=HEADS), _plain


def hf_longformer(window: int, n_max: int) -> tuple[nn.Module, Callable]:
    from transformers import LongformerConfig
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    cfg = LongformerConfig(
        hidden_size=D_MODEL, num_attention_heads=HEADS, attention_window=[window]
    )
    layer = LongformerSelfAttention(cfg, layer_id=0)

    def call(m: nn.Module, x: Tensor) -> Tensor:
        local = torch.zeros(x.shape[:2])  # 0: local attention, no global tokens, no padding
        out = m(
            x,
            attention_mask=local,
            is_index_masked=local.bool(),
            is_index_global_attn=local.bool(),
            is_global_attn=False,
        )
        return out[0]

    return layer, call


def formers_sliding(window: int, n_max: int) -> tuple[nn.Module, Callable] | None:
    try:
        from formers.kernels.window import sliding_window_attention
    except ImportError:
        return None
    layer = MultiHeadAttention(D_MODEL, HEADS)

    def call(m: nn.Module, x: Tensor) -> Tensor:
        q, k, v, _ = m.project(x)
        out = sliding_window_attention(q, k, v, window=window, causal=False)
        return m.out_proj(out.transpose(1, 2).reshape(x.shape))

    return layer, call


def installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def candidates(args: argparse.Namespace, n_max: int) -> dict[str, tuple[nn.Module, Callable]]:
    """Every candidate layer this machine can build, by name."""
    made: dict[str, Any] = {"full": formers_full(n_max)}
    for k in args.k:
        made[f"linformer k={k}"] = formers_linformer(k, n_max)
    sliding = formers_sliding(args.window, n_max)
    if sliding is not None:
        made[f"sliding w={args.window}"] = sliding
    if installed("linformer"):
        for k in args.k:
            made[f"lucidrains k={k}"] = lucidrains_linformer(k, n_max)
    if installed("transformers"):
        made[f"hf-longformer w={args.window}"] = hf_longformer(args.window, n_max)
    return made


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    n_max = max(args.lengths)
    layers = candidates(args, n_max)
    if args.only:
        layers = {k: v for k, v in layers.items() if k.split()[0] in args.only}
    rows = []
    for length in args.lengths:
        steps = {
            name: Step(layer, length, call)
            for name, (layer, call) in layers.items()
            if not (name == "full" and length > args.full_max)
        }
        print(f"n = {length}: {', '.join(steps)}", flush=True)
        seconds = interleaved(steps, repeats=args.repeats, warmup=args.warmup)
        for name, step in steps.items():
            memory = peak_bytes(step, step.live(), torch.device("cpu"))
            rows.append(
                {
                    "candidate": name,
                    "seq_len": length,
                    "seconds": seconds[name],
                    "median_seconds": statistics.median(seconds[name]),
                    "peak_memory_bytes": memory,
                }
            )
            print(f"  {name:22s} {rows[-1]['median_seconds']:8.3f} s  {memory / 2**20:9.1f} MiB")
    return {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": args.threads,
            "torch": torch.__version__,
        },
        "settings": {**vars(args), "d_model": D_MODEL, "heads": HEADS, "batch": 1},
        "memory_method": METHOD,
        "rows": rows,
    }


def table(report: dict[str, Any]) -> str:
    """Markdown: median seconds and peak MiB per candidate and length, and ratios at each n."""
    rows = report["rows"]
    names = list(dict.fromkeys(r["candidate"] for r in rows))
    lengths = sorted({r["seq_len"] for r in rows})
    cell = {(r["candidate"], r["seq_len"]): r for r in rows}
    head = "| candidate | " + " | ".join(f"n={n}" for n in lengths) + " |"
    lines = ["time per forward + backward, median seconds", "", head]
    lines.append("|" + " --- |" * (len(lengths) + 1))
    for name in names:
        values = [cell.get((name, n)) for n in lengths]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{v['median_seconds']:.3f}" if v else "–" for v in values)
            + " |"
        )
    lines += ["", "peak memory, MiB", "", head, "|" + " --- |" * (len(lengths) + 1)]
    for name in names:
        values = [cell.get((name, n)) for n in lengths]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{v['peak_memory_bytes'] / 2**20:.1f}" if v else "–" for v in values)
            + " |"
        )
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> Path:
    """Time and memory against n, log-log, one line per candidate."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(dict.fromkeys(r["candidate"] for r in report["rows"]))
    for name in names:
        mine = [r for r in report["rows"] if r["candidate"] == name]
        xs = [r["seq_len"] for r in mine]
        left.plot(xs, [r["median_seconds"] for r in mine], marker=".", label=name)
        right.plot(xs, [r["peak_memory_bytes"] / 2**20 for r in mine], marker=".", label=name)
    for ax, label in ((left, "seconds per forward + backward"), (right, "peak memory, MiB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="sequence length n (batch 1)", ylabel=label)
        ax.grid(alpha=0.3)
    left.legend(fontsize=7)
    fig.suptitle(f"one attention layer, d_model {D_MODEL}, {HEADS} heads, fp32, CPU")
    return save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    parser.add_argument("--k", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--window", type=int, default=512, help="sliding / Longformer window")
    parser.add_argument("--full-max", type=int, default=16384, help="longest n for full attention")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument(
        "--only", nargs="+", help="candidates to run, by first word (full, linformer, ...)"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    args = parser.parse_args()
    keep_freed_memory()
    report = run(args)
    report["settings"] = {
        k: str(v) if isinstance(v, Path) else v for k, v in report["settings"].items()
    }
    print()
    print(table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.png:
        plot(report, args.png)


if __name__ == "__main__":
    main()
