"""`formers compare PRESET [PRESET ...]` or `formers compare --spec FILE`: the command-line face
of `formers.compare.harness`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from formers.errors import FormersError

DESCRIPTION = """\
Train each preset once per seed on the same corpus with the same overrides (size, and a
budget, which is required: --train.max_steps and/or --train.time_budget), then write a report
into --out: report.md, report.html (self-contained), summary.json and loss plots (PNG). The
first preset is the baseline. Running the same command again skips finished runs and resumes
interrupted ones. Shared overrides are dotted flags as for `formers train`: --model.d_model
128 --train.lr 3e-4.

--spec FILE reads the comparison from a YAML file instead: arms (a preset, or a name, a
preset and overrides of its own), shared overrides, corpus, seeds, a budget, contexts
(train.seq_len values, each reported on its own) and extra evaluations of the trained runs.
See docs/benchmarks.md ("Comparison specs") and experiments/family-lm.yaml.

--task mqar|passkey|listops trains on a generated long-range probe instead of a corpus (its
options as --train.probe.X flags, or under task: in a spec file) and adds each arm's accuracy
by distance, depth or length to the report. See docs/family.md ("What each attention can see").
"""
DEFAULT_CORPUS = "stdlib"


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers compare`."""
    p = sub.add_parser(
        "compare",
        help="train presets on equal terms and report them side by side",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("presets", nargs="*", metavar="PRESET", help="the first is the baseline")
    p.add_argument("--spec", metavar="FILE", help="a YAML spec file (instead of PRESET ...)")
    p.add_argument("--corpus", help=f"corpus name or text file/folder (default {DEFAULT_CORPUS})")
    p.add_argument(
        "--task", metavar="PROBE", help="a probe instead of a corpus: mqar, passkey or listops"
    )
    p.add_argument("--seeds", nargs="+", type=int, help="one run per preset and seed (default 0)")
    p.add_argument(
        "--out",
        help="report folder (default runs/compare-<corpus>-<presets>; with --spec, "
        "runs/compare-<spec file name>)",
    )
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (none unless on a terminal)"
    )
    p.add_argument("--no-plots", action="store_true", help="no PNG plots (no matplotlib needed)")
    p.set_defaults(func=cmd_compare, takes_overrides=True)


def default_out(presets: list[str], corpus: str) -> Path:
    """A folder named after what is compared, so rerunning the same command finds it again."""
    return Path("runs") / f"compare-{Path(corpus).name}-{'-'.join(presets)}"


def spec_from_args(args: argparse.Namespace, extra: list[str]) -> tuple[object, Path]:
    """The comparison the command line asks for, and its folder."""
    from formers.compare.spec import BUDGET_KEYS, CompareSpec
    from formers.compare.spec_file import load_spec_file
    from formers.overrides import parse_overrides

    if args.spec is not None:
        given = [
            what
            for what, value in (
                ("PRESET", args.presets),
                ("--corpus", args.corpus),
                ("--task", args.task),
                ("--seeds", args.seeds),
                ("--model./--train. overrides", extra),
            )
            if value
        ]
        if given:
            raise FormersError(
                f"--spec {args.spec} holds the whole comparison: leave {', '.join(given)} out "
                "(or write them into the spec file)"
            )
        out = Path(args.out) if args.out else Path("runs") / f"compare-{Path(args.spec).stem}"
        return load_spec_file(args.spec), out
    if not args.presets:
        raise FormersError(
            "name the presets to compare (formers compare vanilla primer-ez), or give a spec "
            "file with --spec FILE"
        )
    try:
        overrides = parse_overrides(extra)
    except FormersError as error:  # argparse took the flag's value for a preset
        raise FormersError(
            f"{error} (name the presets first: formers compare vanilla primer-ez "
            "--model.d_model 128)"
        ) from None
    if args.task and args.corpus:
        raise FormersError(
            f"--task {args.task} makes its own data: leave --corpus {args.corpus} out"
        )
    if not set(overrides) & set(BUDGET_KEYS):
        # as a spec file must: a default of 1,000 steps per run would train for an hour unasked
        raise FormersError(
            "no budget: add --train.max_steps N or --train.time_budget 5m (or both: whichever "
            "comes first), the same for every preset"
        )
    corpus = args.corpus or DEFAULT_CORPUS
    task = {"kind": args.task} if args.task else {}
    spec = CompareSpec(tuple(args.presets), corpus, tuple(args.seeds or (0,)), overrides, task)
    return spec, Path(args.out) if args.out else default_out(args.presets, args.task or corpus)


def cmd_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.compare.harness import run_compare
    from formers.train.console import progress_shown

    spec, out = spec_from_args(args, extra)
    result = run_compare(
        spec,
        out,
        data_dir=args.data_dir,
        progress=progress_shown(args.no_progress),
        plots=not args.no_plots,
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
