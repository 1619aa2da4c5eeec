"""What a comparison trains (`CompareSpec`), where its runs go, and how two specs differ."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formers.config import did_you_mean
from formers.errors import ConfigError, FormersError
from formers.overrides import flatten
from formers.presets import PRESETS
from formers.train.config import RunConfig, run_config
from formers.train.tasks import TASKS

SPEC_FILE = "compare.json"
RUNS_DIR = "runs"
# Set per run by the comparison itself, never by the shared overrides.
OWN_KEYS = {"corpus": "--corpus", "seed": "--seeds", "data_dir": "--data-dir"}
# Where the data lives and how a run is watched do not change what it computes.
NOT_COMPARED = ("train.data_dir",)


@dataclass(frozen=True)
class CompareSpec:
    """What a comparison trains: each preset once per seed, with the same overrides.

    Args:
        presets: preset names; the first is the baseline the others are measured against.
        corpus: a named corpus or a text file or folder, the same for every run.
        seeds: one run per preset and seed (`train.seed`).
        overrides: shared "model.x" / "train.y" overrides (size, budget: `train.max_steps`,
            `train.time_budget`, evaluation), as for `formers train`.
    """

    presets: tuple[str, ...]
    corpus: str = "stdlib"
    seeds: tuple[int, ...] = (0,)
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "presets", tuple(self.presets))
        object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))
        object.__setattr__(self, "overrides", dict(self.overrides))
        if not self.presets:
            raise ConfigError("compare needs at least one preset (the first is the baseline)")
        for name in self.presets:
            if name not in PRESETS:
                raise ConfigError(
                    f"unknown preset {name!r}{did_you_mean(name, list(PRESETS))}; "
                    f"valid presets: {', '.join(PRESETS)}"
                )
        for what, values in (("preset", self.presets), ("seed", self.seeds)):
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                raise ConfigError(f"{what} {', '.join(repeated)} is listed twice: list it once")
        if not self.seeds:
            raise ConfigError("compare needs at least one seed, e.g. seeds=(0,)")
        archs = {name: PRESETS[name]().arch for name in self.presets}
        if len(set(archs.values())) > 1:
            listed = ", ".join(f"{name} ({arch})" for name, arch in archs.items())
            raise ConfigError(
                f"compare measures presets on one task, but {listed} train different ones "
                "(causal LM, masked LM): compare presets of one arch at a time"
            )
        for key in self.overrides:
            name = key.removeprefix("train.")
            if name in OWN_KEYS:
                raise ConfigError(
                    f"{key} is set by the comparison for every run: use {OWN_KEYS[name]} instead"
                )

    @property
    def baseline(self) -> str:
        """The preset every other one is measured against."""
        return self.presets[0]

    def run_config(self, preset: str, seed: int, data_dir: str | None = None) -> RunConfig:
        """The resolved config of one run; only the preset and the seed differ between runs."""
        overrides = {**self.overrides, "train.corpus": self.corpus, "train.seed": seed}
        if data_dir is not None:
            overrides["train.data_dir"] = data_dir
        cfg = run_config(preset, overrides)
        if cfg.model.arch not in TASKS:
            raise ConfigError(
                f"preset {preset!r} builds arch={cfg.model.arch!r}, which has no training task "
                f"yet; compare trains {' or '.join(TASKS)} models (see `formers presets`)"
            )
        return cfg

    def command(self) -> str:
        """The `formers compare` command line that makes this spec."""
        words = ["formers", "compare", *self.presets, "--corpus", self.corpus, "--seeds"]
        words += [str(s) for s in self.seeds]
        for key, value in self.overrides.items():
            words += [f"--{key}", str(value)]
        return " ".join(shlex.quote(w) for w in words)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; `from_dict` reverses it."""
        return {
            "presets": list(self.presets),
            "corpus": self.corpus,
            "seeds": list(self.seeds),
            "overrides": dict(self.overrides),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompareSpec:
        """Rebuild a spec saved by `to_dict`."""
        return cls(
            presets=tuple(data["presets"]),
            corpus=data.get("corpus", "stdlib"),
            seeds=tuple(data.get("seeds", (0,))),
            overrides=data.get("overrides", {}),
        )


def run_path(out: Path, preset: str, seed: int) -> Path:
    """The run folder of one (preset, seed) of a comparison."""
    return Path(out) / RUNS_DIR / preset / f"seed{seed}"


def load_spec(out: Path) -> CompareSpec:
    """The spec saved in a comparison folder."""
    path = Path(out) / SPEC_FILE
    if not path.exists():
        raise FormersError(f"{out} is not a compare folder: it has no {SPEC_FILE}")
    return CompareSpec.from_dict(json.loads(path.read_text()))


def spec_differences(saved: CompareSpec, spec: CompareSpec) -> list[str]:
    """What differs between two specs, as "field: saved -> now" lines; empty when the same.

    Overrides are compared resolved, so `--train.lr 1e-3` and `--train.lr 0.001` agree.
    """
    diffs = [
        f"{name}: {_words(getattr(saved, name))} -> {_words(getattr(spec, name))}"
        for name in ("presets", "corpus", "seeds")
        if getattr(saved, name) != getattr(spec, name)
    ]
    changed: dict[str, str] = {}
    for preset in (p for p in spec.presets if p in saved.presets):
        try:
            before = flatten(saved.run_config(preset, 0).to_dict())
        except ConfigError as error:  # the library changed under the saved spec
            diffs.append(f"the saved settings no longer resolve ({error})")
            break
        after = flatten(spec.run_config(preset, 0).to_dict())
        for key in sorted(before.keys() | after.keys()):
            if key not in NOT_COMPARED and before.get(key) != after.get(key):
                changed.setdefault(key, f"{key}: {before.get(key)} -> {after.get(key)}")
    return diffs + list(changed.values())


def _words(value: Any) -> str:
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)
