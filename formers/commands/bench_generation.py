"""`formers bench --generation-vs-hf`: the command line of formers.bench.generation_vs_hf."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from formers.commands.flags import GivenFlag, given_flags, verb_and_pronoun
from formers.errors import FormersError

if TYPE_CHECKING:
    from formers.bench.generation_vs_hf import GenerationSettings

# the flags of --generation-vs-hf alone, and of the preset benchmark alone (dest: default)
GENERATION_DEFAULTS: dict[str, Any] = {
    "prompt_len": 512,
    "sentences": 8,
    "src_len": 20,
    "clock": "wall",
}
PRESET_DEFAULTS: dict[str, Any] = {
    "presets": None,
    "seq_len": 512,
    "batch_size": 4,
    "sweep": None,
    "sweep_time_limit": 600.0,
    "matmul_size": None,
    "no_plots": False,
    "compile": False,
    "compile_backend": "inductor",
    "compile_time_limit": 600.0,
}
GEN_TOKENS = 32  # decoder steps of both workloads unless --gen-tokens
MIN_VOCAB = 8  # GPT-2's prompt ids lie above 2 and below its end token, the last id


def add_generation_flags(p: argparse.ArgumentParser) -> None:
    """Register --generation-vs-hf and the flags that only it takes."""
    g = p.add_argument_group(
        "formers against transformers' generate on the same imported weights (--generation-vs-hf)"
    )
    g.add_argument(
        "--generation-vs-hf",
        action="store_true",
        help="instead of the presets, time greedy decoding (a GPT-2-shaped checkpoint) and "
        "beam-4 translation (a Marian-shaped one), initialised and saved by transformers and "
        "imported by formers, against transformers' generate in fp32 and bf16 on the CPU; the "
        "size flags set both checkpoints, --vocab-size both vocabularies (default: GPT-2's "
        "50,257 and Marian's 8,000), --gen-tokens the decoder steps (default: 32). Needs the hf "
        "extra",
    )
    g.add_argument(
        "--prompt-len",
        type=int,
        default=GENERATION_DEFAULTS["prompt_len"],
        action=GivenFlag,
        help="greedy: tokens of the prompt (default: 512)",
    )
    g.add_argument(
        "--sentences",
        type=int,
        default=GENERATION_DEFAULTS["sentences"],
        action=GivenFlag,
        help="beam 4: sources translated per call (default: 8)",
    )
    g.add_argument(
        "--src-len",
        type=int,
        default=GENERATION_DEFAULTS["src_len"],
        action=GivenFlag,
        help="beam 4: tokens per source, fewer than --gen-tokens (default: 20)",
    )
    g.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default=GENERATION_DEFAULTS["clock"],
        action=GivenFlag,
        help="wall: elapsed time; cpu: this process's CPU time, which other processes on a "
        "busy machine do not inflate (with --threads 1) (default: wall)",
    )


def refuse_flags(args: argparse.Namespace, defaults: dict[str, Any], where: str, fix: str) -> None:
    """Flags of the other benchmark are an error, not silently ignored: "FLAGS do not apply
    `where`: `fix` them out"."""
    given = given_flags(args, defaults)
    if given:
        verb, them = verb_and_pronoun(given)
        raise FormersError(f"{', '.join(given)} {verb} not apply {where}: {fix} {them} out")


def cmd_generation_vs_hf(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the benchmark, print its table and write bench.json and bench.md."""
    from formers.bench.generation_vs_hf import (
        format_generation_report,
        require_transformers,
        run_generation_vs_hf,
    )
    from formers.bench.report import JSON_NAME, TABLE_NAME
    from formers.commands.bench_setup import set_threads, writable_folder

    require_transformers()
    refuse_flags(args, PRESET_DEFAULTS, "to --generation-vs-hf", "leave")
    if extra:
        raise FormersError(
            f"{extra[0]}: --generation-vs-hf takes no model overrides; its checkpoints are "
            "sized by --n-layers, --d-model, --n-heads, --d-ff and --vocab-size"
        )
    settings = generation_settings(args)
    set_threads(args.threads)
    out = Path(args.out or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}")
    writable_folder(out)
    report = run_generation_vs_hf(settings, log=lambda line: print(line, file=sys.stderr))
    table = format_generation_report(report)
    print(table, end="")
    try:
        (out / JSON_NAME).write_text(json.dumps(report, indent=2) + "\n")
        (out / TABLE_NAME).write_text(table)
    except OSError as error:
        raise FormersError(
            f"cannot write the report to {out} (the table is above): {error}"
        ) from None
    print(f"\nwrote {out / JSON_NAME}, {out / TABLE_NAME}")
    return 0


def generation_settings(args: argparse.Namespace) -> GenerationSettings:
    """The GenerationSettings of the flags, each checked (one line naming the flag)."""
    from formers.bench.generation_vs_hf import GenerationSettings

    new_tokens = GEN_TOKENS if args.gen_tokens is None else args.gen_tokens
    at_least = {
        "--n-layers": (args.n_layers, 1),
        "--d-model": (args.d_model, 1),
        "--n-heads": (args.n_heads, 1),
        "--d-ff": (args.d_ff, 1),
        "--vocab-size": (MIN_VOCAB if args.vocab_size is None else args.vocab_size, MIN_VOCAB),
        "--prompt-len": (args.prompt_len, 1),
        "--gen-tokens": (new_tokens, 2),  # decoding tokens/s spans the first to the last
        "--sentences": (args.sentences, 1),
        "--src-len": (args.src_len, 1),
        "--repeats": (args.repeats, 1),
        "--warmup": (args.warmup, 0),
    }
    for flag, (value, least) in at_least.items():
        if value < least:
            raise FormersError(f"{flag} {value} must be at least {least}")
    if args.d_model % args.n_heads:
        raise FormersError(
            f"--d-model {args.d_model} must be a multiple of --n-heads {args.n_heads}"
        )
    if args.src_len >= new_tokens:
        raise FormersError(
            f"--src-len {args.src_len} must be below --gen-tokens {new_tokens}: formers' beam "
            "search ends a source at its length plus max_len_b >= 0 steps"
        )
    if args.device not in ("auto", "cpu"):
        raise FormersError(f"--generation-vs-hf runs on the CPU: leave out --device {args.device}")
    return GenerationSettings(
        n_layers=args.n_layers,
        d_model=args.d_model,
        n_heads=args.n_heads,
        d_ff=args.d_ff,
        vocab_size=args.vocab_size,
        prompt_len=args.prompt_len,
        new_tokens=new_tokens,
        sentences=args.sentences,
        src_len=args.src_len,
        precisions=("fp32", "bf16") if args.precision == "auto" else (args.precision,),
        repeats=args.repeats,
        warmup=args.warmup,
        clock=args.clock,
        seed=args.seed,
    )
