"""Block-sparse attention on CUDA: the FlexAttention twins against the explicit kernels and dense
causal attention, one attention layer's `attend` (everything between the projections and the
output projection), forward + backward, bf16 by default.

For each pattern and shape (batch × length), three candidates on the same random q, k, v
(B × H heads × K channels; the GPT-2-small width by default, 12 × 64):

  flex       the layer's attend as it runs on CUDA (formers.kernels.sparse picks the twin)
  explicit   the same attend inside `explicit_kernels()` (the kernels the CPU runs)
  dense      torch's fused causal scaled_dot_product_attention over all keys (vanilla's kernel)

Patterns, with the presets' options unless given: longformer (causal window 256), routing (half
the heads local in blocks of 128, half routed: 32 clusters, blocks of 16 members), xl (memory
128, the relative terms), topk (k = 8). Each row is the median of --repeats interleaved calls
after --warmup untimed ones (compilation, autotuning), with the peak rise of allocated bytes over
one call; a candidate that runs out of memory is reported as such. On the CPU, FlexAttention has
no backward: every candidate runs forward only there (a smoke test, not a measurement).

    python benchmarks/block_sparse_cuda.py --shapes 2x8192 1x32768 --json results/bs.json
    python benchmarks/block_sparse_cuda.py --patterns xl topk --shapes 16x1024
    python benchmarks/block_sparse_cuda.py --device cpu --shapes 1x160 --heads 2 --head-dim 16
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from formers.bench.hardware import machine_info
from formers.bench.memory import peak_rise_bytes
from formers.bench.timing import interleaved, median
from formers.kernels import sparse
from formers.layers.mask import AttentionMask
from formers.variants.longformer import LongformerConfig
from formers.variants.longformer.attention import LongformerAttention
from formers.variants.routing import RoutingConfig
from formers.variants.routing.attention import RoutingAttention
from formers.variants.topk import TopKAttention, TopKConfig
from formers.variants.xl.attention import RelativeMultiHeadAttention
from formers.variants.xl.config import XLConfig
from formers.variants.xl.mask import xl_mask

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PATTERNS = ("longformer", "routing", "xl", "topk")
CANDIDATES = ("flex", "explicit", "dense")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--patterns", nargs="+", choices=PATTERNS, default=["longformer", "routing"])
    p.add_argument("--shapes", nargs="+", default=["2x8192", "1x32768"], help="BATCHxLENGTH")
    p.add_argument("--candidates", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16")
    p.add_argument("--window", type=int, default=256, help="longformer: the causal window")
    p.add_argument("--n-clusters", type=int, default=32, help="routing: centroids per head")
    p.add_argument("--cluster-window", type=int, default=32, help="routing: attention.window")
    p.add_argument("--local-window", type=int, default=128, help="routing: local block")
    p.add_argument("--mem-len", type=int, default=128, help="xl: memory length")
    p.add_argument("--top-k", type=int, default=8)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", type=Path, default=None, help="write the rows here")
    return p.parse_args(argv)


def shape(text: str) -> tuple[int, int]:
    batch, _, length = text.lower().partition("x")
    if not (batch.isdigit() and length.isdigit()):
        raise SystemExit(f"--shapes {text!r}: write BATCHxLENGTH, e.g. 2x8192")
    return int(batch), int(length)


def candidates(pattern: str, args, batch: int, length: int, device, dtype) -> dict:
    """The three candidates on one set of random q, k, v (leaves that need gradients)."""
    d_model = args.heads * args.head_dim
    if pattern == "longformer":
        layer = LongformerAttention(d_model, args.heads, LongformerConfig(window=args.window))
    elif pattern == "routing":
        options = RoutingConfig(
            n_clusters=args.n_clusters, window=args.cluster_window, local_window=args.local_window
        )
        layer = RoutingAttention(d_model, args.heads, options)
    elif pattern == "xl":
        layer = RelativeMultiHeadAttention(d_model, args.heads, XLConfig(mem_len=args.mem_len))
    else:
        layer = TopKAttention(d_model, args.heads, TopKConfig(top_k=args.top_k))
    layer = layer.to(device, dtype)
    memory = args.mem_len if pattern == "xl" else 0

    def leaf(n: int) -> torch.Tensor:
        x = torch.randn(batch, args.heads, n, args.head_dim, device=device, dtype=dtype)
        return x.requires_grad_()

    q, k, v = leaf(length), leaf(memory + length), leaf(memory + length)
    mask = xl_mask(length, memory, None, device) if pattern == "xl" else AttentionMask(True)
    # dense: all keys, causal (for xl, over memory + segment: S = M + T keys)
    dense_mask = mask.dense(length, memory + length, device) if pattern == "xl" else None

    def attend() -> torch.Tensor:
        return layer.attend(q, k, v, mask)

    def dense() -> torch.Tensor:
        causal = dense_mask is None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask, is_causal=causal)

    return {"flex": attend, "explicit": explicit(attend), "dense": dense}


def call(fn: Callable[[], torch.Tensor], backward: bool) -> Callable[[], None]:
    def run() -> None:
        if backward:
            fn().float().sum().backward()
        else:
            with torch.no_grad():
                fn()

    return run


def explicit(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    def run() -> torch.Tensor:
        with sparse.explicit_kernels():
            return fn()

    return run


def measure(name: str, fn: Callable[[], None], args, device) -> dict:
    """Median ms and peak MiB of `fn`, or its failure."""
    try:
        seconds = interleaved({name: fn}, repeats=args.repeats, warmup=args.warmup, device=device)
        peak = peak_rise_bytes(fn, device)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"status": "out of memory", "ms": None, "peak_mib": None}
    mib = None if peak is None else peak / 2**20
    return {"status": "ok", "ms": 1e3 * median(seconds[name]), "peak_mib": mib}


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    # past flex.RECOMPILE_LIMIT kernels the twins hand new shapes to the explicit kernels with a
    # warning: here that would time the explicit path as "flex", so it stops the run instead
    warnings.filterwarnings("error", message=".*new shapes take the explicit kernels")
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    backward = device.type == "cuda"
    passes = "forward + backward" if backward else "forward only (FlexAttention: no CPU backward)"
    info = machine_info(device)
    flex_runs = sparse.runs_on_flex(torch.empty(1, 1, 1, args.head_dim, device=device))
    print(
        f"{info['device_name']}, torch {torch.__version__}, {args.dtype}; H={args.heads} "
        f"K={args.head_dim}; {passes}; median of {args.repeats} after {args.warmup} warm-up"
        f"{'' if flex_runs else '; FlexAttention not taken here: flex = explicit'}"
    )
    print(f"{'pattern':10} {'shape':>9} {'candidate':9} {'ms':>10} {'peak MiB':>10}  status")
    rows = []
    for pattern in args.patterns:
        for text in args.shapes:
            batch, length = shape(text)
            torch.manual_seed(0)
            runs = candidates(pattern, args, batch, length, device, dtype)
            for name in args.candidates:
                result = measure(name, call(runs[name], backward), args, device)
                row = {"pattern": pattern, "batch": batch, "length": length, "candidate": name}
                rows.append(row | result | {"flex_taken": flex_runs and name == "flex"})
                ms = "-" if result["ms"] is None else f"{result['ms']:10.2f}"
                mib = "-" if result["peak_mib"] is None else f"{result['peak_mib']:10.1f}"
                print(f"{pattern:10} {text:>9} {name:9} {ms:>10} {mib:>10}  {result['status']}")
            del runs
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = vars(args) | {"json": str(args.json)}
        report = {"args": settings, "machine": info, "passes": passes, "rows": rows}
        args.json.write_text(json.dumps(report, indent=1))
    return rows


if __name__ == "__main__":
    main()
