"""The `formers` command: train | eval | generate | bench | compare | data | presets."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from formers.bench.bench_cli import add_bench_parser
from formers.bench.compare_cli import add_compare_parser
from formers.cpu_allocator import keep_freed_memory
from formers.errors import FormersError
from formers.overrides import flatten, parse_overrides
from formers.runtime_flags import add_runtime_flags
from formers.translate_cli import add_translate_parsers, add_translation_eval_flags


def read_yaml(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as error:
        raise FormersError(f"cannot read config file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise FormersError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise FormersError(f"{path} must hold a mapping like 'model: {{d_model: 256}}'")
    return data


def resumed_config(run_dir: Path, overrides: dict[str, Any]):
    """The saved config of a run, with training overrides (more steps, another budget) applied."""
    from formers.overrides import apply_overrides
    from formers.presets import override
    from formers.train.checkpoint import load_config
    from formers.train.config import run_config_from_dict

    cfg = run_config_from_dict(load_config(run_dir))
    train_keys = {
        k.removeprefix("train."): v for k, v in overrides.items() if k.startswith("train.")
    }
    model_keys = {
        k.removeprefix("model."): v
        for k, v in overrides.items()
        if k not in train_keys and not k.startswith("train.")
    }
    wanted = override(cfg.model, model_keys)
    changed = [
        f.name for f in fields(wanted) if getattr(wanted, f.name) != getattr(cfg.model, f.name)
    ]
    if changed:
        raise FormersError(
            f"--resume keeps the saved model; it cannot change model.{', model.'.join(changed)}. "
            "Start a new --run-dir to train another model"
        )
    return replace(cfg, train=apply_overrides(cfg.train, train_keys, prefix="train."))


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.train.config import run_config
    from formers.train.trainer import train

    file_values = read_yaml(args.config) if args.config else {}
    preset = args.preset or file_values.pop("preset", None) or "vanilla"
    file_values.pop("preset", None)
    overrides = {**flatten(file_values), **parse_overrides(extra)}
    if args.data_dir:
        overrides["train.data_dir"] = args.data_dir
    cfg = run_config(preset, overrides)
    run_dir = Path(
        args.run_dir
        or f"runs/{preset}-{Path(cfg.train.corpus).name}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if not args.resume and (run_dir / "checkpoints").exists():
        raise FormersError(
            f"{run_dir} already holds a run: continue it with --resume, or pick another --run-dir"
        )
    if args.resume and (run_dir / "checkpoints").exists():
        cfg = resumed_config(run_dir, overrides)
    result = train(cfg, run_dir, resume=args.resume, progress=not args.no_progress)
    summary = {
        "run_dir": str(result.run_dir),
        "step": result.step,
        "tokens": result.tokens_seen,
        "train_seconds": round(result.train_seconds, 1),
        "interrupted": result.interrupted,
    }
    if result.valid is not None:
        summary["valid"] = result.valid.as_dict()
    print(json.dumps(summary, indent=2))
    return 130 if result.interrupted else 0


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run import corpus_of, load_run, read_run_config
    from formers.runtime_flags import runtime_changes, runtime_report
    from formers.train.tasks import task_for
    from formers.translate_cli import cmd_eval_translation, is_translation_run

    if is_translation_run(args.run):
        return cmd_eval_translation(args)
    changes = runtime_changes(args, read_run_config(args.run).model)
    run = load_run(args.run, args.device, runtime=changes)
    corpus = corpus_of(run, args.data_dir)
    if args.split not in corpus.splits:
        raise FormersError(
            f"{corpus.name} has no {args.split!r} split; it has {list(corpus.splits)}"
        )
    seq_len = args.seq_len or run.config.train.seq_len
    result = task_for(run.config, data=corpus).evaluate(
        run.model,
        args.split,
        max_tokens=args.max_tokens,
        device=args.device,
        seq_len=seq_len,
        batch_size=args.batch_size,
        context_len=args.context_len,
    )
    report = {
        "run": str(run.run_dir),
        "step": run.step,
        "corpus": corpus.name,
        "split": args.split,
        "unit": corpus.unit,
        "seq_len": seq_len,
        **runtime_report(run.config.model),
        **result.as_dict(),
    }
    print(json.dumps(report, indent=2))
    return 0


def cmd_generate(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.infer import iter_generate
    from formers.run import load_run
    from formers.train.evaluate import carries_memory

    run = load_run(args.run, args.device)
    prompt = run.tokenizer.encode(args.prompt)
    if not prompt:
        raise FormersError("the prompt is empty: give at least one character with --prompt")
    print(args.prompt, end="", flush=True)
    pieces: list[int] = []
    printed = ""
    # A model with absolute positions has never seen positions past its training length:
    # beyond it, slide a window of that length instead of extrapolating.
    window = args.max_context
    if window is None and not carries_memory(run.model):
        window = run.config.train.seq_len
    for token in iter_generate(
        run.model,
        [prompt],
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_context=window,
    ):
        pieces.append(int(token[0]))
        text = run.tokenizer.decode(pieces)
        # a multi-byte character may arrive in pieces: print only what decoded cleanly
        if not text.endswith("\ufffd"):
            print(text[len(printed) :], end="", flush=True)
            printed = text
    print(run.tokenizer.decode(pieces)[len(printed) :])
    return 0


def cmd_data(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.data import CORPORA, fetch, load_corpus
    from formers.data.locate import data_dir

    if args.action == "list":
        for name, spec in CORPORA.items():
            print(f"{name:18s} {spec.description}")
        print(f"\ndata folder: {data_dir(args.data_dir)}  (any text file or folder path works too)")
    elif args.action == "get":
        path = fetch(args.name, args.data_dir)
        print(f"{args.name} is ready at {path}")
    elif args.action == "info":
        corpus = load_corpus(args.name, args.data_dir)
        print(corpus)
    return 0


def cmd_presets(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.presets import PRESETS

    for name, factory in PRESETS.items():
        print(f"{name:16s} {(factory.__doc__ or '').strip().splitlines()[0]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="formers", description="Train, evaluate and sample Transformer-family models."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "train",
        help="train a preset on a corpus",
        description="Train a model. Override any config field with dotted flags: "
        "--model.d_model 256 --train.lr 3e-4 --train.corpus tinyshakespeare.",
    )
    p.add_argument("--preset", help="model preset (see `formers presets`); default vanilla")
    p.add_argument("--config", help="YAML file with preset:, model: and train: sections")
    p.add_argument("--run-dir", help="where checkpoints, metrics and config go")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train, takes_overrides=True)

    p = sub.add_parser("eval", help="loss, bits and perplexity of a run over a whole split")
    p.add_argument("run", help="run folder")
    p.add_argument("--split", default="valid", help="train, valid, test, or a corpus's own")
    p.add_argument(
        "--seq-len",
        "--tgt-len",
        type=int,
        help="tokens scored per window, or per segment of a model with memory (default: "
        "training's)",
    )
    p.add_argument("--context-len", type=int, default=0, help="extra left context per window")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-tokens", type=int, help="score only the first N tokens")
    add_runtime_flags(p)
    add_translation_eval_flags(p)
    p.add_argument("--data-dir")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("generate", help="sample text from a run")
    p.add_argument("run", help="run folder")
    p.add_argument("--prompt", default="\n")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int)
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-context",
        type=int,
        help="tokens the model sees (default: the training length; memory models: unlimited)",
    )
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("data", help="list, download or inspect corpora")
    p.add_argument("action", choices=["list", "get", "info"])
    p.add_argument("name", nargs="?", help="corpus name (get, info)")
    p.add_argument("--data-dir")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("presets", help="list the model presets")
    p.set_defaults(func=cmd_presets)

    add_bench_parser(sub)
    add_compare_parser(sub)
    add_translate_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_overrides", False):
        parser.error(f"unrecognised arguments: {' '.join(extra)}")
    if args.command == "data" and args.action in ("get", "info") and not args.name:
        parser.error(f"formers data {args.action} needs a corpus name")
    keep_freed_memory()  # big per-step tensors reuse the heap instead of fresh pages
    try:
        return args.func(args, extra)
    except FormersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # training and compare save a checkpoint on Ctrl-C themselves and return; what reaches
        # here (bench, eval, generate, a download) has nothing half-written to keep
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
