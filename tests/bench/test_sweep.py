"""The length sweep of `formers bench`: a row for every attention kind at every length, a kind
that runs out of memory or over the time limit stops there while the others go on, and the
length from which a kind overtakes full attention. Tiny models; no timing is asserted except
through stand-in clocks."""

import dataclasses
import signal

import pytest
import torch

from formers.bench import sweep
from formers.bench.fresh_process import ProcessKilled
from formers.bench.measure import sweep_configs
from formers.bench.settings import BenchSettings
from formers.bench.sweep import faster_from, run_sweep
from formers.bench.sweep_report import sweep_text
from formers.bench.workloads import TrainStep
from formers.registry import ATTENTION

TINY = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "vocab_size": 64, "dropout": 0.0}
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared machine run fastest on one thread (nothing here is a timing)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def settings(**changes) -> BenchSettings:
    """Tiny models at 64, 128 and 256 tokens, measured in this process (where the tests' stand-ins
    reach them) unless `sweep_fresh_process=True` is given."""
    base = BenchSettings(
        overrides=TINY, seq_len=64, batch_size=1, repeats=1, warmup=0, precision="fp32"
    )
    defaults = {"device": "cpu", "sweep": (64, 128, 256), "sweep_fresh_process": False}
    return dataclasses.replace(base, **{**defaults, **changes})


def sweep_of(s: BenchSettings, lines: list[str] | None = None) -> dict:
    log = (lambda line: None) if lines is None else lines.append
    return run_sweep(s, sweep_configs(s), CPU, "fp32", log, matmul_rate=1e9)


def by_point(result: dict) -> dict[tuple[str, int], dict]:
    return {(run["preset"], run["seq_len"]): run for run in result["runs"]}


def test_every_attention_kind_runs_at_every_length_against_full_attention_of_its_shape():
    lines: list[str] = []
    result = sweep_of(settings(), lines)
    kinds = [p["attention"] for p in result["presets"].values()]
    assert set(kinds) == set(ATTENTION)  # every kind of the registry, none hard-coded
    full = result["full_attention"]
    assert full == {"decoder": "vanilla", "encoder": "bert"}  # Linformer is an encoder
    points = by_point(result)
    assert set(points) == {(p, n) for p in result["presets"] for n in (64, 128, 256)}
    for (_, n), run in points.items():
        assert run["status"] == "ok" and run["train"]["tokens_per_second"] > 0
        assert run["train"]["tokens_per_call"] == max(1, 64 // n) * n
        assert run["peak_train_memory_bytes"] > 0
    assert set(result["crossings"]) == set(result["presets"]) - set(full.values())
    assert result["crossings"]["linformer"]["full"] == "bert"
    table = "\n".join(sweep_text(result)).split("where each kind overtakes")[0]
    assert sum(line.startswith("| ") for line in table.splitlines()) == 2 + len(points)
    assert sum("sweep 3/3: seq_len 256" in line for line in lines) == 1  # progress, per length
    assert "; every length in one process;" in sweep_text(result)[0]


def sweep_notes(result: dict) -> dict[tuple[str, str], str]:
    """(label, seq_len) -> the note cell of the sweep table's row."""
    table = sweep_text(result)[2]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in table.splitlines()]
    return {(row[0], row[1]): row[-1] for row in rows[2:]}


@pytest.fixture
def two_presets() -> BenchSettings:
    """vanilla and transformer-xl only, at 64, 128 and 256 tokens."""
    return settings(presets=("vanilla", "transformer-xl"))


def fail_xl_from(length: int, error: BaseException, monkeypatch, on_call: int = 1) -> list:
    """Make transformer-xl's training step raise `error` on its `on_call`-th call at `length`
    tokens or more; returns the lengths its training step was called at."""
    real, calls = TrainStep.__call__, []

    def call(self):
        n = self.inputs.shape[1]
        if self.model.cfg.attention.kind == "xl":
            calls.append(n)
            if n >= length and calls.count(n) >= on_call:
                raise error
        return real(self)

    monkeypatch.setattr(TrainStep, "__call__", call)
    return calls


@pytest.mark.parametrize(
    ("error", "on_call"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"), 1),
        (MemoryError(), 1),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 2"), 1),
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"), 2),
    ],
    ids=["torch", "python", "cpu-allocator", "torch-in-a-timed-call"],
)
def test_a_kind_out_of_memory_stops_there_and_the_others_go_on(
    two_presets, monkeypatch, error, on_call
):
    calls = fail_xl_from(128, error, monkeypatch, on_call)
    result = sweep_of(two_presets)
    points = by_point(result)
    assert points["transformer-xl", 64]["status"] == "ok"
    assert points["transformer-xl", 128]["status"] == "out of memory"
    assert points["transformer-xl", 128]["train"] is None
    assert points["transformer-xl", 256]["status"] == "not run"
    assert points["transformer-xl", 256]["note"] == "out of memory at 128"
    assert 256 not in calls  # not tried at a longer length
    assert all(points["vanilla", n]["status"] == "ok" for n in (64, 128, 256))
    assert points["vanilla", 256]["train"]["tokens_per_second"] > 0
    notes = sweep_notes(result)
    assert notes["xl (transformer-xl)", "128"] == "out of memory"
    assert notes["xl (transformer-xl)", "256"] == "not run: out of memory at 128"
    assert notes["vanilla (vanilla)", "256"] == ""


def test_each_length_is_measured_in_a_fresh_process_that_nothing_here_reaches(monkeypatch):
    # a stand-in here that makes transformer-xl run out of memory at every length must not
    # reach the processes that measure (a fork, or this process, would carry it)
    fail_xl_from(64, MemoryError(), monkeypatch)
    lines: list[str] = []
    s = settings(presets=("vanilla", "transformer-xl"), sweep=(64, 128), sweep_fresh_process=True)
    result = sweep_of(s, lines)
    assert result["fresh_process_per_length"] is True
    assert {run["status"] for run in result["runs"]} == {"ok"}
    assert by_point(result)["transformer-xl", 128]["train"]["tokens_per_second"] > 0
    assert sum("transformer-xl: first training step" in line for line in lines) == 2
    assert "; each length in a fresh process;" in sweep_text(result)[0]


def test_a_length_whose_process_is_killed_is_out_of_memory_there_and_the_sweep_keeps_the_rest(
    two_presets, monkeypatch
):
    def killed_from_128(fn, job, log):
        if job.seq_len >= 128:
            raise ProcessKilled(-signal.SIGKILL)
        return fn(job, log=log)

    monkeypatch.setattr(sweep, "call_in_fresh_process", killed_from_128)
    result = sweep_of(dataclasses.replace(two_presets, sweep_fresh_process=True))
    points = by_point(result)
    assert points["vanilla", 64]["status"] == points["transformer-xl", 64]["status"] == "ok"
    for preset in ("vanilla", "transformer-xl"):
        assert points[preset, 128]["status"] == "out of memory"
        assert "killed by SIGKILL" in points[preset, 128]["note"]
        assert points[preset, 256]["note"] == "out of memory at 128"


def test_a_process_that_ends_otherwise_without_a_result_is_an_error(two_presets, monkeypatch):
    def ended(fn, job, log):
        raise ProcessKilled(1)

    monkeypatch.setattr(sweep, "call_in_fresh_process", ended)
    with pytest.raises(ProcessKilled, match="exit code 1"):
        sweep_of(dataclasses.replace(two_presets, sweep_fresh_process=True))


def test_other_errors_are_not_taken_for_running_out_of_memory(two_presets, monkeypatch):
    fail_xl_from(128, RuntimeError("mat1 and mat2 shapes cannot be multiplied"), monkeypatch)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        sweep_of(two_presets)


def test_a_point_over_the_time_limit_stops_its_kind_and_the_others_go_on(two_presets, monkeypatch):
    # stand-in clock for the first calls: transformer-xl's training step takes 3 s at 64
    # tokens and 3.2 s at 128; every forward 0.4 s. With 1 repeat and no warm-up a point is
    # the first calls, one timed call of each, and one training step for the memory:
    # 3 × 3 + 2 × 0.4 = 9.8 s at 64, 3 × 3.2 + 2 × 0.4 = 10.4 s at 128, over a 10 s limit.
    def first_call(fn, device):
        fn()
        if not isinstance(fn, TrainStep):
            return 0.4
        if fn.model.cfg.attention.kind != "xl":
            return 0.001
        return 3.0 if fn.inputs.shape[1] == 64 else 3.2

    monkeypatch.setattr(sweep, "time_call", first_call)
    calls = fail_xl_from(10**9, MemoryError(), monkeypatch)  # counts calls, never fails
    result = sweep_of(dataclasses.replace(two_presets, sweep_time_limit=10.0))
    points = by_point(result)
    assert points["transformer-xl", 64]["status"] == "ok"
    assert points["transformer-xl", 64]["projected_seconds"] == pytest.approx(9.8)
    assert points["transformer-xl", 128]["status"] == "over time limit"
    assert points["transformer-xl", 128]["projected_seconds"] == pytest.approx(10.4)
    assert points["transformer-xl", 256]["status"] == "not run"
    assert points["transformer-xl", 256]["note"] == "over time limit at 128"
    assert calls.count(128) == 1 and 256 not in calls  # stopped after its first step
    assert all(points["vanilla", n]["status"] == "ok" for n in (64, 128, 256))
    assert sweep_notes(result)["xl (transformer-xl)", "128"] == "over time limit (about 10 s)"


@pytest.mark.parametrize(
    ("mine", "full", "lower_is_better", "expected"),
    [
        # slower at first, ahead from 1,024 on
        ({512: 10, 1024: 20, 2048: 30}, {512: 15, 1024: 15, 2048: 15}, False, 1024),
        # ahead at 512, behind at 1,024: only the run to the end counts
        ({512: 20, 1024: 10, 2048: 30}, {512: 15, 1024: 15, 2048: 15}, False, 2048),
        # level is not ahead
        ({512: 15, 1024: 15}, {512: 15, 1024: 15}, False, None),
        # ahead everywhere
        ({512: 20, 1024: 20}, {512: 15, 1024: 15}, False, 512),
        # full attention ran out of memory at 2,048: a kind that still runs is ahead there
        ({512: 10, 1024: 20, 2048: 5}, {512: 15, 1024: 15, 2048: None}, False, 1024),
        # the kind ran out at 2,048 while full attention went on: behind there
        ({512: 20, 1024: 20, 2048: None}, {512: 15, 1024: 15, 2048: 15}, False, None),
        # both out at 2,048: that length says nothing
        ({512: 10, 1024: 20, 2048: None}, {512: 15, 1024: 15, 2048: None}, False, 1024),
        # memory: lower is better
        ({512: 100, 1024: 150, 2048: 200}, {512: 50, 1024: 200, 2048: 800}, True, 1024),
    ],
)
def test_faster_from_is_where_a_kind_stays_ahead_of_full_attention(
    mine, full, lower_is_better, expected
):
    assert faster_from(mine, full, lower_is_better) == expected


def test_crossings_compare_each_preset_with_full_attention_of_its_shape():
    s = settings(presets=("vanilla", "longformer", "linformer"))
    configs = sweep_configs(s)
    assert list(configs) == ["vanilla", "longformer", "bert", "linformer"]

    def run(preset, n, train, infer, memory):
        status = "ok" if train else "out of memory"
        return {
            "preset": preset,
            "seq_len": n,
            "status": status,
            "train": train and {"tokens_per_second": train},
            "inference": infer and {"tokens_per_second": infer},
            "peak_train_memory_bytes": memory,
        }

    runs = [
        *(run("vanilla", n, t, i, m) for n, t, i, m in [(1, 10, 30, 5), (2, 8, 20, 9)]),
        *(run("longformer", n, t, i, m) for n, t, i, m in [(1, 9, 31, 6), (2, 9, 21, 8)]),
        *(run("bert", n, t, i, m) for n, t, i, m in [(1, 10, 10, 5), (2, None, None, None)]),
        *(run("linformer", n, t, i, m) for n, t, i, m in [(1, 5, 15, 9), (2, 4, 4, 9)]),
    ]
    # longformer against vanilla; linformer against bert, which ran out of memory at 2
    assert sweep.crossings(runs, configs) == {
        "longformer": {"full": "vanilla", "train": 2, "inference": 1, "peak_train_memory_bytes": 2},
        "linformer": {"full": "bert", "train": 2, "inference": 1, "peak_train_memory_bytes": 2},
    }
