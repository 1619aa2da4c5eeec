"""The benchmarks on CUDA: calls timed by CUDA events, the training step in bf16 autocast with
fused AdamW, peak memory from CUDA's allocator, the compiled columns and the sweep's fresh
processes, and a peers row in a process of its own. Marked `gpu` (skipped without CUDA); tiny
models and torch.compile's "eager" backend keep them short (scripts/gpu_check.sh compiles with
inductor at full size)."""

import json
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import tiny_config

import formers
from formers.bench.timing import time_call
from formers.bench.workloads import TrainStep
from formers.cli import main

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_a_cuda_call_is_timed_by_events_as_long_as_the_device_works():
    x = torch.randn(2048, 2048, device=CUDA)

    def work():
        for _ in range(20):
            x @ x

    work()
    torch.cuda.synchronize()
    start = time.perf_counter()
    work()
    torch.cuda.synchronize()
    wall = time.perf_counter() - start  # the reference: host clock around a synchronisation
    timed = time_call(work, CUDA)
    assert 0.5 * wall < timed < 2 * wall


def test_the_training_step_on_cuda_uses_fused_adamw():
    model = formers.build(tiny_config("vanilla")).to(CUDA)
    step = TrainStep(model, 2, 16, "bf16", CUDA)
    step()
    assert all(group["fused"] for group in step.optimizer.param_groups)


def test_bench_compile_and_sweep_on_cuda(tmp_path):
    out = tmp_path / "report"
    argv = ["bench", "--presets", "vanilla", "--device", "cuda", "--n-layers", "1"]
    argv += ["--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--seq-len", "32"]
    argv += ["--batch-size", "2", "--gen-tokens", "0", "--repeats", "3", "--warmup", "1"]
    argv += ["--compile", "--compile-backend", "eager", "--sweep", "64", "--no-plots"]
    assert main([*argv, "--out", str(out)]) == 0
    report = json.loads((out / "bench.json").read_text())
    assert report["settings"]["precision"] == "bf16"  # auto on a GPU with bf16
    assert report["machine"]["device"].startswith("cuda")
    weights = 4 * report["results"]["vanilla"]["params"]
    assert report["results"]["vanilla"]["peak_train_memory_bytes"] > 4 * weights
    for r in report["compile"]["results"].values():
        assert r["status"] == "ok" and r["compiled"]["peak_train_memory_bytes"] > 4 * weights
    runs = report["sweep"]["runs"]  # measured in a fresh process of its own
    assert len(runs) == 1 and all(r["status"] == "ok" for r in runs)
    assert all(r["peak_train_memory_bytes"] > 0 for r in runs)


def test_a_peers_row_on_cuda_reports_its_process_peak_memory(tmp_path):
    import peer_candidates
    import peer_step
    import peers

    out = tmp_path / "rows.json"
    argv = "--device cuda --precision bf16 --repeats 2 --warmup 1 --n-layers 1 --d-model 32 "
    argv += f"--n-heads 2 --d-ff 64 --seq-len 16 --batch-size 2 --vocab 64 --json {out} "
    assert peers.main([*argv.split(), "--rows", "vanilla:formers"]) == 0
    for row in json.loads(out.read_text())["rows"]:
        assert row["status"] == "ok", row["note"]
        assert row["peak_memory_bytes"] > 4 * 4 * row["params"]  # weights, grads, 2 moments
    shape = peer_candidates.Shape(1, 32, 2, 64, 64, 16, 2, 16)
    x, y = peer_step.batch(shape, CUDA)
    candidate = peer_candidates.bare(shape)
    candidate.model.to(CUDA)
    peer_step.train_step(candidate, x, y, "bf16", CUDA)()
    assert all(group["fused"] for group in candidate.optimizer.param_groups)
