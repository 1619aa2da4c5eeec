"""`--train.compile` measured through the trainer: each preset trained by `formers.train.train`,
eager and compiled, every run in a fresh process of its own.

A run trains `--warmup` + `--steps` steps of a preset as `formers train` does, at the preset's
size and the trainer's defaults unless overridden (`--model.KEY VALUE`, `--train.KEY VALUE`), with
a train record every step, no evaluation before the end and one checkpoint at the end. Its corpus
is written for the purpose from this Python's standard library (the `stdlib` corpus, its first
--corpus-bytes bytes, so that the final evaluation is short); the encoder–decoder trains on its
lines paired with the next line (the speed depends on lengths, not on what the text means).

Each step's wall time is read from the trainer's own record (`tokens_per_s` over a window of one
step, from the start of the loop): the step and its logging, not the final evaluation. tokens/s
is the median over the timed steps; max/min the slowest timed step over the fastest; compile
seconds (a compiled run) the warm-up steps' time beyond what their tokens take at that rate,
where torch.compile does its work (and again at any step that changes what it compiled for).
The same excess of the eager run, the first steps' set-up, stands beside it. graphs and breaks:
dynamo's counters in the run's process. Each run gets a fresh inductor cache (unless
--warm-cache), so compile seconds are those of a first compilation on the machine.

    python benchmarks/train_compile.py --device cuda --json runs/train-compile.json
    python benchmarks/train_compile.py --presets vanilla routing --device cpu \
        --compile-backend eager --steps 3 --model.n_layers 1 --model.d_model 32 --model.n_heads 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from formers.bench.compiled import dynamo_counts
from formers.bench.fresh_process import ProcessKilled, TimeLimitReached, call_in_fresh_process
from formers.bench.hardware import machine_info, resolve_device
from formers.bench.tables import aligned
from formers.data.local import read_stdlib
from formers.errors import FormersError
from formers.overrides import parse_overrides
from formers.presets import PRESETS

MODES = ("eager", "compiled")


@dataclasses.dataclass(frozen=True)
class RunJob:
    """One training run: a preset, eager or compiled, and how to run it."""

    preset: str
    mode: str
    overrides: dict[str, str]
    corpus: str
    device: str
    warmup: int
    steps: int
    backend: str
    cache_dir: str | None


def write_corpora(folder: Path, size: int, pairs: int) -> tuple[str, str]:
    """The LM corpus (a text file of `size` bytes) and the translation corpus ("SRC,TGT"
    aligned files of `pairs` lines)."""
    data = b"".join(part.data for part in read_stdlib()["train"])[:size]
    text = data.decode("utf-8", errors="ignore")
    lm = folder / "stdlib.txt"
    lm.write_text(text)
    lines = [line.strip() for line in text.splitlines() if line.strip()][: pairs + 1]
    source, target = folder / "lines.src", folder / "lines.tgt"
    source.write_text("\n".join(lines[:-1]) + "\n")
    target.write_text("\n".join(lines[1:]) + "\n")
    return str(lm), f"{source},{target}"


def _compile_with(backend: str) -> None:
    """Make `backend` the default of torch.compile in this process (the trainer names none)."""
    original = torch.compile

    def compile_with(model: Any = None, **kwargs: Any) -> Any:
        kwargs.setdefault("backend", backend)
        return original(model, **kwargs)

    torch.compile = compile_with  # type: ignore[assignment]


def train_and_read(job: RunJob, log: Any) -> dict[str, Any]:
    """Train one run in this process and read its steps from the trainer's records."""
    from formers.train.config import run_config
    from formers.train.metrics import read_metrics
    from formers.train.trainer import train

    if job.cache_dir is not None:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = job.cache_dir
    if job.backend != "inductor":
        _compile_with(job.backend)
    overrides = {
        **job.overrides,
        "train.corpus": job.corpus,
        "train.max_steps": str(job.warmup + job.steps),
        "train.log_every": "1",
        "train.eval_every": "0",
        "train.save_every": "0",
        "train.compile": "true" if job.mode == "compiled" else "false",
        "train.device": job.device,
    }
    cfg = run_config(job.preset, overrides)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        train(cfg, Path(folder) / "run", progress=False)
        wall = time.perf_counter() - start
        records = read_metrics(Path(folder) / "run", "train")
    log(f"  {job.preset} {job.mode}: {len(records)} steps, {wall:.3g} s with set-up and evaluation")
    graphs, breaks, first_break = dynamo_counts()
    return summarise(records, job.warmup) | {
        "wall_seconds": wall,
        "train": _train_fields(cfg),
        "graphs": graphs,
        "graph_breaks": breaks,
        "first_graph_break": first_break,
    }


def _train_fields(cfg: Any) -> dict[str, Any]:
    tc = cfg.train
    return {k: getattr(tc, k) for k in ("batch_size", "seq_len", "precision", "compile", "device")}


def summarise(records: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Per-step seconds and tokens from train records written every step, and the summary."""
    tokens, seconds, rates = [], [], []
    previous = 0
    for record in records:
        window = record["tokens"] - previous
        previous = record["tokens"]
        tokens.append(window)
        rates.append(record["tokens_per_s"])
        seconds.append(window / record["tokens_per_s"])
    timed, warm = seconds[warmup:], seconds[:warmup]
    if not timed:
        raise FormersError(f"the run logged {len(records)} steps, none after {warmup} warm-up")
    rate = statistics.median(rates[warmup:])
    compile_metrics = {k: v for r in records for k, v in r.items() if "compile" in k}
    return {
        "step_tokens": tokens,
        "step_seconds": seconds,
        "tokens_per_second": rate,
        "median_step_seconds": statistics.median(timed),
        "max_over_min": max(timed) / min(timed),
        "warmup_seconds": warm,
        # beyond what the warm-up steps' tokens take at the timed rate (translation batches
        # differ in size)
        "warmup_excess_seconds": sum(warm) - sum(tokens[:warmup]) / rate,
        "trainer_compile_metrics": compile_metrics,
    }


def run_one(job: RunJob, time_limit: float) -> dict[str, Any]:
    """`train_and_read` in a fresh process; a run that fails or runs out of time says so."""
    base = {"preset": job.preset, "mode": job.mode}

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        result = call_in_fresh_process(train_and_read, job, log=log, time_limit=time_limit)
    except TimeLimitReached:
        return {**base, "status": "over time limit", "note": f"not finished in {time_limit:g} s"}
    except ProcessKilled as killed:
        return {**base, "status": "failed", "note": str(killed)}
    except Exception as error:  # noqa: BLE001 (a preset that cannot train this way is a row)
        note = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
        return {**base, "status": "failed", "note": note}
    return {**base, "status": "ok", "note": "", **result}


def summary_rows(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """preset -> {"eager": run, "compiled": run} (either missing if not run)."""
    table: dict[str, dict[str, Any]] = {}
    for run in runs:
        table.setdefault(run["preset"], {})[run["mode"]] = run
    return table


def format_table(runs: list[dict[str, Any]]) -> str:
    """One row per preset: eager and compiled tokens/s, their ratio and compile seconds."""

    def tps(run: dict[str, Any] | None) -> str:
        if run is None:
            return "—"
        return f"{run['tokens_per_second']:,.0f}" if run["status"] == "ok" else run["status"]

    rows = []
    for preset, modes in summary_rows(runs).items():
        eager, compiled = modes.get("eager"), modes.get("compiled")
        both = eager and compiled and eager["status"] == compiled["status"] == "ok"
        ok = compiled is not None and compiled["status"] == "ok"
        notes = [r["note"] for r in (eager, compiled) if r is not None and r["note"]]
        rows.append(
            [
                preset,
                tps(eager),
                tps(compiled),
                f"{compiled['tokens_per_second'] / eager['tokens_per_second']:.2f}×"
                if both
                else "—",
                f"{compiled['warmup_excess_seconds']:.1f}" if ok else "—",
                f"{compiled['graphs']} / {compiled['graph_breaks']}" if ok else "—",
                f"{eager['warmup_excess_seconds']:.1f}"
                if eager is not None and eager["status"] == "ok"
                else "—",
                f"{eager['max_over_min']:.2f}" if both else "—",
                f"{compiled['max_over_min']:.2f}" if ok else "—",
                "; ".join(notes),
            ]
        )
    header = ["preset", "eager tok/s", "compiled tok/s", "compiled/eager", "compile s"]
    header += ["graphs / breaks", "eager warm-up s", "eager max/min", "compiled max/min", "note"]
    return aligned(header, rows, text_last=True)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, str]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--presets", nargs="+", default=list(PRESETS), help="default: every preset")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    p.add_argument("--compile-backend", default="inductor", help="torch.compile's backend")
    p.add_argument("--time-limit", type=float, default=600.0, help="most seconds per run")
    p.add_argument("--corpus-bytes", type=int, default=1_000_000, help="the LM corpus' size")
    p.add_argument(
        "--translation-pairs",
        type=int,
        default=2000,
        help="sentence pairs of the encoder–decoder's corpus (5%% are translated at the end)",
    )
    p.add_argument("--warm-cache", action="store_true", help="keep torch's inductor cache")
    p.add_argument("--json", type=Path, help="write the results here (after every run)")
    args, extra = p.parse_known_args(argv)
    unknown = [name for name in args.presets if name not in PRESETS]
    if unknown:
        p.error(f"unknown preset {unknown[0]!r}; the presets are {', '.join(PRESETS)}")
    if args.steps < 1 or args.warmup < 1:
        p.error("--steps and --warmup must be at least 1 (the first step compiles)")
    try:
        overrides = parse_overrides(extra)
    except FormersError as error:
        p.error(str(error))
    return args, overrides


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    try:
        device = resolve_device(args.device)
    except FormersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "machine": machine_info(device),
        "settings": {**vars(args), "json": str(args.json), "overrides": overrides},
        "method": (__doc__ or "").strip(),
        "runs": [],
    }
    work = Path(tempfile.mkdtemp(prefix="formers-train-compile-"))
    try:
        lm, pairs = write_corpora(work, args.corpus_bytes, args.translation_pairs)
        for preset in args.presets:
            translation = PRESETS[preset]().arch == "encoder_decoder"
            for mode in args.modes:
                print(f"{preset} {mode} ...", file=sys.stderr, flush=True)
                cache = None if args.warm_cache else str(work / f"cache-{preset}-{mode}")
                job = RunJob(preset, mode, overrides, pairs if translation else lm, str(device),
                             args.warmup, args.steps, args.compile_backend, cache)  # fmt: skip
                report["runs"].append(run_one(job, args.time_limit))
                if args.json is not None:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(format_table(report["runs"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
