"""The numbers of a comparison's report against hand-computed cases: time to the baseline's loss
between two evaluations, means over seeds, the final bits in the corpus's unit, and the cores
other processes took (a mean weighted by time). Each case is a comparison folder written here
with chosen metrics, so every expected cell is worked out by hand below it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from formers.compare.report import write_report
from formers.compare.spec import SPEC_FILE, CompareSpec, run_path

TINY = {"model.n_layers": 1, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
        "train.max_steps": 100}  # fmt: skip


def valid(step: int, seconds: float, loss: float, tokens: int = 1000) -> dict:
    return {"kind": "valid", "step": step, "seconds": seconds, "loss": loss, "tokens": tokens}


def final(step: int, seconds: float, loss: float, bits_per_byte: float | None = None) -> dict:
    """The whole-split valid record the trainer logs last (more tokens than the periodic ones)."""
    return valid(step, seconds, loss, tokens=5000) | {
        "final": True,
        "bits_per_token": loss / math.log(2),
        "bits_per_byte": bits_per_byte,
        "perplexity": math.exp(loss),
    }


def train(step: int, seconds: float, **values: float) -> dict:
    return {"kind": "train", "step": step, "seconds": seconds, "loss": 3.0, **values}


def comparison(out: Path, runs: dict[tuple[str, int], list[dict]], unit: str = "byte") -> Path:
    """A comparison folder of the arms and seeds in `runs` ((arm, seed) -> metrics records, the
    first arm the baseline), as `formers compare` leaves it after training."""
    arms = tuple(dict.fromkeys(arm for arm, _ in runs))
    seeds = tuple(sorted({seed for _, seed in runs}))
    spec = CompareSpec(arms, corpus="corpus.txt", seeds=seeds, overrides=TINY)
    out.mkdir()
    (out / SPEC_FILE).write_text(json.dumps(spec.to_dict()))
    for (arm, seed), records in runs.items():
        folder = run_path(out, arm, seed)
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(spec.run_config(arm, seed).to_dict()))
        (folder / "tokenizer.json").write_text(json.dumps({"unit": unit}))
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return out


def tables(report: str) -> list[dict[tuple[str, str], dict[str, str]]]:
    """Every table of report.md as {(arm, seed cell): {column: cell}}."""
    found, lines = [], report.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("| arm |"):
            continue
        # "best valid loss (N tokens)", "final valid loss (whole split)": keyed without the scope
        header = [c.strip().split(" (")[0] for c in line.strip("|").split("|")]
        rows = {}
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            cells = dict(zip(header, [c.strip() for c in row.strip("|").split("|")], strict=True))
            rows[cells["arm"], cells["seed"]] = cells
        found.append(rows)
    return found


def notes(report: str) -> list[str]:
    return [line[2:] for line in report.splitlines() if line.startswith("- ")]


# The baseline of the time-to-loss cases: its last eval is at step 100, 50 s, loss 2.0.
BASELINE = [valid(50, 25.0, 2.6), valid(100, 50.0, 2.0), final(100, 50.0, 2.0)]


def reach_cells(out: Path, curve: list[dict]) -> tuple[str, str, dict]:
    """The report's two "to baseline" cells of an arm with valid curve `curve`, and its run's
    `reach` in summary.json."""
    end = curve[-1]
    records = [*curve, final(end["step"], end["seconds"], end["loss"])]
    comparison(out, {("vanilla", 0): BASELINE, ("primer-ez", 0): records})
    report = write_report(out, plots=False)
    row = tables(report.markdown)[0]["primer-ez", "0"]
    run = next(r for r in report.summary["runs"] if r["arm"] == "primer-ez")
    return row["steps to baseline"], row["train s to baseline"], run["reach"]


def test_time_to_loss_is_interpolated_from_the_eval_before_the_crossing(tmp_path):
    # loss 3.0 at step 20 (10 s), 2.2 at step 60 (30 s), 1.4 at step 100 (70 s): 2.0 lies a
    # quarter of the way from the eval at step 60 to the one at 100, (2.2 - 2.0) / (2.2 - 1.4)
    # at a loss that falls 0.8 over that stretch: step 60 + 0.25 * 40 = 70, 30 s + 0.25 * 40 s
    # = 40 s; of the baseline's 100 steps and 50 s: 0.70× and 0.80×
    curve = [valid(20, 10.0, 3.0), valid(60, 30.0, 2.2), valid(100, 70.0, 1.4)]
    steps, seconds, reach = reach_cells(tmp_path / "cmp", curve)
    assert (steps, seconds) == ("70 (0.70×)", "40.0 (0.80×)")
    assert reach["step"] == pytest.approx(70.0) and reach["seconds"] == pytest.approx(40.0)
    assert reach["bound"] is False and reach["target_loss"] == 2.0


def test_time_to_loss_at_an_eval_that_reaches_it_exactly_is_that_eval(tmp_path):
    # the later end: 2.0 is the eval at step 60's own loss, so no share of the next stretch
    curve = [valid(20, 10.0, 3.0), valid(60, 45.0, 2.0), valid(100, 90.0, 1.0)]
    steps, seconds, reach = reach_cells(tmp_path / "cmp", curve)
    assert (steps, seconds) == ("60 (0.60×)", "45.0 (0.90×)")
    assert reach["bound"] is False


def test_time_to_loss_already_reached_at_the_first_eval_is_an_upper_bound(tmp_path):
    # the earlier end: below the target at the first eval, which is all that is known
    curve = [valid(10, 5.0, 1.9), valid(20, 10.0, 1.5)]
    steps, seconds, reach = reach_cells(tmp_path / "cmp", curve)
    assert (steps, seconds) == ("≤ 10 (0.10×)", "≤ 5.0 (0.10×)")
    assert reach["bound"] is True


def test_time_to_loss_never_reached_says_so(tmp_path):
    curve = [valid(50, 25.0, 2.9), valid(100, 50.0, 2.1)]
    steps, seconds, reach = reach_cells(tmp_path / "cmp", curve)
    assert steps == seconds == "not reached"
    assert reach == {"target_loss": 2.0, "reached": False}


def run_records(losses: tuple[float, float], rates: list[float], seconds: float) -> list[dict]:
    """A run's records: training windows at `rates` tokens/s, evals at steps 50 and 100 (the
    last at `seconds`) with `losses`, then the final eval, again at losses[1]."""
    trains = [train(10 * (i + 1), i + 1.0, tokens_per_s=r) for i, r in enumerate(rates)]
    evals = [valid(50, seconds / 2, losses[0]), valid(100, seconds, losses[1])]
    return trains + evals + [final(100, seconds, losses[1], bits_per_byte=losses[1])]


def test_a_row_is_the_mean_of_its_seeds_and_each_seed_has_its_own_row(tmp_path):
    runs = {
        ("vanilla", 0): run_records((2.6, 2.0), [100, 300, 200], 50.0),  # median 200 tokens/s
        ("vanilla", 1): run_records((2.4, 2.2), [400, 500], 70.0),  # median 450
        # reaches seed 0's 2.0 half way from step 50 (2.4) to 100 (1.6): step 75 of 100 (0.75×),
        # 30 s + 0.5 * 30 s = 45 s of 50 (0.90×); and seed 1's 2.2 a quarter of the way from
        # step 50 (2.6) to 100 (1.0): step 62.5 of 100, 20 s + 0.25 * 20 s = 25 s of 70 s
        ("primer-ez", 0): run_records((2.4, 1.6), [50], 60.0),
        ("primer-ez", 1): run_records((2.6, 1.0), [150], 40.0),
    }
    report = write_report(comparison(tmp_path / "cmp", runs), plots=False).markdown
    means, per_seed = tables(report)
    # means: tokens/s (200 + 450) / 2 = 325; final loss (2.0 + 2.2) / 2 = 2.1; train s 60;
    # steps to baseline (75 + 62.5) / 2 = 68.75 and its share (0.75 + 0.625) / 2 = 0.6875;
    # seconds (45 + 25) / 2 = 35 and their share (0.9 + 25 / 70) / 2 = 0.6286
    vanilla, primer = means["vanilla", "mean of 2"], means["primer-ez", "mean of 2"]
    assert (vanilla["tokens/s"], vanilla["final valid loss"], vanilla["train s"]) == (
        "325", "2.1000", "60.0"
    )  # fmt: skip
    assert vanilla["best valid loss"] == "2.1000"  # the lowest of each seed's curve: 2.0, 2.2
    assert (primer["tokens/s"], primer["final valid loss"]) == ("100", "1.3000")
    assert primer["steps to baseline"] == "69 (0.69×)"
    assert primer["train s to baseline"] == "35.0 (0.63×)"
    assert per_seed["primer-ez", "0"]["steps to baseline"] == "75 (0.75×)"
    assert per_seed["primer-ez", "1"]["steps to baseline"] == "62 (0.62×)"  # 62.5, 0.625
    assert per_seed["vanilla", "1"]["tokens/s"] == "450"
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    row = next(r for r in summary["rows"] if r["arm"] == "primer-ez")
    assert row["reach"]["step"] == pytest.approx(68.75)
    assert row["reach"]["seconds"] == pytest.approx(35.0)
    assert row["reach"]["time_fraction"] == pytest.approx((0.9 + 25 / 70) / 2)
    assert row["final_bits_per_byte"] == pytest.approx(1.3)


def test_a_seed_that_never_reaches_the_baseline_leaves_the_mean_out(tmp_path):
    runs = {
        ("vanilla", 0): run_records((2.6, 2.0), [100], 50.0),
        ("vanilla", 1): run_records((2.4, 2.2), [100], 70.0),
        ("primer-ez", 0): run_records((2.4, 1.6), [100], 60.0),
        ("primer-ez", 1): run_records((2.6, 2.3), [100], 40.0),  # 2.3 > 2.2: not reached
    }
    report = write_report(comparison(tmp_path / "cmp", runs), plots=False).markdown
    row = tables(report)[0]["primer-ez", "mean of 2"]
    assert row["steps to baseline"] == row["train s to baseline"] == "1/2 seeds"


# bits per token of a final loss of 2 ln 2 nats: exactly 2; the bits per byte logged beside it
# (over the split's UTF-8 bytes) is made different, 1.25, so the column shows which it holds
FINAL_LOSS, BITS_PER_BYTE = 2 * math.log(2), 1.25


@pytest.mark.parametrize(
    ("unit", "header", "cell"),
    [
        ("byte", "final bits/byte", "1.2500"),  # per byte: the split's bytes, not its targets
        ("char", "final bits/char", "2.0000"),  # per character: a token is one
        ("bpe", "final bits/token", "2.0000"),
    ],
)
def test_the_final_bits_column_is_in_the_corpus_unit(tmp_path, unit, header, cell):
    records = [valid(100, 50.0, FINAL_LOSS), final(100, 50.0, FINAL_LOSS, BITS_PER_BYTE)]
    out = comparison(tmp_path / "cmp", {("vanilla", 0): records}, unit=unit)
    report = write_report(out, plots=False).markdown
    row = tables(report)[0]["vanilla", "0"]
    assert row[header] == cell
    assert row["final valid loss"] == f"{FINAL_LOSS:.4f}" and row["final ppl"] == "4.00"


def cores(pairs: list[tuple[float, float]]) -> list[dict]:
    """Training records at (seconds, share of the cores other processes took)."""
    return [train(i + 1, s, others_cpu=share) for i, (s, share) in enumerate(pairs)]


# The first record closes the window of the first step and the set-up around it: left out.
# Windows of 1 s at 2%, 10 s at 1% and 1 s at 30%: (0.02 + 0.10 + 0.30) / 12 = 3.5% over the
# training, though its worst window is 30% and the windows' plain mean 11%.
QUIET = cores([(1.0, 0.9), (2.0, 0.02), (12.0, 0.01), (13.0, 0.30)])
# Windows of 1 s at 60%, 10 s at 4% and 1 s at 0%: (0.6 + 0.4 + 0) / 12 = 8.3%.
BUSY = cores([(1.0, 0.0), (2.0, 0.60), (12.0, 0.04), (13.0, 0.0)])
EVALS = [valid(100, 13.0, 2.0), final(100, 13.0, 2.0, 2.0)]


def test_shared_cores_are_judged_by_the_time_weighted_mean_of_a_run(tmp_path):
    out = comparison(tmp_path / "cmp", {("vanilla", 0): QUIET + EVALS})
    report = write_report(out, plots=False)
    share = report.summary["runs"][0]["others_cpu"]
    assert share["mean"] == pytest.approx(0.035) and share["max"] == pytest.approx(0.30)
    said = [n for n in notes(report.markdown) if "of a measured run's cores" in n]
    assert len(said) == 1 and "at most 3.5%" in said[0]  # the most a run's mean reached
    assert not any(n.startswith("shared cores") for n in notes(report.markdown))


def test_a_run_whose_mean_share_is_above_five_percent_is_named_with_it(tmp_path):
    runs = {("vanilla", 0): QUIET + EVALS, ("primer-ez", 0): BUSY + EVALS}
    report = write_report(comparison(tmp_path / "cmp", runs), plots=False)
    shared = [n for n in notes(report.markdown) if n.startswith("shared cores")]
    assert len(shared) == 1  # primer-ez alone: vanilla's worst window does not count
    assert "primer-ez seed 0" in shared[0] and "took 8% of its cores" in shared[0]
    busy = next(r for r in report.summary["runs"] if r["arm"] == "primer-ez")
    assert busy["others_cpu"]["mean"] == pytest.approx(1 / 12)


@pytest.mark.parametrize(("tokenizer", "header"), [("char", "bits/char"), ("bpe", "bits/token")])
def test_a_trained_comparison_reports_bits_in_its_tokenizer_unit(
    tmp_path, tokenizer, header, capsys
):
    from formers.cli import main

    corpus = tmp_path / "corpus.txt"  # not ASCII, so bytes and characters differ
    corpus.write_text("".join(f"ligne {i}: été, naïve, {i * 7 % 13}\n" for i in range(300)))
    flags = {**TINY, "train.max_steps": 2, "train.batch_size": 2, "train.seq_len": 16,
             "train.eval_every": 0, "train.tokenizer": tokenizer, "train.precision": "fp32",
             "train.tokenizer_vocab": 300}  # fmt: skip
    if tokenizer == "char":
        del flags["train.tokenizer_vocab"]
    args = ["compare", "vanilla", "--corpus", str(corpus), "--out", str(tmp_path / "cmp")]
    assert (
        main([*args, "--no-progress", "--no-plots", *(f"--{k}={v}" for k, v in flags.items())]) == 0
    )
    capsys.readouterr()
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    run = summary["runs"][0]
    assert summary["unit"] == tokenizer
    # the split's bits per byte is logged too, and differs: the column must not take it
    assert run["final_bits_per_byte"] < run["final_bits_per_token"]
    row = tables((tmp_path / "cmp" / "report.md").read_text())[0]["vanilla", "0"]
    assert row[f"final {header}"] == f"{run['final_valid_loss'] / math.log(2):.4f}"
