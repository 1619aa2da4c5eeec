"""`formers train`: train a preset (or continue a run) and print one JSON result on stdout.

Progress, evaluations and the reason training stopped go to stderr, so stdout holds only the
result (strict JSON: a NaN or infinite number is null); under torchrun only rank 0 prints it.
The exit status is 0 for a run that trained to its end or budget, 130 for an interrupted one
(its checkpoint saved) and 1 for one that diverged (`train.stop_on_nonfinite`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import time
from pathlib import Path
from typing import Any

import yaml

from formers.config import did_you_mean
from formers.errors import FormersError
from formers.overrides import flatten, parse_overrides
from formers.train.metrics import json_safe

SECTIONS = ("preset", "model", "train")  # of a --config file
# what a run's config.json holds besides its settings: what its "auto" settings chose on the
# machine that trained it, not a setting, so a run's config.json reads as a --config file
RECORDS = ("resolved",)


def read_yaml(path: str) -> dict[str, Any]:
    """A --config file's sections (preset:, model:, train:); a run's config.json is one."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as error:
        raise FormersError(f"cannot read config file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise FormersError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise FormersError(f"{path} must hold a mapping like 'model: {{d_model: 256}}'")
    data = {section: values for section, values in data.items() if section not in RECORDS}
    for section in data:
        if section not in SECTIONS:
            raise FormersError(
                f"unknown section {section!r} in {path}{did_you_mean(str(section), SECTIONS)}: "
                f"the sections are {', '.join(SECTIONS)}"
            )
    return data


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers train`."""
    p = sub.add_parser(
        "train",
        help="train a preset on a corpus",
        description="Train a model. Override any config field with dotted flags: "
        "--model.d_model 256 --train.lr 3e-4 --train.corpus tinyshakespeare.",
        epilog="Every model and training field, with its value for a preset: "
        "`formers config PRESET` (it takes the same overrides).",
    )
    p.add_argument("--preset", help="model preset (see `formers presets`); default vanilla")
    p.add_argument("--config", help="YAML file with preset:, model: and train: sections")
    p.add_argument("--run-dir", help="where checkpoints, metrics and config go")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir (it may change only its length and how it is "
        "watched: max_steps, time_budget, eval/log/save cadence)",
    )
    p.add_argument(
        "--init-from",
        metavar="RUN_OR_SOURCE",
        help="start from these weights (a run folder, or a Hugging Face folder or hub id as "
        "formers import reads it) with their model and tokenizer, and a fresh optimizer and "
        "schedule",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (there is none when stderr is not a terminal: one line per "
        "evaluation instead)",
    )
    p.set_defaults(func=cmd_train, takes_overrides=True)


def requested(args: argparse.Namespace, extra: list[str]) -> tuple[str | None, dict[str, Any]]:
    """The preset named on the command line or in --config (None if neither), and the dotted
    overrides of both (the command line wins)."""
    file_values = read_yaml(args.config) if args.config else {}
    preset = args.preset or file_values.pop("preset", None)
    file_values.pop("preset", None)
    overrides = {**flatten(file_values), **parse_overrides(extra)}
    if args.data_dir:
        overrides["train.data_dir"] = args.data_dir
    return preset, overrides


def new_run_config(
    args: argparse.Namespace, preset: str | None, overrides: dict[str, Any]
) -> tuple[Any, Any, Any]:
    """A new run's config, and with --init-from the data its tokenizer encodes and the weights
    it starts from (else None, None)."""
    from formers.pretrained.init_from import start_from
    from formers.train.config import run_config

    if not args.init_from:
        return run_config(preset or "vanilla", overrides), None, None
    if preset:
        raise FormersError(
            f"--preset {preset}: a run started from weights has their model; leave --preset out"
        )
    start = start_from(args.init_from, overrides)
    return start.config, start.data, start.weights


def own_tokenizer_corpus(cfg: Any, run_dir: Path) -> Any:
    """A resumed run's corpus, when it reads it with the tokenizer its weights came with (the
    run folder's); else None, and training builds its tokenizer as always."""
    from formers.data.tokenizers import PRETRAINED_TOKENIZER, tokenizer_from_dict
    from formers.pretrained.init_from import pretrained_corpus

    if cfg.train.tokenizer != PRETRAINED_TOKENIZER:
        return None
    saved = json.loads((run_dir / "tokenizer.json").read_text())
    return pretrained_corpus(cfg, tokenizer_from_dict(saved))


def resume_command(run_dir: Path) -> str:
    """The one way on for an interrupted run: this command, resumed; under torchrun, started
    by torchrun as this one was (its processes, and on several machines its rendezvous)."""
    command = f"formers train --run-dir {shlex.quote(str(run_dir))} --resume"
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return f"continue it with: {command}"
    per_machine = os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"])
    machines = int(os.environ["WORLD_SIZE"]) // int(per_machine)
    where = f" on each of the {machines} machines, with torchrun's other options as before"
    return (
        f"continue it with: torchrun --nproc_per_node={per_machine} -m {command}"
        f"{where if machines > 1 else ''}"
    )


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.train.checkpoint import latest_checkpoint
    from formers.train.console import progress_shown
    from formers.train.resume import resumed_config
    from formers.train.trainer import train

    preset, overrides = requested(args, extra)
    data = init = None
    if args.resume:
        if not args.run_dir:
            raise FormersError("--resume needs --run-dir: the folder of the run to continue")
        if args.init_from:
            raise FormersError(
                "--resume continues a run, which already started from its weights: leave "
                "--init-from out"
            )
        run_dir = Path(args.run_dir)
        cfg = resumed_config(run_dir, preset, overrides)
        data = own_tokenizer_corpus(cfg, run_dir)
    else:
        cfg, data, init = new_run_config(args, preset, overrides)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = Path(args.run_dir or f"runs/{cfg.preset}-{Path(cfg.train.corpus).name}-{stamp}")
        if latest_checkpoint(run_dir) is not None:
            raise FormersError(
                f"{run_dir} already holds a run: continue it with --resume, or pick another "
                "--run-dir"
            )
    progress = progress_shown(args.no_progress)
    result = train(cfg, run_dir, resume=args.resume, progress=progress, data=data, init=init,
                   how_to_continue=resume_command(run_dir))  # fmt: skip
    if int(os.environ.get("RANK", "0")) == 0:
        summary = {
            "run_dir": str(result.run_dir),
            "step": result.step,
            "tokens": result.tokens_seen,
            "train_seconds": round(result.train_seconds, 1),
            "stopped": result.stopped,
            "interrupted": result.interrupted,
        }
        if result.valid is not None:
            summary["valid"] = result.valid.as_dict()
        if result.divergence is not None:
            summary["divergence"] = dataclasses.asdict(result.divergence)
        if result.compile_seconds is not None:
            summary["compile_seconds"] = round(result.compile_seconds, 1)
        print(json.dumps(json_safe(summary), indent=2, allow_nan=False))
    if result.stopped == "nonfinite":
        return 1
    return 130 if result.interrupted else 0
