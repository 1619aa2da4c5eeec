"""Extra evaluations of a comparison's trained runs: `formers eval` with other settings.

    Evaluation("runtime", arms=("arm-a",), overrides={"model.attention.FIELD": 512})  # runtime
    Evaluation("extrapolate", options={"seq_len": "2x"})     # twice the trained context
    Evaluation("bleu", splits=("valid", "test"), average=5, options={"beam": 4, "alpha": 0.6})

Each one scores a trained run from its final checkpoint (or from the mean of its last
`average` checkpoints, as `formers average` writes it) through the task's own `evaluate`, the
one `formers eval` and the trainer call, on the device and at the precision the run trained with.
Only what may change on a trained model changes: the options of `formers eval` and the
attention's runtime options (`runtime_fields`, e.g. Transformer-XL's memory length).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formers.config import did_you_mean
from formers.errors import ConfigError
from formers.train.config import RunConfig
from formers.train.metrics import json_safe

# `formers eval`'s options, by the kind of run they apply to; seq_len may be "Nx": N times the
# context the run trained at.
LM_OPTIONS = ("seq_len", "context_len", "batch_size", "max_tokens")
TRANSLATION_OPTIONS = ("beam", "alpha", "max_len_b", "batch_tokens", "max_tokens")
OPTIONS = {"decoder": LM_OPTIONS, "encoder": LM_OPTIONS, "encoder_decoder": TRANSLATION_OPTIONS}
KEYS = ("name", "arms", "splits", "overrides", "average")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
TIMES = re.compile(r"(\d+(?:\.\d+)?)x\Z")


@dataclass(frozen=True)
class Evaluation:
    """One extra evaluation of each trained arm, reported as its own columns.

    Args:
        name: the column's name (letters, digits, '.', '_', '-').
        arms: the arms it applies to (names); empty: every arm.
        splits: the splits it scores, e.g. ("valid", "test").
        overrides: runtime options of the trained model: fields its attention lists in
            `runtime_fields` (they change no weight), e.g. {"model.attention.FIELD": 512}.
        average: score the mean of the run's last `average` checkpoints (needs as many kept:
            `train.save_every`, `train.keep_checkpoints`); 0 or 1: the final checkpoint.
        options: `formers eval`'s options: seq_len (an int, or "2x": twice the trained context),
            context_len, batch_size, max_tokens; for translation beam, alpha, max_len_b,
            batch_tokens.
    """

    name: str
    arms: tuple[str, ...] = ()
    splits: tuple[str, ...] = ("valid",)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    average: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("arms", self.arms), ("splits", self.splits)):
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))
        object.__setattr__(self, "overrides", dict(self.overrides))
        object.__setattr__(self, "options", dict(self.options))
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"evaluation name {self.name!r}: use letters, digits, '.', '_' and '-' "
                "(it names a column and a file)"
            )
        if not self.splits:
            raise ConfigError(f"evaluation {self.name!r} has no splits: list one, e.g. valid")
        if not isinstance(self.average, int) or self.average < 0:
            raise ConfigError(
                f"evaluation {self.name!r}: average {self.average!r} is not a number of "
                "checkpoints: give 0 (the final one) or N >= 2"
            )
        known = sorted({*LM_OPTIONS, *TRANSLATION_OPTIONS})
        for key, value in self.options.items():
            if key not in known:
                raise ConfigError(
                    f"evaluation {self.name!r}: unknown key {key!r}{did_you_mean(key, known)}; "
                    f"valid keys: {', '.join([*KEYS, *known])}"
                )
            if key != "seq_len" and not _positive_number(value, zero=key == "context_len"):
                raise ConfigError(
                    f"evaluation {self.name!r}: {key} {value!r} is not a positive number"
                )
        self.seq_len(1)  # a malformed seq_len fails now

    def seq_len(self, context: int) -> int | None:
        """Tokens per window or segment for a run trained at `context` (None: training's)."""
        value = self.options.get("seq_len")
        if value is None:
            return None
        match = TIMES.match(value) if isinstance(value, str) else None
        if match:
            return max(1, round(float(match.group(1)) * context))
        if not _positive_number(value) or not isinstance(value, int):
            raise ConfigError(
                f"evaluation {self.name!r}: seq_len {value!r} is neither a positive integer "
                "nor a multiple of the trained context such as 2x"
            )
        return value

    def applies_to(self, arm: str) -> bool:
        return not self.arms or arm in self.arms

    def runtime(self) -> dict[str, Any]:
        """The overrides as `load_run`'s runtime changes ("attention.FIELD")."""
        return {key.removeprefix("model."): value for key, value in self.overrides.items()}

    def check(self, arm: str, cfg: RunConfig) -> None:
        """Raise if this evaluation cannot run on the arm `arm` trained with `cfg`."""
        from formers.models import runtime_config

        where = f"evaluation {self.name!r}, arm {arm!r}"
        allowed = OPTIONS.get(cfg.model.arch, ())
        for key in self.options:
            if key not in allowed:
                raise ConfigError(
                    f"{where}: {key} does not apply to a {cfg.model.arch} model (its options: "
                    f"{', '.join(allowed)}): leave it out, or list under arms the arms it fits"
                )
        try:
            runtime_config(cfg.model, self.runtime())
        except ConfigError as error:
            raise ConfigError(
                f"{where}: {error} (list under arms the arms this evaluation fits)"
            ) from None
        tc, model = cfg.train, cfg.model
        seq_len = self.seq_len(tc.seq_len)
        if seq_len and model.position == "learned" and seq_len > model.max_len:
            raise ConfigError(
                f"{where}: seq_len {seq_len} is past its learned position table (model.max_len "
                f"{model.max_len}): give a shorter seq_len, or list under arms the arms it fits"
            )
        if self.average > 1 and (tc.save_every <= 0 or tc.keep_checkpoints < self.average):
            raise ConfigError(
                f"{where}: average {self.average} needs that many checkpoints kept: set "
                f"train.keep_checkpoints: {self.average} and a train.save_every that saves "
                "them (now "
                f"{tc.keep_checkpoints} and {tc.save_every})"
            )

    def kwargs(self, context: int) -> dict[str, Any]:
        """The keyword arguments of the task's `evaluate`."""
        kwargs = {k: v for k, v in self.options.items() if k != "seq_len"}
        if "seq_len" in self.options:
            kwargs["seq_len"] = self.seq_len(context)
        return kwargs

    def to_dict(self) -> dict[str, Any]:
        """The spec file's form of this evaluation; `from_dict` reverses it."""
        data: dict[str, Any] = {"name": self.name}
        if self.arms:
            data["arms"] = list(self.arms)
        data["splits"] = list(self.splits)
        if self.overrides:
            data["overrides"] = dict(self.overrides)
        if self.average:
            data["average"] = self.average
        return data | dict(self.options)

    @classmethod
    def from_dict(cls, data: Any) -> Evaluation:
        """An entry of a spec file's `evaluate:` list."""
        if not isinstance(data, Mapping) or "name" not in data:
            raise ConfigError(
                f"evaluate entry {data!r}: give a mapping with a name, e.g. "
                "{name: extrapolate-2x, seq_len: 2x}"
            )
        data = dict(data)
        overrides = data.pop("overrides", None) or {}
        if not isinstance(overrides, Mapping):
            raise ConfigError(f"evaluation {data['name']!r}: overrides is a mapping of keys")
        return cls(
            name=data.pop("name"),
            arms=data.pop("arms", ()),
            splits=data.pop("splits", ("valid",)),
            overrides=overrides,
            average=data.pop("average", 0),
            options=data,
        )


def _positive_number(value: Any, zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return value >= 0 if zero else value > 0


def evaluate_run(
    run_dir: Path, evaluation: Evaluation, data: Any, work_dir: Path, progress: bool = False
) -> dict[str, Any]:
    """Score the trained run in `run_dir` as `evaluation` says; averages go under `work_dir`.

    Returns the checkpoint's step, the settings used and each split's result (`as_dict`).
    """
    from formers.devices import resolve_device
    from formers.run import load_run, read_run_config
    from formers.train.checkpoint.average import average_checkpoints
    from formers.train.precision import autocast_for
    from formers.train.tasks import task_for

    source = run_dir
    if evaluation.average > 1:
        folder = work_dir / f"{evaluation.name}-avg{evaluation.average}"
        source = average_checkpoints(run_dir, evaluation.average, folder, replace=True)
    tc = read_run_config(source).train
    device = resolve_device(tc.device, "train.device")
    run = load_run(source, device, runtime=evaluation.runtime())
    task = task_for(run.config, data=data)
    kwargs = evaluation.kwargs(run.config.train.seq_len)
    splits = {
        split: task.evaluate(
            run.model,
            split,
            device=device,
            autocast=autocast_for(tc.precision, device),
            progress=progress,
            **kwargs,
        ).as_dict()
        for split in evaluation.splits
    }
    return {"step": run.step, "settings": evaluation.to_dict() | kwargs, "splits": splits}


def save_result(path: Path, result: dict[str, Any]) -> None:
    """Write an evaluation's result; renamed into place, so a half-written one never counts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(json_safe(result), indent=2, allow_nan=False) + "\n")
    partial.replace(path)


def read_result(path: Path) -> dict[str, Any] | None:
    """A saved evaluation's result, or None when it has not run yet."""
    return json.loads(path.read_text()) if path.exists() else None


def peak_train_memory(run_dir: Path) -> int | None:
    """Peak bytes of live tensors during one training step of the run's model at its batch
    size and context, on its device and precision: `formers bench`'s measure
    (`formers.bench.memory`), not process RSS. None for models the benchmark's workloads do not
    cover (translation)."""
    import torch

    from formers.bench.memory import peak_bytes
    from formers.bench.workloads import TrainStep
    from formers.devices import resolve_device
    from formers.models import build
    from formers.run import read_run_config
    from formers.train.precision import resolve_precision

    cfg = read_run_config(run_dir)
    if cfg.model.arch not in ("decoder", "encoder"):
        return None
    tc = cfg.train
    device = resolve_device(tc.device, "train.device")
    torch.manual_seed(tc.seed)
    model = build(cfg.model).to(device)
    precision = resolve_precision(tc.precision, device)
    step = TrainStep(model, tc.batch_size, tc.seq_len, precision, device, tc)
    step()  # the optimizer's state exists from the first step on, as in training
    return peak_bytes(step, step.live_tensors(), device)
