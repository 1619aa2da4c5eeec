"""Probes through `formers compare`: a spec's task, the command line's --task, the accuracy
tables and plots of the report, bad input as one line, and (slow) a probe that tells a model
that cannot see far from one that can."""

import importlib.util
import json
from pathlib import Path

import pytest

from formers.cli import main
from formers.compare.harness import run_compare
from formers.compare.probe_report import probe_summary, probe_tables, wilson_interval
from formers.compare.spec import CompareSpec
from formers.errors import ConfigError
from formers.train.metrics import MetricsLog
from formers.train.run_record import parameter_count

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TINY = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "model.dropout": 0.0,
    "train.batch_size": 4,
    "train.seq_len": 32,
    "train.max_steps": 2,
    "train.eval_every": 0,
    "train.save_every": 0,
    "train.precision": "fp32",
}
MQAR = {"kind": "mqar", "pairs": 2, "vocab": 16, "eval_samples": 2, "eval_distances": [4, 16]}


def test_a_task_resolves_every_run_to_the_probe_and_round_trips():
    spec = CompareSpec.from_dict(
        {"arms": ["vanilla", "longformer"], "task": MQAR, "overrides": TINY, "seeds": [0, 1]}
    )
    for arm, context, seed in spec.runs():
        probe = spec.run_config(arm, seed, context=context).train.probe
        assert (probe.kind, probe.pairs, probe.eval_distances) == ("mqar", 2, (4, 16))
    assert CompareSpec.from_dict(spec.to_dict()) == spec
    assert spec.data_name == "mqar"
    command = spec.command()
    assert "--task mqar" in command and "--train.probe.pairs 2" in command
    assert "--corpus" not in command
    plain = CompareSpec.from_dict({"arms": ["vanilla"], "task": "passkey"})
    assert plain.run_config("vanilla", 0).train.probe.kind == "passkey"


@pytest.mark.parametrize(
    "data, message",
    [
        ({"task": MQAR, "corpus": "ptb"}, "task and corpus are both given"),
        ({"task": {"pairs": 2}}, "give a probe's kind"),
        ({"task": "sudoku"}, "unknown task 'sudoku'"),
    ],
)
def test_a_bad_task_in_a_spec_names_the_fix(data, message):
    with pytest.raises(ConfigError, match=message):
        CompareSpec.from_dict({"arms": ["vanilla"], **data})


@pytest.mark.parametrize(
    "args, message",
    [
        (["vanilla", "--task", "sudoku"], "unknown task 'sudoku' (train.probe.kind): the probes"),
        (
            ["vanilla", "--task", "mqar", "--train.seq_len", "128"]
            + ["--train.probe.eval_distances", "500"],
            "distance 500 is longer than the sequence (train.seq_len=128",
        ),
        (
            ["vanilla", "--task", "listops", "--train.probe.head", "pooled"],
            "head=pooled (sequence classification) needs an encoder, and vanilla is decoder-only",
        ),
        (["bert", "--task", "passkey"], "passkey is a causal probe"),
        (["vanilla", "--task", "mqar", "--corpus", "ptb"], "--task mqar makes its own data"),
    ],
)
def test_bad_probe_input_on_the_command_line_is_one_line(args, message, tmp_path, capsys):
    tiny = [f"--{k}={v}" for k, v in TINY.items() if k != "train.seq_len"]  # if it ran: briefly
    code = main(["compare", *args, "--out", str(tmp_path / "out"), "--no-plots", *tiny])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "out").exists()


def fake_run(out, arm, seed, points, context=None):
    """A finished run folder whose final valid record holds `points` (accuracy per distance)."""
    folder = out / "runs" / arm / (f"ctx{context}" if context else "") / f"seed{seed}"
    folder.mkdir(parents=True)
    log = MetricsLog(folder, tensorboard=False)
    accuracy = sum(a for _, a in points) / len(points)
    rows = [{"distance": d, "accuracy": a, "items": 10} for d, a in points]
    log.log("valid", 100, loss=1.0, tokens=20, axis="distance", accuracy=accuracy, points=rows,
            final=True)  # fmt: skip
    log.close()
    return {"arm": arm, "seed": seed, "context": context, "run_dir": str(folder.relative_to(out))}


def test_the_accuracy_table_is_the_mean_over_seeds_per_point(tmp_path):
    runs = [
        fake_run(tmp_path, "full", 0, [(4, 1.0), (64, 0.9)]),
        fake_run(tmp_path, "full", 1, [(4, 0.8), (64, 0.5)]),
        fake_run(tmp_path, "window-4", 0, [(4, 1.0), (64, 0.0)]),
        fake_run(tmp_path, "window-4", 1, [(4, 0.6), (64, 0.2)]),
    ]
    spec = {"task": {"kind": "mqar"}, "arms": [{"name": "full"}, {"name": "window-4"}]}
    probe = probe_summary(tmp_path, {"spec": spec, "runs": runs, "contexts": []})
    full, window = probe["rows"]
    assert probe["axis"] == "distance"
    assert full["accuracy"] == pytest.approx((0.95 + 0.65) / 2)
    assert [p["accuracy"] for p in window["points"]] == pytest.approx([0.8, 0.1])
    [table] = probe_tables(probe)
    header = ["arm", "params", "all distances", "95% interval", "distance 4", "distance 64"]
    assert table.header == header
    # 40 items per arm (2 points x 20); Wilson's interval of 32/40 and of 18/40
    assert table.rows == [
        ["full", "–", "80.0", "65.2–89.5", "90.0", "70.0"],
        ["window-4", "–", "45.0", "30.7–60.2", "80.0", "10.0"],
    ]
    assert "20 items per point" in table.caption


@pytest.mark.parametrize(
    "right, items, low, high",
    [
        (50, 100, 0.4038, 0.5962),
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (1, 2, 0.0945, 0.9055),
    ],
)
def test_the_interval_is_wilsons(right, items, low, high):
    # references: Wilson's score interval, z = 1.96 (e.g. Newcombe 1998, Table I: 0/10 -> 0-0.2775)
    assert wilson_interval(right / items, items) == pytest.approx((low, high), abs=1e-4)


def test_a_probe_comparison_reports_accuracy_by_distance(tmp_path):
    spec = CompareSpec(("vanilla",), task=MQAR, overrides=TINY)
    result = run_compare(spec, tmp_path / "out", progress=False)
    out = tmp_path / "out"
    assert result.report.markdown.startswith("# vanilla on mqar")
    header = "| arm | params | all distances | 95% interval | distance 4 | distance 16 |"
    assert header in result.report.markdown
    params = parameter_count(out / "runs/vanilla/seed0")
    assert params and f"| vanilla | {params:,} |" in result.report.markdown
    assert (out / "accuracy_vs_distance.png").read_bytes().startswith(PNG_SIGNATURE)
    summary = json.loads((out / "summary.json").read_text())
    [row] = summary["probe"]["rows"]
    assert row["complete"] and [p["items"] for p in row["points"]] == [2, 2]  # 2 sequences
    assert json.loads((out / "runs/vanilla/seed0/probe.json").read_text())["kind"] == "mqar"
    again = run_compare(spec, out, progress=False)  # the same spec again: nothing to train
    assert again.trained == [] and len(again.skipped) == 1


def load_rescore():
    path = Path(__file__).resolve().parents[2] / "scripts" / "experiments" / "probe_rescore.py"
    spec = importlib.util.spec_from_file_location("probe_rescore", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rescoring_a_comparison_from_its_checkpoints_gives_its_report_again(tmp_path, capsys):
    out = tmp_path / "out"
    run_compare(CompareSpec(("vanilla",), task=MQAR, overrides=TINY), out, progress=False)
    [reported] = json.loads((out / "summary.json").read_text())["probe"]["rows"]
    load_rescore().main([str(out)])  # the same held-out sequences: the same accuracy
    [again] = json.loads((out / "rescored-valid" / "probe.json").read_text())["rows"]
    assert again["points"] == reported["points"] and again["accuracy"] == reported["accuracy"]
    assert "| arm | params | all distances |" in capsys.readouterr().out
    load_rescore().main([str(out), "--eval-samples", "4", "--split", "test"])
    [more] = json.loads((out / "rescored-test" / "probe.json").read_text())["rows"]
    assert [p["items"] for p in more["points"]] == [4, 4]  # 4 sequences, one query each
    assert (out / "rescored-test" / "accuracy_vs_distance.png").is_file()


# MQAR with every query 64 tokens after its pair: a window of 4 keys (2 layers: 6 positions back
# at most) cannot reach the answer, full attention can. Sized to train in about a minute on 2 cores.
FAR = {"kind": "mqar", "pairs": 2, "vocab": 32, "distances": [64, 64], "eval_distances": [64]}
FAR_SIZE = {
    "model.n_layers": 2,
    "model.d_model": 64,
    "model.n_heads": 4,
    "model.d_ff": 128,
    "model.dropout": 0.0,
    "model.norm": "pre",
    "train.seq_len": 72,
    "train.batch_size": 16,
    "train.max_steps": 300,
    "train.lr": 1e-2,
    "train.warmup_steps": 20,
    "train.eval_every": 0,
    "train.save_every": 0,
    "train.precision": "fp32",
}


@pytest.mark.slow
def test_mqar_tells_a_window_of_4_from_full_attention_at_distance_64(tmp_path):
    window = {"name": "window-4", "preset": "longformer"}
    window["overrides"] = {"model.attention.window": 4}
    spec = CompareSpec.from_dict(
        {"arms": ["vanilla", window], "task": {**FAR, "eval_samples": 128}, "overrides": FAR_SIZE}
    )
    result = run_compare(spec, tmp_path / "out", progress=False, plots=False)
    full, near = result.report.summary["probe"]["rows"]
    assert full["accuracy"] >= 0.9, full  # 128 scored queries at distance 64, one a sequence
    assert near["accuracy"] <= 0.3, near  # chance is 1 in 15 values
