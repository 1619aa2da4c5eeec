"""Speed and memory of the blocked sliding-window kernel (Longformer §3.1) against full attention.

Three tables, each the median of `--repeats` interleaved forward+backward passes of one attention
layer's kernel (B = `--batch`, H = `--heads`, K = `--head-dim`, random q, k, v), with the peak
rise of live tensor bytes over one pass (formers.bench.memory: profiler allocation records on
CPU, allocator statistics on CUDA):

  scaling  the causal window kernel vs full causal `scaled_dot_product_attention` per length;
  blocks   the kernel per block size at one length (how the default block was chosen);
  kernels  block pairs through the fused kernel vs two batched matmuls and a masked softmax
           (the kernel itself picks the explicit path on CPU in bf16/fp16, the fused elsewhere).

    python benchmarks/sliding_window_kernel.py scaling --threads 2 \
        --lengths 1024 2048 4096 8192 16384 --window 256 --json results/sliding_window.json
    python benchmarks/sliding_window_kernel.py blocks --threads 2 --lengths 8192
    python benchmarks/sliding_window_kernel.py kernels --threads 2 --lengths 4096 16384
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from formers.bench.hardware import device_name
from formers.bench.memory import peak_rise_bytes
from formers.bench.timing import interleaved, median
from formers.cpu_allocator import keep_freed_memory
from formers.kernels import attention as kernels
from formers.kernels.window import (
    band_reach,
    default_block_size,
    sliding_window_attention,
)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("table", choices=["scaling", "blocks", "kernels"])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384])
    p.add_argument("--window", type=int, default=256)
    p.add_argument("--two-sided", action="store_true", help="two-sided window (default causal)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtypes", nargs="+", default=None, choices=list(DTYPES))
    p.add_argument("--blocks", type=int, nargs="+", default=[32, 64, 128, 255, 256, 512])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", type=Path, default=None, help="write the rows here")
    return p.parse_args(argv)


def measure(
    candidates: dict[str, Callable[[], object]], repeats: int, device: torch.device
) -> dict[str, tuple[float, float | None]]:
    """Median seconds and peak MiB of each candidate."""
    seconds = interleaved(candidates, repeats=repeats, device=device)
    result = {}
    for name, fn in candidates.items():
        peak = peak_rise_bytes(fn, device)
        result[name] = (median(seconds[name]), None if peak is None else peak / 2**20)
    return result


def with_fused(fused: bool, fn: Callable[[], None]) -> Callable[[], None]:
    """`fn` with the shared kernel's fused-or-explicit choice forced during the call."""

    def run() -> None:
        rule = kernels.fused_kernel_is_faster
        kernels.fused_kernel_is_faster = lambda q, k: fused
        try:
            fn()
        finally:
            kernels.fused_kernel_is_faster = rule

    return run


def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
    def run() -> None:
        fn().sum().backward()

    return run


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    keep_freed_memory()
    device = torch.device(args.device)
    causal = not args.two_sided
    dtypes = args.dtypes or (["fp32"] if args.table == "scaling" else ["fp32", "bf16"])
    print(
        f"{device_name(device)}, {torch.get_num_threads()} threads, torch {torch.__version__}; "
        f"B={args.batch} H={args.heads} K={args.head_dim} window={args.window} "
        f"{'causal' if causal else 'two-sided'}; forward+backward, median of {args.repeats}"
    )
    rows = []
    for dtype_name in dtypes:
        for length in args.lengths:
            shape = (args.batch, args.heads, length, args.head_dim)
            q, k, v = (
                torch.randn(shape, dtype=DTYPES[dtype_name], device=device, requires_grad=True)
                for _ in range(3)
            )

            def window(block_size=None, q=q, k=k, v=v):
                return sliding_window_attention(
                    q, k, v, window=args.window, causal=causal, block_size=block_size
                )

            if args.table == "scaling":
                full = lambda q=q, k=k, v=v: F.scaled_dot_product_attention(  # noqa: E731
                    q, k, v, is_causal=causal
                )
                candidates = {"window": step(window), "full": step(full)}
            elif args.table == "blocks":
                candidates = {f"block {b}": step(lambda b=b: window(b)) for b in args.blocks}
                left, right = band_reach(args.window, causal)
                print(f"n={length} {dtype_name}: default block {default_block_size(left + right)}")
            else:
                candidates = {
                    "fused": with_fused(True, step(window)),
                    "explicit": with_fused(False, step(window)),
                }
            results = measure(candidates, args.repeats, device)
            for name, (seconds, mib) in results.items():
                row = {"dtype": dtype_name, "n": length, "candidate": name}
                rows.append(row | {"ms": 1e3 * seconds, "peak_mib": mib})
                memory = "n/a" if mib is None else f"{mib:9.1f}"
                print(
                    f"{dtype_name:5} n={length:6d} {name:10} {1e3 * seconds:10.1f} ms {memory} MiB"
                )
            if args.table == "scaling":
                ratio = results["full"][0] / results["window"][0]
                print(f"{'':5} n={length:6d} full / window time: {ratio:.2f}x", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = vars(args) | {"json": str(args.json)}
        args.json.write_text(json.dumps({"args": settings, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
