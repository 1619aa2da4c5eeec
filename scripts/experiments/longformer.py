"""Longformer's window against full and top-k attention at equal size and CPU time
(docs/longformer.md).

Trains each variant once per seed on one corpus with the same model shape, context, batch and
training-time budget, then scores the whole valid split. Variants:
  vanilla              full causal attention (the fused SDPA kernel)
  longformer-w<W>      the causal sliding window of W keys (`--windows`, default 64 128 256)
  sparse-topk-k<K>     each query keeps its K best keys (`--top-k`, default 8 32)
Writes into --out:
  <variant>/seed<k>/     the runs (config, checkpoints, metrics.jsonl)
  summary.json, summary.md   per run: parameters, steps, training tokens/s (median of the
                         logged windows), whole-split valid loss and bits per byte; per variant
                         the mean over seeds
  valid_bpb.png          valid bits per byte against training seconds, every run

With --extrapolate N (after training, seed --seeds[0]): each model scores valid windows of N
tokens, positions it never saw in training (sinusoidal positions extrapolate; a window model
only sees its last W keys of them), and reports bits per byte of the first --seq-len positions,
of the later ones, and of the same later targets scored in windows of --seq-len (positions
restarted at 0): where the last two agree, positions past the training length cost nothing.
Writes extrapolation.json and .md.

Re-running the same command skips finished runs and resumes interrupted ones; --report-only
rebuilds the tables from what is on disk.

    python scripts/experiments/longformer.py --corpus wikitext-2-bytes --seeds 0 1 \\
        --seq-len 1024 --time-budget 150s --out runs/longformer-wt2
    python scripts/experiments/longformer.py --corpus wikitext-2-bytes --seeds 0 1 \
        --seq-len 1024 --time-budget 150s --out runs/longformer-wt2 --report-only \
        --extrapolate 4096 --extrapolate-windows 16
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
from experiment_runs import add_common_overrides

from formers.bench.plots import line_plot
from formers.bench.run_metrics import (
    final_valid,
    is_complete,
    parameter_count,
    tokens_per_second,
    valid_curve,
)
from formers.data.corpora import load_corpus
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig, run_config, run_config_from_dict, with_vocab
from formers.train.trainer import train


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", default="wikitext-2-bytes")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--windows", nargs="+", type=int, default=[64, 128, 256])
    p.add_argument("--top-k", nargs="+", type=int, default=[8, 32])
    p.add_argument("--out", type=Path, default=Path("runs/longformer-wt2"))
    model = p.add_argument_group("model (the same for every variant)")
    model.add_argument("--n-layers", type=int, default=4)
    model.add_argument("--d-model", type=int, default=128)
    model.add_argument("--n-heads", type=int, default=4)
    model.add_argument("--d-ff", type=int, default=512)
    model.add_argument("--dropout", type=float, default=0.0)
    model.add_argument("--norm", default="pre", choices=["pre", "post"])
    run = p.add_argument_group("training (the same for every variant)")
    run.add_argument("--time-budget", default="150s", help='training-time cap per run, e.g. "3m"')
    run.add_argument("--max-steps", type=int, default=100_000)
    run.add_argument("--batch-size", type=int, default=4)
    run.add_argument("--seq-len", type=int, default=1024)
    run.add_argument("--lr", type=float, default=2e-3)
    run.add_argument("--warmup-steps", type=int, default=30)
    run.add_argument("--eval-every", type=int, default=50)
    run.add_argument("--eval-tokens", type=int, default=32768, help="periodic evals only")
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    run.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--report-only", action="store_true", help="only rebuild the tables")
    p.add_argument("--extrapolate", type=int, default=0, help="score windows this long, see above")
    p.add_argument("--extrapolate-windows", type=int, default=16, help="how many such windows")
    return p.parse_args(argv)


def variants(args: argparse.Namespace) -> dict[str, tuple[str, dict[str, Any]]]:
    """Variant name -> (preset, its own overrides)."""
    table: dict[str, tuple[str, dict[str, Any]]] = {"vanilla": ("vanilla", {})}
    for w in args.windows:
        table[f"longformer-w{w}"] = ("longformer", {"attention.window": w})
    for k in args.top_k:
        table[f"sparse-topk-k{k}"] = ("sparse-topk", {"attention.top_k": k})
    return table


def run_overrides(args: argparse.Namespace, own: dict[str, Any], seed: int) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "dropout": args.dropout,
        "max_len": args.seq_len,
        "train.corpus": args.corpus,
        "train.data_dir": args.data_dir,
        "train.seed": seed,
        "train.max_steps": args.max_steps,
        "train.time_budget": args.time_budget,
        "train.schedule": "constant",
        "train.batch_size": args.batch_size,
        "train.seq_len": args.seq_len,
        "train.lr": args.lr,
        "train.warmup_steps": args.warmup_steps,
        "train.eval_every": args.eval_every,
        "train.eval_tokens": args.eval_tokens,
        "train.save_every": 0,
        **own,
    }
    add_common_overrides(overrides, args.norm, args.extra)
    return overrides


def check_same_config(path: Path, cfg: RunConfig) -> None:
    saved = path / "config.json"
    if saved.exists() and run_config_from_dict(json.loads(saved.read_text())) != cfg:
        raise SystemExit(f"{path} was run with other settings: use another --out")


def train_all(args: argparse.Namespace) -> None:
    corpus = None
    for seed in args.seeds:
        for name, (preset, own) in variants(args).items():
            path = args.out / name / f"seed{seed}"
            if corpus is None:
                corpus = load_corpus(args.corpus, args.data_dir)
            cfg = run_config(preset, run_overrides(args, own, seed))
            cfg = with_vocab(cfg, corpus.tokenizer.vocab_size)
            check_same_config(path, cfg)
            if is_complete(path):
                print(f"{path}: done, skipped", flush=True)
                continue
            resume = latest_checkpoint(path) is not None
            print(f"{path}: {'resuming' if resume else 'training'}", flush=True)
            result = train(cfg, path, resume=resume, progress=False, data=corpus)
            if result.interrupted:
                raise SystemExit("interrupted: run the same command again to resume")
            print(f"{path}: step {result.step}, valid loss {result.valid.loss:.4f}", flush=True)


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    runs, means = [], {}
    for name in variants(args):
        per_seed = []
        for seed in args.seeds:
            path = args.out / name / f"seed{seed}"
            final = final_valid(path)
            if final is None:
                continue
            curve = valid_curve(path)
            run = {
                "variant": name,
                "seed": seed,
                "params": parameter_count(path),
                "steps": final["step"],
                "tokens_per_s": tokens_per_second(path),
                "valid_loss": final["loss"],
                "valid_bpb": final["loss"] / math.log(2),  # one token is one byte
                "valid_tokens": final["tokens"],
                "curve": curve,
            }
            runs.append(run)
            per_seed.append(run)
        if per_seed:
            means[name] = {
                key: sum(r[key] for r in per_seed) / len(per_seed)
                for key in ("valid_bpb", "tokens_per_s", "steps")
            } | {"seeds": len(per_seed)}
    return {"command": sys.argv, "runs": runs, "means": means}


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| variant | seed | params | steps | train tokens/s | valid bits/byte (whole split) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary["runs"]:
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['params']:,} | {r['steps']} | "
            f"{r['tokens_per_s']:,.0f} | {r['valid_bpb']:.4f} |"
        )
    base = summary["means"].get("vanilla")
    lines += [
        "",
        "| variant | seeds | mean steps | mean train tokens/s | vs vanilla | mean valid bits/byte "
        "|",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, m in summary["means"].items():
        speed = f"{m['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "–"
        lines.append(
            f"| {name} | {m['seeds']} | {m['steps']:.0f} | {m['tokens_per_s']:,.0f} | {speed} | "
            f"{m['valid_bpb']:.4f} |"
        )
    return "\n".join(["Command: `" + " ".join(summary["command"]) + "`", "", *lines, ""])


@torch.no_grad()
def extrapolation(args: argparse.Namespace) -> dict[str, Any]:
    """Bits per byte of positions inside and past the training length (see the module doc)."""
    from formers.run import load_run

    length, trained = args.extrapolate, args.seq_len
    valid = load_corpus(args.corpus, args.data_dir).splits["valid"]
    count = min(args.extrapolate_windows, (len(valid) - 1) // length)
    inputs = valid[: count * length].view(count, length)
    targets = valid[1 : count * length + 1].view(count, length)
    result = {}
    for name in variants(args):
        path = args.out / name / f"seed{args.seeds[0]}"
        if not is_complete(path):
            continue
        model = load_run(path).model
        long = torch.stack(  # one window at a time: (count, length) losses
            [token_losses(model, inputs[i : i + 1], targets[i : i + 1])[0] for i in range(count)]
        )
        chunks = inputs[:, trained:].reshape(-1, trained)  # the later targets, positions from 0
        short = token_losses(model, chunks, targets[:, trained:].reshape(-1, trained))
        bits = 1 / math.log(2)
        result[name] = {
            "inside": bits * float(long[:, :trained].mean()),
            "past": bits * float(long[:, trained:].mean()),
            "past_in_training_windows": bits * float(short.mean()),
            "windows": count,
        }
        print(name, result[name], flush=True)
    return result


def token_losses(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> Any:
    logits = model(inputs).logits  # (B, T, V)
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


def extrapolation_markdown(args: argparse.Namespace, result: dict[str, Any]) -> str:
    n, t = args.extrapolate, args.seq_len
    lines = [
        f"Valid bits per byte in windows of {n} tokens (trained on {t}), seed {args.seeds[0]}, "
        f"{next(iter(result.values()))['windows'] if result else 0} windows:",
        "",
        f"| variant | positions 0–{t - 1} | positions {t}–{n - 1} | same targets, windows of {t} |",
        "| --- | --- | --- | --- |",
    ]
    for name, r in result.items():
        past, short = r["past"], r["past_in_training_windows"]
        lines.append(f"| {name} | {r['inside']:.4f} | {past:.4f} | {short:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.report_only:
        train_all(args)
    summary = summarise(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (args.out / "summary.md").write_text(markdown(summary))
    series = {
        f"{r['variant']} s{r['seed']}": (
            [p["seconds"] for p in r["curve"]],
            [p["loss"] / math.log(2) for p in r["curve"]],
        )
        for r in summary["runs"]
    }
    if series:
        line_plot(
            series,
            args.out / "valid_bpb.png",
            xlabel="training seconds",
            ylabel=f"valid bits/byte (first {args.eval_tokens} bytes)",
        )
    print(markdown(summary))
    if args.extrapolate:
        result = extrapolation(args)
        (args.out / "extrapolation.json").write_text(json.dumps(result, indent=2) + "\n")
        table = extrapolation_markdown(args, result)
        (args.out / "extrapolation.md").write_text(table)
        print(table)


if __name__ == "__main__":
    main()
