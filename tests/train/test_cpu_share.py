"""Other processes' share of a run's cores: read from /proc/stat, logged per window, reported."""

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from formers.cli import main
from formers.compare import harness as compare
from formers.compare.report import SHARED_CORES, shared_cores_notes
from formers.compare.run_metrics import others_cpu_share
from formers.train import cpu_share, startup, trainer
from formers.train.config import run_config
from formers.train.cpu_share import OthersShare, busy_seconds
from formers.train.metrics import MetricsLog, read_metrics

# user nice system idle iowait irq softirq steal guest guest_nice, in ticks of 1/100 s
STAT = """cpu  900 90 90 9000 900 9 9 9 0 0
cpu0 100 10 20 5000 400 1 2 3 0 0
cpu1 800 80 70 4000 500 8 7 6 0 0
intr 12345 0 0
ctxt 999
"""


def write_stat(path: Path, cpu0_busy: int, cpu1_busy: int) -> None:
    """A /proc/stat whose cores have been busy (user time) for so many ticks."""
    path.write_text(
        f"cpu  {cpu0_busy + cpu1_busy} 0 0 100 0 0 0 0 0 0\n"
        f"cpu0 {cpu0_busy} 0 0 50 0 0 0 0 0 0\ncpu1 {cpu1_busy} 0 0 50 0 0 0 0 0 0\n"
    )


def test_busy_time_counts_all_but_idle_and_iowait_on_the_chosen_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_share.os, "sysconf", lambda name: 100)
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    assert busy_seconds({0}, stat) == pytest.approx((100 + 10 + 20 + 1 + 2 + 3) / 100)
    assert busy_seconds({1}, stat) == pytest.approx((800 + 80 + 70 + 8 + 7 + 6) / 100)
    assert busy_seconds({0, 1}, stat) == pytest.approx(1.36 + 9.71)
    assert busy_seconds({5}, stat) is None  # a core the file does not list
    assert busy_seconds({0, 5}, stat) is None  # not a part of the cores' time either
    assert busy_seconds({0}, tmp_path / "missing") is None


def test_the_share_is_what_the_cores_did_beyond_this_process(tmp_path, monkeypatch):
    """Two cores for 10 s: 12 s busy, of which 4 s this process's, leave 8 of 20 s to others."""
    monkeypatch.setattr(cpu_share.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(cpu_share, "this_process_cores", lambda: {0, 1})
    clock = {"wall": 100.0, "own": 50.0}
    monkeypatch.setattr(cpu_share.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(cpu_share, "own_seconds", lambda: clock["own"])
    stat = tmp_path / "stat"
    write_stat(stat, 1000, 1000)
    share = OthersShare(threads=2, stat=stat)

    clock["wall"] += 10
    clock["own"] += 4
    write_stat(stat, 1000 + 700, 1000 + 500)
    assert share.take() == pytest.approx(8 / 20)

    clock["wall"] += 10  # the next window starts where the last ended: only this process ran
    clock["own"] += 15
    write_stat(stat, 1700 + 800, 1500 + 700)
    assert share.take() == pytest.approx(0.0)

    clock["wall"] += 5
    stat.unlink()  # unreadable: unknown, not 0
    assert share.take() is None


@pytest.mark.parametrize(
    ("threads", "others_busy", "expected"),
    [
        (1, 10, 0.0),  # one core's worth of others fits in the core a 1-thread run leaves free
        (1, 15, 0.5),  # half a core more than that displaced half of the run's core
        (1, 20, 1.0),
        (2, 10, 0.5),  # a 2-thread run leaves no core free
        (4, 10, 0.5),  # more threads than cores: it computes on both, so the same
    ],
)
def test_only_the_others_beyond_the_cores_a_run_leaves_free_count(
    tmp_path, monkeypatch, threads, others_busy, expected
):
    """10 s on two cores: the others kept `others_busy` core-seconds busy."""
    monkeypatch.setattr(cpu_share.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(cpu_share, "this_process_cores", lambda: {0, 1})
    clock = {"wall": 0.0}
    monkeypatch.setattr(cpu_share.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(cpu_share, "own_seconds", lambda: 0.0)
    stat = tmp_path / "stat"
    write_stat(stat, 0, 0)
    share = OthersShare(threads=threads, stat=stat)
    clock["wall"] = 10.0
    write_stat(stat, others_busy * 50, others_busy * 50)
    assert share.take() == pytest.approx(expected)


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_a_busy_process_beside_this_one_is_seen():
    """A process spinning on one core shows as that core's share of a run that computes on all
    of them."""
    spin = "import time\nend = time.time() + 2\nprint(flush=True)\nwhile time.time() < end: pass\n"
    child = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # it has started and spins
        share = OthersShare(threads=len(cpu_share.this_process_cores()))
        time.sleep(1.0)  # this process sleeps: what the cores do is the child's
        seen = share.take()
    finally:
        child.wait()
    assert seen is not None and seen > 0.5 / len(share.cores)


def test_the_mean_weighs_each_window_by_its_training_time_and_leaves_out_the_first(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step, seconds, share in [(1, 1.0, 0.9), (2, 3.0, 0.1), (4, 9.0, 0.4)]:
        log.log("train", step, loss=1.0, seconds=seconds, others_cpu=share)
    log.log("train", 5, loss=1.0, seconds=10.0)  # a record without it (measured elsewhere)
    log.close()
    assert others_cpu_share(tmp_path) == {
        "mean": pytest.approx((2 * 0.1 + 6 * 0.4) / 8),
        "max": 0.4,
    }


@pytest.mark.parametrize(
    ("world_size", "device", "measured"), [(1, "cpu", True), (2, "cpu", False), (1, "cuda", False)]
)
def test_only_a_single_process_on_the_cpu_measures_its_cores(world_size, device, measured):
    env = SimpleNamespace(world_size=world_size, device=torch.device(device))
    assert startup.measures_cores(env) is measured


def run(arm: str, seed: int, mean: float | None, time_budget: bool = True) -> dict:
    others = None if mean is None else {"mean": mean, "max": 2 * mean}
    return {"arm": arm, "context": 1024, "seed": seed, "others_cpu": others,
            "run_dir": f"runs/{arm}/ctx1024/seed{seed}", "time_budget": time_budget}  # fmt: skip


def test_the_report_names_the_runs_that_shared_their_cores():
    runs = [run("vanilla", 0, 0.01), run("vanilla", 1, SHARED_CORES + 0.01), run("xl", 0, 0.3)]
    notes = shared_cores_notes(runs)
    assert len(notes) == 2
    assert notes[0].startswith(
        "shared cores: vanilla context 1,024 seed 1 (other processes took 6% of its cores"
    )
    assert "runs/xl/ctx1024/seed0" in notes[1] and "30%" in notes[1]

    quiet = shared_cores_notes([run("vanilla", 0, 0.01), run("xl", 0, 0.004)])
    assert quiet == [
        "cores: other processes took at most 1.0% of a measured run's cores while it trained "
        "(mean over its training); a run above 5% would be named here."
    ]
    assert shared_cores_notes([run("vanilla", 0, None)]) == []  # runs from before it was logged

    fixed_steps = shared_cores_notes([run("vanilla", 0, 0.4, time_budget=False)])
    assert fixed_steps == [
        "shared cores: vanilla context 1,024 seed 0 (other processes took 40% of its cores while "
        "it trained): its tokens/s and train seconds describe a shared machine; its losses do not "
        "depend on it (it trained a fixed number of steps)."
    ]


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="needs Linux's /proc/stat")
def test_every_train_record_carries_the_share_and_compare_reads_it_back(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick fox {i % 13}\n" for i in range(600)))
    overrides = {
        "model.n_layers": 1, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
        "train.corpus": str(corpus), "train.batch_size": 2, "train.seq_len": 16,
        "train.max_steps": 6, "train.log_every": 2, "train.eval_every": 0,
        "train.save_every": 0, "train.warmup_steps": 1, "train.precision": "fp32",
    }  # fmt: skip
    trainer.train(run_config("vanilla", overrides), tmp_path / "run", progress=False)
    records = read_metrics(tmp_path / "run", "train")
    assert [r["step"] for r in records] == [1, 2, 4, 6]
    assert all(0.0 <= r["others_cpu"] <= 1.0 for r in records)
    assert others_cpu_share(tmp_path / "run")["max"] == max(r["others_cpu"] for r in records[1:])


def test_compare_says_when_a_run_shared_its_cores(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick fox {i % 13}\n" for i in range(400)))
    monkeypatch.setattr(compare, "others_cpu_share", lambda path: {"mean": 0.4, "max": 0.9})
    tiny = {
        "model.n_layers": 1, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
        "train.batch_size": 2, "train.seq_len": 16, "train.max_steps": 2, "train.eval_every": 0,
        "train.time_budget": "1h",  # its steps depend on the machine (2 come first here)
        "train.save_every": 0, "train.warmup_steps": 1, "train.precision": "fp32",
    }  # fmt: skip
    flags = [f"--{k}={v}" for k, v in tiny.items()]
    args = ["compare", "vanilla", "--corpus", str(corpus), "--out", str(tmp_path / "cmp")]
    assert main([*args, "--no-progress", "--no-plots", *flags]) == 0
    said = capsys.readouterr().err
    assert "[1/1] vanilla seed 0: other processes took 40% of its cores while it trained" in said
    assert "move " + str(tmp_path / "cmp" / "runs") in said

    flags = [f for f in flags if "time_budget" not in f]  # a fixed number of steps
    assert main([*args[:-1], str(tmp_path / "steps"), "--no-progress", "--no-plots", *flags]) == 0
    said = capsys.readouterr().err
    assert "its tokens/s describe a shared machine (its losses do not)" in said
    assert "move " not in said
