"""`formers bench`: speed, memory and FLOP/s of presets at one matched size, on this machine.

Every preset runs the same workloads at the same size (by default the decoder-only byte LM of
the matched benchmark: 6 layers, d_model 512, 8 heads, d_ff 2048, vocab 256, no dropout,
sequences of 512, batch 4). The presets are timed in interleaved rounds and summarised by
medians (formers.bench.timing), so a noisy machine slows them all alike and ratios within one
run hold. The optional length sweep is formers.bench.sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from formers.bench import flops, hardware
from formers.bench.compiled import run_compiled
from formers.bench.memory import METHOD, free_memory, peak_bytes
from formers.bench.settings import BenchSettings
from formers.bench.sweep import (
    full_attention_kind,
    in_order,
    one_per_kind,
    run_sweep,
    shapes_without_full,
)
from formers.bench.timing import interleaved
from formers.bench.workloads import GenerateStep, InferStep, TrainStep, rate
from formers.config import ModelConfig, did_you_mean
from formers.errors import ConfigError, FormersError
from formers.models import build
from formers.presets import PRESETS, config
from formers.train.precision import resolve_precision

Log = Callable[[str], None]


def benchable_presets() -> list[str]:
    """Every preset with a single stack (decoder or encoder), in PRESETS order."""
    return [name for name, factory in PRESETS.items() if factory().arch != "encoder_decoder"]


def default_presets() -> list[str]:
    """The causal LMs (the matched benchmark's model shape); encoders run when named."""
    return [name for name, factory in PRESETS.items() if factory().arch == "decoder"]


def bench_configs(settings: BenchSettings) -> dict[str, ModelConfig]:
    """The config of every preset to run, checked against the settings (errors name the fix)."""
    _check_settings(settings)
    return {name: _preset_config(name, settings) for name in settings.presets or default_presets()}


def sweep_configs(settings: BenchSettings) -> dict[str, ModelConfig]:
    """The presets of the length sweep (formers.bench.sweep): per attention kind the first of
    the named presets (all presets formers bench can run if none are named) using it, and a
    full-attention preset for each model shape among them; empty without a sweep."""
    if not settings.sweep:
        return {}
    if settings.presets:
        chosen = one_per_kind({name: _preset_config(name, settings) for name in settings.presets})
    else:  # by the presets' own kinds: presets not chosen need not take the overrides
        chosen = one_per_kind({name: PRESETS[name]() for name in benchable_presets()})
    full = full_attention_kind()
    for arch in shapes_without_full(chosen):
        for name in benchable_presets():
            cfg = PRESETS[name]()
            if cfg.arch == arch and cfg.attention.kind == full:
                chosen[name] = cfg
                break
    return in_order({name: _preset_config(name, settings) for name in chosen})


def _preset_config(name: str, settings: BenchSettings) -> ModelConfig:
    """Preset `name` with the settings' overrides, checked (errors name the fix)."""
    if name not in PRESETS:
        raise FormersError(
            f"unknown preset {name!r}{did_you_mean(name, list(PRESETS))}; "
            f"formers bench runs: {', '.join(benchable_presets())}"
        )
    if PRESETS[name]().arch == "encoder_decoder":
        raise FormersError(
            f"preset {name!r} is an encoder–decoder (translation) model, and formers bench "
            "measures language models over one token stream: leave it out of --presets"
        )
    try:
        cfg = config(name, **settings.overrides)
    except ConfigError as error:
        raise FormersError(f"preset {name!r}: {error}") from None
    # the sweep sizes its models for each length (sweep.at_length); the main run does not
    if cfg.position == "learned" and settings.seq_len > cfg.max_len:
        raise FormersError(
            f"preset {name!r}: sequences of {settings.seq_len} tokens pass the {cfg.max_len} "
            f"positions of its learned position table: pass --model.max_len {settings.seq_len} "
            "or a shorter --seq-len"
        )
    return cfg


def _check_settings(s: BenchSettings) -> None:
    for name in ("seq_len", "batch_size", "repeats"):
        if getattr(s, name) < 1:
            raise FormersError(f"--{name.replace('_', '-')} must be at least 1")
    if s.warmup < 0:
        raise FormersError("--warmup must be 0 or more")
    if not 0 <= s.new_tokens < s.seq_len:
        raise FormersError(
            f"--gen-tokens {s.gen_tokens} must be in [0, --seq-len {s.seq_len}): the prompt is "
            "the first seq_len − gen_tokens tokens (0 skips the generation benchmark)"
        )
    if any(length < 1 for length in s.sweep):
        raise FormersError(f"--sweep lengths must be positive, got {list(s.sweep)}")
    if not s.sweep_time_limit > 0:
        raise FormersError(
            f"--sweep-time-limit (sweep_time_limit) {s.sweep_time_limit} must be more than 0 "
            "seconds"
        )
    if s.matmul_size is not None and s.matmul_size < 1:
        raise FormersError(f"--matmul-size {s.matmul_size} must be at least 1")
    if s.precision not in ("auto", "fp32", "bf16"):
        raise FormersError(f"--precision {s.precision!r} is not one of auto, fp32, bf16")
    if not s.compile_time_limit > 0:
        raise FormersError(
            f"--compile-time-limit {s.compile_time_limit} must be more than 0 seconds"
        )
    backends = torch._dynamo.list_backends(exclude_tags=())
    if s.compile and s.compile_backend not in backends:
        raise FormersError(
            f"--compile-backend {s.compile_backend!r} is not a torch.compile backend: use "
            "inductor (torch's default), aot_eager or eager (tracing only, fast on a CPU)"
        )


def run_bench(
    settings: BenchSettings,
    log: Log = lambda line: None,
    save_partial: Callable[[dict[str, Any]], None] = lambda report: None,
) -> dict[str, Any]:
    """Measure every preset; return the whole report as a JSON-able dict. `save_partial` gets
    the report so far after the main table, after each compiled preset and after each sweep
    length (a run stopped later keeps what it had measured)."""
    configs = bench_configs(settings)
    device = hardware.resolve_device(settings.device)
    precision = resolve_precision(settings.precision, device)
    log(f"measuring the matmul rate on {device} ...")
    rates = hardware.matmul_rates(device, precision, settings.matmul_size)
    torch.manual_seed(settings.seed)
    models = {name: build(cfg).to(device) for name, cfg in configs.items()}
    work = _workloads(settings, configs, models, precision, device)
    seconds = _time_workloads(work, settings, device, log)
    log("measuring peak memory ...")
    results = {
        name: _preset_result(name, cfg, work, seconds, settings, rates[precision])
        for name, cfg in configs.items()
    }
    report = _report(settings, configs, device, precision, rates, results)
    save_partial(report)
    del models, work  # the compiled runs and the sweep build models of their own
    free_memory(device)
    if settings.compile:

        def compiled_so_far(part: dict[str, Any]) -> None:
            report["compile"] = part
            save_partial(report)

        report["compile"] = run_compiled(
            settings, configs, device, precision, log, on_record=compiled_so_far
        )
    if settings.sweep:

        def sweep_so_far(sweep: dict[str, Any]) -> None:
            report["sweep"] = sweep
            save_partial(report)

        report["sweep"] = run_sweep(
            settings, sweep_configs(settings), device, precision, log, rates[precision],
            on_length=sweep_so_far,
        )  # fmt: skip
    return report


@dataclasses.dataclass
class _Workloads:
    """Each preset's timed workloads (generation only for decoders, when asked for)."""

    train: dict[str, TrainStep]
    infer: dict[str, InferStep]
    generate: dict[str, GenerateStep]
    device: torch.device


def _workloads(
    settings: BenchSettings,
    configs: dict[str, ModelConfig],
    models: dict[str, torch.nn.Module],
    precision: str,
    device: torch.device,
) -> _Workloads:
    batch, seq_len = settings.batch_size, settings.seq_len
    gen_len = seq_len - settings.new_tokens
    return _Workloads(
        train={k: TrainStep(m, batch, seq_len, precision, device) for k, m in models.items()},
        infer={k: InferStep(m, batch, seq_len, precision, device) for k, m in models.items()},
        generate={
            k: GenerateStep(m, batch, gen_len, settings.new_tokens, precision, device)
            for k, m in models.items()
            if settings.new_tokens and configs[k].arch == "decoder"
        },
        device=device,
    )


def _time_workloads(
    work: _Workloads, settings: BenchSettings, device: torch.device, log: Log
) -> dict[str, dict[str, list[float]]]:
    """Seconds per call by workload ("train", "inference") and preset; generation keeps its
    decoding seconds in its steps."""
    timing = {"repeats": settings.repeats, "warmup": settings.warmup, "device": device}
    log(f"timing {len(work.train)} presets: training steps ...")
    train_s = interleaved(work.train, **timing)
    log("timing inference ...")
    infer_s = interleaved(work.infer, **timing)
    if work.generate:
        log("timing cached generation ...")
        interleaved(work.generate, **timing)
    return {"train": train_s, "inference": infer_s}


def _preset_result(
    name: str,
    cfg: ModelConfig,
    work: _Workloads,
    seconds: dict[str, dict[str, list[float]]],
    settings: BenchSettings,
    matmul_rate: float,
) -> dict[str, Any]:
    """One preset's row: rates, peak memory (a training step of its own), FLOPs and config."""
    step = work.train[name]
    train_rate = rate(seconds["train"][name], step.tokens)
    infer_rate = rate(seconds["inference"][name], step.tokens)
    generation = None
    if name in work.generate:
        gen = work.generate[name]
        generation = rate(gen.decode_seconds[-settings.repeats :], gen.tokens)
        generation.update(prompt_len=gen.prompt.shape[1], new_tokens=settings.new_tokens)
    return {
        "preset": name,
        "arch": cfg.arch,
        "attention": cfg.attention.kind,
        "params": sum(p.numel() for p in step.model.parameters()),
        "train": train_rate,
        "inference": infer_rate,
        "generation": generation,
        "peak_train_memory_bytes": peak_bytes(step, step.live_tensors(), work.device),
        "flops": flops.flops_summary(
            cfg,
            settings.seq_len,
            train_rate["tokens_per_second"],
            infer_rate["tokens_per_second"],
            matmul_rate,
        ),
        "config": cfg.to_dict(),
    }


def _report(
    settings: BenchSettings,
    configs: dict[str, ModelConfig],
    device: torch.device,
    precision: str,
    rates: dict[str, float],
    results: dict[str, Any],
) -> dict[str, Any]:
    """The report around the results: machine, settings, matmul rates and methods."""
    return {
        "machine": hardware.machine_info(device),
        "settings": {
            **dataclasses.asdict(settings),
            "presets": list(configs),
            "gen_tokens": settings.new_tokens,
            "requested_precision": settings.precision,
            "precision": precision,
            "device": str(device),
        },
        "matmul": {
            "size": settings.matmul_size or hardware.default_matmul_size(device),
            "flops_per_second": rates,
            "reference": precision,
        },
        "memory_method": METHOD,
        "flops_method": (flops.__doc__ or "").strip(),
        "results": results,
    }
