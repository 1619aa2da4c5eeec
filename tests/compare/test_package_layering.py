"""formers/compare (the experiment harness) sits above formers/bench (speed and memory): compare
may use bench's plots and timing, bench never imports compare (docs/architecture.md)."""

import ast
from pathlib import Path

import formers

PACKAGE = Path(formers.__file__).parent


def formers_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "formers":
                names.update(f"formers.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name.startswith("formers")}


def test_bench_never_imports_the_compare_harness():
    for path in sorted((PACKAGE / "bench").rglob("*.py")):
        up = sorted(n for n in formers_imports(path) if n.startswith("formers.compare"))
        assert not up, f"formers/bench/{path.name} imports {up}"


def test_the_harness_lives_in_compare_and_bench_holds_no_comparison_module():
    assert (PACKAGE / "compare" / "harness.py").exists()
    assert not sorted((PACKAGE / "bench").glob("compare*.py"))
