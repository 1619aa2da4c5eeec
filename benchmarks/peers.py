"""Training throughput of formers against a bare SDPA model and the popular libraries.

Every candidate trains the same decoder-only byte LM (by default 6 layers, d_model 512, 8 heads,
d_ff 2048, sequences of 512, batch 4, no dropout) on the same random batch: forward, loss,
backward, clipping and an AdamW step. Candidates of one family are timed in interleaved rounds (the
first candidate changes every round) so they share the machine's noise, and each reports the
median of its step times. Ratios are against the bare model of the same precision.

Families and candidates:
  vanilla          bare (peer_candidates.py: fused qkv, SDPA, pre-LN, GELU), formers, x-transformers
                   (attn_flash=True), HF GPT-2 (transformers), labml-nn
  transformer-xl   formers, x-transformers (memory with T5 relative bias, and with rotary
                   positions), HF TransfoXL (transformers < 4.40), labml-nn; all with a full
                   memory of --mem-len states
  primer-ez        formers, labml-nn (its Primer EZ: squared ReLU + multi-DConv-head attention)
  sparse-topk      formers, x-transformers (attn_sparse_topk): explicit sparse attention with
                   --top-k keys per query, on the vanilla family's model
  switch           formers (the switch preset: --n-experts experts of d_ff each in every other
                   layer, capacity factor 1.25), labml-nn (its SwitchFeedForward and
                   SwitchTransformerLayer in the same layers, its TransformerLayer in the
                   others), on the vanilla family's model; both losses add their layers'
                   load-balancing loss (α = 0.01)
  longformer       formers (causal sliding window of --window keys), lucidrains local-attention
                   (LocalAttention(window_size=--window, causal=True) in the bare model's
                   blocks: each query sees its block of --window and the one before), on the
                   vanilla family's model
With --compile, bare and formers also run with torch.compile (`bare+compile`,
`formers+compile`); with --compile all, every candidate does. Every candidate runs with the
malloc setting of formers commands (formers/cpu_allocator.py) unless --default-malloc is given:
one process, the same for all.

On a GPU (--device cuda) every candidate takes the same step under bf16 autocast with torch's
fused AdamW (formers' own optimizer is fused there too), timed by CUDA events. --shape gpt2-small
is GPT-2 small's shape (12 layers, d_model 768, 12 heads, d_ff 3,072, vocabulary 50,257, batch
16 × 1,024 tokens). --rows times named rows, each alone in a fresh process of its own
(benchmarks/peer_rows.py), with its compile seconds and the process's peak GPU memory:

    python benchmarks/peers.py --device cuda --shape gpt2-small --precision bf16 \
        --rows vanilla:bare vanilla:formers vanilla:hf-gpt2 vanilla:x-transformers \
        vanilla:formers+compile --repeats 10 --warmup 3 --json runs/peers-gpu.json

The peers are optional: `pip install -e '.[peers]'`; a library that is not installed is skipped.

    python benchmarks/peers.py --families vanilla transformer-xl --precision fp32 bf16 \
        --repeats 7 --json bench-results/peers.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import peer_rows
import torch
from peer_candidates import FAMILIES, Shape
from peer_step import COMPILED, batch, compiled, train_step

from formers.bench.hardware import machine_info, resolve_device
from formers.bench.timing import interleaved, median
from formers.cpu_allocator import keep_freed_memory
from formers.errors import FormersError

OURS = ("bare", "formers")  # always run; the rest are the peers


def run_family(
    family: str,
    s: Shape,
    precision: str,
    repeats: int,
    warmup: int,
    only: list[str] | None,
    compile_ours: bool = False,
    profile: bool = False,
    device: torch.device | None = None,
    compile_peers: bool = False,
    backend: str = "inductor",
) -> dict[str, Any]:
    device = device or torch.device("cpu")
    x, y = batch(s, device)
    makers = dict(FAMILIES[family])
    if compile_ours or compile_peers:
        for name in list(makers):
            if name in OURS or compile_peers:
                present, make = makers[name]
                makers[name + COMPILED] = (
                    present,
                    lambda s, make=make: compiled(make(s), backend),
                )
    steps, params, skipped, failed, notes = {}, {}, [], {}, {}
    for name, (present, make) in makers.items():
        if only and name.removesuffix(COMPILED) not in (*only, *OURS):
            continue
        if not present():
            skipped.append(name)
            continue
        torch.manual_seed(0)
        try:  # a peer that breaks is a row marked failed, never the end of the run
            candidate = make(s)
            candidate.model.to(device).train()
            step = train_step(candidate, x, y, precision, device)
            step()  # one trial step: errors surface here, not inside the timing rounds
        except Exception as error:  # noqa: BLE001 (any failure of a third-party library)
            failed[name] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
            continue
        params[name] = sum(p.numel() for p in candidate.model.parameters())
        steps[name] = step
        if candidate.note:
            notes[name] = candidate.note
    # warmup >= 2 when there is memory (the first step runs without it), 3 when compiled (the
    # step with memory compiles a second graph)
    least = 3 if compile_ours or compile_peers else 2
    seconds = interleaved(steps, repeats=repeats, warmup=max(warmup, least), device=device)
    tokens = s.batch * s.seq_len
    rates = {name: tokens / median(times) for name, times in seconds.items()}
    reference = rates.get("bare") or rates["formers"]
    peers = [rate for name, rate in rates.items() if name.removesuffix(COMPILED) not in OURS]
    fastest = max(peers) if peers else None
    return {
        "family": family,
        "precision": precision,
        "tokens_per_s": rates,
        "ratio_to_reference": {name: rate / reference for name, rate in rates.items()},
        "formers_vs_fastest_peer": rates["formers"] / fastest if fastest else None,
        "compiled_formers_vs_fastest_peer": (
            rates["formers" + COMPILED] / fastest if fastest and compile_ours else None
        ),
        "params": params,
        "seconds": seconds,
        "skipped": skipped,
        "failed": failed,
        "notes": notes,
        "profile": profile_step(steps["formers"]) if profile else None,
    }


LINEAR_OPS = ("aten::mm", "aten::addmm")
ATTENTION_MATMUL_OPS = ("aten::bmm", "aten::baddbmm", "aten::baddbmm_")


def profile_step(step: Callable[[], None], steps: int = 3) -> dict[str, float]:
    """Where one training step's time goes, by torch.profiler: linear layers (2-D matmuls),
    batched matmuls (attention), and everything else (norms, softmax, activations, casts, loss,
    optimizer, and the profiler's own overhead). Milliseconds per step; GFLOP/s from the
    profiler's FLOP counts."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        wall_ms = (time.perf_counter() - start) * 1e3 / steps
    events = {e.key: e for e in prof.key_averages()}

    def ms_and_flops(ops: tuple[str, ...]) -> tuple[float, float]:
        found = [events[op] for op in ops if op in events]
        ms = sum(e.self_cpu_time_total for e in found) / 1e3 / steps
        return ms, sum(e.flops for e in found) / steps

    linear_ms, linear_flops = ms_and_flops(LINEAR_OPS)
    attention_ms, attention_flops = ms_and_flops(ATTENTION_MATMUL_OPS)
    return {
        "step_ms": wall_ms,
        "linear_ms": linear_ms,
        "linear_gflop_per_s": linear_flops / linear_ms / 1e6 if linear_ms else 0.0,
        "attention_matmul_ms": attention_ms,
        "attention_matmul_gflop_per_s": (
            attention_flops / attention_ms / 1e6 if attention_ms else 0.0
        ),
        "other_ms": wall_ms - linear_ms - attention_ms,
    }


def print_table(result: dict[str, Any]) -> None:
    reference = "bare" if "bare" in result["tokens_per_s"] else "formers"
    print(f"\n{result['family']} ({result['precision']}), ratio to {reference}")
    print(f"{'candidate':16s} {'params':>12s} {'tokens/s':>10s} {'ratio':>7s}")
    for name, rate in sorted(result["tokens_per_s"].items(), key=lambda kv: -kv[1]):
        ratio = result["ratio_to_reference"][name]
        print(f"{name:16s} {result['params'][name]:12,d} {rate:10,.0f} {ratio:7.2f}")
    if result["formers_vs_fastest_peer"] is not None:
        print(f"formers / fastest peer: {result['formers_vs_fastest_peer']:.2f}")
    if result["compiled_formers_vs_fastest_peer"] is not None:
        print(f"formers{COMPILED} / fastest peer: {result['compiled_formers_vs_fastest_peer']:.2f}")
    for name, reason in result.get("failed", {}).items():
        print(f"{name:16s} failed: {reason}")
    if result["skipped"]:
        print(f"not installed: {', '.join(result['skipped'])}")
    if result.get("profile"):
        p = result["profile"]
        print(
            f"formers step under torch.profiler: {p['step_ms']:.0f} ms = linear layers "
            f"{p['linear_ms']:.0f} ms ({p['linear_gflop_per_s']:.0f} GFLOP/s) + attention "
            f"matmuls {p['attention_matmul_ms']:.0f} ms ({p['attention_matmul_gflop_per_s']:.0f} "
            f"GFLOP/s) + the rest {p['other_ms']:.0f} ms"
        )


SHAPES: dict[str, dict[str, int]] = {
    # the decoder-only byte LM of `formers bench`
    "matched": dict(n_layers=6, d_model=512, n_heads=8, d_ff=2048, vocab=256, seq_len=512,
                    batch_size=4),
    # GPT-2 small (Radford et al. 2019) at its context, batch 16
    "gpt2-small": dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab=50257,
                       seq_len=1024, batch_size=16),
}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--only", nargs="+", help="peers to time (bare and formers always run)")
    p.add_argument(
        "--rows",
        nargs="+",
        metavar="FAMILY:CANDIDATE[+compile]",
        help="instead of --families: time exactly these rows, in this order, each alone in a "
        "fresh process of its own (e.g. vanilla:hf-gpt2 vanilla:formers+compile)",
    )
    p.add_argument(
        "--row-time-limit",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="with --rows: most seconds one row's process may take (default: 600)",
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="ours",
        choices=["ours", "all"],
        help="also time bare and formers with torch.compile (bare+compile, formers+compile); "
        "--compile all: every candidate",
    )
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend")
    p.add_argument(
        "--profile",
        action="store_true",
        help="after timing, profile formers' step: linear layers, attention matmuls, the rest",
    )
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument(
        "--shape",
        choices=list(SHAPES),
        default="matched",
        help="the sizes below unless given: matched (6 × 512, batch 4 × 512) or gpt2-small",
    )
    for name in SHAPES["matched"]:
        p.add_argument("--" + name.replace("_", "-"), type=int)
    p.add_argument("--mem-len", type=int, default=512, help="Transformer-XL memory")
    p.add_argument("--top-k", type=int, default=8, help="keys per query of sparse-topk")
    p.add_argument("--n-experts", type=int, default=8, help="experts per Switch layer")
    p.add_argument("--window", type=int, default=256, help="keys per query of longformer")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per candidate")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate first")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc malloc as it is; by default every candidate runs with the setting "
        "formers commands use (formers/cpu_allocator.py)",
    )
    p.add_argument("--json", type=Path, help="write the results here")
    args = p.parse_args(argv)
    for name, value in SHAPES[args.shape].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def library_versions() -> dict[str, str | None]:
    """The installed version of torch and of each peer library (None: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "x-transformers", "labml-nn", "local-attention"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        device = resolve_device(args.device)
        rows = peer_rows.parse_rows(args.rows, FAMILIES) if args.rows else None
    except FormersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    tuned = False if args.default_malloc else keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    s = Shape(
        args.n_layers, args.d_model, args.n_heads, args.d_ff, args.vocab,
        args.seq_len, args.batch_size, args.mem_len, args.top_k, args.n_experts, args.window,
    )  # fmt: skip
    machine = {
        **machine_info(device),
        "processor": platform.processor(),
        "libraries": library_versions(),
        "keep_freed_memory": tuned,
        "threads": torch.get_num_threads(),
    }
    if rows is not None:
        settings = peer_rows.RowSettings(
            vars(s), tuple(args.precision), str(device), args.repeats, args.warmup,
            args.compile_backend, args.row_time_limit,
        )  # fmt: skip
        peer_rows.run_rows(rows, settings, machine, args.json)
        return 0
    results = []
    for precision in args.precision:
        for family in args.families:
            result = run_family(
                family,
                s,
                precision,
                args.repeats,
                args.warmup,
                args.only,
                compile_ours=args.compile is not None,
                profile=args.profile,
                device=device,
                compile_peers=args.compile == "all",
                backend=args.compile_backend,
            )
            print_table(result)
            results.append(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {"machine": machine, "shape": vars(s), "results": results}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
