"""Training step of one Switch layer against a dense FFN of the same per-token FLOPs and against
the popular Switch layers, timed in one interleaved run.

Every candidate takes (B, T, D) inputs, B·T tokens in rows of --seq-len, and its step is the
forward pass, its load-balancing loss, and the backward pass of sum(output · g) + that loss for
a fixed random g (so every candidate back-propagates the same upstream gradient):

  dense        formers' FeedForward with d_ff = one expert's: the FLOP-matched dense layer.
               Per token both compute x W₁ (D·F multiply-adds) and h W₂ (F·D); the Switch
               layer adds its router (D·E) and nothing else per token.
  formers      SwitchFeedForward: 8 experts, top-1, capacity factor 1.25 per row.
  hf           transformers' SwitchTransformersSparseMLP (4.37.2), expert_capacity =
               ⌈1.25 · T / E⌉ per row (its capacity counts along each row too), router jitter
               0.01 like ours, its load_balancing_loss_func.
  labml        labml-nn's SwitchFeedForward (sequence-first), capacity factor 1.25 over the
               batch, drop_tokens=True, is_scale_prob=True, the balancing loss of its
               experiment.
Candidates run round by round, the first one rotating each round; each reports the median of
its step times. Ratios are dense/candidate (1.0 = as fast as the dense layer) and
formers/peer.

    python benchmarks/switch_layer.py --tokens 2048 4096 8192 16384 32768 \
        --precision fp32 bf16 --json bench-results/switch_layer.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import sys
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.bench.timing import interleaved, median
from formers.cpu_allocator import keep_freed_memory
from formers.layers.feedforward import FeedForward
from formers.variants.switch import SwitchConfig, SwitchFeedForward

Step = Callable[[], None]


def dense(d: int, f: int, e: int, cf: float, seq_len: int) -> tuple[nn.Module, Callable]:
    layer = FeedForward(d, f, "relu")
    return layer, lambda x: layer(x)


def formers_switch(d: int, f: int, e: int, cf: float, seq_len: int) -> tuple[nn.Module, Callable]:
    layer = SwitchFeedForward(d, f, SwitchConfig(n_experts=e, capacity_factor=cf))

    def run(x: Tensor) -> Tensor:
        out = layer(x)
        return out, layer.aux_loss

    return layer, run


def hf_switch(d: int, f: int, e: int, cf: float, seq_len: int) -> tuple[nn.Module, Callable]:
    from transformers import SwitchTransformersConfig
    from transformers.models.switch_transformers.modeling_switch_transformers import (
        SwitchTransformersSparseMLP,
        load_balancing_loss_func,
    )

    config = SwitchTransformersConfig(
        d_model=d, d_ff=f, num_experts=e, expert_capacity=math.ceil(cf * seq_len / e),
        router_jitter_noise=0.01, dropout_rate=0.0, dense_act_fn="relu",
    )  # fmt: skip
    layer = SwitchTransformersSparseMLP(config)
    # transformers 5 returns only the output; the router's (index, probs, logits) are read off it
    # with a hook, which works with 4.x too
    routed: list[tuple[Tensor, Tensor, Tensor]] = []
    layer.router.register_forward_hook(lambda module, args, result: routed.append(result))

    def run(x: Tensor) -> Tensor:
        routed.clear()
        out = layer(x)
        out = out[0] if isinstance(out, tuple) else out
        expert_index, _, router_logits = routed[0]
        probs = torch.softmax(router_logits.float(), dim=-1)
        return out, 0.01 * load_balancing_loss_func(probs, expert_index)

    return layer, run


def labml_switch(d: int, f: int, e: int, cf: float, seq_len: int) -> tuple[nn.Module, Callable]:
    from labml_nn.transformers.feed_forward import FeedForward as LabmlFeedForward
    from labml_nn.transformers.switch import SwitchFeedForward as LabmlSwitch

    layer = LabmlSwitch(
        capacity_factor=cf, drop_tokens=True, is_scale_prob=True, n_experts=e,
        expert=LabmlFeedForward(d, f, dropout=0.0), d_model=d,
    )  # fmt: skip

    def run(x: Tensor) -> Tensor:
        out, counts, route_prob, _, _ = layer(x)  # (T, B, D) in and out: its layout
        total = counts.sum()
        loss = e * ((counts / total) * (route_prob / total)).sum()  # its experiment's loss
        return out, 0.01 * loss

    run.sequence_first = True
    return layer, run


def available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


CANDIDATES: dict[str, tuple[Callable[[], bool], Callable]] = {
    "dense": (lambda: True, dense),
    "formers": (lambda: True, formers_switch),
    "hf": (lambda: available("transformers"), hf_switch),
    "labml": (lambda: available("labml_nn"), labml_switch),
}


def seq_first(x: Tensor) -> Tensor:
    return x.transpose(0, 1).contiguous()


def train_step(run: Callable, layer: nn.Module, x: Tensor, g: Tensor, precision: str) -> Step:
    autocast = torch.autocast("cpu", torch.bfloat16) if precision == "bf16" else nullcontext()

    def step() -> None:
        with autocast:
            result = run(x)
            out, aux = result if isinstance(result, tuple) else (result, None)
            loss = (out.float() * g).sum()
            if aux is not None:
                loss = loss + aux
        loss.backward()
        for p in layer.parameters():
            p.grad = None

    return step


def measure(
    tokens: int, args: argparse.Namespace, precision: str, only: list[str] | None
) -> dict[str, Any]:
    torch.manual_seed(0)
    batch = max(1, tokens // args.seq_len)
    x = torch.randn(batch, args.seq_len, args.d_model)
    g = torch.randn(batch, args.seq_len, args.d_model)
    steps, skipped, failed = {}, [], {}
    for name, (present, make) in CANDIDATES.items():
        if only and name not in only and name not in ("dense", "formers"):
            continue
        if not present():
            skipped.append(name)
            continue
        torch.manual_seed(0)
        layer, run = make(args.d_model, args.d_ff, args.n_experts, args.capacity_factor,
                          args.seq_len)  # fmt: skip
        layer.train()
        if getattr(run, "sequence_first", False):  # its own layout, transposed before timing
            step = train_step(run, layer, seq_first(x), seq_first(g), precision)
        else:
            step = train_step(run, layer, x, g, precision)
        try:
            step()  # a peer that cannot run this precision is reported, not timed
        except RuntimeError as error:
            failed[name] = f"{type(error).__name__}: {error}".splitlines()[0][:160]
            continue
        steps[name] = step
    seconds = interleaved(steps, repeats=args.repeats, warmup=args.warmup)
    medians = {name: median(times) for name, times in seconds.items()}
    return {
        "tokens": batch * args.seq_len,
        "batch": batch,
        "precision": precision,
        "ms": {name: 1e3 * s for name, s in medians.items()},
        "vs_dense": {name: medians["dense"] / s for name, s in medians.items()},
        "formers_vs": {
            name: s / medians["formers"] for name, s in medians.items() if name != "formers"
        },
        "seconds": seconds,
        "skipped": skipped,
        "failed": failed,
    }


def print_table(results: list[dict[str, Any]]) -> None:
    names = list(dict.fromkeys(n for r in results for n in r["ms"]))
    peers = [n for n in names if n not in ("dense", "formers")]
    header = f"{'precision':9s} {'tokens':>7s} " + " ".join(f"{n + ' ms':>10s}" for n in names)
    header += " " + " ".join(f"{n + '/dense':>14s}" for n in names if n != "dense")
    header += " " + " ".join(f"{'formers/' + n:>14s}" for n in peers)
    print(header)
    for r in results:
        line = f"{r['precision']:9s} {r['tokens']:7d} "
        line += " ".join(cell(r["ms"].get(n), 10, ".1f") for n in names)
        line += " " + " ".join(cell(r["vs_dense"].get(n), 14) for n in names if n != "dense")
        line += " " + " ".join(cell(r["formers_vs"].get(n), 14) for n in peers)
        print(line)
    for r in results:
        for name, error in r["failed"].items():
            print(f"{name} failed at {r['precision']}, {r['tokens']} tokens: {error}")


def cell(value: float | None, width: int, spec: str = ".2f") -> str:
    return f"{'–' if value is None else format(value, spec):>{width}s}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tokens", type=int, nargs="+", default=[2048, 4096, 8192, 16384, 32768])
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per row")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--d-ff", type=int, default=2048, help="inner width of one expert")
    p.add_argument("--n-experts", type=int, default=8)
    p.add_argument("--capacity-factor", type=float, default=1.25)
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--only", nargs="+", help="peers to time (dense and formers always run)")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per candidate")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per candidate first")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--json", type=Path, help="write the results here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tuned = keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for precision in args.precision:
        for tokens in args.tokens:
            results.append(measure(tokens, args, precision, args.only))
            print_table(results[-1:])
    print()
    print_table(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor(),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "keep_freed_memory": tuned,
            },
            "shape": {
                "d_model": args.d_model,
                "d_ff": args.d_ff,
                "n_experts": args.n_experts,
                "capacity_factor": args.capacity_factor,
                "seq_len": args.seq_len,
            },  # fmt: skip
            "results": results,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
