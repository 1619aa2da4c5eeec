"""Primer EZ against vanilla at equal size, steps and training-time budget (docs/primer-ez.md).

Trains the presets vanilla, squared-relu, dconv and primer-ez with the same model shape and
training settings for each corpus and seed, then writes into --out:
  <corpus>/<preset>/seed<k>/      the runs (config, checkpoints, metrics.jsonl)
  <corpus>/valid_loss.png         valid loss vs step and vs training seconds, every run
  summary.json, summary.md        final valid loss per run and, for each variant, the fraction
                                  of vanilla's steps and seconds it needs to reach vanilla's
                                  final valid loss (same seed; linear between eval points)

Re-running the same command skips finished runs and resumes interrupted ones; --report-only
rebuilds the plots and tables from what is on disk.

    python scripts/experiments/primer_ez.py --corpus tinyshakespeare \
        --seeds 0 1 --max-steps 2000 --time-budget 15m --out runs/primer_ez
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
from experiment_runs import add_common_overrides, run_dir

from formers.bench.run_metrics import crossing, is_complete, parameter_count, valid_curve
from formers.data.corpora import load_corpus
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig, run_config, run_config_from_dict, with_vocab
from formers.train.metrics import read_metrics
from formers.train.trainer import train

PRESETS = ("vanilla", "squared-relu", "dconv", "primer-ez")
BASELINE = "vanilla"
COLORS = {"vanilla": "tab:gray", "squared-relu": "tab:blue", "dconv": "tab:orange"}
COLORS["primer-ez"] = "tab:red"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", nargs="+", default=["tinyshakespeare"], help="corpus names")
    p.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--out", type=Path, default=Path("runs/primer_ez"))
    model = p.add_argument_group("model (the same for every preset)")
    model.add_argument("--n-layers", type=int, default=4)
    model.add_argument("--d-model", type=int, default=128)
    model.add_argument("--n-heads", type=int, default=4)
    model.add_argument("--d-ff", type=int, default=512)
    model.add_argument("--dropout", type=float, default=0.0)
    model.add_argument(
        "--norm", default=None, choices=["pre", "post"], help="default: the presets' own (post)"
    )
    run = p.add_argument_group("training (the same for every preset)")
    run.add_argument("--max-steps", type=int, default=2000)
    run.add_argument("--time-budget", default=None, help='training-time cap per run, e.g. "15m"')
    run.add_argument("--batch-size", type=int, default=32)
    run.add_argument("--seq-len", type=int, default=128)
    run.add_argument("--lr", type=float, default=1e-3)
    run.add_argument("--warmup-steps", type=int, default=100)
    run.add_argument("--eval-every", type=int, default=100)
    run.add_argument(
        "--eval-tokens",
        type=int,
        default=None,
        help="score only the first N valid tokens in periodic evals (default: the whole split; "
        "with a cap, the curves and the crossing use the capped evals only)",
    )
    run.add_argument("--device", default="auto")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    run.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other run override for every run, e.g. --set train.weight_decay=0.0",
    )
    p.add_argument("--data-dir", default=None)
    p.add_argument("--report-only", action="store_true", help="only rebuild plots and tables")
    p.add_argument("--progress", action="store_true", help="show a progress bar per run")
    return p.parse_args(argv)


def run_overrides(args: argparse.Namespace, corpus: str, seed: int) -> dict[str, Any]:
    """The overrides that make one run: shared shape and training settings, its corpus and seed."""
    overrides: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "dropout": args.dropout,
        "train.corpus": corpus,
        "train.data_dir": args.data_dir,
        "train.seed": seed,
        "train.max_steps": args.max_steps,
        "train.time_budget": args.time_budget,
        "train.batch_size": args.batch_size,
        "train.seq_len": args.seq_len,
        "train.lr": args.lr,
        "train.warmup_steps": args.warmup_steps,
        "train.eval_every": args.eval_every,
        "train.eval_tokens": args.eval_tokens,
        "train.device": args.device,
        "train.save_every": max(args.eval_every, 250),
    }
    add_common_overrides(overrides, args.norm, args.extra)
    return overrides


def check_same_config(path: Path, cfg: RunConfig) -> None:
    """Refuse to resume or reuse a run that was made with other settings."""
    saved_file = path / "config.json"
    if not saved_file.exists():
        return
    saved = run_config_from_dict(json.loads(saved_file.read_text()))
    if saved != cfg:
        raise SystemExit(
            f"{path} was run with other settings than this command's; use another --out, or "
            "repeat the original command"
        )


def train_all(args: argparse.Namespace) -> None:
    for corpus_name in args.corpus:
        corpus = None
        for seed in args.seeds:
            for preset in args.presets:
                path = run_dir(args.out, corpus_name, preset, seed)
                cfg = run_config(preset, run_overrides(args, corpus_name, seed))
                if corpus is None:
                    corpus = load_corpus(corpus_name, args.data_dir)
                cfg = with_vocab(cfg, corpus.tokenizer.vocab_size)
                check_same_config(path, cfg)
                if is_complete(path):
                    print(f"{path}: done, skipped")
                    continue
                resume = latest_checkpoint(path) is not None
                print(f"{path}: {'resuming' if resume else 'training'}", flush=True)
                result = train(cfg, path, resume=resume, progress=args.progress, data=corpus)
                if result.interrupted:
                    raise SystemExit("interrupted: run the same command again to resume")
                print(
                    f"{path}: step {result.step}, {result.train_seconds:.0f}s, "
                    f"valid loss {result.valid.loss:.4f}",
                    flush=True,
                )


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {"command": sys.argv, "corpora": {}}
    for corpus in args.corpus:
        runs: dict[str, dict[str, Any]] = {}
        for preset in args.presets:
            for seed in args.seeds:
                path = run_dir(args.out, corpus, preset, seed)
                points = valid_curve(path)
                if not points:
                    continue
                final = [r for r in read_metrics(path, "valid") if r.get("final")]
                last = points[-1]
                runs[f"{preset}/seed{seed}"] = {
                    "preset": preset,
                    "seed": seed,
                    "complete": bool(final),
                    "params": parameter_count(path),
                    "steps": last["step"],
                    "seconds": last["seconds"],
                    "seconds_per_step": last["seconds"] / max(last["step"], 1),
                    "valid_loss": last["loss"],
                    "final_valid_loss_whole_split": final[-1]["loss"] if final else None,
                    "curve": points,
                }
        summary["corpora"][corpus] = {"runs": runs, "reach_vanilla": reach_vanilla(runs, args)}
    return summary


def reach_vanilla(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """For each variant and seed: the fraction of vanilla's steps and seconds to its final loss."""
    out: dict[str, Any] = {}
    for preset in args.presets:
        if preset == BASELINE:
            continue
        per_seed = {}
        for seed in args.seeds:
            base = runs.get(f"{BASELINE}/seed{seed}")
            run = runs.get(f"{preset}/seed{seed}")
            if base is None or run is None:
                continue
            hit = crossing(run["curve"], base["valid_loss"])
            per_seed[seed] = {
                "target_loss": base["valid_loss"],
                "reached": hit is not None,
                "bound": hit["bound"] if hit else None,
                "step": hit["step"] if hit else None,
                "seconds": hit["seconds"] if hit else None,
                "step_fraction": hit["step"] / base["steps"] if hit else None,
                "time_fraction": hit["seconds"] / base["seconds"] if hit else None,
            }
        reached = [s for s in per_seed.values() if s["reached"]]
        mean = None
        if per_seed and len(reached) == len(per_seed):
            mean = {
                key: sum(s[key] for s in reached) / len(reached)
                for key in ("step_fraction", "time_fraction")
            }
        out[preset] = {"per_seed": per_seed, "mean": mean}
    return out


def fmt(value: float | None, spec: str = ".4f") -> str:
    return (
        "–"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# Primer EZ vs vanilla", "", "Command: `" + " ".join(summary["command"]) + "`", ""]
    for corpus, data in summary["corpora"].items():
        lines += [f"## {corpus}", "", f"![valid loss]({corpus.replace('/', '_')}/valid_loss.png)"]
        lines += [
            "",
            "| preset | seed | params | steps | train s | ms/step | valid loss | whole-split |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for run in data["runs"].values():
            params = f"{run['params']:,}" if run["params"] else "–"
            lines.append(
                f"| {run['preset']} | {run['seed']} | {params} | {run['steps']} | "
                f"{run['seconds']:.0f} | {1000 * run['seconds_per_step']:.0f} | "
                f"{fmt(run['valid_loss'])} | {fmt(run['final_valid_loss_whole_split'])} |"
                + ("" if run["complete"] else " (unfinished)")
            )
        lines += [
            "",
            "Fraction of vanilla's steps and training seconds needed to reach vanilla's final "
            "valid loss (same seed):",
            "",
            "| preset | seed | vanilla's final loss | at step | step fraction | time fraction |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for preset, reach in data["reach_vanilla"].items():
            for seed, s in reach["per_seed"].items():
                if not s["reached"]:
                    lines.append(
                        f"| {preset} | {seed} | {s['target_loss']:.4f} | not reached | – | – |"
                    )
                    continue
                bound = "≤ " if s["bound"] else ""
                lines.append(
                    f"| {preset} | {seed} | {s['target_loss']:.4f} | {bound}{s['step']:.0f} | "
                    f"{bound}{s['step_fraction']:.3f} | {bound}{s['time_fraction']:.3f} |"
                )
            if reach["mean"]:
                mean = reach["mean"]
                lines.append(
                    f"| {preset} | mean | | | {mean['step_fraction']:.3f} | "
                    f"{mean['time_fraction']:.3f} |"
                )
        lines.append("")
    return "\n".join(lines)


def plot(summary: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for corpus, data in summary["corpora"].items():
        fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
        styles = ["-", "--", ":", "-."]
        seeds = sorted({run["seed"] for run in data["runs"].values()})
        for run in data["runs"].values():
            steps = [p["step"] for p in run["curve"]]
            seconds = [p["seconds"] for p in run["curve"]]
            losses = [p["loss"] for p in run["curve"]]
            style = dict(
                color=COLORS.get(run["preset"]),
                linestyle=styles[seeds.index(run["seed"]) % len(styles)],
                marker=".",
                label=f"{run['preset']} seed {run['seed']}",
            )
            by_step.plot(steps, losses, **style)
            by_time.plot(seconds, losses, **style)
        targets = [r["valid_loss"] for r in data["runs"].values() if r["preset"] == BASELINE]
        for ax in (by_step, by_time):
            if targets:
                ax.axhline(sum(targets) / len(targets), color="black", linewidth=0.6)
            ax.grid(alpha=0.3)
        by_step.set(xlabel="step", ylabel="valid loss (nats/token)", title=corpus)
        by_time.set(xlabel="training seconds", title=f"{corpus}: same time budget")
        by_time.legend(fontsize=7)
        # the tail is where the presets differ; the first evals would flatten it
        losses = [p["loss"] for r in data["runs"].values() for p in r["curve"]]
        if losses:
            low, high = min(losses), sorted(losses)[int(0.9 * (len(losses) - 1))]
            by_step.set_ylim(low - 0.05 * (high - low + 1e-9), high)
        fig.tight_layout()
        path = out / corpus.replace("/", "_") / "valid_loss.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if BASELINE not in args.presets:
        raise SystemExit("--presets must include vanilla: every comparison is against it")
    if not args.report_only:
        train_all(args)
    summary = summarise(args)
    args.out.mkdir(parents=True, exist_ok=True)
    plots = plot(summary, args.out)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    print("wrote", args.out / "summary.json", args.out / "summary.md", *plots, sep="\n  ")


if __name__ == "__main__":
    main()
