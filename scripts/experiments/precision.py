"""bf16 autocast against fp32: the same preset, data, seeds and steps; do the loss curves agree?

bf16 autocast keeps fp32 master weights and optimizer state; matmuls run in bf16 and losses,
norms and softmax accumulate in fp32. Its curve should match fp32's within the noise between
seeds. For each precision and seed this trains `--preset` for `--steps` steps (a step budget,
not a time budget, so both precisions see the same batches), then writes into --out:

  <precision>/seed<k>/         the runs
  valid_loss.png               valid loss vs step, every precision and seed
  summary.json, summary.md     final whole-split valid loss, the bf16−fp32 gap per seed next to
                               the seed-to-seed spread, and median training tokens/s

Re-running the same command skips finished runs.

    python scripts/experiments/precision.py --corpus tinyshakespeare --seeds 0 1 --steps 600
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from experiment_runs import add_common_overrides

from formers.bench.plots import line_plot
from formers.bench.run_metrics import final_valid, is_complete, tokens_per_second, valid_curve
from formers.data.corpora import load_corpus
from formers.train.config import run_config
from formers.train.trainer import train

PRECISIONS = ("fp32", "bf16")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="vanilla")
    p.add_argument("--corpus", default="tinyshakespeare")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-tokens", type=int, default=50_000)
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=Path("runs/precision"))
    p.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="another run setting, e.g. model.embed_init=paper (repeatable)",
    )  # fmt: skip
    return p.parse_args(argv)


def overrides(args: argparse.Namespace, precision: str, seed: int) -> dict[str, Any]:
    values: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "train.corpus": args.corpus,
        "train.seq_len": args.seq_len,
        "train.batch_size": args.batch_size,
        "train.max_steps": args.steps,
        "train.eval_every": args.eval_every,
        "train.eval_tokens": args.eval_tokens,
        "train.precision": precision,
        "train.seed": seed,
    }
    add_common_overrides(values, None, args.extra)
    return values


def train_all(args: argparse.Namespace) -> None:
    corpus = None
    for seed in args.seeds:
        for precision in PRECISIONS:
            run = args.out / precision / f"seed{seed}"
            if is_complete(run):
                continue
            corpus = corpus or load_corpus(args.corpus)
            print(f"training {args.preset} {precision} seed {seed} in {run}", file=sys.stderr)
            cfg = run_config(args.preset, overrides(args, precision, seed))
            result = train(cfg, run, resume=run.exists(), progress=False, data=corpus)
            if result.interrupted:
                raise SystemExit("interrupted: run the same command again to continue")


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    finals: dict[str, dict[int, float]] = {p: {} for p in PRECISIONS}
    speed: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for precision in PRECISIONS:
        for seed in args.seeds:
            run = args.out / precision / f"seed{seed}"
            finals[precision][seed] = final_valid(run)["loss"]
            speed[precision].append(tokens_per_second(run))
    gaps = {seed: finals["bf16"][seed] - finals["fp32"][seed] for seed in args.seeds}
    spread = {p: max(finals[p].values()) - min(finals[p].values()) for p in PRECISIONS}
    return {
        "preset": args.preset,
        "corpus": args.corpus,
        "steps": args.steps,
        "final_valid_loss": finals,
        "bf16_minus_fp32": gaps,
        "seed_spread": spread,
        "median_tokens_per_s": {p: statistics.median(v) for p, v in speed.items()},
    }


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['preset']} on {summary['corpus']}, {summary['steps']} steps: final valid loss",
        "",
        "| seed | fp32 | bf16 | bf16 − fp32 |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for seed, gap in summary["bf16_minus_fp32"].items():
        fp32 = summary["final_valid_loss"]["fp32"][seed]
        bf16 = summary["final_valid_loss"]["bf16"][seed]
        lines.append(f"| {seed} | {fp32:.4f} | {bf16:.4f} | {gap:+.4f} |")
    spread = summary["seed_spread"]
    rate = summary["median_tokens_per_s"]
    lines += [
        "",
        f"seed-to-seed spread: fp32 {spread['fp32']:.4f}, bf16 {spread['bf16']:.4f}",
        f"median training tokens/s: fp32 {rate['fp32']:,.0f}, bf16 {rate['bf16']:,.0f}",
        "",
    ]
    return "\n".join(lines)


def plot(args: argparse.Namespace) -> Path:
    series = {}
    for precision in PRECISIONS:
        for seed in args.seeds:
            points = valid_curve(args.out / precision / f"seed{seed}")
            series[f"{precision} seed {seed}"] = (
                [p["step"] for p in points],
                [p["loss"] for p in points],
            )
    tail = sorted(loss for _, losses in series.values() for loss in losses)
    return line_plot(
        series,
        args.out / "valid_loss.png",
        xlabel="step",
        ylabel="valid loss (nats/token)",
        title=f"{args.preset} on {args.corpus}: bf16 autocast vs fp32",
        ylim=(tail[0] - 0.02, tail[int(0.85 * (len(tail) - 1))]),
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    train_all(args)
    summary = summarise(args)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    print("wrote", args.out / "summary.json", args.out / "summary.md", plot(args), sep="\n  ")


if __name__ == "__main__":
    main()
