"""Transformer-XL against vanilla at equal size and training time (docs/transformer-xl.md).

For each corpus and seed, trains the presets `vanilla` and `transformer-xl` with the same shape,
segment length L (--seq-len), batch and training-time budget. Each run's step count is set from
its own measured speed (a short calibration run), so that both cosine schedules end at the
budget; the budget also stops a run that turns out slower. Then both are evaluated on the valid
and test splits, every token scored once:

  vanilla          windows of L tokens, independent (as trained; --vanilla-context C adds C
                   tokens of unscored left context to each window)
  xl mem=kL        segments of L tokens carrying a memory of k·L states per layer, for each k in
                   --mem-multipliers (1 = as trained; 2 and 4 = longer memory at evaluation only)

and writes into --out:
  <corpus>/<preset>/seed<k>/      the runs (config, checkpoints, metrics.jsonl, eval.json)
  summary.json, summary.md        perplexity (word corpora) or bits per byte/char, per run

Re-running the same command skips finished training and evaluation; --report-only rebuilds the
tables from what is on disk.

    python scripts/experiments/xl_vs_vanilla.py --corpus ptb wikitext-2 \
        --seeds 0 1 --time-budget 15m --out runs/xl_vs_vanilla
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from experiment_runs import add_common_overrides, run_dir

from formers.data.corpora import Corpus, load_corpus
from formers.models import reconfigure
from formers.run import load_run
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig, run_config, run_config_from_dict, with_vocab
from formers.train.evaluate import evaluate
from formers.train.metrics import read_metrics
from formers.train.trainer import train

PRESETS = ("vanilla", "transformer-xl")
SPLITS = ("valid", "test")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", nargs="+", default=["ptb", "wikitext-2"], help="corpus names")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--out", type=Path, default=Path("runs/xl_vs_vanilla"))
    model = p.add_argument_group("model (the same for both presets)")
    model.add_argument("--n-layers", type=int, default=4)
    model.add_argument("--d-model", type=int, default=256)
    model.add_argument("--n-heads", type=int, default=4)
    model.add_argument("--d-ff", type=int, default=1024)
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--norm", default=None, choices=["pre", "post"], help="default: post")
    run = p.add_argument_group("training (the same for both presets)")
    run.add_argument("--time-budget", default="15m", help='training time per run, e.g. "15m"')
    run.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="fixed step count for both (default: from each run's measured speed and the budget)",
    )
    run.add_argument("--calibration-steps", type=int, default=30)
    run.add_argument("--seq-len", type=int, default=64, help="L: training segment length")
    run.add_argument("--batch-size", type=int, default=16)
    run.add_argument("--lr", type=float, default=1e-3)
    run.add_argument("--warmup-steps", type=int, default=100)
    run.add_argument("--device", default="auto")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    run.add_argument(
        "--set",
        dest="extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other run override for both runs, e.g. --set train.weight_decay=0.0",
    )
    ev = p.add_argument_group("evaluation")
    ev.add_argument("--mem-multipliers", type=int, nargs="+", default=[1, 2, 4])
    ev.add_argument("--clamp-len", type=int, default=None, help="XL distance cap at evaluation")
    ev.add_argument("--same-length", action="store_true", help="XL same_length at evaluation")
    ev.add_argument("--vanilla-context", type=int, default=0, help="left context per window")
    ev.add_argument("--eval-batch-size", type=int, default=16)
    ev.add_argument("--eval-tokens", type=int, default=None, help="score only the first N")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--report-only", action="store_true", help="only rebuild the tables")
    p.add_argument("--progress", action="store_true", help="show a progress bar per run")
    return p.parse_args(argv)


def run_overrides(args: argparse.Namespace, preset: str, corpus: str, seed: int) -> dict[str, Any]:
    """Shared shape and training settings; XL's training memory is the segment length L."""
    overrides: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "dropout": args.dropout,
        "train.corpus": corpus,
        "train.data_dir": args.data_dir,
        "train.seed": seed,
        "train.time_budget": args.time_budget,
        "train.batch_size": args.batch_size,
        "train.seq_len": args.seq_len,
        "train.lr": args.lr,
        "train.warmup_steps": args.warmup_steps,
        "train.eval_every": 0,
        "train.save_every": 500,
        "train.device": args.device,
    }
    if preset == "vanilla":
        overrides["max_len"] = max(1024, args.seq_len + args.vanilla_context)
    else:
        overrides["attention.mem_len"] = args.seq_len
    add_common_overrides(overrides, args.norm, args.extra)
    return overrides


def calibrated_steps(cfg: RunConfig, scratch: Path, corpus: Corpus, args) -> int:
    """Steps that fit the time budget, from the speed of a short throwaway run."""
    budget = cfg.train.time_budget_seconds
    if args.max_steps is not None or budget is None:
        return args.max_steps or cfg.train.max_steps
    probe_train = dataclasses.replace(
        cfg.train,
        max_steps=args.calibration_steps,
        warmup_steps=1,
        save_every=0,
        log_every=1,
        time_budget=None,
    )
    probe = dataclasses.replace(cfg, train=probe_train)
    shutil.rmtree(scratch, ignore_errors=True)
    train(probe, scratch, progress=False, data=corpus)
    seconds = {r["step"]: r["seconds"] for r in read_metrics(scratch, "train")}
    shutil.rmtree(scratch, ignore_errors=True)
    last, first = args.calibration_steps, args.calibration_steps // 3  # skip the warm-up steps
    seconds_per_step = (seconds[last] - seconds.get(first, 0.0)) / max(last - first, 1)
    return max(1, int(budget / seconds_per_step))


def is_trained(path: Path) -> bool:
    return any(r.get("final") for r in read_metrics(path, "valid"))


def train_all(args: argparse.Namespace) -> None:
    for corpus_name in args.corpus:
        corpus = load_corpus(corpus_name, args.data_dir)
        for seed in args.seeds:
            for preset in PRESETS:
                path = run_dir(args.out, corpus_name, preset, seed)
                cfg = run_config(preset, run_overrides(args, preset, corpus_name, seed))
                cfg = with_vocab(cfg, corpus.tokenizer.vocab_size)
                if is_trained(path):
                    print(f"{path}: trained, skipped")
                else:
                    saved = path / "config.json"
                    if saved.exists():  # resume with the step count it started with
                        steps = run_config_from_dict(json.loads(saved.read_text())).train.max_steps
                    else:
                        scratch = path.parent / f".calibration-seed{seed}"  # one per run
                        steps = calibrated_steps(cfg, scratch, corpus, args)
                    cfg = dataclasses.replace(
                        cfg, train=dataclasses.replace(cfg.train, max_steps=steps)
                    )
                    resume = latest_checkpoint(path) is not None
                    print(
                        f"{path}: {'resuming' if resume else 'training'} {steps} steps", flush=True
                    )
                    result = train(cfg, path, resume=resume, progress=args.progress, data=corpus)
                    if result.interrupted:
                        raise SystemExit("interrupted: run the same command again to resume")
                evaluate_run(path, preset, corpus, args)


def eval_settings(preset: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The evaluations of one run: one for vanilla, one per memory multiplier for XL."""
    if preset == "vanilla":
        return [{"name": "vanilla", "context_len": args.vanilla_context}]
    settings = []
    for k in args.mem_multipliers:
        settings.append(
            {
                "name": f"xl mem={k}L",
                "mem_len": k * args.seq_len,
                "clamp_len": args.clamp_len,
                "same_length": args.same_length,
            }
        )
    return settings


def evaluate_run(path: Path, preset: str, corpus: Corpus, args: argparse.Namespace) -> None:
    """Score valid and test in every setting of `eval_settings`; cached in <run>/eval.json."""
    cache_file = path / "eval.json"
    done = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    run = load_run(path, "cuda" if args.device == "cuda" else "cpu")
    device = next(run.model.parameters()).device
    for setting in eval_settings(preset, args):
        key = json.dumps({**setting, "eval_tokens": args.eval_tokens}, sort_keys=True)
        if key in done:
            continue
        model = run.model
        if preset != "vanilla":
            clamp = setting["clamp_len"]
            model = reconfigure(
                run.model,
                mem_len=setting["mem_len"],
                clamp_len=-1 if clamp is None else clamp,
                same_length=setting["same_length"],
            )
        scores = {}
        for split in SPLITS:
            result = evaluate(
                model,
                corpus.splits[split],
                seq_len=args.seq_len,
                batch_size=args.eval_batch_size,
                context_len=setting.get("context_len", 0),
                max_tokens=args.eval_tokens,
                split_bytes=corpus.bytes_per_split.get(split),
                device=device,
            )
            scores[split] = result.as_dict()
        done[key] = {"setting": setting, "scores": scores}
        cache_file.write_text(json.dumps(done, indent=2) + "\n")
        print(f"{path}: {setting['name']}: " + metric_text(scores, corpus.unit), flush=True)


def metric(scores: dict[str, Any], unit: str) -> float:
    """Perplexity for word corpora, bits per token (= per byte or char) otherwise."""
    return scores["perplexity"] if unit == "word" else scores["bits_per_token"]


def metric_name(unit: str) -> str:
    return "ppl" if unit == "word" else f"bits/{unit}"


def metric_text(scores: dict[str, dict[str, Any]], unit: str) -> str:
    return ", ".join(f"{s} {metric_name(unit)} {metric(scores[s], unit):.3f}" for s in SPLITS)


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {"command": sys.argv, "corpora": {}}
    for corpus_name in args.corpus:
        rows = []
        for seed in args.seeds:
            for preset in PRESETS:
                path = run_dir(args.out, corpus_name, preset, seed)
                cache_file = path / "eval.json"
                if not cache_file.exists():
                    continue
                saved = run_config_from_dict(json.loads((path / "config.json").read_text()))
                finals = [r for r in read_metrics(path, "valid") if r.get("final")]
                last = finals[-1] if finals else {}
                for entry in json.loads(cache_file.read_text()).values():
                    rows.append(
                        {
                            "preset": preset,
                            "seed": seed,
                            "eval": entry["setting"]["name"],
                            "setting": entry["setting"],
                            "steps": last.get("step"),
                            "train_seconds": last.get("seconds"),
                            "max_steps": saved.train.max_steps,
                            "valid": entry["scores"]["valid"],
                            "test": entry["scores"]["test"],
                        }
                    )
        summary["corpora"][corpus_name] = {"rows": rows}
    return summary


def markdown(summary: dict[str, Any], units: dict[str, str]) -> str:
    lines = ["# Transformer-XL vs vanilla", "", "Command: `" + " ".join(summary["command"]) + "`"]
    for corpus_name, data in summary["corpora"].items():
        unit = units.get(corpus_name, "word")
        name = metric_name(unit)
        lines += [
            "",
            f"## {corpus_name}",
            "",
            f"| model | evaluation | seed | steps | train s | valid {name} | test {name} |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in data["rows"]:
            groups.setdefault(row["eval"], []).append(row)
            lines.append(
                f"| {row['preset']} | {row['eval']} | {row['seed']} | {row['steps']} | "
                f"{row['train_seconds'] or 0:.0f} | {metric(row['valid'], unit):.3f} | "
                f"{metric(row['test'], unit):.3f} |"
            )
        if len(summary_seeds(data)) > 1:
            for eval_name, rows in groups.items():
                valid = [metric(r["valid"], unit) for r in rows]
                test = [metric(r["test"], unit) for r in rows]
                lines.append(
                    f"| {rows[0]['preset']} | {eval_name} | mean ± sd | | | "
                    f"{statistics.mean(valid):.3f} ± {_sd(valid):.3f} | "
                    f"{statistics.mean(test):.3f} ± {_sd(test):.3f} |"
                )
    return "\n".join(lines) + "\n"


def summary_seeds(data: dict[str, Any]) -> set[int]:
    return {row["seed"] for row in data["rows"]}


def _sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else math.nan


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    units = {}
    if not args.report_only:
        train_all(args)
    for corpus_name in args.corpus:
        units[corpus_name] = load_corpus(corpus_name, args.data_dir).unit
    summary = summarise(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(summary, units))
    print(markdown(summary, units))
    print("wrote", args.out / "summary.json", args.out / "summary.md", sep="\n  ")


if __name__ == "__main__":
    main()
