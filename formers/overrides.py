"""Overriding fields of frozen configs: from Python keywords or from `--a.b value` strings.

Unknown keys are errors (a silently ignored typo costs a whole training run), and string
values are converted to the field's declared type.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from formers.config import did_you_mean
from formers.errors import ConfigError, FormersError

C = TypeVar("C")
KindLookup = Callable[[str, str], type]  # (field name, kind) -> config class
YES = ("true", "1", "yes", "on")


def apply_overrides(
    cfg: C, overrides: Mapping[str, Any], kind_class: KindLookup | None = None, prefix: str = ""
) -> C:
    """A copy of dataclass `cfg` with `overrides` applied.

    Keys are field names or dotted paths into nested configs ("attention.window"). A nested
    config may also be given whole (a dataclass), as a dict of its fields, or by its kind name;
    a new `kind` switches to that kind's config class via `kind_class`.
    """
    nested: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        elif isinstance(value, Mapping):
            nested.setdefault(head, {}).update(value)
        else:
            nested.setdefault(head, {})[""] = value
    hints = typing.get_type_hints(type(cfg))
    names = [f.name for f in dataclasses.fields(cfg)]
    changes: dict[str, Any] = {}
    for head, values in nested.items():
        path = prefix + head
        if head in getattr(cfg, "removed_fields", {}):
            raise ConfigError(f"config key {path!r} is gone: {cfg.removed_fields[head]}")
        if head not in names:
            raise ConfigError(
                f"unknown config key {path!r}{did_you_mean(head, names)}; "
                f"valid keys{' under ' + prefix[:-1] if prefix else ''}: {', '.join(names)}"
            )
        current = getattr(cfg, head)
        optional = _optional_dataclass(hints[head])
        if current is None and optional is not None:
            if _means_none(values):
                changes[head] = None
                continue
            current = optional()  # an optional nested config starts from its defaults
        if dataclasses.is_dataclass(current):
            if optional is not None and _means_none(values):
                changes[head] = None
            else:
                changes[head] = _override_nested(current, values, path, kind_class)
        elif "" in values and len(values) == 1:
            changes[head] = coerce(values[""], hints[head], path)
        else:
            raise ConfigError(f"{path!r} is a value, not a group: it has no sub-keys")
    try:
        return dataclasses.replace(cfg, **changes)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid config: {error}") from error


def _optional_dataclass(hint: Any) -> type | None:
    """The dataclass X of an `X | None` field, else None."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return None
    options = typing.get_args(hint)
    classes = [o for o in options if dataclasses.is_dataclass(o)]
    return classes[0] if type(None) in options and len(classes) == 1 else None


def _means_none(values: dict[str, Any]) -> bool:
    """Whether the overrides of a field set it to None (None, "none" or "null")."""
    if set(values) != {""}:
        return False
    value = values[""]
    return value is None or (isinstance(value, str) and value.lower() in ("none", "null"))


def _override_nested(current: Any, values: dict[str, Any], path: str, kind_class: Any) -> Any:
    whole = values.pop("", None)
    if dataclasses.is_dataclass(whole):
        current = whole
    elif isinstance(whole, str):
        values.setdefault("kind", whole)
    elif whole is not None:
        raise ConfigError(f"{path}={whole!r}: give a config, a dict of its fields or a kind name")
    kind = values.get("kind")
    if kind is not None and kind != getattr(current, "kind", kind):
        if kind_class is None:
            raise ConfigError(f"{path}.kind cannot be changed here")
        current = kind_class(path, kind)()
    return apply_overrides(current, values, kind_class, prefix=path + ".")


def coerce(value: Any, hint: Any, name: str) -> Any:
    """`value` as type `hint`; strings are parsed (CLI), other values are type-checked."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        is_none = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
        if is_none and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(value, option, name)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{name}={value!r} has the wrong type")
    if origin is typing.Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")
        return value
    if hint is bool:
        if isinstance(value, str) and value.lower() in (*YES, "false", "0", "no", "off"):
            return value.lower() in YES
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name}={value!r} must be true or false (or 1/0, yes/no, on/off)")
    elif hint is int:
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:
                pass
        elif isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        elif isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:
        return value
    raise ConfigError(f"{name}={value!r} must be of type {getattr(hint, '__name__', hint)}")


def parse_overrides(items: list[str]) -> dict[str, str]:
    """["--model.d_model", "256", "--train.lr=3e-4"] -> {"model.d_model": "256", ...}."""
    overrides: dict[str, str] = {}
    i = 0
    while i < len(items):
        item = items[i]
        if not item.startswith("--") or "." not in item.split("=", 1)[0]:
            raise FormersError(
                f"unrecognised argument {item!r}: config overrides look like "
                "--model.d_model 256 or --train.lr=3e-4"
            )
        key, eq, value = item[2:].partition("=")
        if not eq:
            if i + 1 >= len(items) or items[i + 1].startswith("--"):
                raise FormersError(f"--{key} needs a value, e.g. --{key} VALUE")
            value = items[i + 1]
            i += 1
        overrides[key] = value
        i += 1
    return overrides


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"d_model": 256}} -> {"model.d_model": 256}; nested configs stay addressable."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
