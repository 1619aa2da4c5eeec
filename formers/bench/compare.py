"""Train several presets on equal terms (corpus, size, seeds, budget), then report side by side.

    spec = CompareSpec(("vanilla", "primer-ez"), corpus="tinyshakespeare", seeds=(0, 1),
                       overrides={"model.d_model": 128, "train.time_budget": "5m"})
    result = run_compare(spec, Path("runs/compare"))   # trains, then writes the report

The output folder holds `compare.json` (the spec), `runs/<preset>/seed<k>/` (ordinary `formers
train` run folders) and the report (`compare_report.py`). Calling it again with the same spec
skips finished runs and resumes interrupted ones from their checkpoints.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from formers.bench.compare_report import CompareReport, write_report
from formers.bench.compare_spec import (
    RUNS_DIR,
    SPEC_FILE,
    CompareSpec,
    load_spec,
    run_path,
    spec_differences,
)
from formers.bench.plots import pyplot
from formers.bench.run_metrics import is_complete
from formers.errors import FormersError
from formers.train.checkpoint import latest_checkpoint
from formers.train.tasks import task_for
from formers.train.trainer import train


@dataclass
class CompareResult:
    """What one call of `run_compare` did; `report` is None when it was interrupted."""

    out: Path
    trained: list[Path]
    skipped: list[Path]
    interrupted: bool
    report: CompareReport | None = None


def check_folder(spec: CompareSpec, out: Path) -> bool:
    """Whether `out` already holds this comparison; raises if it holds another one."""
    if (out / SPEC_FILE).exists():
        saved = load_spec(out)
        diffs = spec_differences(saved, spec)
        if diffs:
            raise FormersError(
                f"{out} holds a comparison with other settings ({'; '.join(diffs)}): continue "
                f"it with its own settings ({saved.command()} --out {out} on the command line), "
                "or compare in another folder"
            )
        return True
    if (out / RUNS_DIR).exists():
        raise FormersError(f"{out} holds runs but no {SPEC_FILE}: compare in another folder")
    return False


def prepare_folder(spec: CompareSpec, out: Path) -> None:
    """Save the spec in a new folder, or check that an existing folder holds the same one."""
    if check_folder(spec, out):
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / SPEC_FILE).write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    except OSError as error:
        raise FormersError(f"cannot write the comparison folder {out}: {error}") from None


def run_compare(
    spec: CompareSpec,
    out: str | Path,
    *,
    data_dir: str | None = None,
    progress: bool = True,
    plots: bool = True,
) -> CompareResult:
    """Train every (preset, seed) of `spec` into `out`, one after another, then write the report.

    Finished runs are skipped and interrupted ones resumed, so an interrupted comparison
    continues where it stopped when called again. A Ctrl-C (or SIGTERM) during training saves
    that run's checkpoint and returns with `interrupted=True`, before any report is written.

    Args:
        spec: what to train.
        out: the comparison folder (created; an existing one must hold the same spec).
        data_dir: the folder of named corpora (not part of the spec).
        progress: show a progress bar per run.
        plots: draw the PNG plots (needs matplotlib).
    """
    from formers.data.corpora import load_corpus

    out = Path(out)
    configs = {(p, s): spec.run_config(p, s, data_dir) for p in spec.presets for s in spec.seeds}
    if plots:
        pyplot()  # a missing matplotlib fails now, not after hours of training
    check_folder(spec, out)  # a folder of another comparison fails before any work
    pending = [key for key in configs if not is_complete(run_path(out, *key))]
    corpus = None
    if pending:  # loaded once for every run; a wrong corpus fails before a folder is made
        tc = configs[pending[0]].train
        corpus = load_corpus(tc.corpus, tc.data_dir, tc.tokenizer, tc.tokenizer_vocab)
        for key in pending:  # what the data refuses (a vocabulary it lacks) fails here too
            task_for(configs[key], corpus)
    prepare_folder(spec, out)
    result = CompareResult(out, [], [], interrupted=False)
    for index, ((preset, seed), cfg) in enumerate(configs.items(), start=1):
        path = run_path(out, preset, seed)
        label = f"[{index}/{len(configs)}] {preset} seed {seed}"
        if is_complete(path):
            _say(f"{label}: finished earlier, skipped")
            result.skipped.append(path)
            continue
        resume = latest_checkpoint(path) is not None
        _say(f"{label}: {'resuming' if resume else 'training'} in {path}")
        trained = train(cfg, path, resume=resume, progress=progress, data=corpus)
        result.trained.append(path)
        if trained.interrupted:
            result.interrupted = True
            return result
        if trained.divergence is not None:
            raise FormersError(f"{label} in {path}: {trained.divergence.describe()}")
        _say(
            f"{label}: step {trained.step}, {trained.train_seconds:.1f}s, "
            f"valid loss {trained.valid.loss:.4f}"
        )
    result.report = write_report(out, plots=plots)
    return result


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
