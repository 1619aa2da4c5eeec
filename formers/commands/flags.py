"""A flag that remembers it was given, so a command can refuse a flag that does not apply even
when its value equals the default (`formers eval RUN --beam 4` on a language model)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

GIVEN = "given_flags"  # Namespace attribute: dest -> the option string typed


class GivenFlag(argparse.Action):
    """Stores the value as argparse's default action does, and records the option string."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        given = dict(getattr(namespace, GIVEN, {}))
        given[self.dest] = option_string or self.dest
        setattr(namespace, GIVEN, given)


def given_flags(args: argparse.Namespace, defaults: dict[str, Any]) -> list[str]:
    """The flags among `defaults`' keys (dests) given on the command line, as typed; a value
    set another way (a Namespace made in Python) counts when it differs from the default."""
    typed = getattr(args, GIVEN, {})
    return [
        typed.get(name, "--" + name.replace("_", "-"))
        for name, default in defaults.items()
        if name in typed or getattr(args, name) != default
    ]


def verb_and_pronoun(flags: Sequence[str]) -> tuple[str, str]:
    """("does", "it") for one flag, ("do", "them") for several: the words of "FLAGS do not
    apply …: leave them out"."""
    return ("do", "them") if len(flags) > 1 else ("does", "it")
