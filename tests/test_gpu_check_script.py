"""scripts/gpu_check.sh, the one command of the CUDA measurements: its parts run in order under
their time limits and one budget, a part over its limit is ended and the next one runs, a part
the budget does not reach is recorded as not run, and each part's results land in
gpu_check.json. Run with a stand-in python that only writes what each part would (fast); the
real parts at tiny sizes on the CPU are the slow test at the end."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
PARTS = ["env", "tests", "peers", "sweep", "mlm", "peers-compiled", "compile", "train-compile"]

FAKE = """#!/usr/bin/env bash
# a stand-in python: the record script runs for real, every part writes a small result
echo "$*" >>"$CALLS"
if [ "$1" = scripts/gpu_check_record.py ]; then exec "$REAL_PYTHON" "$@"; fi
case " $* " in *" $SLOW "*) sleep 60 ;; esac
args=("$@")
for i in "${!args[@]}"; do
  case "${args[$i]}" in
    --json) echo '{"rows": [], "runs": []}' >"${args[$((i + 1))]}" ;;
    --out) mkdir -p "${args[$((i + 1))]}"
      echo '{"results": {}}' >"${args[$((i + 1))]}/bench.json" ;;
    --junitxml) echo '<testsuite tests="2" failures="0" errors="0" skipped="1">
      <testcase classname="t" name="a"/><testcase classname="t" name="b"><skipped/></testcase>
      </testsuite>' >"${args[$((i + 1))]}" ;;
  esac
done
"""


def run_script(tmp_path: Path, *parts: str, slow: str = "none", **env: str):
    fake = tmp_path / "python"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    out = tmp_path / "out"
    environ = {
        **os.environ,
        "OUT": str(out),
        "GPU_CHECK_PYTHON": str(fake),
        "REAL_PYTHON": sys.executable,
        "CALLS": str(tmp_path / "calls"),
        "SLOW": slow,
        **env,
    }
    done = subprocess.run(
        ["bash", str(SCRIPT), *parts], cwd=ROOT, env=environ, capture_output=True, text=True
    )
    record = json.loads((out / "gpu_check.json").read_text()) if done.returncode == 0 else None
    return done, record, out


def test_every_part_runs_in_order_and_lands_in_one_json(tmp_path):
    done, record, out = run_script(tmp_path)
    assert done.returncode == 0, done.stderr
    assert list(record["parts"]) == PARTS
    assert all(part["status"] == "ok" for part in record["parts"].values())
    assert record["parts"]["tests"]["result"]["passed"] == 1
    assert record["parts"]["tests"]["result"]["skipped"] == 1
    assert record["parts"]["peers"]["result"] == {"rows": [], "runs": []}
    assert record["parts"]["compile"]["result"] == {"results": {}}
    assert "python3 -m formers bench --device cuda" in record["parts"]["compile"]["command"]
    assert "--compile" in record["parts"]["compile"]["command"]
    assert "--sweep 1024 4096 8192 32768 65536" in record["parts"]["sweep"]["command"]
    assert record["dry"] is False and record["budget_seconds"] == 450
    with tarfile.open(out / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "./sweep/bench.json" in names and "./peers.json" in names
    log = (out / "gpu_check.log").read_text()
    assert all(f"== {part}: ok in" in log for part in PARTS)


def test_a_part_over_its_limit_is_ended_and_the_next_part_runs(tmp_path):
    done, record, _ = run_script(tmp_path, "sweep", "mlm", slow="--sweep", GPU_CHECK_PART_LIMIT="3")
    assert done.returncode == 0, done.stderr
    assert record["parts"]["sweep"]["status"] == "over time limit"
    assert record["parts"]["sweep"]["seconds"] < 30  # ended at 3 s, not after its 60 s
    assert record["parts"]["mlm"]["status"] == "ok"


def test_parts_the_budget_does_not_reach_are_recorded_as_not_run(tmp_path):
    done, record, _ = run_script(
        tmp_path, "tests", "peers", "compile", slow="pytest",
        GPU_CHECK_BUDGET="14", GPU_CHECK_PART_LIMIT="6",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    statuses = {name: part["status"] for name, part in record["parts"].items()}
    assert statuses == {"tests": "over time limit", "peers": "not run", "compile": "not run"}
    calls = (tmp_path / "calls").read_text().splitlines()
    assert not any(call.startswith("benchmarks/peers.py") for call in calls)  # never started


def test_an_unknown_part_is_refused_naming_the_parts(tmp_path):
    done, _, _ = run_script(tmp_path, "peer")
    assert done.returncode == 2
    assert "no part peer (parts: env tests peers" in done.stderr


@pytest.mark.slow
def test_a_dry_run_measures_every_part_on_the_cpu_and_reports_it(tmp_path):
    out = tmp_path / "out"
    environ = {**os.environ, "OUT": str(out), "GPU_CHECK_DRY": "1",
               "GPU_CHECK_PYTHON": sys.executable}  # fmt: skip
    done = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=environ, capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "gpu_check.json").read_text())
    statuses = {name: part["status"] for name, part in record["parts"].items()}
    assert statuses == dict.fromkeys(PARTS, "ok")
    peers = record["parts"]["peers"]["result"]["rows"]
    assert [r["status"] for r in peers if r["candidate"] in ("bare", "formers")] == ["ok"] * 3
    compiled = record["parts"]["compile"]["result"]["compile"]["results"]
    assert all(r["status"] == "ok" for r in compiled.values())
    sweep = record["parts"]["sweep"]["result"]["sweep"]
    assert {r["seq_len"] for r in sweep["runs"]} == {32, 64}
    runs = record["parts"]["train-compile"]["result"]["runs"]
    assert all(r["status"] == "ok" for r in runs), [r["note"] for r in runs]
    report = subprocess.run(
        [sys.executable, "scripts/gpu_report.py", str(out)], cwd=ROOT, capture_output=True,
        text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "A dry run on the CPU" in report.stdout and "Not run." not in report.stdout
