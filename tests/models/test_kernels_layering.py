"""formers/kernels is the floor under every attention kind: it imports torch, the standard
library, formers.errors and itself, and names no variant (docs/architecture.md, "Kernels")."""

import ast
import re
from pathlib import Path

import formers
from formers.registry import ATTENTION, FFN

KERNELS = Path(formers.__file__).parent / "kernels"
ALLOWED = ("formers.kernels", "formers.errors")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_kernels_import_nothing_above_them():
    for path in sorted(KERNELS.glob("*.py")):
        above = [
            name
            for name in imported_modules(path)
            if name.startswith("formers") and not name.startswith(ALLOWED)
        ]
        assert not above, f"{path.name} imports {above}"


def test_kernels_name_no_variant():
    kinds = {kind for kind in (*ATTENTION, *FFN) if kind not in ("vanilla", "dense")}
    names = kinds | {"transformer-xl", "routing transformer", "primer"}
    words = "|".join(re.escape(name) for name in sorted(names))
    pattern = re.compile(rf"\b({words})\b", re.IGNORECASE)
    for path in sorted(KERNELS.glob("*.py")):
        found = sorted({m.group(0).lower() for m in pattern.finditer(path.read_text())})
        assert not found, f"{path.name} names {found}"
