"""Command-line flags for the runtime options of every attention kind (`formers eval`).

An attention config lists in `runtime_fields` the options that change how a trained model runs
but not its weights (Transformer-XL's memory length, say). Each becomes a flag (option `a_b`
is --a-b) with the help text of the config's docstring; a flag given for a run whose attention
does not have that option is an error that names the kinds that do.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from typing import Any

from formers.config import AttentionConfig, ModelConfig
from formers.config_kinds import ATTENTION_CONFIG
from formers.errors import FormersError


def _kinds_with(field: str) -> list[type[AttentionConfig]]:
    return [c for c in ATTENTION_CONFIG.values() if field in c.runtime_fields]


def _fields() -> list[str]:
    names: list[str] = []
    for options in ATTENTION_CONFIG.values():
        names += [f for f in options.runtime_fields if f not in names]
    return names


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _help(options: type, field: str) -> str:
    """The `field:` entry of the config class's Args docstring, on one line."""
    doc = options.__doc__ or ""
    match = re.search(rf"^\s+{field}: (.*?)(?=^\s+\w+: |\Z)", doc, re.S | re.M)
    return " ".join(match.group(1).split()) if match else ""


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    """A flag per runtime option of every registered attention kind, in one argument group."""
    group = parser.add_argument_group(
        "runtime options of the attention (change how a trained model runs, not its weights)"
    )
    for field in _fields():
        kinds = _kinds_with(field)
        hints = typing.get_type_hints(kinds[0])
        kind_names = ", ".join(repr(k.kind) for k in kinds)
        help_text = f"{_help(kinds[0], field)} [attention.kind {kind_names}]"
        if hints[field] is bool:
            group.add_argument(
                _flag(field), dest=field, action=argparse.BooleanOptionalAction, help=help_text
            )
        else:
            group.add_argument(_flag(field), dest=field, type=int, help=help_text)


def runtime_changes(args: argparse.Namespace, cfg: ModelConfig) -> dict[str, Any]:
    """The runtime flags given, as "attention.<field>" overrides for the run's config `cfg`."""
    changes = {}
    for field in _fields():
        value = getattr(args, field, None)
        if value is None:
            continue
        if field not in cfg.attention.runtime_fields:
            kinds = _kinds_with(field)
            about = "; ".join(f"{k.kind!r}: {(k.__doc__ or '').splitlines()[0]}" for k in kinds)
            raise FormersError(
                f"{_flag(field)} is an option of attention.kind {about} — this run has "
                f"attention.kind={cfg.attention.kind!r}: leave {_flag(field)} out"
            )
        changes[f"attention.{field}"] = value
    return changes


def runtime_report(cfg: ModelConfig) -> dict[str, Any]:
    """The run's runtime options and their values, for a report."""
    options = cfg.attention
    values = dataclasses.asdict(options)
    return {field: values[field] for field in options.runtime_fields}
