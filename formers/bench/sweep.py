"""Sequence-length sweep: training and inference speed and peak memory, per attention kind.

One preset per attention kind of the registry (the first one using it), and for each model
shape among them (causal LM, masked-LM encoder) the first preset with full attention, the
reference each kind is compared against: "faster than full from n = ..." is the shortest
length from which a kind stays ahead of full attention of its shape to the end of the sweep.
At each length every preset gets a model of its own (seeded alike), sized for the length where
the config sizes something by `max_len` (a learned position table, projections along the
sequence).
The batch shrinks as the length grows so that every batch holds the same number of tokens,
batch_size × seq_len of the main run (at least one sequence): the per-token work of the linear
layers stays the same, and what changes with length is the attention's.

A preset that runs out of memory at a length, or whose point would take longer than the time
limit (projected from its first training step and inference call), is marked so there and not
run at longer lengths; the others go on.

Each length is measured in a fresh process of its own (`formers.bench.fresh_process`), so that
no point's numbers depend on the lengths measured before it: in one process that had run every
shorter length, the longest points trained markedly slower than the same points run alone.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from formers.bench import flops
from formers.bench.fresh_process import ProcessKilled, call_in_fresh_process
from formers.bench.memory import free_memory, peak_bytes
from formers.bench.settings import BenchSettings
from formers.bench.timing import interleaved, time_call
from formers.bench.workloads import InferStep, TrainStep, rate
from formers.config import ModelConfig
from formers.layers.attention import MultiHeadAttention
from formers.models import build
from formers.registry import ATTENTION

BATCH_RULE = (
    "batch = max(1, tokens_per_batch // seq_len): the same tokens per batch at every length"
)
OK, OUT_OF_MEMORY, OVER_TIME, NOT_RUN = "ok", "out of memory", "over time limit", "not run"
Log = Callable[[str], None]


def full_attention_kind() -> str:
    """The registry's kind for the textbook module itself (every variant subclasses it)."""
    return next(kind for kind, module in ATTENTION.items() if module is MultiHeadAttention)


def one_per_kind(configs: Mapping[str, ModelConfig]) -> dict[str, ModelConfig]:
    """Per attention kind, in registry order, the first preset of `configs` using it."""
    chosen: dict[str, ModelConfig] = {}
    for kind in ATTENTION:
        name = next((n for n, cfg in configs.items() if cfg.attention.kind == kind), None)
        if name is not None:
            chosen[name] = configs[name]
    return chosen


def shapes_without_full(configs: Mapping[str, ModelConfig]) -> list[str]:
    """The archs among `configs` with no full-attention preset to compare against."""
    have = full_presets(configs)
    return [arch for arch in dict.fromkeys(c.arch for c in configs.values()) if arch not in have]


def in_order(configs: Mapping[str, ModelConfig]) -> dict[str, ModelConfig]:
    """`configs` grouped by arch (as they first appear), registry kind order within one."""
    archs, kinds = list(dict.fromkeys(c.arch for c in configs.values())), list(ATTENTION)
    names = sorted(
        configs,
        key=lambda n: (archs.index(configs[n].arch), kinds.index(configs[n].attention.kind)),
    )
    return {name: configs[name] for name in names}


def full_presets(configs: Mapping[str, ModelConfig]) -> dict[str, str]:
    """Arch -> the first preset of `configs` with full attention of that arch."""
    full = full_attention_kind()
    chosen: dict[str, str] = {}
    for name, cfg in configs.items():
        if cfg.attention.kind == full:
            chosen.setdefault(cfg.arch, name)
    return chosen


def sweep_batch(tokens_per_batch: int, seq_len: int) -> int:
    """Sequences per batch at `seq_len` (see BATCH_RULE)."""
    return max(1, tokens_per_batch // seq_len)


def at_length(cfg: ModelConfig, seq_len: int) -> ModelConfig:
    """`cfg` with room for `seq_len` positions (what is sized by max_len is sized for it)."""
    return dataclasses.replace(cfg, max_len=seq_len) if seq_len > cfg.max_len else cfg


def is_out_of_memory(error: BaseException) -> bool:
    """True for an allocation failure: torch's (CUDA), Python's, or the CPU allocator's (which
    raises a plain RuntimeError)."""
    if isinstance(error, torch.OutOfMemoryError | MemoryError):
        return True
    return isinstance(error, RuntimeError) and "can't allocate memory" in str(error)


def faster_from(
    mine: Mapping[int, float | None],
    full: Mapping[int, float | None],
    lower_is_better: bool = False,
) -> int | None:
    """The shortest length from which `mine` beats `full` at every longer length, or None.

    Both map length -> measured value, None where the preset has no number (out of memory,
    over the time limit, not run). Where full attention has none and `mine` has, `mine` is
    ahead; where `mine` has none and full has, behind; where neither has, that length says
    nothing.
    """
    since = None
    for n in sorted(set(mine) | set(full), reverse=True):
        a, b = mine.get(n), full.get(n)
        if a is None and b is None:
            continue
        ahead = a is not None and (b is None or (a < b if lower_is_better else a > b))
        if not ahead:
            break
        since = n
    return since


class _Guarded:
    """A workload that stops (and remembers why) at its first allocation failure, so that the
    interleaved rounds go on for the others."""

    def __init__(self, fn: Callable[[], object]):
        self.fn: Callable[[], object] | None = fn
        self.error: str | None = None

    def __call__(self) -> None:
        if self.fn is None:
            return
        try:
            self.fn()
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            self.fn, self.error = None, _first_line(error)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


@dataclasses.dataclass
class _Point:
    """One preset at one length while it is measured."""

    preset: str
    cfg: ModelConfig
    seq_len: int
    batch: int
    status: str = OK
    note: str = ""
    train: TrainStep | None = None
    infer: InferStep | None = None
    first_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    projected_seconds: float | None = None
    seconds: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    peak_bytes: int | None = None

    def fail(self, status: str, note: str) -> None:
        """Mark the point failed and drop its model."""
        self.status, self.note, self.train, self.infer = status, note, None, None


def _start(point: _Point, settings: BenchSettings, device: torch.device, precision: str) -> None:
    """Build the point's model and workloads and make their first (untimed) calls."""
    torch.manual_seed(settings.seed)
    try:
        model = build(point.cfg).to(device)
        point.train = TrainStep(model, point.batch, point.seq_len, precision, device)
        point.infer = InferStep(model, point.batch, point.seq_len, precision, device)
        point.first_seconds = {
            "train": time_call(point.train, device),
            "inference": time_call(point.infer, device),
        }
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        point.fail(OUT_OF_MEMORY, _first_line(error))
        free_memory(device)
        return
    calls = 1 + max(0, settings.warmup - 1) + settings.repeats  # the first included
    point.projected_seconds = (calls + 1) * point.first_seconds["train"]  # + 1: memory
    point.projected_seconds += calls * point.first_seconds["inference"]
    if point.projected_seconds > settings.sweep_time_limit:
        point.fail(
            OVER_TIME,
            f"first step {point.first_seconds['train']:.3g} s: about "
            f"{point.projected_seconds:.3g} s in all, over {settings.sweep_time_limit:g} s",
        )


def _time(points: Sequence[_Point], settings: BenchSettings, device: torch.device) -> None:
    """Interleaved timing of the running points' workloads, then each one's peak memory."""
    for workload in ("train", "inference"):
        running = [p for p in points if p.status == OK]
        if not running:
            return
        guarded = {p.preset: _Guarded(p.train if workload == "train" else p.infer) for p in running}
        seconds = interleaved(
            guarded, repeats=settings.repeats, warmup=max(0, settings.warmup - 1), device=device
        )
        for p in running:
            if guarded[p.preset].error is not None:
                p.fail(OUT_OF_MEMORY, guarded[p.preset].error or "")
            p.seconds[workload] = seconds[p.preset]
    for p in points:
        if p.status == OK and p.train is not None:
            guarded_step = _Guarded(p.train)
            p.peak_bytes = peak_bytes(guarded_step, p.train.live_tensors(), device)
            if guarded_step.error is not None:
                p.fail(OUT_OF_MEMORY, guarded_step.error)


def _record(point: _Point, matmul_rate: float) -> dict[str, Any]:
    """The JSON of one point: every number measured, and its status."""
    record: dict[str, Any] = {
        "preset": point.preset,
        "attention": point.cfg.attention.kind,
        "arch": point.cfg.arch,
        "seq_len": point.seq_len,
        "batch_size": point.batch,
        "status": point.status,
        "note": point.note,
        "first_seconds": point.first_seconds,
        "projected_seconds": point.projected_seconds,
        "train": None,
        "inference": None,
        "peak_train_memory_bytes": None,
    }
    if point.status != OK:
        record["seconds"] = point.seconds  # what was timed before it failed
        return record
    tokens = point.batch * point.seq_len
    train, infer = rate(point.seconds["train"], tokens), rate(point.seconds["inference"], tokens)
    summary = flops.flops_summary(
        point.cfg,
        point.seq_len,
        train["tokens_per_second"],
        infer["tokens_per_second"],
        matmul_rate,
    )
    record.update(
        train=train,
        inference=infer,
        peak_train_memory_bytes=point.peak_bytes,
        training_flops_per_token=summary["training_per_token"],
        training_fraction_of_matmul=summary["training_fraction_of_matmul"],
    )
    return record


@dataclasses.dataclass(frozen=True)
class LengthJob:
    """What one length of the sweep measures: the presets still running, how, and where."""

    configs: Mapping[str, ModelConfig]
    seq_len: int
    batch: int
    settings: BenchSettings
    device: torch.device
    precision: str
    matmul_rate: float


def measure_length(job: LengthJob, log: Log) -> list[_Point]:
    """Every preset of the job at its length: started one by one, then timed interleaved."""
    points = [
        _Point(name, at_length(cfg, job.seq_len), job.seq_len, job.batch)
        for name, cfg in job.configs.items()
    ]
    for point in points:
        _start(point, job.settings, job.device, job.precision)
        if point.status == OK:
            first = point.first_seconds
            train, infer = first["train"], first["inference"]
            log(f"  {point.preset}: first training step {train:.3g} s, forward {infer:.3g} s")
        else:
            log(f"  {point.preset}: {point.status} ({point.note})")
    _time(points, job.settings, job.device)
    for point in points:
        point.train = point.infer = None
    free_memory(job.device)  # before the next length's models
    return points


def records_at_length(job: LengthJob, log: Log) -> dict[str, dict[str, Any]]:
    """preset -> the JSON record of its point at the job's length (`measure_length`)."""
    return {point.preset: _record(point, job.matmul_rate) for point in measure_length(job, log)}


def _measure(job: LengthJob, log: Log) -> dict[str, dict[str, Any]]:
    """`records_at_length`, in a fresh process of its own where the settings ask for one. A
    process killed before it answers (the kernel's out-of-memory killer sends SIGKILL) marks
    every preset of that length out of memory, and the sweep ends with what it has."""
    if not job.settings.sweep_fresh_process:
        return records_at_length(job, log=log)
    try:
        return call_in_fresh_process(records_at_length, job, log=log)
    except ProcessKilled as killed:
        if killed.exit_code != -signal.SIGKILL:
            raise
        log(f"  {killed}")
        failed = [
            _Point(name, at_length(cfg, job.seq_len), job.seq_len, job.batch)
            for name, cfg in job.configs.items()
        ]
        for point in failed:
            point.fail(OUT_OF_MEMORY, str(killed))
        return {point.preset: _record(point, job.matmul_rate) for point in failed}


def _not_run(cfg: ModelConfig, preset: str, seq_len: int, batch: int, why: dict) -> dict:
    point = _Point(preset, at_length(cfg, seq_len), seq_len, batch, NOT_RUN)
    point.note = f"{why['status']} at {why['seq_len']}"
    return _record(point, 0.0)


def run_sweep(
    settings: BenchSettings,
    configs: Mapping[str, ModelConfig],
    device: torch.device,
    precision: str,
    log: Log,
    matmul_rate: float,
    on_length: Callable[[dict[str, Any]], None] = lambda sweep: None,
) -> dict[str, Any]:
    """Measure each preset of `configs` at every length of `settings.sweep`, shortest first,
    each length in a fresh process where `settings.sweep_fresh_process` (a script calling this
    then needs its top level under `if __name__ == "__main__":`, which the process imports).

    Args:
        settings: lengths, repeats, warm-up, time limit, and tokens per batch (batch_size ×
            seq_len of the main run).
        configs: preset -> config, e.g. `formers.bench.measure.sweep_configs(settings)`; a
            preset of each arch with full attention is the reference of the others.
        device: where the models run.
        precision: "fp32" or "bf16".
        log: receives a progress line per length and per preset.
        matmul_rate: the FLOP/s the achieved FLOP/s is a fraction of.
        on_length: receives the sweep so far (the same form as the result) after each length.
    """
    tokens = settings.batch_size * settings.seq_len
    if settings.sweep_fresh_process:
        free_memory(device)  # what this process no longer uses, for the processes that measure
    stopped: dict[str, dict] = {}  # preset -> the point where it failed
    runs, start = [], time.perf_counter()
    lengths = sorted(set(settings.sweep))  # shortest first: a failure ends the longer ones
    for i, length in enumerate(lengths, 1):
        batch = sweep_batch(tokens, length)
        live = {name: cfg for name, cfg in configs.items() if name not in stopped}
        log(
            f"sweep {i}/{len(lengths)}: seq_len {length}, batch {batch}, "
            f"{len(live)} presets ({time.perf_counter() - start:.0f} s so far) ..."
        )
        job = LengthJob(live, length, batch, settings, device, precision, matmul_rate)
        measured = _measure(job, log)
        for name, cfg in configs.items():
            if name in measured:
                record = measured[name]
                if record["status"] != OK:
                    stopped[name] = record
            else:
                record = _not_run(cfg, name, length, batch, stopped[name])
            runs.append(record)
        log("  " + ", ".join(_progress(r) for r in runs[-len(configs) :]))
        on_length(_sweep_result(settings, configs, runs))
    return _sweep_result(settings, configs, runs)


def _sweep_result(
    settings: BenchSettings, configs: Mapping[str, ModelConfig], runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """The sweep's JSON: how it was run, its points so far and the crossings among them."""
    return {
        "tokens_per_batch": settings.batch_size * settings.seq_len,
        "batch_rule": BATCH_RULE,
        "fresh_process_per_length": settings.sweep_fresh_process,
        "time_limit_seconds": settings.sweep_time_limit,
        "presets": {
            name: {"attention": cfg.attention.kind, "arch": cfg.arch}
            for name, cfg in configs.items()
        },
        "full_attention": full_presets(configs),
        "runs": list(runs),
        "crossings": crossings(runs, configs),
    }


def _progress(record: Mapping[str, Any]) -> str:
    if record["status"] != OK:
        return f"{record['preset']} {record['status']}"
    return f"{record['preset']} {record['train']['tokens_per_second']:,.0f} tok/s"


def crossings(runs: Sequence[Mapping[str, Any]], configs: Mapping[str, ModelConfig]) -> dict:
    """Per preset (full attention left out): its full-attention reference and the length from
    which it trains faster, infers faster and trains in less memory (None: not in this sweep)."""
    full = full_presets(configs)

    def values(preset: str, key: str) -> dict[int, float | None]:
        mine = [r for r in runs if r["preset"] == preset]
        if key == "peak_train_memory_bytes":
            return {r["seq_len"]: r[key] for r in mine}
        return {r["seq_len"]: r[key] and r[key]["tokens_per_second"] for r in mine}

    result = {}
    for name, cfg in configs.items():
        reference = full.get(cfg.arch)
        if reference is None or reference == name:
            continue
        result[name] = {"full": reference}
        for key, lower in (
            ("train", False),
            ("inference", False),
            ("peak_train_memory_bytes", True),
        ):
            result[name][key] = faster_from(values(name, key), values(reference, key), lower)
    return result
