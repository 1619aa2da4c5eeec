"""scripts/demo.sh, the README's main command: a bad step budget is refused at once."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("steps", ["5m", "0", "3", "-10"])
def test_the_demo_refuses_a_step_budget_it_cannot_run(steps, tmp_path):
    venv = tmp_path / "venv"  # refused before the environment is set up: nothing is installed
    env = {**os.environ, "FORMERS_DEMO_STEPS": steps, "FORMERS_VENV": str(venv)}
    result = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and not venv.exists()
    assert result.stderr.splitlines() == [
        f"error: FORMERS_DEMO_STEPS={steps} is not a number of steps of at least 4: set e.g. "
        "FORMERS_DEMO_STEPS=1000"
    ]


@pytest.mark.slow  # trains the demo's model 100 steps, scores the whole valid and test splits
def test_the_demo_says_its_precision_and_pace_before_its_first_evaluation():
    env = {**os.environ, "FORMERS_DEMO_STEPS": "100"}  # evaluations at steps 25, 50 and 75
    result = subprocess.run(
        ["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=1800,
    )  # fmt: skip
    run = re.search(r"in (runs/demo-\S+) ", result.stderr)
    if run is not None:  # the demo's run folder, in the checkout
        shutil.rmtree(ROOT / run.group(1), ignore_errors=True)
    assert result.returncode == 0, result.stderr[-2000:]
    said = [line for line in result.stderr.splitlines() if not line.startswith(" ")]
    first_eval = next(i for i, line in enumerate(said) if line.startswith("step 25: valid"))
    before = said[:first_eval]
    assert before[0].startswith("== training: 100 steps of a 4-layer vanilla Transformer")
    assert any(line.startswith("precision: ") for line in before)
    pace = [line for line in before if line.startswith("pace: ")]
    assert len(pace) == 1 and "steps left take about" in pace[0]
