"""Training configuration, and the run configuration = model config + training config."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any

from formers.config import ModelConfig, check_finite
from formers.data.probes import ProbeConfig, probe_config_class
from formers.errors import ConfigError
from formers.overrides import apply_overrides
from formers.presets import config, config_from_dict, override
from formers.train.schedule import SCHEDULES

OPTIMIZERS = ("adamw", "adam_paper", "sgd")
PRECISIONS = ("fp32", "bf16", "auto")
DISTRIBUTED = ("ddp", "fsdp")


@dataclass(frozen=True)
class TrainConfig:
    """How to train: data, batching, optimisation, precision, evaluation, checkpoints.

    Args:
        corpus: a named corpus (see `formers data list`) or a path to a text file or folder.
        data_dir: where named corpora live; default --data-dir, FORMERS_DATA, ../shared/data
            beside a checkout, or the user cache.
        tokenizer: "byte", "char", "word" or "bpe"; None uses the corpus's own; "pretrained":
            the tokenizer the run's weights came with (an imported model's, `--init-from`'s),
            used as it is.
        tokenizer_vocab: BPE vocabulary size (or a cap on word vocabularies).
        batch_size: sequences per optimizer step and process (before accumulation).
        seq_len: tokens per sequence (the segment length of recurrent models).
        max_tokens: translation: tokens per batch and side, padding included (Vaswani §5.1);
            None: batch_size × seq_len, the same budget as a language-model batch.
        grad_accum: micro-batches accumulated per optimizer step.
        optimizer: "adamw" (decoupled decay on matrices), "adam_paper" (Vaswani §5.3) or "sgd"
            (with momentum 0.9).
        lr: peak learning rate.
        schedule: "cosine", "inverse_sqrt" or "constant", each after a linear warmup.
        warmup_steps: steps of the linear warmup.
        min_lr_ratio: where the cosine decay ends, as a fraction of lr.
        max_steps: optimizer steps to take.
        schedule_steps: the cosine decay's length; None: max_steps. A resumed run that is given
            more steps keeps the decay it started with (and then holds its final rate).
        time_budget: stop after this much training time, e.g. "20m", "90s", "1h" (None: no limit).
        precision: "fp32", "bf16" (autocast, fp32 master weights) or "auto" (bf16 where the
            device runs it natively, else fp32).
        compile: compile the training step (forward, loss, backward) as one graph with
            torch.compile (fullgraph); "auto": on CUDA only. Off by default.
        distributed: under torchrun, "ddp" (every process keeps the whole model) or "fsdp"
            (FSDP2: weights, gradients and optimizer state sharded over the processes).
        eval_every: steps between evaluations on the valid split (0: only at the end).
        eval_tokens: score at most this many valid tokens in periodic evaluations (None: all).
        save_every: steps between checkpoints (0: only at the end and on interruption).
        log_every: steps between train records in metrics.jsonl.
        keep_checkpoints: how many of the newest checkpoints to keep.
        weight_decay: AdamW's decoupled decay on weight matrices.
        grad_clip: clip the gradient's global norm to this (0: no clipping).
        label_smoothing: ε of the smoothed targets (Vaswani §5.4).
        aux_loss_coef: weight of the model's auxiliary losses (Switch, Routing) in the loss.
        stop_on_nonfinite: stop the run when the loss or the gradient norm is NaN or infinite
            (the weights of that step are not kept) instead of training on.
        probe: train on a generated long-range probe instead of the corpus (`kind`: mqar,
            passkey or listops, with its options; `formers.data.probes`); None: the corpus.
    """

    corpus: str = "stdlib"
    data_dir: str | None = None
    tokenizer: str | None = None
    tokenizer_vocab: int | None = None
    batch_size: int = 16
    seq_len: int = 128
    max_tokens: int | None = None
    grad_accum: int = 1
    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.1
    beta2: float = 0.95
    schedule: str = "cosine"
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    max_steps: int = 1000
    schedule_steps: int | None = None
    time_budget: str | None = None
    grad_clip: float = 1.0
    label_smoothing: float = 0.0
    aux_loss_coef: float = 1.0
    precision: str = "auto"
    compile: bool | str = False
    seed: int = 0
    device: str = "auto"
    distributed: str = "ddp"
    eval_every: int = 250
    eval_tokens: int | None = 100_000
    eval_batch_size: int = 16
    log_every: int = 10
    save_every: int = 250
    keep_checkpoints: int = 2
    stop_on_nonfinite: bool = True
    probe: ProbeConfig | None = None

    def __post_init__(self) -> None:
        check_finite(self, prefix="train.")
        positive = (
            "batch_size", "seq_len", "grad_accum", "max_steps", "eval_batch_size", "log_every",
            "keep_checkpoints",
        )  # fmt: skip
        for name in positive:
            _check_int(name, getattr(self, name), minimum=1)
        for name in ("eval_every", "save_every", "warmup_steps", "seed"):
            _check_int(name, getattr(self, name), minimum=0)
        for name in ("eval_tokens", "tokenizer_vocab", "schedule_steps"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=1)
        for name in ("weight_decay", "grad_clip", "aux_loss_coef"):
            if getattr(self, name) < 0:
                raise ConfigError(
                    f"train.{name}={getattr(self, name)} must be 0 or more: set train.{name} to a "
                    "value >= 0"
                )
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"train.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        if not 0 < self.beta2 < 1:
            raise ConfigError(f"train.beta2={self.beta2} must be in (0, 1)")
        for name, choices in (
            ("optimizer", OPTIMIZERS),
            ("schedule", SCHEDULES),
            ("precision", PRECISIONS),
            ("distributed", DISTRIBUTED),
        ):
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"train.{name}={getattr(self, name)!r} is not one of {', '.join(choices)}"
                )
        if self.compile not in (True, False, "auto"):
            raise ConfigError(
                f"train.compile={self.compile!r} must be true, false or auto (on CUDA only)"
            )
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise ConfigError(f"train.max_tokens={self.max_tokens!r} must be a positive integer")
        if self.lr <= 0:
            raise ConfigError(f"train.lr={self.lr} must be positive")
        if not 0 <= self.label_smoothing < 1:
            raise ConfigError(f"train.label_smoothing={self.label_smoothing} must be in [0, 1)")
        if self.time_budget is not None:
            parse_duration(self.time_budget)
        if self.probe is not None:
            self.probe.validate(self.seq_len)

    @property
    def batch_tokens(self) -> int:
        """Tokens per translation batch and side: `max_tokens`, or batch_size × seq_len."""
        return self.max_tokens or self.batch_size * self.seq_len

    @property
    def time_budget_seconds(self) -> float | None:
        """`time_budget` in seconds, or None."""
        return None if self.time_budget is None else parse_duration(self.time_budget)


_MEANING = {
    "log_every": "write a train record every N steps",
    "keep_checkpoints": "keep the N newest checkpoints",
    "eval_every": "evaluate every N steps, 0 only at the end",
    "save_every": "save every N steps, 0 only at the end",
}


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        why = f" ({_MEANING[name]})" if name in _MEANING else ""
        raise ConfigError(
            f"train.{name}={value!r} must be {kind}{why}: set train.{name} accordingly"
        )


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "20m", "1.5h" or "1h30m"; a budget of 0 or less is refused (it
    would stop training after its first step)."""
    if str(text).strip().startswith("-"):
        raise ConfigError(_NOT_POSITIVE)
    parts = re.fullmatch(
        r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", str(text)
    )
    if not parts or not any(parts.groups()):
        raise ConfigError(
            f"train.time_budget={text!r} is not a duration: write e.g. '90s', '20m' or '1h30m'"
        )
    hours, minutes, seconds = (float(g) if g else 0.0 for g in parts.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ConfigError(_NOT_POSITIVE)
    return total


_NOT_POSITIVE = "train.time_budget must be positive, e.g. 20m; leave it out for no limit"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs: which preset, the model, and how to train it."""

    preset: str = "vanilla"
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    # model keys the overrides set (not saved): a value the data decides, such as the
    # vocabulary, is refused there rather than replaced, while a preset's default is replaced
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.train.probe is not None:  # a probe the model cannot read fails here
            self.train.probe.check_arch(self.model.arch, self.preset)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; `run_config_from_dict` reverses it."""
        return {"preset": self.preset, "model": self.model.to_dict(), "train": _asdict(self.train)}


def _asdict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def run_config(preset: str = "vanilla", overrides: dict[str, Any] | None = None) -> RunConfig:
    """A run config from a preset and overrides keyed "model.x", "train.y" (or bare model keys).

    Bare keys that are not training keys go to the model, so `d_model=64` works like
    `model.d_model=64`.
    """
    model_overrides, train_overrides = split_overrides(overrides or {})
    probe_keys = [k for k in train_overrides if k.startswith("probe.") and k != "probe.kind"]
    if probe_keys and not {"probe", "probe.kind"} & set(train_overrides):
        raise ConfigError(
            f"train.{probe_keys[0]} is an option of a probe, and no probe is chosen: set "
            "train.probe.kind to mqar, passkey or listops"
        )
    model = config(preset, **model_overrides)
    train = apply_overrides(TrainConfig(), train_overrides, probe_config_class, prefix="train.")
    return RunConfig(preset=preset, model=model, train=train, explicit=frozenset(model_overrides))


def split_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Overrides keyed "model.x", "train.y" or bare, as (model overrides, train overrides)
    without their prefixes; a bare key goes to training only when no model field has it."""
    model_overrides: dict[str, Any] = {}
    train_overrides: dict[str, Any] = {}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if head == "train" and rest:
            train_overrides[rest] = value
        elif head == "model" and rest:
            model_overrides[rest] = value
        elif head in train_fields and head not in {f.name for f in dataclasses.fields(ModelConfig)}:
            train_overrides[head] = value
        else:
            model_overrides[key] = value
    return model_overrides, train_overrides


def run_config_from_dict(data: dict[str, Any]) -> RunConfig:
    """Rebuild a run config saved by `RunConfig.to_dict()`."""
    try:
        model = config_from_dict(data["model"])
        train = apply_overrides(
            TrainConfig(), data.get("train", {}), probe_config_class, prefix="train."
        )
    except KeyError as error:
        raise ConfigError(f"saved run config has no {error} section") from None
    return RunConfig(preset=data.get("preset", "vanilla"), model=model, train=train)


def with_vocab(cfg: RunConfig, vocab_size: int) -> RunConfig:
    """The run config with the model's vocabulary set to the tokenizer's."""
    return dataclasses.replace(cfg, model=override(cfg.model, {"vocab_size": vocab_size}))


def with_data_fields(cfg: RunConfig, fields: dict[str, Any], source: str) -> RunConfig:
    """The run config with the model fields the data decides (vocabulary, padding id) set.

    Args:
        cfg: the run config; a field in `cfg.explicit` set to another value is refused, as
            replacing it would silently train something other than what was asked for.
        fields: model field -> the value the data gives it.
        source: what decides them, for the error, e.g. "tinyshakespeare's char tokenizer".
    """
    for name, value in fields.items():
        mine = getattr(cfg.model, name)
        if name in cfg.explicit and mine != value:
            hint = "; train.tokenizer_vocab sizes a BPE vocabulary" if name == "vocab_size" else ""
            raise ConfigError(
                f"model.{name}={mine!r} does not match the corpus: {source} makes it {value!r}; "
                f"leave model.{name} unset (the corpus decides it{hint})"
            )
    return dataclasses.replace(cfg, model=override(cfg.model, fields))
