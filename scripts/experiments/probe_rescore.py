"""Score every run of a finished probe comparison again, from its saved checkpoint, on the
held-out sequences its probe draws now: with more of them (--eval-samples), on the test split,
or after the held-out sets were redrawn. Writes the accuracy tables and plots as the comparison's
report does, into FOLDER/rescored-SPLIT/ (report.md, probe.json, accuracy_vs_*.png), and prints
the tables.

    python scripts/experiments/probe_rescore.py runs/probe-mqar --eval-samples 256
    python scripts/experiments/probe_rescore.py runs/probe-listops --split test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from formers.compare.probe_report import probe_plots, probe_summary, probe_tables
from formers.compare.report import markdown
from formers.compare.run_metrics import final_valid
from formers.run import load_model, with_eval_samples
from formers.train.tasks import task_for


def scorer(split: str, eval_samples: int | None) -> Callable[[Path], dict[str, Any] | None]:
    """A run folder -> its probe result on `split` from its final checkpoint, with the step
    scored; None for a run that has not finished (as the comparison's report shows it)."""

    def score(run_dir: Path) -> dict[str, Any] | None:
        if final_valid(run_dir) is None:
            print(f"{run_dir}: not finished, left out", file=sys.stderr)
            return None
        start = time.perf_counter()
        cfg, model, step = load_model(run_dir)
        result = task_for(with_eval_samples(cfg, eval_samples)).evaluate(model, split)
        print(
            f"{run_dir}: step {step}, accuracy {100 * result.accuracy:.1f}% over "
            f"{result.items:,} items ({time.perf_counter() - start:.0f} s)",
            file=sys.stderr,
        )
        return {**result.as_dict(), "step": step}

    return score


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a finished `formers compare` probe folder")
    parser.add_argument("--split", default="valid", choices=("valid", "test"))
    parser.add_argument(
        "--eval-samples", type=int, help="held-out sequences per point (default: the runs')"
    )
    args = parser.parse_args(argv)
    summary_file = args.folder / "summary.json"
    if not summary_file.is_file():
        sys.exit(f"{summary_file} is missing: give a folder `formers compare` has written")
    summary = json.loads(summary_file.read_text())
    probe = probe_summary(args.folder, summary, scorer(args.split, args.eval_samples))
    if probe is None:
        sys.exit(f"{args.folder} compared on a corpus, not a probe: nothing to rescore")
    dest = args.folder / f"rescored-{args.split}"
    dest.mkdir(exist_ok=True)
    (dest / "probe.json").write_text(json.dumps(probe, indent=1) + "\n")
    plots = probe_plots(probe, dest)
    samples = "" if args.eval_samples is None else f" --eval-samples {args.eval_samples}"
    command = f"python scripts/experiments/probe_rescore.py {args.folder} --split {args.split}"
    text = markdown(
        f"{probe['kind']}, {args.split} split, scored again from the saved checkpoints",
        command + samples,
        probe_tables(probe),
        [],
        [(title, path.name) for title, path in plots],
    )
    (dest / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
