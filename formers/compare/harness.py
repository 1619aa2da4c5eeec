"""Train several arms on equal terms (corpus, size, seeds, budget), then report side by side.

    spec = CompareSpec(("vanilla", "primer-ez"), corpus="tinyshakespeare", seeds=(0, 1),
                       overrides={"model.d_model": 128, "train.time_budget": "5m"})
    result = run_compare(spec, Path("runs/compare"))   # trains, then writes the report

An arm is a preset, or a preset with overrides of its own under its own name (`Arm`); a spec
may list contexts (`train.seq_len` values, each trained and reported on its own) and extra
evaluations of the trained runs (`evaluation.py`). The output folder holds `compare.json` (the
spec), `runs/<arm>/[ctx<L>/]seed<k>/` (ordinary `formers train` run folders), the evaluations'
results under `evaluations/` and the report (`report.py`). Calling it again with the
same spec skips finished runs and evaluations and resumes interrupted runs from their
checkpoints.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from formers.bench.memory import METHOD
from formers.bench.plots import pyplot
from formers.compare.evaluation import evaluate_run, peak_train_memory, save_result
from formers.compare.report import SHARED_CORES, CompareReport, write_report
from formers.compare.run_metrics import is_complete, others_cpu_share
from formers.compare.spec import (
    RUNS_DIR,
    SPEC_FILE,
    CompareSpec,
    eval_path,
    evaluations_path,
    load_spec,
    memory_path,
    run_path,
)
from formers.compare.spec_changes import spec_differences
from formers.errors import FormersError
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig
from formers.train.tasks import task_for
from formers.train.trainer import train

RunKey = tuple[str, int | None, int]  # (arm, context, seed)


@dataclass
class CompareResult:
    """What one call of `run_compare` did; `report` is None when it was interrupted."""

    out: Path
    trained: list[Path]
    skipped: list[Path]
    interrupted: bool
    report: CompareReport | None = None


def check_folder(spec: CompareSpec, out: Path) -> bool:
    """Whether `out` already holds this comparison, or the same with fewer seeds (the seeds
    the spec adds train beside the runs it holds); raises if it holds another one."""
    if (out / SPEC_FILE).exists():
        saved = load_spec(out)
        if set(saved.seeds) <= set(spec.seeds):
            saved = dataclasses.replace(saved, seeds=spec.seeds)
        diffs = spec_differences(saved, spec)
        if diffs:
            # its own spec file may have changed since: the folder's copy is what it ran
            again = f"formers compare --spec {out / SPEC_FILE}"
            if saved.expressible() and saved.source is None:
                again = saved.command()
            raise FormersError(
                f"{out} holds a comparison with other settings ({'; '.join(diffs)}): continue "
                f"it with its own settings ({again} --out {out} on the command line), "
                "or compare in another folder"
            )
        return True
    if (out / RUNS_DIR).exists():
        raise FormersError(f"{out} holds runs but no {SPEC_FILE}: compare in another folder")
    return False


def prepare_folder(spec: CompareSpec, out: Path) -> None:
    """Save the spec in a new folder, or check that an existing folder holds the same one
    (saved again when the spec adds seeds)."""
    if check_folder(spec, out) and load_spec(out).seeds == spec.seeds:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    except OSError as error:
        raise FormersError(f"cannot write the comparison folder {out}: {error}") from None


def load_data(spec: CompareSpec, configs: dict[RunKey, RunConfig], out: Path) -> Any:
    """The corpus, loaded once for every run that still has work; None when none has.

    A wrong corpus, a vocabulary it lacks or a split an evaluation names fails here, before
    any folder is made.
    """
    pending = [key for key in configs if _pending(spec, out, key)]
    if not pending:
        return None
    corpus = task_for(configs[pending[0]]).data  # the task reads its kind of data
    for key in pending:
        task_for(configs[key], corpus)
    splits = getattr(corpus, "splits", None)
    for evaluation in spec.evaluations if splits is not None else ():
        for split in evaluation.splits:
            if split not in splits:
                raise FormersError(
                    f"evaluation {evaluation.name!r}: {corpus.name} has no split {split!r}: "
                    f"use splits {' or '.join(splits)}"
                )
    return corpus


def _pending(spec: CompareSpec, out: Path, key: RunKey) -> bool:
    arm, context, seed = key
    if not is_complete(run_path(out, arm, seed, context)):
        return True
    if not memory_path(out, arm, context).exists():
        return True
    return any(
        not eval_path(out, arm, seed, context, e.name).exists()
        for e in spec.evaluations
        if e.applies_to(arm)
    )


def run_compare(
    spec: CompareSpec,
    out: str | Path,
    *,
    data_dir: str | None = None,
    progress: bool = True,
    plots: bool = True,
) -> CompareResult:
    """Train every (arm, context, seed) of `spec` into `out`, one after another, evaluate each
    run as `spec.evaluations` say, then write the report.

    Finished runs and evaluations are skipped and interrupted runs resumed, so an interrupted
    comparison continues where it stopped when called again. A Ctrl-C (or SIGTERM) during
    training saves that run's checkpoint and returns with `interrupted=True`, before any report
    is written.

    Args:
        spec: what to train.
        out: the comparison folder (created; an existing one must hold the same spec).
        data_dir: the folder of named corpora (not part of the spec).
        progress: show a progress bar per run.
        plots: draw the PNG plots (needs matplotlib).
    """
    out = Path(out)
    configs = {(a, c, s): spec.run_config(a, s, data_dir, context=c) for a, c, s in spec.runs()}
    if plots:
        pyplot()  # a missing matplotlib fails now, not after hours of training
    check_folder(spec, out)  # a folder of another comparison fails before any work
    corpus = load_data(spec, configs, out)
    prepare_folder(spec, out)
    result = CompareResult(out, [], [], interrupted=False)
    for index, (key, cfg) in enumerate(configs.items(), start=1):
        arm, context, seed = key
        label = f"[{index}/{len(configs)}] {arm}{'' if context is None else f' context {context}'}"
        label += f" seed {seed}"
        run = run_path(out, arm, seed, context)
        evaluations = evaluations_path(out, arm, seed, context)
        if not _train_one(cfg, run, evaluations, label, corpus, result, progress):
            return result
        try:
            _evaluate_one(spec, out, key, label, corpus, progress)
        except KeyboardInterrupt:  # nothing half-written: the evaluation runs again next time
            result.interrupted = True
            return result
    result.report = write_report(out, plots=plots)
    return result


def _train_one(
    cfg: RunConfig,
    path: Path,
    evaluations: Path,
    label: str,
    corpus: Any,
    result: CompareResult,
    progress: bool,
) -> bool:
    """Train (or resume, or skip) one run; False when it was interrupted. A run trained afresh
    first drops any `evaluations` saved for its folder: they scored a run moved away."""
    if is_complete(path):
        _say(f"{label}: finished earlier, skipped")
        result.skipped.append(path)
        return True
    resume = latest_checkpoint(path) is not None
    if not resume:
        shutil.rmtree(evaluations, ignore_errors=True)
    _say(f"{label}: {'resuming' if resume else 'training'} in {path}")
    # an interrupted compare says its own way on: the same command again
    trained = train(cfg, path, resume=resume, progress=progress, data=corpus, how_to_continue=None)
    result.trained.append(path)
    if trained.interrupted:
        result.interrupted = True
        return False
    if trained.divergence is not None:
        raise FormersError(f"{label} in {path}: {trained.divergence.describe()}")
    _say(
        f"{label}: step {trained.step}, {trained.train_seconds:.1f}s, "
        f"valid loss {trained.valid.loss:.4f}"
    )
    others = others_cpu_share(path)
    if others is not None and others["mean"] > SHARED_CORES:
        took = f"{label}: other processes took {others['mean']:.0%} of its cores while it trained"
        if cfg.train.time_budget_seconds is None:  # a fixed number of steps: the same losses
            _say(f"{took}, so its tokens/s describe a shared machine (its losses do not)")
        else:
            _say(
                f"{took}, so its speed and steps are understated: move {path} away and run the "
                "same command to train it again alone"
            )
    return True


def _evaluate_one(
    spec: CompareSpec, out: Path, key: RunKey, label: str, corpus: Any, progress: bool
) -> None:
    """The peak memory and the spec's evaluations of one finished run, those not done yet."""
    arm, context, seed = key
    memory = memory_path(out, arm, context)
    if not memory.exists():  # once per arm and context: the seed does not change it
        peak = peak_train_memory(run_path(out, arm, seed, context))
        save_result(memory, {"peak_train_memory_bytes": peak, "method": METHOD})
    for evaluation in (e for e in spec.evaluations if e.applies_to(arm)):
        path = eval_path(out, arm, seed, context, evaluation.name)
        if path.exists():
            continue
        scored = evaluate_run(
            run_path(out, arm, seed, context), evaluation, corpus, path.parent, progress
        )
        save_result(path, scored)
        losses = ", ".join(f"{s} loss {r['loss']:.4f}" for s, r in scored["splits"].items())
        _say(f"{label}: evaluation {evaluation.name}: {losses}")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
