"""How long each run of a comparison spec takes per training step: for sizing a spec's budget.

For every (arm, context) of the spec (first seed), this builds the run's task and model as
`formers compare` would, takes one step to warm up, then times `--steps` more (the batch drawn,
forward, backward, the optimizer step) and prints a table: wall milliseconds per step, CPU
milliseconds per step (all threads), tokens per second, and the spec's `train.max_steps` at
that pace. CPU time keeps most of its meaning on a machine other processes share, where wall
time does not; `--idle-rate` converts it: pass the ratio between a rate measured here now and
the same rate measured on the idle machine (e.g. 7.6 when a 16,225 tokens/s rate reads 2,124
per 2 CPU-seconds here), and the last column estimates the idle machine's minutes.

    python benchmarks/spec_step_time.py experiments/family-mlm.yaml --steps 3 --runs 1
    python benchmarks/spec_step_time.py experiments/probe-mqar.yaml --steps 3 --idle-rate 7.6 \
        --json runs/probe_mqar_step_time.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from formers.compare.spec_file import load_spec_file
from formers.models import build
from formers.train.optim import make_optimizer
from formers.train.tasks import task_for


def time_run(spec, arm: str, context: int | None, steps: int) -> dict:
    """Wall and CPU seconds per training step of one run of `spec`."""
    cfg = spec.run_config(arm, spec.seeds[0], context=context)
    task = task_for(cfg)
    cfg = task.cfg
    torch.manual_seed(cfg.train.seed)
    model = build(cfg.model)
    optimizer = make_optimizer(model, cfg.train)
    batches = task.train_batches(0, 1)

    def step() -> None:
        out = task.step(model, next(batches), None)
        (out.loss + cfg.train.aux_loss_coef * out.aux_loss).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the first step allocates the optimizer's state
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = (time.perf_counter() - wall) / steps, (time.process_time() - cpu) / steps
    tokens = cfg.train.batch_size * cfg.train.seq_len
    return {
        "arm": arm,
        "context": context,
        "wall_ms": 1000 * wall,
        "cpu_ms": 1000 * cpu,
        "tokens_per_s": tokens / wall,
        "max_steps": cfg.train.max_steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", help="a spec file, e.g. experiments/probe-mqar.yaml")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per run")
    parser.add_argument("--runs", type=int, default=None, help="time only the first N runs")
    parser.add_argument("--idle-rate", type=float, default=None, help="see the module doc")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    spec = load_spec_file(args.spec)
    rows = []
    print(f"{'arm':16} {'context':>7} {'wall ms':>9} {'CPU ms':>9} {'tok/s':>8} {'steps':>6} "
          f"{'idle min':>8}")  # fmt: skip
    for arm, context, _ in [r for r in spec.runs() if r[2] == spec.seeds[0]][: args.runs]:
        row = time_run(spec, arm, context, args.steps)
        if args.idle_rate:
            # idle: every thread's CPU time runs at idle_rate times this pace, on all the threads
            seconds = row["cpu_ms"] / 1000 / args.idle_rate / torch.get_num_threads()
            row["idle_minutes"] = seconds * row["max_steps"] / 60
        rows.append(row)
        idle = f"{row['idle_minutes']:8.1f}" if "idle_minutes" in row else f"{'–':>8}"
        print(f"{arm:16} {str(context):>7} {row['wall_ms']:9.0f} {row['cpu_ms']:9.0f} "
              f"{row['tokens_per_s']:8.0f} {row['max_steps']:6d} {idle}", flush=True)  # fmt: skip
    if args.idle_rate:
        print(f"idle estimate, all runs: {sum(r['idle_minutes'] for r in rows):.0f} minutes")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"spec": args.spec, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
