"""Commands that train nothing start without torch and the other heavy libraries: importing
torch alone takes seconds on a small CPU. Nothing is timed here; what is checked is which
modules a command imports (in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Imported by no command that only reads configs, lists or prints help.
HEAVY = ("torch", "numpy", "tokenizers", "safetensors", "sacrebleu", "matplotlib", "transformers")

PROBE = """
import contextlib, io, json, sys
from formers.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    try:
        code = main(sys.argv[1:])
    except SystemExit as end:  # --help
        code = end.code
print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def imported_by(argv: list[str]) -> tuple[int, set[str]]:
    """The exit status of `formers ARGV` and the top-level packages it imported."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    return report["code"], set(report["modules"])


@pytest.mark.parametrize(
    "argv",
    [
        ["presets"],
        ["data", "list"],
        ["config", "vanilla"],
        ["config", "primer-xl", "--model.attention.mem_len", "64", "--train.lr", "3e-4"],
        ["--help"],
        *([command, "--help"] for command in ("train", "eval", "generate", "import", "compare")),
    ],
    ids=" ".join,
)
def test_a_command_that_trains_nothing_imports_no_heavy_library(argv):
    code, modules = imported_by(argv)
    assert code == 0
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_the_probe_sees_torch_when_a_command_needs_it(tmp_path):
    # the check above could pass by never looking: `formers eval` of a missing run gets as far as
    # loading, which imports torch
    code, modules = imported_by(["eval", str(tmp_path / "no-run")])
    assert code == 2 and "torch" in modules


def test_the_torch_free_config_tables_name_the_modules_config_classes():
    from formers.config_kinds import ATTENTION_CONFIG, FFN_CONFIG
    from formers.registry import ATTENTION, FFN

    assert ATTENTION_CONFIG.keys() == ATTENTION.keys()
    assert FFN_CONFIG.keys() == FFN.keys()
    for configs, modules in ((ATTENTION_CONFIG, ATTENTION), (FFN_CONFIG, FFN)):
        for kind, module in modules.items():
            assert configs[kind] is module.config_class, kind
            assert configs[kind]().kind == kind


def test_the_import_commands_help_lists_every_family():
    from formers.commands.import_model import ARCHITECTURES
    from formers.pretrained import FAMILIES

    assert tuple(sorted(FAMILIES)) == ARCHITECTURES


def test_a_lazy_export_is_the_modules_own_object():
    import formers
    import formers.models
    import formers.variants.xl.attention
    from formers.variants.xl import RelativeMultiHeadAttention

    assert formers.build is formers.models.build
    assert RelativeMultiHeadAttention is formers.variants.xl.attention.RelativeMultiHeadAttention
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        formers.nonexistent  # noqa: B018


EXPORTING_PACKAGES = (
    "formers", "formers.data", "formers.infer", "formers.pretrained", "formers.variants.linformer",
    "formers.variants.longformer", "formers.variants.primer_ez", "formers.variants.routing",
    "formers.variants.switch", "formers.variants.topk", "formers.variants.xl",
    "formers.variants.xl_primer",
)  # fmt: skip


@pytest.mark.parametrize("name", EXPORTING_PACKAGES)
def test_every_export_stays_itself_once_every_submodule_is_imported(name):
    # importing a submodule sets the package's attribute of its name: an export of the same
    # name (`formers.infer.translate`, the function, and formers/infer/translate.py) must be
    # bound after it, not looked up lazily, or it becomes the module
    import importlib
    import pkgutil
    import types

    package = importlib.import_module(name)
    for sub in pkgutil.iter_modules(package.__path__):
        if sub.name != "__main__":  # that one runs the command
            importlib.import_module(f"{name}.{sub.name}")
    for export in package.__all__:
        assert not isinstance(getattr(package, export), types.ModuleType), f"{name}.{export}"
