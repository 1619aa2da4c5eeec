"""Eager against compiled: each preset's training step with and without `torch.compile`.

Each preset is measured in a fresh process of its own (`formers.bench.fresh_process`) under a
time limit, so a compilation that never finishes is a row that says so, not the end of the run.
There its model is built (seeded as in the main run) and its forward compiled as
`--train.compile` does (the backward follows through AOTAutograd); `warmup` untimed compiled
steps come first (at least one: it compiles), then the eager and the compiled step (one model,
one optimizer) are timed in interleaved rounds, and each one's peak memory is measured.

compile seconds = the warm-up steps' time beyond that many median compiled steps: tracing and
code generation, and any recompilation the first steps trigger. Dynamo's counters give the
graphs compiled and the graph breaks; a step with breaks still runs, in pieces.
"""

from __future__ import annotations

import dataclasses
import signal
from collections.abc import Callable, Mapping
from typing import Any

import torch

from formers.bench.fresh_process import ProcessKilled, TimeLimitReached, call_in_fresh_process
from formers.bench.memory import free_memory, peak_bytes
from formers.bench.settings import BenchSettings
from formers.bench.timing import interleaved, median, time_call
from formers.bench.workloads import TrainStep, rate
from formers.config import ModelConfig
from formers.models import build

OK, FAILED, OUT_OF_MEMORY, OVER_TIME = "ok", "failed", "out of memory", "over time limit"
Log = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class CompileJob:
    """One preset's eager-against-compiled measurement: what and where."""

    preset: str
    cfg: ModelConfig
    settings: BenchSettings
    device: torch.device
    precision: str


def dynamo_counts() -> tuple[int | None, int | None, str]:
    """(graphs compiled, graph breaks, the first break's reason) since the counters were last
    cleared; None where this torch keeps no such counter."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None, None, ""
    breaks = counters.get("graph_break", {})
    reason = next(iter(breaks), "").strip().splitlines()
    graphs = counters.get("stats", {}).get("unique_graphs")
    return graphs, sum(breaks.values()), reason[0] if reason else ""


def measure_compiled(job: CompileJob, log: Log) -> dict[str, Any]:
    """The record of one preset: eager and compiled rates, peak memory, compile seconds, graphs.

    A compilation or step that fails is a record with status "failed" (or "out of memory") and
    the error's first line, so that the other presets go on."""
    s = job.settings
    torch._dynamo.reset()  # counters and caches of an earlier preset in this process
    torch.manual_seed(s.seed)
    try:
        model = build(job.cfg).to(job.device)
        eager = TrainStep(model, s.batch_size, s.seq_len, job.precision, job.device)
        compiled = TrainStep(
            model, s.batch_size, s.seq_len, job.precision, job.device,
            optimizer=eager.optimizer, compile_backend=s.compile_backend,
        )  # fmt: skip
        warm = [time_call(compiled, job.device) for _ in range(max(1, s.warmup))]
        graphs, breaks, first_break = dynamo_counts()
        log(f"  {job.preset}: compiled ({s.compile_backend}) in {sum(warm):.3g} s, "
            f"{graphs} graphs, {breaks} graph breaks")  # fmt: skip
        for _ in range(s.warmup):
            eager()
        seconds = interleaved({"eager": eager, "compiled": compiled}, repeats=s.repeats,
                              warmup=0, device=job.device)  # fmt: skip
        graphs, breaks, first_break = dynamo_counts()  # recompilations while timed included
        memory = {
            name: peak_bytes(step, step.live_tensors(), job.device)
            for name, step in (("eager", eager), ("compiled", compiled))
        }
    except Exception as error:  # noqa: BLE001 (a backend's failure is this preset's result)
        status = OUT_OF_MEMORY if isinstance(error, torch.OutOfMemoryError) else FAILED
        return failed_record(job.preset, status, f"{type(error).__name__}: {first_line(error)}")
    finally:
        free_memory(job.device)
    record: dict[str, Any] = {"preset": job.preset, "status": OK, "note": ""}
    for name in ("eager", "compiled"):
        record[name] = rate(seconds[name], eager.tokens)
        record[name]["peak_train_memory_bytes"] = memory[name]
    record.update(
        warmup_seconds=warm,
        compile_seconds=sum(warm) - len(warm) * median(seconds["compiled"]),
        speedup=record["compiled"]["tokens_per_second"] / record["eager"]["tokens_per_second"],
        graphs=graphs,
        graph_breaks=breaks,
        first_graph_break=first_break,
    )
    return record


def first_line(error: BaseException) -> str:
    """The error's first line, cut to 200 characters (a backend's messages run long)."""
    lines = str(error).strip().splitlines()
    return lines[0][:200] if lines else ""


def failed_record(preset: str, status: str, note: str) -> dict[str, Any]:
    """The record of a preset that has no numbers, and why."""
    return {"preset": preset, "status": status, "note": note, "eager": None, "compiled": None}


def run_compiled(
    settings: BenchSettings,
    configs: Mapping[str, ModelConfig],
    device: torch.device,
    precision: str,
    log: Log,
    on_record: Callable[[dict[str, Any]], None] = lambda part: None,
) -> dict[str, Any]:
    """Every preset of `configs`, eager against compiled, one after another (each in a fresh
    process where `settings.compile_fresh_process`); `on_record` gets the part so far after
    each one."""
    part: dict[str, Any] = {
        "backend": settings.compile_backend,
        "time_limit_seconds": settings.compile_time_limit,
        "fresh_process_per_preset": settings.compile_fresh_process,
        "method": (__doc__ or "").strip(),
        "results": {},
    }
    for i, (name, cfg) in enumerate(configs.items(), 1):
        log(f"compile {i}/{len(configs)}: {name} ({settings.compile_backend}) ...")
        job = CompileJob(name, cfg, settings, device, precision)
        part["results"][name] = _measure(job, log)
        on_record(part)
    return part


def _measure(job: CompileJob, log: Log) -> dict[str, Any]:
    limit = job.settings.compile_time_limit
    if not job.settings.compile_fresh_process:
        return measure_compiled(job, log)
    try:
        return call_in_fresh_process(measure_compiled, job, log=log, time_limit=limit)
    except TimeLimitReached:
        log(f"  {job.preset}: not finished in {limit:g} s, ended")
        return failed_record(job.preset, OVER_TIME, f"not finished in {limit:g} s")
    except ProcessKilled as killed:  # SIGKILL: the kernel's out-of-memory killer, among others
        status = OUT_OF_MEMORY if killed.exit_code == -signal.SIGKILL else FAILED
        return failed_record(job.preset, status, str(killed))
