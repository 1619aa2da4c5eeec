"""scripts/demo.sh, the README's main command: a bad step budget is refused at once."""

import os
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
