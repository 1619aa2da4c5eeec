"""How two comparison specs differ: what a resumed comparison refuses to mix into its folder."""

from __future__ import annotations

from typing import Any

from formers.compare.spec import NOT_COMPARED, CompareSpec, words
from formers.errors import ConfigError
from formers.overrides import flatten


def spec_differences(saved: CompareSpec, spec: CompareSpec) -> list[str]:
    """What differs between two specs, as "field: saved -> now" lines; empty when the same.

    Overrides are compared resolved, so `--train.lr 1e-3` and `--train.lr 0.001` agree; a
    change that only some arms see is named with the arm.
    """
    diffs = [
        f"{name}: {words(getattr(saved, name))} -> {words(getattr(spec, name))}"
        for name in ("names", "corpus", "seeds", "contexts")
        if getattr(saved, name) != getattr(spec, name)
    ]
    diffs = [d.replace("names:", "arms:", 1) for d in diffs]
    before = {e.name: e.to_dict() for e in saved.evaluations}
    after = {e.name: e.to_dict() for e in spec.evaluations}
    for name in sorted(before.keys() | after.keys()):
        if before.get(name) != after.get(name):
            diffs.append(f"evaluation {name}: {before.get(name)} -> {after.get(name)}")
    return diffs + _setting_differences(saved, spec)


def _setting_differences(saved: CompareSpec, spec: CompareSpec) -> list[str]:
    arms = [name for name in spec.names if name in saved.names]
    # the contexts both train (a change of the list itself is named on its own)
    contexts = [c for c in spec.context_list if c in saved.context_list] or [None]
    changes: dict[str, dict[tuple[str, int | None], str]] = {}  # key -> run -> "old -> new"
    for run in [(name, context) for name in arms for context in contexts]:
        try:
            before = flatten(saved.run_config(run[0], 0, context=run[1]).to_dict())
        except ConfigError as error:  # the library changed under the saved spec
            return [f"the saved settings no longer resolve ({error})"]
        after = flatten(spec.run_config(run[0], 0, context=run[1]).to_dict())
        for key in sorted(before.keys() | after.keys()):
            if key not in NOT_COMPARED and before.get(key) != after.get(key):
                changes.setdefault(key, {})[run] = f"{before.get(key)} -> {after.get(key)}"
    return [line for key, by_run in changes.items() for line in _said(key, by_run, arms, contexts)]


def _said(
    key: str, by_run: dict[tuple[str, int | None], str], arms: list[str], contexts: list[Any]
) -> list[str]:
    """One setting's changes, said once for every run, per context or per arm where all the
    runs there changed alike, and per run otherwise."""

    def alike(runs: list[tuple[str, int | None]]) -> bool:
        return all(run in by_run for run in runs) and len({by_run[run] for run in runs}) == 1

    every = [(a, c) for a in arms for c in contexts]
    if alike(every):
        return [f"{key}: {by_run[every[0]]}"]
    lines, said = [], set()
    groups = [(f"context {c}", [(a, c) for a in arms]) for c in contexts if c is not None]
    groups += [(f"arm {a}", [(a, c) for c in contexts]) for a in arms]
    groups += [(f"arm {a}, context {c}", [(a, c)]) for a, c in every]
    for label, runs in groups:
        if alike(runs) and not said & set(runs):
            lines.append(f"{label}: {key}: {by_run[runs[0]]}")
            said |= set(runs)
    return lines
