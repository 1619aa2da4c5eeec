"""What a comparison trains (`CompareSpec`: arms × contexts × seeds) and where its runs go (how
two specs differ: `spec_changes`)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formers.compare.evaluation import Evaluation
from formers.config import did_you_mean
from formers.errors import ConfigError, FormersError
from formers.overrides import flatten
from formers.presets import PRESETS
from formers.train.config import RunConfig, run_config
from formers.train.tasks import TASKS

SPEC_FILE = "compare.json"
RUNS_DIR = "runs"
EVALS_DIR = "evaluations"
# Set per run by the comparison itself, never by the shared overrides.
OWN_KEYS = {"corpus": "--corpus", "seed": "--seeds", "data_dir": "--data-dir"}
# What each context sets; the budget a spec file must give (`budget:`).
CONTEXT_KEY = "train.seq_len"
BUDGET_KEYS = ("train.max_steps", "train.time_budget")
# Where the data lives and how a run is watched do not change what it computes.
NOT_COMPARED = ("train.data_dir",)
# The keys of a spec file (and of compare.json, which is one); "presets" is the arms of folders
# made before arms had names of their own.
SPEC_KEYS = ("arms", "corpus", "task", "seeds", "contexts", "overrides", "budget", "evaluate")
# A spec's `task:` is a probe (`formers.data.probes`): its kind and options, as train.probe.*.
PROBE_KEY = "train.probe"
# The keys of a `contexts:` entry given as a mapping rather than a plain seq_len.
CONTEXT_ENTRY_KEYS = ("seq_len", "overrides")
CONTEXT_EXAMPLE = "{seq_len: 4096, overrides: {train.batch_size: 2}}"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


@dataclass(frozen=True)
class Arm:
    """One contestant of a comparison: a preset with overrides of its own, under its own name.

    Args:
        name: the arm's name in the report and its folder; a preset's name alone makes an arm
            of that preset.
        preset: the preset it starts from (default: `name`).
        overrides: "model.x" / "train.y" overrides of this arm alone, applied over the shared
            ones, e.g. {"model.attention.window": 64}.
    """

    name: str
    preset: str = ""
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "preset", self.preset or self.name)
        object.__setattr__(self, "overrides", flatten(dict(self.overrides)))
        if not isinstance(self.name, str) or not NAME.match(self.name):
            raise ConfigError(
                f"arm name {self.name!r}: use letters, digits, '.', '_' and '-' (it names a folder)"
            )
        if self.preset not in PRESETS:
            raise ConfigError(
                f"{self._of()}unknown preset {self.preset!r}"
                f"{did_you_mean(self.preset, list(PRESETS))}; valid presets: {', '.join(PRESETS)}"
            )

    @property
    def plain(self) -> bool:
        """A preset as it is: what `formers compare PRESET ...` makes."""
        return self.name == self.preset and not self.overrides

    def _of(self) -> str:
        return "" if self.name == self.preset else f"arm {self.name!r}: "

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "preset": self.preset, "overrides": dict(self.overrides)}

    @classmethod
    def from_dict(cls, data: Any) -> Arm:
        """A preset name, or a mapping with name, preset and overrides."""
        if isinstance(data, str):
            return cls(data)
        if not isinstance(data, Mapping) or "preset" not in data:
            raise ConfigError(
                f"arm {data!r}: give a preset name, or a mapping such as "
                "{name: window-64, preset: longformer, overrides: {model.attention.window: 64}}"
            )
        unknown = sorted(set(data) - {"name", "preset", "overrides"})
        if unknown:
            raise ConfigError(
                f"arm {data.get('name', data['preset'])!r}: unknown key {unknown[0]!r}"
                f"{did_you_mean(unknown[0], ['name', 'preset', 'overrides'])}; an arm has a "
                "name, a preset and overrides"
            )
        return cls(data.get("name") or data["preset"], data["preset"], data.get("overrides") or {})


@dataclass(frozen=True)
class CompareSpec:
    """What a comparison trains: each arm once per context and seed, with the same overrides.

    Args:
        arms: `Arm`s, or preset names; the first is the baseline the others are measured
            against.
        corpus: a named corpus or a text file or folder, the same for every run.
        task: a long-range probe to train on instead of a corpus: its kind (mqar, passkey,
            listops) and options, e.g. {"kind": "mqar", "pairs": 8} (`train.probe`).
        seeds: one run per arm, context and seed (`train.seed`).
        overrides: shared "model.x" / "train.y" overrides (size, budget: `train.max_steps`,
            `train.time_budget`, evaluation), as for `formers train`.
        contexts: `train.seq_len` values, each trained and reported on its own; empty: the one
            the overrides or the presets give.
        context_overrides: overrides of one context's runs alone, keyed by its `contexts`
            value and applied over the shared ones, under the arm's own, e.g.
            {4096: {"train.batch_size": 2, "model.max_len": 4096}}.
        evaluations: extra evaluations of every trained run (`Evaluation`).
        source: the spec file it was read from (not part of what is compared).
    """

    arms: tuple[Arm, ...]
    corpus: str = "stdlib"
    seeds: tuple[int, ...] = (0,)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    task: Mapping[str, Any] = field(default_factory=dict)
    contexts: tuple[int, ...] = ()
    context_overrides: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    evaluations: tuple[Evaluation, ...] = ()
    source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        arms = (self.arms,) if isinstance(self.arms, str | Arm) else self.arms
        object.__setattr__(self, "arms", tuple(a if isinstance(a, Arm) else Arm(a) for a in arms))
        for seed in self.seeds:
            if isinstance(seed, bool) or not isinstance(seed, int):
                raise ConfigError(f"seed {seed!r} is not an integer: give seeds such as 0 1")
        object.__setattr__(self, "seeds", tuple(self.seeds))
        object.__setattr__(self, "contexts", tuple(self.contexts))
        object.__setattr__(self, "overrides", flatten(dict(self.overrides)))
        object.__setattr__(self, "task", _task(self.task))
        # an entry with no overrides is the plain context, so both spell the same spec
        own = {c: flatten(dict(o)) for c, o in dict(self.context_overrides).items() if o}
        object.__setattr__(self, "context_overrides", own)
        object.__setattr__(self, "evaluations", tuple(self.evaluations))
        self._check_lists()
        self._check_keys()
        archs = {arm.name: PRESETS[arm.preset]().arch for arm in self.arms}
        if len(set(archs.values())) > 1:
            listed = ", ".join(f"{name} ({arch})" for name, arch in archs.items())
            raise ConfigError(
                f"compare measures presets on one task, but {listed} train different ones "
                "(causal LM, masked LM): compare presets of one arch at a time"
            )
        self._check_resolves()

    def _check_lists(self) -> None:
        if not self.arms:
            raise ConfigError("compare needs at least one preset (the first is the baseline)")
        for context in self.contexts:
            if isinstance(context, bool) or not isinstance(context, int) or context < 1:
                raise ConfigError(
                    f"context {context!r} is not a positive integer: list train.seq_len values, "
                    "e.g. contexts [1024, 4096]"
                )
        listed = (
            ("arm", self.names, "list it once, or give each its own name"),
            ("seed", self.seeds, "list it once"),
            ("context", self.contexts, "list it once"),
            ("evaluation", tuple(e.name for e in self.evaluations), "give each its own name"),
        )
        for what, values, fix in listed:
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                raise ConfigError(f"{what} {', '.join(repeated)} is listed twice: {fix}")
        if not self.seeds:
            raise ConfigError("compare needs at least one seed, e.g. seeds=(0,)")
        for context in self.context_overrides:
            if context not in self.contexts:
                raise ConfigError(
                    f"context_overrides: {context!r} is not one of the contexts "
                    f"({words(self.contexts) or 'none'}): key them by a contexts value"
                )
        for evaluation in self.evaluations:
            unknown = [a for a in evaluation.arms if a not in self.names]
            if unknown:
                raise ConfigError(
                    f"evaluation {evaluation.name!r}: no arm is named {unknown[0]!r}"
                    f"{did_you_mean(unknown[0], self.names)}; the arms: {', '.join(self.names)}"
                )

    def _check_keys(self) -> None:
        for where, overrides in (
            ("", self.overrides),
            *((f"context {c}: ", o) for c, o in self.context_overrides.items()),
            *((a._of(), a.overrides) for a in self.arms),
        ):
            for key in overrides:
                name = key.removeprefix("train.")
                if name in OWN_KEYS:
                    raise ConfigError(
                        f"{where}{key} is set by the comparison for every run: use "
                        f"{OWN_KEYS[name]} instead"
                    )
                if self.contexts and key in (CONTEXT_KEY, "seq_len"):
                    raise ConfigError(
                        f"{where}{key} is set by each context ({words(self.contexts)}): leave "
                        "it out, or list its values under contexts"
                    )

    def _check_resolves(self) -> None:
        """Every run resolves and every evaluation fits its arms, before any work."""
        for arm in self.arms:
            for context in self.context_list:
                cfg = self.run_config(arm.name, self.seeds[0], context=context)
                for evaluation in self.evaluations:
                    if evaluation.applies_to(arm.name):
                        evaluation.check(arm.name, cfg)

    @property
    def task_overrides(self) -> dict[str, Any]:
        """The task as the runs' overrides: train.probe.kind and its options."""
        return {f"{PROBE_KEY}.{k}": v for k, v in self.task.items()}

    @property
    def data_name(self) -> str:
        """What the runs train on: the probe's kind, or the corpus."""
        return self.task.get("kind") or self.corpus

    @property
    def names(self) -> tuple[str, ...]:
        """The arms' names, the baseline first."""
        return tuple(arm.name for arm in self.arms)

    @property
    def baseline(self) -> str:
        """The arm every other one is measured against."""
        return self.arms[0].name

    @property
    def context_list(self) -> tuple[int | None, ...]:
        """The contexts, or (None,): one context, the one the settings give."""
        return self.contexts or (None,)

    def arm(self, name: str) -> Arm:
        return next(arm for arm in self.arms if arm.name == name)

    def run_config(
        self, arm: str, seed: int, data_dir: str | None = None, context: int | None = None
    ) -> RunConfig:
        """The resolved config of one run: the task's options, the shared overrides, then the
        context's, then the arm's own."""
        own = self.arm(arm)
        overrides = {**self.task_overrides, **self.overrides}
        overrides |= {**self.context_overrides.get(context, {}), **own.overrides}
        overrides |= {"train.corpus": self.corpus, "train.seed": seed}
        if context is not None:
            overrides[CONTEXT_KEY] = context
        if data_dir is not None:
            overrides["train.data_dir"] = data_dir
        try:
            cfg = run_config(own.preset, overrides)
        except ConfigError as error:
            raise ConfigError(f"{self._culprit(own, context)}{error}") from None
        if cfg.model.arch not in TASKS:
            raise ConfigError(
                f"preset {own.preset!r} builds arch={cfg.model.arch!r}, which has no training "
                f"task yet; compare trains {' or '.join(TASKS)} models (see `formers presets`)"
            )
        return cfg

    def _culprit(self, arm: Arm, context: int | None) -> str:
        """Whose overrides a run does not resolve with, as an error's prefix: the arm's, when
        the shared and context overrides resolve alone; the context's, when the shared do."""
        fixed = {"train.corpus": self.corpus} | ({CONTEXT_KEY: context} if context else {})
        shared = {**self.task_overrides, **self.overrides, **fixed}
        layers = [({**shared, **self.context_overrides.get(context, {}), **fixed}, arm._of())]
        if self.context_overrides.get(context):
            layers.append((shared, f"context {context}: {arm._of()}"))
        for overrides, blamed in layers:
            try:
                run_config(arm.preset, overrides)
                return blamed
            except ConfigError:
                continue
        return arm._of()

    def runs(self) -> list[tuple[str, int | None, int]]:
        """Every (arm, context, seed), in the order they train."""
        return [(a, c, s) for a in self.names for c in self.context_list for s in self.seeds]

    def command(self) -> str | None:
        """The command line that makes this spec (None: only a spec file can)."""
        if self.source is not None:
            return f"formers compare --spec {shlex.quote(self.source)}"
        if not self.expressible():
            return None
        words = ["formers", "compare", *self.names]
        words += ["--task", self.task["kind"]] if self.task else ["--corpus", self.corpus]
        words += ["--seeds", *(str(s) for s in self.seeds)]
        options = {f"{PROBE_KEY}.{k}": v for k, v in self.task.items() if k != "kind"}
        for key, value in {**options, **self.overrides}.items():
            words += [f"--{key}", str(value)]
        return " ".join(shlex.quote(w) for w in words)

    def expressible(self) -> bool:
        """Whether `formers compare PRESET ...` can make this spec."""
        return all(a.plain for a in self.arms) and not self.contexts and not self.evaluations

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, a spec file's; `from_dict` reverses it."""
        data = {
            "arms": [arm.to_dict() for arm in self.arms],
            "corpus": self.corpus,
            **({"task": dict(self.task)} if self.task else {}),
            "seeds": list(self.seeds),
            "contexts": [self._context_entry(c) for c in self.contexts],
            "overrides": dict(self.overrides),
            "evaluate": [e.to_dict() for e in self.evaluations],
        }
        return data | ({"source": self.source} if self.source else {})

    def _context_entry(self, context: int) -> int | dict[str, Any]:
        own = self.context_overrides.get(context)
        return {"seq_len": context, "overrides": dict(own)} if own else context

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompareSpec:
        """A spec from a spec file's keys (or as saved by `to_dict`)."""
        check_keys(data)
        overrides = _mapping(data, "overrides") | _budget(data)
        budget = overrides.get(BUDGET_KEYS[1])
        if isinstance(budget, int | float) and not isinstance(budget, bool):
            overrides[BUDGET_KEYS[1]] = f"{budget}s"  # YAML reads 300 as a number, not "300s"
        evaluations = data.get("evaluate") or []
        if not isinstance(evaluations, list):
            raise ConfigError("evaluate is a list of evaluations: evaluate: [{name: ..., ...}]")
        contexts = [_context(entry) for entry in _list(data, "contexts", ())]
        if data.get("task") and "corpus" in data and data["corpus"] != "stdlib":
            raise ConfigError(
                f"task and corpus are both given: a probe ({_task(data['task']).get('kind')}) "
                "makes its own data, so leave corpus out"
            )
        return cls(
            arms=tuple(Arm.from_dict(a) for a in _list(data, "arms", data.get("presets"))),
            corpus=str(data.get("corpus", "stdlib")),
            task=data.get("task") or {},
            seeds=tuple(_list(data, "seeds", (0,))),
            overrides=overrides,
            contexts=tuple(c for c, _ in contexts),
            context_overrides={c: o for c, o in contexts if o},
            evaluations=tuple(Evaluation.from_dict(e) for e in evaluations),
            source=data.get("source"),
        )


def check_keys(data: Mapping[str, Any]) -> None:
    """Refuse a key a spec does not have, naming it (`arm:` for `arms:`)."""
    unknown = sorted(set(data) - {*SPEC_KEYS, "presets", "source"}, key=str)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), SPEC_KEYS)}; the keys "
            f"of a spec: {', '.join(SPEC_KEYS)}"
        )


def _list(data: Mapping[str, Any], key: str, default: Any) -> list[Any]:
    value = data.get(key, default)
    value = default if value is None else value
    if isinstance(value, str | int) and key != "arms":
        return [value]
    if not isinstance(value, list | tuple):
        raise ConfigError(f"{key} is a list, e.g. {key}: [{'vanilla' if key == 'arms' else 0}]")
    return list(value)


def _context(entry: Any) -> tuple[Any, dict[str, Any]]:
    """A `contexts:` entry as (seq_len, its overrides): a plain seq_len, or a mapping."""
    if not isinstance(entry, Mapping):
        return entry, {}
    name = f"context {entry.get('seq_len', dict(entry))!r}"
    unknown = sorted(set(entry) - set(CONTEXT_ENTRY_KEYS), key=str)
    if unknown:
        raise ConfigError(
            f"{name}: unknown key {unknown[0]!r}{did_you_mean(str(unknown[0]), CONTEXT_ENTRY_KEYS)}"
            f"; a context is a seq_len and its overrides, e.g. {CONTEXT_EXAMPLE}"
        )
    if "seq_len" not in entry:
        raise ConfigError(f"{name}: give its seq_len, e.g. {CONTEXT_EXAMPLE}")
    try:
        return entry["seq_len"], _mapping(entry, "overrides")
    except ConfigError as error:
        raise ConfigError(f"{name}: {error}") from None


def _task(task: Any) -> dict[str, Any]:
    """A spec's `task:`: a probe's kind alone, or a mapping of its kind and options."""
    if isinstance(task, str):
        task = {"kind": task}
    if not isinstance(task, Mapping) or (task and "kind" not in task):
        raise ConfigError(
            f"task {task!r}: give a probe's kind (mqar, passkey or listops), or a mapping of its "
            "kind and options, e.g. {kind: mqar, pairs: 8}"
        )
    return {str(k).removeprefix(f"{PROBE_KEY}."): v for k, v in task.items()}


def _mapping(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} is a mapping of settings, e.g. {key}: {{model.d_model: 256}}")
    return flatten(dict(value))


def _budget(data: Mapping[str, Any]) -> dict[str, Any]:
    """The `budget:` mapping as overrides: train.max_steps and/or train.time_budget."""
    budget = _mapping(data, "budget")
    budget = {k if k.startswith("train.") else f"train.{k}": v for k, v in budget.items()}
    for key in budget:
        if key not in BUDGET_KEYS:
            raise ConfigError(
                f"budget: {key} is not a budget: give {' and/or '.join(BUDGET_KEYS)} (other "
                "settings go under overrides)"
            )
    return budget


def run_path(out: Path, arm: str, seed: int, context: int | None = None) -> Path:
    """The run folder of one (arm, context, seed) of a comparison."""
    arm_dir = Path(out) / RUNS_DIR / arm
    return (arm_dir if context is None else arm_dir / f"ctx{context}") / f"seed{seed}"


def eval_path(out: Path, arm: str, seed: int, context: int | None, name: str) -> Path:
    """Where the result of one evaluation of one run is saved."""
    return evaluations_path(out, arm, seed, context) / f"{name}.json"


def evaluations_path(out: Path, arm: str, seed: int, context: int | None) -> Path:
    """The folder of one run's evaluation results."""
    run = run_path(out, arm, seed, context).relative_to(Path(out) / RUNS_DIR)
    return Path(out) / EVALS_DIR / run


def memory_path(out: Path, arm: str, context: int | None) -> Path:
    """Where the peak training memory of an arm at a context is saved (one for its seeds)."""
    arm_dir = run_path(out, arm, 0, context).parent.relative_to(Path(out) / RUNS_DIR)
    return Path(out) / EVALS_DIR / arm_dir / "peak_train_memory.json"


def load_spec(out: Path) -> CompareSpec:
    """The spec saved in a comparison folder."""
    path = Path(out) / SPEC_FILE
    if not path.exists():
        raise FormersError(f"{out} is not a compare folder: it has no {SPEC_FILE}")
    return CompareSpec.from_dict(json.loads(path.read_text()))


def words(value: Any) -> str:
    """A spec field as words: a tuple space-separated."""
    return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)
