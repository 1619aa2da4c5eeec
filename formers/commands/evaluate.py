"""`formers eval`: a trained run's loss over a whole split, as one JSON report on stdout."""

from __future__ import annotations

import argparse
import json

from formers.commands.flags import given_flags
from formers.commands.translate import (
    TRANSLATION_EVAL_DEFAULTS,
    cmd_eval_translation,
    is_translation_run,
)
from formers.devices import resolve_device
from formers.errors import FormersError
from formers.train.metrics import json_safe

# `formers eval`'s language-model flags and their defaults (given on a translation run: an error)
LM_EVAL_DEFAULTS = {"seq_len": None, "context_len": 0, "batch_size": 16}


def refuse_flags(args: argparse.Namespace, defaults: dict, run_kind: str) -> None:
    """A flag of the other kind of run is an error, not silently ignored."""
    given = given_flags(args, defaults)
    if given:
        verb, them = ("do", "them") if len(given) > 1 else ("does", "it")
        raise FormersError(
            f"{args.run} holds {run_kind}, which {', '.join(given)} {verb} not apply to: "
            f"leave {them} out"
        )


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run import corpus_of, load_run, read_run_config
    from formers.runtime_flags import runtime_changes, runtime_report
    from formers.train.tasks import task_for

    if is_translation_run(args.run):
        refuse_flags(args, LM_EVAL_DEFAULTS, "a translation model")
        runtime_changes(args, read_run_config(args.run, args.checkpoint).model)
        return cmd_eval_translation(args)
    refuse_flags(args, TRANSLATION_EVAL_DEFAULTS, "a language model")
    device = resolve_device(args.device)  # before anything is loaded
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
        progress=not args.no_progress,
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
