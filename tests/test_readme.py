"""The README's Python blocks run as written (a stale example is a bug users hit first)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index):
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {})


COMMANDS = [
    line.strip()
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    for line in block.splitlines()
    if line.strip().split(" #")[0].strip() in ("formers presets", "formers data list")
]


def test_the_readme_shows_the_quick_commands():
    assert {c.split(" #")[0].strip() for c in COMMANDS} == {"formers presets", "formers data list"}


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_quick_commands_run(command):
    words = command.split(" #")[0].split()
    result = subprocess.run(
        [sys.executable, "-m", "formers", *words[1:]], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout, result.stderr


def test_the_readmes_slow_test_command_finds_tests():
    # `bash scripts/test.sh -m slow` must run something
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow"],
        capture_output=True,
        text=True,
        cwd=README.parent,
    )
    counts = result.stdout.strip().splitlines()[-1]  # "2/611 tests collected (609 deselected)"
    assert result.returncode == 0 and not counts.startswith("0/"), counts
