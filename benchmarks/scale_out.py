"""Throughput and memory per process of one process, DDP×2 and FSDP×2, on this machine.

Each configuration trains the `small` vanilla LM (6 layers, d_model 512, 8 heads, d_ff 2048,
bytes, seq 512, batch 4 per process, AdamW, no dropout) on wikitext-2-bytes through the trainer's
own steps (`trainer.start`, `set_learning_rate`, `compute_gradients`, `take_step`) for --steps
steps, the first --warmup of them untimed, then saves one checkpoint. Configurations run one
after the other in --rounds interleaved rounds (the first one changes every round), each as
its own launch:

    one     a single process, all the machine's threads
    one-1t  a single process on one thread (what each process of the two below gets)
    ddp     torchrun, 2 processes (1 thread each, torchrun's default): replicated weights
    fsdp    torchrun, 2 processes (1 thread each): weights, gradients and AdamW state sharded

Reported per configuration, medians over rounds:
    tokens/s         tokens of all processes per second (median step time of each run)
    peak RSS         the largest resident set of any of its processes (getrusage ru_maxrss:
                     everything the process holds: Python, torch, data, activations)
    model state      bytes this process keeps of parameters + gradients + optimizer state,
                     counted from its own tensors (the local shards under FSDP)
    checkpoint       seconds to save one checkpoint, and the bytes each process wrote

    python benchmarks/scale_out.py --rounds 3 --json bench-results/scale_out.json

Under torchrun this same file is the per-process worker (--worker).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

SMALL = {
    "model.n_layers": 6,
    "model.d_model": 512,
    "model.n_heads": 8,
    "model.d_ff": 2048,
    "model.dropout": 0.0,
}
# name: (processes, strategy, threads per process; 0: torch's default)
CONFIGS = {
    "one": (1, "ddp", 0),
    "one-1t": (1, "ddp", 1),
    "ddp": (2, "ddp", 1),
    "fsdp": (2, "fsdp", 1),
}


def local_bytes(tensor: torch.Tensor) -> int:
    """Bytes of this process's part of `tensor` (its shard when it is a DTensor)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def worker(args: argparse.Namespace) -> None:
    """One process of a configuration: train, time, measure, save; write a JSON line."""
    from formers.train import distributed, trainer
    from formers.train.config import run_config

    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = {
        **SMALL,
        "train.corpus": args.corpus,
        "train.batch_size": 4,
        "train.seq_len": 512,
        "train.precision": args.precision,
        "train.distributed": args.strategy,
        "train.max_steps": args.steps,
        "train.eval_every": 0,
        "train.save_every": 0,
        "train.warmup_steps": 0,
    }
    cfg = run_config("vanilla", overrides)
    run = trainer.start(cfg, Path(args.run_dir), resume=False, data=None)
    grads: list[int] = []
    run.optimizer.register_step_pre_hook(
        lambda optimizer, *_: grads.append(
            sum(local_bytes(p.grad) for p in run.model.parameters() if p.grad is not None)
        )
    )
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        trainer.set_learning_rate(run)
        trainer.take_step(run, *trainer.compute_gradients(run))
        trainer.read_steps(run)  # the step's numbers on the host: a timed step has finished
        times.append(time.perf_counter() - start)
    params = sum(local_bytes(p) for p in run.model.parameters())
    optimizer = sum(
        local_bytes(v)
        for state in run.optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
    start = time.perf_counter()
    trainer.save(run)
    save_seconds = time.perf_counter() - start
    checkpoint = Path(args.run_dir) / "checkpoints" / f"step_{args.steps:06d}"
    result = {
        "rank": run.env.rank,
        "world_size": run.env.world_size,
        "threads": torch.get_num_threads(),
        "step_seconds": times[args.warmup :],
        "tokens_per_step": 4 * 512 * run.env.world_size,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "param_bytes": params,
        "grad_bytes": grads[0],
        "optimizer_bytes": optimizer,
        "save_seconds": save_seconds,
        "checkpoint_bytes": sum(p.stat().st_size for p in checkpoint.rglob("*") if p.is_file()),
    }
    out = Path(args.run_dir) / f"result_{run.env.rank}.json"
    out.write_text(json.dumps(result))
    if run.lock is not None:
        run.lock.release()
    distributed.teardown()


def launch(name: str, args: argparse.Namespace, run_dir: Path) -> list[dict[str, Any]]:
    """Run configuration `name` once; the result of each of its processes."""
    processes, strategy, threads = CONFIGS[name]
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    command = [
        *launcher, __file__, "--worker", "--strategy", strategy, "--run-dir", str(run_dir),
        "--steps", str(args.steps), "--warmup", str(args.warmup), "--corpus", args.corpus,
        "--precision", args.precision, "--threads", str(threads),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("result_*.json"))]


def summarise(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians over rounds of one configuration's runs (each a list of per-process results)."""

    def median_of(per_run) -> float:
        return statistics.median(per_run(run) for run in runs)

    step = median_of(lambda run: max(statistics.median(r["step_seconds"]) for r in run))
    return {
        "processes": runs[0][0]["world_size"],
        "threads_per_process": runs[0][0]["threads"],
        "step_seconds": step,
        "tokens_per_s": runs[0][0]["tokens_per_step"] / step,
        "peak_rss_mib": median_of(lambda run: max(r["peak_rss_bytes"] for r in run)) / 2**20,
        "model_state_mib": median_of(
            lambda run: max(r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in run)
        )
        / 2**20,
        "params_mib": median_of(lambda run: max(r["param_bytes"] for r in run)) / 2**20,
        "optimizer_mib": median_of(lambda run: max(r["optimizer_bytes"] for r in run)) / 2**20,
        "save_seconds": median_of(lambda run: max(r["save_seconds"] for r in run)),
        "checkpoint_mib": median_of(lambda run: max(r["checkpoint_bytes"] for r in run)) / 2**20,
        "rounds": len(runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="steps per run, warmup included")
    parser.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--corpus", default="wikitext-2-bytes")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--strategy", default="ddp", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    raw: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in args.configs}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            shift = round_index % len(args.configs)
            for name in args.configs[shift:] + args.configs[:shift]:
                run_dir = Path(tmp) / f"{name}-{round_index}"
                raw[name].append(launch(name, args, run_dir))
                print(f"round {round_index + 1}/{args.rounds}: {name} done", file=sys.stderr)
    table = {name: summarise(runs) for name, runs in raw.items()}
    base = table[args.configs[0]]["tokens_per_s"]
    header = (
        f"{'config':7} {'procs x threads':>15} {'tokens/s':>9} {'vs ' + args.configs[0]:>7} "
        f"{'peak RSS MiB':>12} {'state MiB':>9} {'params':>7} {'AdamW':>7} {'save s':>7} "
        f"{'ckpt MiB':>8}"
    )
    print(header)
    for name, row in table.items():
        print(
            f"{name:7} {row['processes']:>9} x {row['threads_per_process']:<3} "
            f"{row['tokens_per_s']:>9,.0f} {row['tokens_per_s'] / base:>6.2f}x "
            f"{row['peak_rss_mib']:>12,.0f} {row['model_state_mib']:>9.1f} "
            f"{row['params_mib']:>7.1f} {row['optimizer_mib']:>7.1f} {row['save_seconds']:>7.2f} "
            f"{row['checkpoint_mib']:>8.1f}"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "precision": args.precision,
            "steps": args.steps,
            "warmup": args.warmup,
        }
        Path(args.json).write_text(json.dumps({"meta": meta, "table": table, "raw": raw}, indent=2))


if __name__ == "__main__":
    main()
