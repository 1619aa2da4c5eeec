"""Names a package exports but imports on first use (PEP 562's module `__getattr__`).

A package whose modules need torch exports them this way, so that what needs no torch (a
config, a preset, the list of corpora) is read without it: importing torch takes most of a
second or more of every command's start-up on a small CPU, and `formers presets`, `formers
config` and `--help` compute nothing with it.

    # formers/variants/topk/__init__.py
    from formers.variants.topk.config import TopKConfig      # no torch: imported at once
    __getattr__ = lazy_exports(__name__, {"TopKAttention": "formers.variants.topk.attention"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: the name `name` is `where[name]`'s attribute of the
    same name, imported the first time it is asked for and kept in the package from then on.

    Args:
        package: the package's `__name__`.
        where: exported name -> the module that defines it (a full dotted name).
    """

    def __getattr__(name: str) -> Any:
        if name not in where:
            # `from package import submodule` then imports the submodule, as without this hook
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
