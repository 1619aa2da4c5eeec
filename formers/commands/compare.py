"""`formers compare PRESET [PRESET ...]`: the command-line face of `formers.bench.compare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from formers.errors import FormersError

DESCRIPTION = """\
Train each preset once per seed on the same corpus with the same overrides (size, budget:
--train.max_steps, --train.time_budget), then write a report into --out: report.md,
report.html (self-contained), summary.json and loss plots (PNG). The first preset is the
baseline. Running the same command again skips finished runs and resumes interrupted ones.
Shared overrides are dotted flags as for `formers train`: --model.d_model 128 --train.lr 3e-4.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers compare`."""
    p = sub.add_parser(
        "compare",
        help="train presets on equal terms and report them side by side",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("presets", nargs="+", metavar="PRESET", help="the first is the baseline")
    p.add_argument("--corpus", default="stdlib", help="corpus name or text file/folder")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="one run per preset and seed")
    p.add_argument("--out", help="report folder (default runs/compare-<corpus>-<presets>)")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots (no matplotlib needed)")
    p.set_defaults(func=cmd_compare, takes_overrides=True)


def default_out(presets: list[str], corpus: str) -> Path:
    """A folder named after what is compared, so rerunning the same command finds it again."""
    return Path("runs") / f"compare-{Path(corpus).name}-{'-'.join(presets)}"


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.bench.compare import run_compare
    from formers.bench.compare_spec import CompareSpec
    from formers.overrides import parse_overrides

    try:
        overrides = parse_overrides(extra)
    except FormersError as error:  # argparse took the flag's value for a preset
        raise FormersError(
            f"{error} (name the presets first: formers compare vanilla primer-ez "
            "--model.d_model 128)"
        ) from None
    spec = CompareSpec(tuple(args.presets), args.corpus, tuple(args.seeds), overrides)
    out = Path(args.out) if args.out else default_out(args.presets, args.corpus)
    result = run_compare(
        spec, out, data_dir=args.data_dir, progress=not args.no_progress, plots=not args.no_plots
    )
    if result.interrupted:
        print(
            f"compare interrupted; finished runs and checkpoints are in {out}. "
            "Run the same command again to continue where it stopped.",
            file=sys.stderr,
        )
        return 130
    print(result.report.markdown)
    print(f"report: {out / 'report.md'}, {out / 'report.html'}", file=sys.stderr)
    return 0
