"""`formers bench --compile`: the compiled training step does the eager step's work, the command
writes eager and compiled columns whose summaries follow from the timed seconds, and a preset
over its time limit is a row that says so. Tiny models, torch.compile's "eager" backend (it
traces and runs the graph without generating code, fast on a CPU); no timing is asserted."""

import copy
import json
import statistics

import pytest
import torch
from helpers import tiny_config

import formers
from formers.bench.compiled import OVER_TIME, dynamo_counts, run_compiled
from formers.bench.measure import bench_configs
from formers.bench.report import compile_table
from formers.bench.settings import BenchSettings
from formers.bench.workloads import TrainStep
from formers.cli import main

CPU = torch.device("cpu")
TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--vocab-size"]
TINY += ["64", "--seq-len", "16", "--batch-size", "2", "--gen-tokens", "0", "--matmul-size", "64"]
TINY += ["--repeats", "3", "--warmup", "2", "--precision", "fp32", "--device", "cpu"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["vanilla", "transformer-xl", "switch"])
def test_a_compiled_training_step_trains_as_the_eager_one(name):
    torch.manual_seed(0)
    eager_model = formers.build(tiny_config(name, dropout=0.0))
    compiled_model = copy.deepcopy(eager_model)
    torch.manual_seed(1)  # the same batch (and XL memory) for both
    eager = TrainStep(eager_model, 2, 12, "fp32", CPU)
    torch.manual_seed(1)
    torch._dynamo.reset()
    compiled = TrainStep(compiled_model, 2, 12, "fp32", CPU, compile_backend="eager")
    for step in (eager, compiled):  # each from the same random state (Switch's router jitter)
        torch.manual_seed(2)
        for _ in range(3):
            step()
    graphs, _, _ = dynamo_counts()
    assert graphs is not None and graphs >= 1  # it did go through torch.compile
    for a, b in zip(eager_model.parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(
            formers.build(tiny_config(name, dropout=0.0)).parameters(),
            eager_model.parameters(),
            strict=True,
        )
    )  # fmt: skip  (and it trained: the weights moved from a fresh model's)


def test_bench_compile_writes_eager_and_compiled_columns(tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["bench", "--presets", "vanilla", *TINY, "--no-plots", "--out", str(out)]
    assert main([*argv, "--compile", "--compile-backend", "eager"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "bench.json").read_text())
    assert "partial" not in report  # the final report replaced the partial ones
    part = report["compile"]
    assert part["backend"] == "eager" and part["fresh_process_per_preset"] is True
    r = part["results"]["vanilla"]
    assert r["status"] == "ok" and r["graphs"] >= 1 and r["graph_breaks"] == 0
    for mode in ("eager", "compiled"):
        seconds = r[mode]["seconds"]
        assert len(seconds) == 3 and r[mode]["tokens_per_call"] == 2 * 16
        assert r[mode]["tokens_per_second"] == pytest.approx(32 / statistics.median(seconds))
        assert r[mode]["max_over_min"] == pytest.approx(max(seconds) / min(seconds))
        assert r[mode]["peak_train_memory_bytes"] > 4 * 4 * report["results"]["vanilla"]["params"]
    warm = r["warmup_seconds"]
    assert len(warm) == 2
    expected = sum(warm) - 2 * statistics.median(r["compiled"]["seconds"])
    assert r["compile_seconds"] == pytest.approx(expected)
    speedup = r["compiled"]["tokens_per_second"] / r["eager"]["tokens_per_second"]
    assert r["speedup"] == pytest.approx(speedup)
    table = (out / "bench.md").read_text()
    assert table in printed and "eager against compiled" in table
    main_part, compile_part = table.split("eager against compiled")
    row = next(line for line in compile_part.splitlines() if line.startswith("| vanilla "))
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1] == f"{r['eager']['tokens_per_second']:,.0f}"
    assert cells[4] == f"{r['compile_seconds']:.1f}"
    main_row = next(line for line in main_part.splitlines() if line.startswith("| vanilla "))
    train = report["results"]["vanilla"]["train"]
    assert f"{max(train['seconds']) / min(train['seconds']):.2f}" in main_row  # train max/min


def test_a_preset_over_its_compile_time_limit_is_a_row_that_says_so():
    overrides = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab_size": 64}
    settings = BenchSettings(
        presets=("vanilla",), overrides=overrides, seq_len=16, batch_size=2, repeats=1,
        compile=True, compile_backend="eager", compile_time_limit=0.5,
    )  # fmt: skip
    configs = bench_configs(settings)
    seen: list[dict] = []
    part = run_compiled(
        settings, configs, CPU, "fp32", log=lambda line: None, on_record=lambda p: seen.append(p)
    )
    r = part["results"]["vanilla"]
    assert r["status"] == OVER_TIME and r["note"] == "not finished in 0.5 s"
    assert r["eager"] is None and len(seen) == 1
    row = compile_table(part).splitlines()[2]
    assert row.startswith("| vanilla ") and "over time limit: not finished in 0.5 s" in row
