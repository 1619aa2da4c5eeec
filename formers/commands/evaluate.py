"""`formers eval`: a trained run's loss over a whole split, or a probe run's accuracy on its
held-out sequences, as one JSON report on stdout."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from formers.commands.flags import GivenFlag, given_flags, verb_and_pronoun
from formers.commands.translate import (
    TRANSLATION_EVAL_DEFAULTS,
    add_translation_eval_flags,
    cmd_eval_translation,
    is_translation_run,
)
from formers.devices import resolve_device
from formers.errors import FormersError
from formers.runtime_flags import add_runtime_flags
from formers.train.metrics import json_safe

if TYPE_CHECKING:
    import torch

# `formers eval`'s language-model flags and their defaults (given on a translation run: an error)
LM_EVAL_DEFAULTS = {"seq_len": None, "context_len": 0, "batch_size": 16, "eval_samples": None}
# the flags that apply to a corpus and not to a probe's held-out sequences
CORPUS_ONLY_DEFAULTS = {"seq_len": None, "context_len": 0, "data_dir": None}


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers eval`."""
    p = sub.add_parser(
        "eval",
        help="loss, bits and perplexity of a run over a whole split (a probe run: its accuracy)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--split", default="valid", help="train, valid, test, or a corpus's own")
    p.add_argument(
        "--seq-len",
        "--tgt-len",
        type=int,
        action=GivenFlag,
        help="tokens scored per window, or per segment of a model with memory (default: "
        "training's)",
    )
    p.add_argument(
        "--context-len",
        type=int,
        default=LM_EVAL_DEFAULTS["context_len"],
        action=GivenFlag,
        help="extra left context per window",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=LM_EVAL_DEFAULTS["batch_size"],
        action=GivenFlag,
        help="windows or streams per pass",
    )
    p.add_argument("--max-tokens", type=int, help="score only the first N tokens")
    p.add_argument(
        "--eval-samples",
        type=int,
        action=GivenFlag,
        help="a probe run: held-out sequences per point (default: the run's "
        "train.probe.eval_samples)",
    )
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    add_runtime_flags(p)
    add_translation_eval_flags(p)
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar (none unless on a terminal)"
    )
    p.set_defaults(func=cmd_eval)


def refuse_flags(args: argparse.Namespace, defaults: dict, run_kind: str) -> None:
    """A flag of the other kind of run is an error, not silently ignored."""
    given = given_flags(args, defaults)
    if given:
        verb, them = verb_and_pronoun(given)
        raise FormersError(
            f"{args.run} holds {run_kind}, which {', '.join(given)} {verb} not apply to: "
            f"leave {them} out"
        )


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run import corpus_of, load_run, read_run_config
    from formers.runtime_flags import runtime_changes, runtime_report
    from formers.train.console import progress_shown
    from formers.train.tasks import task_for

    if is_translation_run(args.run):
        refuse_flags(args, LM_EVAL_DEFAULTS, "a translation model")
        runtime_changes(args, read_run_config(args.run, args.checkpoint).model)
        return cmd_eval_translation(args)
    refuse_flags(args, TRANSLATION_EVAL_DEFAULTS, "a language model")
    device = resolve_device(args.device)  # before anything is loaded
    if read_run_config(args.run, args.checkpoint).train.probe is not None:
        return eval_probe(args, device)
    if args.eval_samples is not None:
        raise FormersError(
            f"{args.run} trained on a corpus, which --eval-samples does not apply to (it sets a "
            "probe's held-out sequences): leave it out"
        )
    model = read_run_config(args.run, args.checkpoint).model
    if model.arch == "encoder" and args.context_len:
        raise FormersError(
            f"{args.run} holds a masked LM, which sees its whole window both ways: leave "
            "--context-len out (or change --seq-len)"
        )
    changes = runtime_changes(args, model)
    run = load_run(args.run, device, runtime=changes, checkpoint=args.checkpoint)
    corpus = corpus_of(run, args.data_dir)
    if args.split not in corpus.splits:
        raise FormersError(
            f"{corpus.name} has no split {args.split!r}: use --split {' or '.join(corpus.splits)}"
        )
    seq_len = args.seq_len or run.config.train.seq_len
    result = task_for(run.config, data=corpus).evaluate(
        run.model,
        args.split,
        max_tokens=args.max_tokens,
        device=device,
        seq_len=seq_len,
        batch_size=args.batch_size,
        context_len=args.context_len,
        progress=progress_shown(args.no_progress),
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
    print(json.dumps(json_safe(report), indent=2, allow_nan=False))  # strict JSON: NaN is null
    return 0


def eval_probe(args: argparse.Namespace, device: torch.device) -> int:
    """A probe run's accuracy on the held-out sequences of --split, by point, as JSON: the
    same sequences its training's final evaluation scored (more with --eval-samples)."""
    from formers.run import load_model, read_run_config, with_eval_samples
    from formers.runtime_flags import runtime_changes, runtime_report
    from formers.train.tasks import task_for

    refuse_flags(args, CORPUS_ONLY_DEFAULTS, "a model trained on a probe's own sequences")
    changes = runtime_changes(args, read_run_config(args.run, args.checkpoint).model)
    cfg, model, step = load_model(args.run, device, changes, args.checkpoint)
    cfg = with_eval_samples(cfg, args.eval_samples)
    batch_size = (
        args.batch_size
        if given_flags(args, {"batch_size": LM_EVAL_DEFAULTS["batch_size"]})
        else None
    )
    result = task_for(cfg).evaluate(
        model, args.split, max_tokens=args.max_tokens, device=device, batch_size=batch_size
    )
    report = {
        "run": str(args.run),
        "step": step,
        "probe": cfg.train.probe.kind,
        "split": args.split,
        "eval_samples": cfg.train.probe.eval_samples,
        **runtime_report(cfg.model),
        **result.as_dict(),
    }
    print(json.dumps(json_safe(report), indent=2, allow_nan=False))
    return 0
