"""Switch against the dense model at equal per-token FLOPs and equal steps (docs/switch.md).

Trains `vanilla` (dense) and `switch` with 2, 4 and 8 experts (the Switch FFN in every other
layer, each expert the dense FFN's size, so a token's matmuls differ only by the router's D·E)
with the same shape, data, seeds and number of steps, then writes into --out:
  <corpus>/<name>/seed<k>/     the runs (config, checkpoints, metrics.jsonl)
  summary.json, summary.md     per run: parameters, training FLOPs per token, steps, training
                               tokens/s, valid bits per byte over the whole split, the Switch
                               layers' drop rate (training: mean over the logged steps of the
                               last tenth; evaluation: the final pass), and the mean over seeds

Re-running the same command skips finished runs and resumes interrupted ones; --report-only
rebuilds the tables from what is on disk.

    python scripts/experiments/switch.py --corpus wikitext-2-bytes --seeds 0 1 \
        --max-steps 1500 --out runs/switch
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from experiment_runs import add_common_overrides, run_dir

from formers.bench.flops import training_flops_per_token
from formers.bench.run_metrics import is_complete, parameter_count
from formers.data.corpora import load_corpus
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig, run_config, run_config_from_dict, with_vocab
from formers.train.metrics import read_metrics
from formers.train.trainer import train

EXPERTS = (2, 4, 8)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--corpus", default="wikitext-2-bytes", help="a corpus name")
    p.add_argument("--experts", nargs="+", type=int, default=list(EXPERTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    p.add_argument("--out", type=Path, default=Path("runs/switch"))
    model = p.add_argument_group("model (the same for every run)")
    model.add_argument("--n-layers", type=int, default=4)
    model.add_argument("--d-model", type=int, default=128)
    model.add_argument("--n-heads", type=int, default=4)
    model.add_argument("--d-ff", type=int, default=512)
    model.add_argument("--dropout", type=float, default=0.0)
    model.add_argument("--norm", default=None, choices=["pre", "post"])
    run = p.add_argument_group("training (the same for every run)")
    run.add_argument("--max-steps", type=int, default=1500)
    run.add_argument("--batch-size", type=int, default=16)
    run.add_argument("--seq-len", type=int, default=128)
    run.add_argument("--lr", type=float, default=1e-3)
    run.add_argument("--warmup-steps", type=int, default=100)
    run.add_argument("--eval-every", type=int, default=250)
    run.add_argument("--eval-tokens", type=int, default=65536)
    run.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    run.add_argument(
        "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
        help="any other run override for every run, e.g. --set train.weight_decay=0.0",
    )  # fmt: skip
    p.add_argument("--data-dir", default=None)
    p.add_argument("--report-only", action="store_true", help="only rebuild the tables")
    p.add_argument("--progress", action="store_true", help="show a progress bar per run")
    return p.parse_args(argv)


def candidates(args: argparse.Namespace) -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (preset, its own overrides): the dense model and one Switch model per E."""
    runs: dict[str, tuple[str, dict[str, Any]]] = {"dense": ("vanilla", {})}
    for n in args.experts:
        runs[f"switch-{n}"] = ("switch", {"ffn.n_experts": n})
    return runs


def run_overrides(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "dropout": args.dropout,
        "train.corpus": args.corpus,
        "train.data_dir": args.data_dir,
        "train.seed": seed,
        "train.max_steps": args.max_steps,
        "train.batch_size": args.batch_size,
        "train.seq_len": args.seq_len,
        "train.lr": args.lr,
        "train.warmup_steps": args.warmup_steps,
        "train.eval_every": args.eval_every,
        "train.eval_tokens": args.eval_tokens,
        "train.save_every": args.eval_every,
        "train.precision": "fp32",
    }
    add_common_overrides(overrides, args.norm, args.extra)
    return overrides


def check_same_config(path: Path, cfg: RunConfig) -> None:
    saved = path / "config.json"
    if saved.exists() and run_config_from_dict(json.loads(saved.read_text())) != cfg:
        raise SystemExit(
            f"{path} was run with other settings than this command's; use another --out, or "
            "repeat the original command"
        )


def configs(args: argparse.Namespace, vocab: int | None) -> dict[tuple[str, int], RunConfig]:
    out = {}
    for seed in args.seeds:
        for name, (preset, own) in candidates(args).items():
            cfg = run_config(preset, {**run_overrides(args, seed), **own})
            out[name, seed] = with_vocab(cfg, vocab) if vocab is not None else cfg
    return out


def train_all(args: argparse.Namespace) -> None:
    corpus = load_corpus(args.corpus, args.data_dir)
    for (name, seed), cfg in configs(args, corpus.tokenizer.vocab_size).items():
        path = run_dir(args.out, args.corpus, name, seed)
        check_same_config(path, cfg)
        if is_complete(path):
            print(f"{path}: done, skipped")
            continue
        resume = latest_checkpoint(path) is not None
        print(f"{path}: {'resuming' if resume else 'training'}", flush=True)
        result = train(cfg, path, resume=resume, progress=args.progress, data=corpus)
        if result.interrupted:
            raise SystemExit("interrupted: run the same command again to resume")
        print(f"{path}: step {result.step}, {result.train_seconds:.0f}s, "
              f"valid {result.valid.summary()}", flush=True)  # fmt: skip


def switch_mean(record: dict[str, Any], name: str) -> float | None:
    """The mean of a diagnostic over the Switch layers of one metrics record."""
    values = [v for k, v in record.items() if k.endswith(f"ffn.{name}")]
    return statistics.fmean(values) if values else None


def summarise(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    for name, seed in configs(args, None):
        path = run_dir(args.out, args.corpus, name, seed)
        final = [r for r in read_metrics(path, "valid") if r.get("final")]
        train_records = read_metrics(path, "train")
        if not final or not train_records:
            continue
        saved = run_config_from_dict(json.loads((path / "config.json").read_text()))
        late = train_records[-max(1, len(train_records) // 10) :]
        rates = [r["tokens_per_s"] for r in late]
        drops = [switch_mean(r, "dropped") for r in late]
        runs[f"{name}/seed{seed}"] = {
            "name": name,
            "seed": seed,
            "params": parameter_count(path),
            "train_flops_per_token": training_flops_per_token(saved.model, saved.train.seq_len),
            "steps": train_records[-1]["step"],
            "train_seconds": final[-1]["seconds"],
            "tokens_per_s": statistics.median(rates),
            "valid_bits_per_byte": final[-1]["bits_per_byte"],
            "valid_loss": final[-1]["loss"],
            "train_dropped": statistics.fmean(drops) if drops[0] is not None else None,
            "valid_dropped": switch_mean(final[-1].get("metrics", {}), "dropped"),
            "valid_load_max": switch_mean(final[-1].get("metrics", {}), "load_max"),
        }
    means = {}
    for name in candidates(args):
        mine = [r for r in runs.values() if r["name"] == name]
        if len(mine) == len(args.seeds):
            means[name] = {
                key: statistics.fmean(r[key] for r in mine) if mine[0][key] is not None else None
                for key in ("valid_bits_per_byte", "tokens_per_s", "train_dropped",
                            "valid_dropped", "params", "train_flops_per_token")
            }  # fmt: skip
    return {"command": ["python", *sys.argv], "runs": runs, "means": means}


def fmt(value: Any, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(summary: dict[str, Any]) -> str:
    lines = ["# Switch vs dense at equal FLOPs per token and equal steps", ""]
    lines += ["Command: `" + " ".join(summary["command"]) + "`", ""]
    lines += [
        "| model | seed | params | train GFLOP/token | steps | tokens/s | valid bits/byte | "
        "dropped (train) | dropped (valid) | busiest expert (valid) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary["runs"].values():
        lines.append(
            f"| {r['name']} | {r['seed']} | {r['params']:,} | "
            f"{r['train_flops_per_token'] / 1e9:.5f} | {r['steps']} | {r['tokens_per_s']:,.0f} | "
            f"{r['valid_bits_per_byte']:.4f} | {fmt(r['train_dropped'], '.2%')} | "
            f"{fmt(r['valid_dropped'], '.2%')} | {fmt(r['valid_load_max'], '.2f')} |"
        )
    lines += ["", "Mean over seeds:", ""]
    lines += [
        "| model | params | valid bits/byte | Δ vs dense | tokens/s | vs dense | dropped (train) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = summary["means"].get("dense")
    for name, m in summary["means"].items():
        delta = m["valid_bits_per_byte"] - base["valid_bits_per_byte"] if base else None
        speed = m["tokens_per_s"] / base["tokens_per_s"] if base else None
        lines.append(
            f"| {name} | {m['params']:,.0f} | {m['valid_bits_per_byte']:.4f} | "
            f"{fmt(delta, '+.4f')} | {m['tokens_per_s']:,.0f} | {fmt(speed, '.2f')} | "
            f"{fmt(m['train_dropped'], '.2%')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.report_only:
        train_all(args)
    summary = summarise(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    text = markdown(summary)
    (args.out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
