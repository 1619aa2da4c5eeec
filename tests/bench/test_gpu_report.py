"""scripts/gpu_report.py: the GPU section of docs/benchmarks.md from the JSON of
scripts/gpu_check.sh. The parts' results are real ones at tiny sizes on the CPU, made here in
this process; the tables must carry their numbers and ratios, a later run's parts must replace
an earlier run's, and the section must replace only what lies between its markers."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
gpu_report = pytest.importorskip("gpu_report")
gpu_targets = pytest.importorskip("gpu_targets")
peer_rows = pytest.importorskip("peer_rows")
train_compile = pytest.importorskip("train_compile")

from formers.bench.measure import run_bench  # noqa: E402
from formers.bench.settings import BenchSettings  # noqa: E402

TINY = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab_size": 64}
SCRATCH = "/tmp/formers-gpu-check.AB12cd"  # gpu_check.sh's scratch folder
SHAPE = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, vocab=64, seq_len=16, batch=2,
             mem_len=16)  # fmt: skip


@pytest.fixture(scope="module")
def parts() -> dict:
    """Each part's result as gpu_check.sh records it, measured here at tiny sizes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        settings = peer_rows.RowSettings(SHAPE, ("fp32",), "cpu", 2, 1, "eager", 60.0)
        rows = [peer_rows.Row("vanilla", name, False) for name in ("bare", "formers")]
        eager = [peer_rows.measure_row(row, "fp32", settings, print) for row in rows]
        compiled_row = peer_rows.Row("vanilla", "formers", True)
        compiled = [peer_rows.measure_row(compiled_row, "fp32", settings, print)]
        bench = BenchSettings(
            presets=("vanilla", "longformer"), overrides=TINY, seq_len=16, batch_size=2,
            gen_tokens=0, precision="fp32", device="cpu", repeats=2, warmup=1, sweep=(8, 16),
            sweep_fresh_process=False, matmul_size=32, compile=True, compile_backend="eager",
            compile_fresh_process=False,
        )  # fmt: skip
        report = run_bench(bench)
        mlm = run_bench(BenchSettings(
            presets=("bert", "linformer"), overrides=TINY, seq_len=16, batch_size=2,
            precision="fp32", device="cpu", repeats=2, warmup=1, matmul_size=32,
        ))  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    records = [{"tokens": 64 * (i + 1), "tokens_per_s": 640.0 / (1 + (i == 0))} for i in range(4)]
    train_runs = [
        {"preset": "vanilla", "mode": mode, "status": "ok", "note": "", "graphs": 1,
         "graph_breaks": 0, **train_compile.summarise(records, 1)}
        for mode in ("eager", "compiled")
    ]  # fmt: skip
    recorded = {"shape": SHAPE, "settings": dataclasses.asdict(settings)}
    return {
        "peers": {**recorded, "rows": eager},
        "peers-compiled": {**recorded, "rows": compiled},
        "compile": report,
        "sweep": report,
        "mlm": mlm,
        "train-compile": {"runs": train_runs},
        "tests": {
            "tests": 3,
            "passed": 2,
            "failures": 1,
            "errors": 0,
            "skipped": 0,
            "failed": [{"test": "t::x", "message": "boom"}],
        },  # fmt: skip
    }


def write_run(
    folder: Path, parts: dict, names: list[str], status: str = "ok", device: str = "Test GPU"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "started": "then",
        "dry": False,
        "env": {"device_name": device, "torch": "2.x", "torch_cuda": "13.0"},
        "parts": {
            name: {
                "command": f"python3 -m formers bench --{name} --out {SCRATCH}/x",
                "status": status,
                "seconds": 1.0,
                "result": parts[name] if status == "ok" else None,
            }
            for name in names
        },
    }
    (folder / "gpu_check.json").write_text(json.dumps(record))
    return folder


def cells(text: str, first: str) -> list[str]:
    row = next(line for line in text.splitlines() if line.startswith(f"| {first}"))
    return [cell.strip() for cell in row.split("|")[1:-1]]


def test_the_section_carries_each_parts_numbers_under_its_command(tmp_path, parts):
    run = write_run(tmp_path / "run", parts, list(parts))
    text = gpu_report.section(gpu_report.load_runs([run]))
    assert text.startswith(gpu_report.BEGIN) and text.rstrip().endswith(gpu_report.END)
    assert "formers bench --compile --out runs/gpu-check/x" in text  # as a reader runs it
    assert "Test GPU, torch 2.x (CUDA 13.0)" in text
    assert "2 passed, 1 failed, 0 errors, 0 skipped of 3" in text and "`t::x`: boom" in text
    bare, ours = parts["peers"]["rows"]
    (compiled,) = parts["peers-compiled"]["rows"]
    row = cells(text, "a bare PyTorch GPT")
    ratio = bare["tokens_per_second"] / ours["tokens_per_second"]
    assert row[1] == f"{bare['tokens_per_second']:,.0f} ({ratio:.2f}×)"  # over formers vanilla
    assert row[2] == "not run"
    row = cells(text, "formers `vanilla` matched")
    assert row[1] == f"{ours['tokens_per_second']:,.0f}"
    assert row[2] == f"{compiled['tokens_per_second']:,.0f}"
    assert row[3] == f"{compiled['compile_seconds']:.1f}"
    for heading in ("Long sequences", "Masked LM", "eager and compiled", "--train.compile"):
        assert heading in text
    assert "eager warm-up s" in text  # the trainer's table
    sweep = parts["sweep"]["sweep"]
    point = next(r for r in sweep["runs"] if r["preset"] == "longformer" and r["seq_len"] == 16)
    rows = [line.split("|")[1:-1] for line in text.splitlines()]
    row = next(r for r in rows if [c.strip() for c in r[:2]] == ["longformer (longformer)", "16"])
    assert row[3].strip() == f"{point['train']['tokens_per_second']:,.0f}"


def test_a_later_runs_parts_replace_an_earlier_runs(tmp_path, parts):
    first = write_run(tmp_path / "a", parts, ["peers", "sweep"], status="over time limit")
    second = write_run(tmp_path / "b", parts, ["sweep", "mlm"], device="Other GPU")
    runs = gpu_report.load_runs([first, second])
    assert runs["parts"]["sweep"]["status"] == "ok"  # the second run's
    assert runs["parts"]["peers"]["status"] == "over time limit"  # only the first had it
    text = gpu_report.section(runs)
    assert "# over time limit, 1 s" in text and "No results." in text
    assert "ran on different GPUs (Other GPU, Test GPU)" in text
    assert text.count("Not run.") == 2  # compile and train-compile


def test_the_section_replaces_only_what_lies_between_its_markers(tmp_path, parts):
    doc = tmp_path / "doc.md"
    doc.write_text(f"before\n{gpu_report.BEGIN}\nold\n{gpu_report.END}\nafter\n")
    run = write_run(tmp_path / "run", parts, ["mlm"])
    assert gpu_report.main([str(run), "--write", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith(f"before\n{gpu_report.BEGIN}\n") and text.endswith(
        f"{gpu_report.END}\nafter\n"
    )
    assert "old" not in text and "linformer" in text


def test_a_dry_run_is_not_written_into_the_docs_unless_asked(tmp_path, parts):
    run = write_run(tmp_path / "run", parts, ["mlm"])
    record = json.loads((run / "gpu_check.json").read_text())
    (run / "gpu_check.json").write_text(json.dumps({**record, "dry": True}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"{gpu_report.BEGIN}\n{gpu_report.END}\n")
    with pytest.raises(SystemExit, match="a dry run"):
        gpu_report.main([str(run), "--write", str(doc)])
    assert gpu_report.main([str(run), "--write", str(doc), "--allow-dry"]) == 0
    assert "A dry run on the CPU" in doc.read_text()


def test_the_docs_hold_the_markers():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert text.count(gpu_report.BEGIN) == 1 and text.count(gpu_report.END) == 1


def test_targets_are_judged_from_the_measured_ratios(tmp_path, parts):
    mlm = parts["mlm"]["results"]
    sweep = json.loads(json.dumps(parts["sweep"]))
    for run in sweep["sweep"]["runs"]:  # as if measured at the targets' lengths
        run["seq_len"] = {8: 8192, 16: 32768}[run["seq_len"]]
    folder = write_run(tmp_path / "run", {**parts, "sweep": sweep}, list(parts))
    table = gpu_targets.targets_table(gpu_report.load_runs([folder]))
    ratio = mlm["linformer"]["train"]["tokens_per_second"]
    ratio /= mlm["bert"]["train"]["tokens_per_second"]
    row = cells(table, "linformer ≥ 2× bert")
    assert row[1] == f"{ratio:.2f}×" and row[2] == ("met" if ratio >= 2 else "missed")
    at = {(r["preset"], r["seq_len"]): r for r in sweep["sweep"]["runs"]}
    mine, full = at["longformer", 32768]["train"], at["vanilla", 32768]["train"]
    ratio = mine["tokens_per_second"] / full["tokens_per_second"]
    row = cells(table, "longformer ≥ 3.0× vanilla at 32,768")
    assert row[1] == f"{ratio:.2f}×" and row[2] == ("met" if ratio >= 3 else "missed")
    assert cells(table, "vanilla compiled ≥ 1.0× bare")[1:] == ["not measured", "—"]
    assert cells(table, "routing ≥ 2.0× vanilla at 32,768")[1] == "not measured"
