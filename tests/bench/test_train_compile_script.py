"""benchmarks/train_compile.py: a run's steps read back from the trainer's own records, and (slow)
every model shape trained eager and compiled through `formers.train.train`."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
train_compile = pytest.importorskip("train_compile")


def test_steps_are_read_from_records_written_every_step():
    # cumulative tokens and each window's rate -> each step's tokens and seconds
    records = [
        {"step": i + 1, "tokens": tokens, "tokens_per_s": rate}
        for i, (tokens, rate) in enumerate(
            [(100, 10.0), (200, 100.0), (300, 50.0), (400, 100.0), (500, 200.0)]
        )
    ]
    s = train_compile.summarise(records, warmup=2)
    assert s["step_tokens"] == [100] * 5
    assert s["step_seconds"] == pytest.approx([10, 1, 2, 1, 0.5])
    assert s["tokens_per_second"] == 100  # the median of the timed steps' rates
    assert s["median_step_seconds"] == 1
    assert s["max_over_min"] == pytest.approx(4.0)
    assert s["warmup_excess_seconds"] == pytest.approx(10 + 1 - 2 * 1)


def test_the_warm_up_excess_counts_what_its_tokens_take_at_the_timed_rate():
    # translation batches differ in size: a big first step is not compilation
    windows, rates = [300, 100, 200, 100], [30.0, 100.0, 100.0, 100.0]
    totals = [sum(windows[: i + 1]) for i in range(4)]
    records = [{"tokens": t, "tokens_per_s": r} for t, r in zip(totals, rates, strict=True)]
    s = train_compile.summarise(records, warmup=1)
    assert s["step_seconds"] == pytest.approx([10, 1, 2, 1])
    assert s["warmup_excess_seconds"] == pytest.approx(10 - 300 / 100)


def test_a_run_with_no_step_after_its_warm_up_is_an_error():
    with pytest.raises(Exception, match="none after 3 warm-up"):
        train_compile.summarise([{"tokens": 1, "tokens_per_s": 1.0}], warmup=3)


@pytest.mark.slow
def test_every_model_shape_trains_eager_and_compiled_through_the_trainer(tmp_path, capsys):
    out = tmp_path / "train.json"
    argv = "--presets vanilla bert transformer --device cpu --compile-backend eager --steps 2 "
    argv += "--warmup 1 --corpus-bytes 60000 --translation-pairs 200 --model.n_layers 1 "
    argv += "--model.d_model 32 --model.n_heads 2 --model.d_ff 64 --train.batch_size 2 "
    argv += f"--train.seq_len 32 --json {out}"
    assert train_compile.main(argv.split()) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [(r["preset"], r["mode"]) for r in runs] == [
        (p, m) for p in ("vanilla", "bert", "transformer") for m in ("eager", "compiled")
    ]
    for r in runs:
        assert r["status"] == "ok", r["note"]
        assert len(r["step_seconds"]) == 3 and r["tokens_per_second"] > 0
        assert r["train"]["compile"] is (r["mode"] == "compiled")
        compiled = r["mode"] == "compiled"
        assert (r["graphs"] or 0) >= 1 if compiled else not r["graphs"]  # the trainer compiled
    assert "| vanilla " in capsys.readouterr().out
