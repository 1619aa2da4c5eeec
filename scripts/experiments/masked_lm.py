"""Masked LM on one corpus: full attention against Linformer at several k, equal size and CPU time
(docs/linformer.md).

For each context length and seed, trains `bert` (full two-sided attention) and `linformer` with
each --k, all with the same model shape, batch tokens, schedule and number of steps (or the same
training-time budget, --time-budget; on a shared machine wall-clock budgets are not equal CPU
budgets), then
writes into --out:
  ctx<n>/<model>/seed<k>/   the runs (config, checkpoints, metrics.jsonl)
  summary.json, summary.md  masked-token bits per byte and accuracy on the first --valid-bytes
                            of the valid split (fixed masks, formers.train.tasks.masked_lm),
                            training tokens/s (median of the logged windows), steps taken
A two-sided sliding-window attention kind ("sliding_window" or "longformer" in
formers.registry.ATTENTION) is added when this checkout has one.

Every run is evaluated on the same prefix of the valid split (the whole split would cost more
CPU than the training), masked by the task's fixed evaluation seed. Re-running skips finished
runs and resumes interrupted ones.

    python scripts/experiments/masked_lm.py --corpus wikitext-2-bytes --contexts 512 1024 \
        --k 64 128 256 --seeds 0 1 --max-steps 100 --out runs/masked_lm_steps
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from experiment_runs import add_common_overrides

from formers.bench.run_metrics import final_valid, is_complete, tokens_per_second
from formers.data.corpora import load_corpus
from formers.registry import ATTENTION
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import run_config
from formers.train.trainer import train

SLIDING_KINDS = ("sliding_window", "longformer")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", default="wikitext-2-bytes")
    p.add_argument("--contexts", type=int, nargs="+", default=[512, 1024])
    p.add_argument("--k", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--window", type=int, default=128, help="sliding window, if present")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", type=Path, default=Path("runs/masked_lm"))
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=512)
    p.add_argument("--batch-tokens", type=int, default=4096, help="tokens per batch, any context")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--time-budget", default=None, help="training time per run, e.g. 100s")
    p.add_argument("--max-steps", type=int, default=100, help="steps per run (if no budget)")
    p.add_argument("--valid-bytes", type=int, default=65536, help="valid prefix scored")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--report-only", action="store_true")
    p.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="another run setting, e.g. model.embed_init=paper (repeatable)",
    )  # fmt: skip
    return p.parse_args(argv)


def models(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Model name -> (preset, attention overrides)."""
    chosen: dict[str, dict[str, Any]] = {"full": {"preset": "bert", "attention": None}}
    for k in args.k:
        attention = {"kind": "linformer", "proj_len": k}
        chosen[f"linformer k={k}"] = {"preset": "linformer", "attention": attention}
    for kind in SLIDING_KINDS:
        if kind in ATTENTION:
            attention = {"kind": kind, "window": args.window}
            chosen[f"{kind} w={args.window}"] = {"preset": "bert", "attention": attention}
    return chosen


def config_of(args: argparse.Namespace, spec: dict[str, Any], context: int, seed: int):
    overrides: dict[str, Any] = {
        "model.n_layers": args.n_layers,
        "model.d_model": args.d_model,
        "model.n_heads": args.n_heads,
        "model.d_ff": args.d_ff,
        "model.max_len": context,
        "model.dropout": 0.0,
        "train.corpus": args.corpus,
        "train.seq_len": context,
        "train.batch_size": max(1, args.batch_tokens // context),
        "train.lr": args.lr,
        "train.schedule": "constant",
        "train.warmup_steps": 20,
        # with a time budget the budget ends every run; else every run takes --max-steps
        "train.max_steps": 1_000_000 if args.time_budget else args.max_steps,
        "train.time_budget": args.time_budget,
        "train.eval_every": 0,
        "train.save_every": 0,
        "train.seed": seed,
        "train.precision": args.precision,
    }
    if spec["attention"] is not None:
        overrides["model.attention"] = spec["attention"]
    add_common_overrides(overrides, None, args.extra)
    return run_config(spec["preset"], overrides)


def run_path(out: Path, context: int, name: str, seed: int) -> Path:
    return out / f"ctx{context}" / name.replace(" ", "_").replace("=", "") / f"seed{seed}"


def train_all(args: argparse.Namespace) -> None:
    corpus = load_corpus(args.corpus)
    # the same valid prefix for every run: scoring the whole split costs more than training
    corpus.splits["valid"] = corpus.splits["valid"][: args.valid_bytes]
    for context in args.contexts:
        for name, spec in models(args).items():
            for seed in args.seeds:
                path = run_path(args.out, context, name, seed)
                if is_complete(path):
                    print(f"ctx {context} {name} seed {seed}: done", flush=True)
                    continue
                cfg = config_of(args, spec, context, seed)
                resume = latest_checkpoint(path) is not None
                print(f"ctx {context} {name} seed {seed}: training in {path}", flush=True)
                result = train(cfg, path, resume=resume, progress=False, data=corpus)
                if result.interrupted:
                    raise SystemExit(130)
                valid = result.valid
                print(f"  {result.step} steps, {valid.summary()}", flush=True)


def summarize(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for context in args.contexts:
        for name in models(args):
            runs = []
            for seed in args.seeds:
                path = run_path(args.out, context, name, seed)
                final = final_valid(path)
                if final is None:
                    continue
                runs.append(
                    {
                        "seed": seed,
                        "bits_per_byte": final["bits_per_byte"],
                        "accuracy": final["accuracy"],
                        "tokens_per_s": tokens_per_second(path),
                        "steps": final["step"],
                        "masked_tokens": final["tokens"],
                    }
                )
            if runs:
                rows.append({"context": context, "model": name, "runs": runs})
    return {"settings": {k: str(v) for k, v in vars(args).items()}, "rows": rows}


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| context | model | masked bits/byte (seeds) | mean | accuracy | tokens/s | steps |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in summary["rows"]:
        runs = row["runs"]
        bits = [r["bits_per_byte"] for r in runs]
        mean = statistics.fmean
        lines.append(
            f"| {row['context']} | {row['model']} | {' / '.join(f'{b:.3f}' for b in bits)} "
            f"| {mean(bits):.3f} | {100 * mean(r['accuracy'] for r in runs):.1f}% "
            f"| {mean(r['tokens_per_s'] for r in runs):,.0f} "
            f"| {mean(r['steps'] for r in runs):.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.report_only:
        train_all(args)
    summary = summarize(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = markdown(summary)
    (args.out / "summary.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
