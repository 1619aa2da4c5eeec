"""The GPU section of docs/benchmarks.md, from the runs of scripts/gpu_check.sh.

    python scripts/gpu_report.py runs/gpu-check-*                  print the section
    python scripts/gpu_report.py runs/a runs/b --write docs/benchmarks.md
    python scripts/gpu_report.py runs/gpu-check-* --targets        the targets, met or not

Each argument is a gpu_check.json or a folder holding one; a later run's parts replace an
earlier run's, so a second run of the parts the first did not reach completes the section.
--write replaces what lies between the markers `<!-- gpu-check:begin -->` and
`<!-- gpu-check:end -->` of the file. Every table is shown under the command that measured it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_compile  # noqa: E402  (benchmarks/ is a folder of scripts)

from formers.bench.report import compile_table, main_table  # noqa: E402
from formers.bench.sweep_report import crossing_table, sweep_table  # noqa: E402
from formers.bench.tables import aligned  # noqa: E402

BEGIN, END = "<!-- gpu-check:begin -->", "<!-- gpu-check:end -->"
ROW_NAMES = {
    "vanilla:bare": "a bare PyTorch GPT (pre-LN, learned positions, SDPA causal, tied)",
    "vanilla:formers": "formers `vanilla` matched to it (norm pre, position learned, GELU, tied)",
    "vanilla:hf-gpt2": "Hugging Face `GPT2LMHeadModel`",
    "vanilla:x-transformers": "x-transformers `Decoder` (attn_flash)",
}


def load_runs(paths: list[Path]) -> dict[str, Any]:
    """The runs merged: the last run's machine and start, each part from the last run with it."""
    merged: dict[str, Any] = {"parts": {}, "runs": []}
    for path in paths:
        path = path / "gpu_check.json" if path.is_dir() else path
        run = json.loads(path.read_text())
        device = (run.get("env") or {}).get("device_name")
        merged["runs"].append(
            {"path": str(path), "started": run["started"], "dry": run["dry"], "device": device}
        )
        merged["env"] = run.get("env", merged.get("env"))
        for name, part in run["parts"].items():
            if part["status"] != "not run" or name not in merged["parts"]:
                merged["parts"][name] = part
    merged["dry"] = any(r["dry"] for r in merged["runs"])
    return merged


def shown(command: str) -> str:
    """A recorded command as a reader runs it: `formers` for `python3 -m formers`, and the
    run's scratch folder as runs/gpu-check."""
    command = command.replace("python3 -m formers ", "formers ")
    return re.sub(r"\S*/formers-gpu-check\.\w+", "runs/gpu-check", command)


def result(runs: dict[str, Any], name: str) -> Any:
    part = runs["parts"].get(name)
    return None if part is None else part["result"]


def commands(runs: dict[str, Any], names: list[str]) -> list[str]:
    """The parts' commands as a reader runs them, each with how it ended unless it finished."""
    lines = []
    for name in names:
        part = runs["parts"].get(name)
        if part is not None:
            ended = "" if part["status"] == "ok" else f"  # {part['status']}, {part['seconds']:g} s"
            lines.append(shown(part["command"]) + ended)
    return ["```bash", *lines, "```", ""] if lines else []


def part_section(runs: dict[str, Any], names: list[str], body: list[str]) -> list[str]:
    """A part's commands and its tables, or what there is instead."""
    if not any(name in runs["parts"] for name in names):
        return ["Not run.", ""]
    if not body:
        return [*commands(runs, names), "No results.", ""]
    return [*commands(runs, names), *body, ""]


def heading(runs: dict[str, Any]) -> list[str]:
    env = runs.get("env") or {}
    memory = env.get("gpu_memory_bytes")
    device = env.get("device_name") or "no GPU"
    if memory:
        device += f" ({memory / 2**30:.0f} GiB)"
    libraries = ", ".join(
        f"{name} {env[name]}"
        for name in ("triton", "transformers", "x-transformers")
        if env.get(name)
    )
    started = ", ".join(r["started"] for r in runs["runs"])
    lines = [
        f"{device}, torch {env.get('torch')} (CUDA {env.get('torch_cuda')}), {libraries}; "
        f"driver and GPU as nvidia-smi reports them: {env.get('nvidia_smi')}. Run {started}.",
    ]
    machines = {r["device"] for r in runs["runs"] if r["device"]}
    if len(machines) > 1:
        lines += ["", f"**The runs ran on different GPUs ({', '.join(sorted(machines))}): compare "
                  "numbers within one part only.**"]  # fmt: skip
    if runs["dry"]:
        lines += ["", "**A dry run on the CPU at tiny sizes: it checks the plumbing and measures "
                  "nothing.**"]  # fmt: skip
    tests = result(runs, "tests")
    if tests:
        counts = f"{tests['passed']} passed, {tests['failures']} failed, {tests['errors']} errors"
        lines += ["", f"`gpu` tests: {counts}, {tests['skipped']} skipped of {tests['tests']}."]
        lines += [f"- failed: `{f['test']}`: {f['message']}" for f in tests["failed"]]
    return lines


def peers_table(runs: dict[str, Any]) -> list[str]:
    """Eager and compiled rows side by side; ratios against formers' vanilla row."""
    eager = {r["row"]: r for r in (result(runs, "peers") or {}).get("rows", [])}
    compiled = {
        r["row"].removesuffix("+compile"): r
        for r in (result(runs, "peers-compiled") or {}).get("rows", [])
    }
    names = list(dict.fromkeys([*eager, *compiled]))
    if not names:
        return ["No rows."]

    def cell(record: dict[str, Any] | None, reference: dict[str, Any] | None) -> str:
        if record is None:
            return "not run"
        if record["status"] != "ok":
            return f"{record['status']} {record['note']}".strip()
        text = f"{record['tokens_per_second']:,.0f}"
        if reference and reference.get("status") == "ok" and reference is not record:
            text += f" ({record['tokens_per_second'] / reference['tokens_per_second']:.2f}×)"
        return text

    def number(record: dict[str, Any] | None, key: str, fmt: str) -> str:
        ok = record is not None and record["status"] == "ok" and record.get(key) is not None
        return fmt.format(record[key]) if ok else "—"

    rows = []
    for name in names:
        e, c = eager.get(name), compiled.get(name)
        label = ROW_NAMES.get(name, f"formers `{name.split(':')[0]}`")
        note = next((r["note"] for r in (e, c) if r and r["status"] == "ok" and r["note"]), "")
        rows.append([
            label + (f" ({note})" if note else ""),
            cell(e, eager.get("vanilla:formers")),
            cell(c, compiled.get("vanilla:formers")),
            number(c, "compile_seconds", "{:.1f}"),
            number(e, "max_over_min", "{:.2f}"),
            number(c, "max_over_min", "{:.2f}"),
            gigabytes(e),
        ])  # fmt: skip
    header = ["model", "eager tokens/s", "compiled tokens/s", "compile s", "eager max/min"]
    header += ["compiled max/min", "peak memory (eager)"]
    found = result(runs, "peers") or result(runs, "peers-compiled")
    shape, settings = found["shape"], found["settings"]
    precision = " and ".join(
        "bf16 autocast" if name == "bf16" else name for name in settings["precisions"]
    )
    warm = settings["warmup"]
    return [
        f"{shape['n_layers']} layers, d_model {shape['d_model']}, {shape['n_heads']} heads, "
        f"d_ff {shape['d_ff']}, vocabulary {shape['vocab']:,}, batch {shape['batch']} × "
        f"{shape['seq_len']:,} random tokens; {precision}, AdamW (fused where "
        f"torch has it), clipping; the median of {settings['repeats']} steps after "
        f"{max(warm, 2)} warm-up steps ({max(warm, 3)} compiled), one process per row; "
        "(×): over formers `vanilla`'s row. Peak memory: the process's "
        "`torch.cuda.max_memory_allocated`.",
        "",
        aligned(header, rows),
    ]


def gigabytes(record: dict[str, Any] | None) -> str:
    """A row's peak memory in GB, or '—'."""
    peak = record and record["status"] == "ok" and record.get("peak_memory_bytes")
    return f"{peak / 1e9:.1f} GB" if peak else "—"


def bench_tables(report: dict[str, Any], *, compiled: bool = False) -> list[str]:
    lines = [main_table(report)]
    if compiled and "compile" in report:
        lines += ["", compile_table(report["compile"])]
    if "sweep" in report:
        lines += ["", sweep_table(report["sweep"]), "", crossing_table(report["sweep"])]
    if report.get("partial"):
        lines += ["", "(cut short: the tables hold what was measured before it was stopped)"]
    return lines


def section(runs: dict[str, Any]) -> str:
    """The generated section's markdown, between the markers."""
    lines = [BEGIN, "", *heading(runs), ""]
    lines += ["### GPT-2 small: formers, a bare PyTorch GPT, Hugging Face and x-transformers", ""]
    peers = ["peers", "peers-compiled"]
    has_rows = any(result(runs, name) for name in peers)
    lines += part_section(runs, peers, peers_table(runs) if has_rows else [])
    for name, title, compiled in (
        ("sweep", "Long sequences, eager (`formers bench --sweep`)", False),
        ("mlm", "Masked LM at 8,192 tokens: `linformer` against `bert`", False),
        ("compile", "Each preset's training step, eager and compiled (`formers bench "
         "--compile`)", True),
    ):  # fmt: skip
        report = result(runs, name)
        body = bench_tables(report, compiled=compiled) if isinstance(report, dict) else []
        lines += [f"### {title}", "", *part_section(runs, [name], body)]
    train = result(runs, "train-compile")
    body = [train_compile.format_table(train["runs"])] if train and train.get("runs") else []
    lines += ["### `formers train --train.compile`, through the trainer", ""]
    lines += [*part_section(runs, ["train-compile"], body), END]
    return "\n".join(lines) + "\n"


def write_section(path: Path, text: str) -> None:
    """Replace what lies between the markers of `path` (markers included) by `text`."""
    doc = path.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(
            f"error: {path} has no {BEGIN} … {END} pair: put the two markers where the "
            "generated section goes"
        )
    before, rest = doc.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    path.write_text(before + text.rstrip("\n") + after)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="gpu_check.json files or their folders")
    p.add_argument("--write", type=Path, help="replace the section in this markdown file")
    p.add_argument("--targets", action="store_true", help="print the targets, met or not")
    p.add_argument(
        "--allow-dry", action="store_true", help="write a dry run's section (it measures nothing)"
    )
    args = p.parse_args(argv)
    runs = load_runs(args.runs)
    if args.targets:
        from gpu_targets import targets_table

        print(targets_table(runs))
        return 0
    text = section(runs)
    if args.write is None:
        print(text, end="")
        return 0
    if runs["dry"] and not args.allow_dry:
        raise SystemExit(
            "error: a dry run (GPU_CHECK_DRY=1) measures nothing; leave it out, or pass "
            "--allow-dry to write it all the same"
        )
    write_section(args.write, text)
    print(f"wrote the GPU section of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
