"""`formers bench`: the command line of formers.bench.measure."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from formers.bench.settings import MATCHED_SIZE
from formers.commands.bench_generation import (
    GENERATION_DEFAULTS,
    PRESET_DEFAULTS,
    add_generation_flags,
    cmd_generation_vs_hf,
    refuse_flags,
)
from formers.commands.bench_setup import set_threads, writable_folder
from formers.commands.flags import GivenFlag
from formers.errors import FormersError

DEFAULT_SWEEP = tuple(512 * 2**i for i in range(7))  # 512 … 32,768


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers bench`."""
    p = sub.add_parser(
        "bench",
        help="speed, memory and FLOP/s of presets at one matched size",
        description="Time every preset (or --presets) at one size on this machine: training, "
        "inference and cached-generation tokens/s, peak memory, parameters, FLOPs per token "
        "and achieved FLOP/s against this machine's measured matmul rate; optionally a "
        "sequence-length sweep. Prints a table and writes bench.json, bench.md and PNG plots. "
        "Any model field can be set for every preset with --model.KEY VALUE. With "
        "--generation-vs-hf, instead: formers' decoding against transformers' generate on the "
        "same imported weights.",
    )
    p.add_argument(
        "--presets",
        nargs="+",
        metavar="PRESET",
        action=GivenFlag,
        help="default: every causal LM preset",
    )
    _add_size_flags(p)
    p.add_argument(
        "--seq-len",
        type=int,
        default=PRESET_DEFAULTS["seq_len"],
        action=GivenFlag,
        help="tokens per sequence",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=PRESET_DEFAULTS["batch_size"],
        action=GivenFlag,
        help="sequences per batch",
    )
    p.add_argument(
        "--gen-tokens",
        type=int,
        help="tokens decoded per row after a prompt of seq_len - gen_tokens "
        "(default: min(64, seq_len / 2); 0: no generation); with --generation-vs-hf, see there",
    )
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="auto",
        help="auto: bf16 where the device runs it natively, else fp32; with --generation-vs-hf, "
        "both (default: auto)",
    )
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per workload")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    _add_sweep_flags(p)
    _add_compile_flags(p)
    p.add_argument("--matmul-size", type=int, action=GivenFlag, help="n of the n×n rate matmuls")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="report folder (default: runs/bench-TIMESTAMP)")
    p.add_argument("--no-plots", action="store_true", help="write no PNGs (no matplotlib)")
    add_generation_flags(p)
    p.set_defaults(func=cmd_bench, takes_overrides=True)


def _add_size_flags(p: argparse.ArgumentParser) -> None:
    size = p.add_argument_group("model size, for every preset (the matched benchmark config)")
    size.add_argument("--n-layers", type=int, default=6)
    size.add_argument("--d-model", type=int, default=512)
    size.add_argument("--n-heads", type=int, default=8)
    size.add_argument("--d-ff", type=int, default=2048)
    size.add_argument(
        "--vocab-size",
        type=int,
        help=f"default: {MATCHED_SIZE['vocab_size']} (bytes); with --generation-vs-hf, see there",
    )


def _add_sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sweep",
        type=int,
        nargs="*",
        metavar="LEN",
        action=GivenFlag,
        help="also sweep these sequence lengths: one preset per attention kind (of --presets, "
        "else of every preset) and full attention to compare with; where each kind gets "
        f"faster than full attention (bare --sweep: {' '.join(map(str, DEFAULT_SWEEP))})",
    )
    p.add_argument(
        "--sweep-time-limit",
        type=float,
        default=PRESET_DEFAULTS["sweep_time_limit"],
        metavar="SECONDS",
        action=GivenFlag,
        help="most seconds one sweep point (a preset at a length) may take, projected from its "
        "first calls; a preset over it, or out of memory, is not run at longer lengths "
        "(default: 600)",
    )


def _add_compile_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time each preset's training step compiled (torch.compile of the model, as "
        "--train.compile) against eager: tokens/s, compile seconds, graph breaks, step "
        "max/min and peak memory, each preset in a fresh process",
    )
    p.add_argument(
        "--compile-backend",
        default=PRESET_DEFAULTS["compile_backend"],
        action=GivenFlag,
        help="with --compile: torch.compile's backend (default: inductor; eager: tracing "
        "only, a quick check on a CPU)",
    )
    p.add_argument(
        "--compile-time-limit",
        type=float,
        default=PRESET_DEFAULTS["compile_time_limit"],
        metavar="SECONDS",
        action=GivenFlag,
        help="with --compile: most seconds one preset's compiled measurement may take, "
        "start-up and compilation included; a preset over it is marked so (default: 600)",
    )


def model_overrides(args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """The size flags, no dropout, then --model.KEY VALUE overrides on top."""
    from formers.overrides import parse_overrides

    overrides: dict[str, Any] = {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "vocab_size": MATCHED_SIZE["vocab_size"] if args.vocab_size is None else args.vocab_size,
        "dropout": 0.0,
    }
    for key, value in parse_overrides(extra).items():
        head, _, rest = key.partition(".")
        if head != "model" or not rest:
            raise FormersError(
                f"--{key}: formers bench takes model overrides such as --model.d_model 256; "
                "lengths, batch and precision have their own flags (formers bench --help)"
            )
        overrides[rest] = value
    return overrides


def cmd_bench(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the benchmark, print its table and write its report folder."""
    if args.generation_vs_hf:
        return cmd_generation_vs_hf(args, extra)
    refuse_flags(
        args, GENERATION_DEFAULTS, "without --generation-vs-hf", "add --generation-vs-hf or leave"
    )
    if not args.compile:
        compile_only = {k: PRESET_DEFAULTS[k] for k in ("compile_backend", "compile_time_limit")}
        refuse_flags(args, compile_only, "without --compile", "add --compile or leave")

    from formers.bench.hardware import resolve_device
    from formers.bench.measure import bench_configs, run_bench, sweep_configs
    from formers.bench.plots import pyplot
    from formers.bench.report import format_report, write_partial, write_report
    from formers.bench.settings import BenchSettings
    from formers.train.precision import resolve_precision

    if not args.no_plots:
        pyplot()  # fail now, not after the measurements, if matplotlib is missing
    set_threads(args.threads)
    sweep = args.sweep if args.sweep is None or args.sweep else list(DEFAULT_SWEEP)
    settings = BenchSettings(
        presets=tuple(args.presets or ()),
        overrides=model_overrides(args, extra),
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        gen_tokens=args.gen_tokens,
        precision=args.precision,
        device=args.device,
        repeats=args.repeats,
        warmup=args.warmup,
        sweep=tuple(sweep or ()),
        sweep_time_limit=args.sweep_time_limit,
        matmul_size=args.matmul_size,
        seed=args.seed,
        compile=args.compile,
        compile_backend=args.compile_backend,
        compile_time_limit=args.compile_time_limit,
    )
    out = Path(args.out or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    # settings, device and --out are checked before the folder is made and before measuring
    bench_configs(settings)
    sweep_configs(settings)
    resolve_precision(settings.precision, resolve_device(settings.device))
    writable_folder(out)
    report = run_bench(
        settings,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        save_partial=lambda so_far: write_partial(so_far, out),
    )
    print(format_report(report), end="")
    try:
        paths = write_report(report, out, plots=not args.no_plots)
    except OSError as error:
        raise FormersError(
            f"cannot write the report to {out} (the table is above): {error}"
        ) from None
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
    return 0
