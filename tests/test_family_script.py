"""scripts/family.sh, the one command of docs/family.md: every spec it runs exists and is shown
on the page, a failed comparison does not stop the others, Ctrl-C stops them all, and a spec
written for one thread runs on one thread."""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "family.sh"


def script_specs() -> list[str]:
    """The names in the script's ALL=(...) list."""
    match = re.search(r"^ALL=\((.*?)\)", SCRIPT.read_text(), re.S | re.M)
    assert match, "scripts/family.sh has no ALL=(...) list"
    return match.group(1).split()


def fake_formers(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose `formers` command is a script running `body`."""
    fake = tmp_path / "formers"
    fake.write_text(f"#!/usr/bin/env bash\n{body}\n")
    fake.chmod(0o755)
    return {**os.environ, "FORMERS": str(fake)}


def test_every_spec_the_script_runs_exists_and_is_on_the_family_page():
    page = (ROOT / "docs" / "family.md").read_text()
    names = script_specs()
    assert "family-lm" in names and "family-mlm" in names
    for name in names:
        assert (ROOT / "experiments" / f"{name}.yaml").is_file(), name
        assert f"formers compare --spec experiments/{name}.yaml --out runs/{name}" in page, name


def test_a_failed_comparison_is_logged_and_the_next_one_runs(tmp_path):
    # fails for the first spec, succeeds for the second; records each call and its threads
    log = tmp_path / "calls"
    env = fake_formers(
        tmp_path,
        f'echo "$3 ${{OMP_NUM_THREADS:-all}}" >> {log}; [ "$3" != experiments/family-lm.yaml ]',
    )
    result = subprocess.run(
        ["bash", str(SCRIPT), "family-lm", "xl-recurrence"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert log.read_text().splitlines() == [
        "experiments/family-lm.yaml all",  # its command names no thread count
        "experiments/xl-recurrence.yaml 1",  # its command runs on one thread
    ]
    assert "FAILED family-lm (exit 1)" in result.stderr
    assert "failed: family-lm" in result.stderr
    assert "done xl-recurrence: runs/xl-recurrence/report.md" in result.stdout


def test_ctrl_c_stops_the_whole_sequence(tmp_path):
    log = tmp_path / "calls"
    # a comparison that saves its run and exits 130 on Ctrl-C, as formers compare does
    env = fake_formers(tmp_path, f"trap 'exit 130' INT; echo \"$3\" >> {log}; sleep 5 & wait")
    process = subprocess.Popen(
        ["bash", str(SCRIPT), "xl-recurrence", "linformer-k"],
        env=env,
        start_new_session=True,
        # as from a terminal: a test run in the background inherits SIGINT ignored, and bash
        # cannot trap a signal ignored on entry
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60  # a loaded machine starts the first comparison late
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends: the whole process group
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130
    assert log.read_text().splitlines() == ["experiments/xl-recurrence.yaml"]
    assert "stopped; the same command continues" in stderr


def test_a_comparison_stopped_from_outside_stops_the_sequence(tmp_path):
    """`kill` of the running comparison alone (SIGTERM, exit 143, as when it is stopped in its
    final evaluation) stops the sequence, not only that comparison."""
    log, pid = tmp_path / "calls", tmp_path / "pid"
    env = fake_formers(tmp_path, f'echo "$3" >> {log}; echo $$ > {pid}; exec sleep 5')
    process = subprocess.Popen(
        ["bash", str(SCRIPT), "xl-recurrence", "linformer-k"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pid.exists() and pid.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(int(pid.read_text()), signal.SIGTERM)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130
    assert log.read_text().splitlines() == ["experiments/xl-recurrence.yaml"]
    assert "stopped; the same command continues" in stderr and "FAILED" not in stderr
