"""Record the parts of scripts/gpu_check.sh in one JSON file, rewritten after each part: the
machine and software, then per part its command, exit status, seconds and results (the JSON
it wrote, or the counts of a pytest JUnit file).

    python scripts/gpu_check_record.py --into OUT/gpu_check.json start --dry 0 --budget 450
    python scripts/gpu_check_record.py --into OUT/gpu_check.json env
    python scripts/gpu_check_record.py --into OUT/gpu_check.json part NAME --status ok \
        --seconds 12 --result FILE -- COMMAND ...
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

LIBRARIES = ("torch", "triton", "transformers", "x-transformers", "einx", "numpy")


def software() -> dict[str, Any]:
    """Python, the libraries the benchmarks use, and what torch sees of the GPU."""
    import torch

    found: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        found["device_name"] = props.name
        found["gpu_memory_bytes"] = props.total_memory
        found["multiprocessors"] = props.multi_processor_count
    else:
        found["device_name"] = None
    return found


def nvidia_smi() -> str | None:
    """The driver, the GPU and its memory as nvidia-smi reports them (None: no nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return None
    query = "--query-gpu=name,driver_version,memory.total"
    done = subprocess.run(
        ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True
    )
    return done.stdout.strip() or done.stderr.strip()


def junit_counts(path: Path) -> dict[str, Any]:
    """Tests, failures, errors and skips of a pytest JUnit file, and the failures' names."""
    root = ElementTree.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    counts["skipped"] = sum(int(s.get("skipped", 0)) for s in suites)
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    failed = []
    for case in root.iter("testcase"):
        problem = case.find("failure") if case.find("failure") is not None else case.find("error")
        if problem is not None:
            message = (problem.get("message") or "").strip().splitlines()
            name = f"{case.get('classname')}::{case.get('name')}"
            failed.append({"test": name, "message": message[0][:300] if message else ""})
    counts["failed"] = failed
    return counts


def read_result(path: str) -> Any:
    """A part's results: its JSON, a JUnit file's counts, or None where it left none."""
    if not path or not Path(path).is_file():
        return None
    if path.endswith(".xml"):
        return junit_counts(Path(path))
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:  # cut short while writing
        return {"unreadable": str(error)}


def write(into: Path, record: dict[str, Any]) -> None:
    into.parent.mkdir(parents=True, exist_ok=True)
    into.with_suffix(".tmp").write_text(json.dumps(record, indent=2) + "\n")
    into.with_suffix(".tmp").replace(into)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--into", type=Path, required=True)
    sub = p.add_subparsers(dest="what", required=True)
    start = sub.add_parser("start")
    start.add_argument("--dry", default="0")
    start.add_argument("--budget", type=float, required=True)
    sub.add_parser("env")
    part = sub.add_parser("part")
    part.add_argument("name")
    part.add_argument("--status", required=True)
    part.add_argument("--seconds", type=float, required=True)
    part.add_argument("--result", default="")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else []  # the part's command line
    args = p.parse_args(argv[: len(argv) - len(command) - (1 if "--" in argv else 0)])
    if args.what == "start":
        record = {
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "dry": args.dry == "1",
            "budget_seconds": args.budget,
            "parts": {},
        }
        write(args.into, record)
        return 0
    record = json.loads(args.into.read_text())
    if args.what == "env":
        record["env"] = {**software(), "nvidia_smi": nvidia_smi()}
        print(json.dumps(record["env"], indent=2))
    else:
        record["parts"][args.name] = {
            "command": " ".join(["python3", *command]),
            "status": args.status,
            "seconds": args.seconds,
            "result": read_result(args.result),
        }
    write(args.into, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
