"""`formers compare`: end to end on a tiny config, resume after an interruption, spec checks."""

import json
import os
import signal
import sys

import pytest

from formers.cli import main
from formers.compare import harness as compare_module
from formers.compare.run_metrics import crossing
from formers.compare.spec import CompareSpec
from formers.compare.spec_changes import spec_differences
from formers.errors import FormersError
from formers.train.metrics import MetricsLog, read_metrics

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("valid_loss_vs_step.png", "valid_loss_vs_time.png", "train_loss_vs_step.png")
TINY = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "model.dropout": 0.0,
    "train.batch_size": 4,
    "train.seq_len": 16,
    "train.max_steps": 12,
    "train.warmup_steps": 2,
    "train.eval_every": 4,
    "train.log_every": 1,
    "train.save_every": 0,
    "train.precision": "fp32",
}


@pytest.fixture
def corpus(tmp_path):
    """~12 KB of text: its 5% valid split is scored whole at every eval in well under a second."""
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(400)
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


def compare_args(out, corpus, *presets, **extra):
    flags = [f"--{k}={v}" for k, v in {**TINY, **extra}.items()]
    return [
        "compare",
        *presets,
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--no-progress",
        *flags,
    ]


def table_rows(report: str) -> dict[str, list[str]]:
    """The first table of report.md, as arm -> cells."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| arm |")) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def test_compare_end_to_end_writes_report(tmp_path, corpus, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "cmp"
    assert main(compare_args(out, corpus, "vanilla", "transformer-xl")) == 0
    printed = capsys.readouterr().out

    report = (out / "report.md").read_text()
    assert printed.rstrip().endswith(report.strip())  # the eval lines of train() come first
    rows = table_rows(report)
    assert list(rows) == ["vanilla", "transformer-xl"]
    for cells in rows.values():
        params, tokens_s, mib, steps = (float(c.replace(",", "")) for c in cells[2:6])
        assert params > 1000 and tokens_s > 0 and steps == 12
        assert mib * 2**20 > 12 * params  # fp32 weights and AdamW's two moments, at least
        best, final, bits, ppl = (float(c.replace(",", "")) for c in cells[7:11])
        assert 0 < best <= final + 1e-9 and bits > 0 and ppl > 1
    # the baseline's own cells: the eval the others' shares are of (1.00× by definition)
    target = json.loads((out / "summary.json").read_text())["runs"][0]["valid_curve"][-1]
    assert rows["vanilla"][11:13] == ["12 (baseline)", f"{target['seconds']:.1f} (baseline)"]
    assert "baseline" not in rows["transformer-xl"][11]
    first_screen = report.split("| arm |")[0]
    assert "Compared: vanilla (baseline), transformer-xl; on " in first_screen
    assert "1 layer, d_model 32, 2 heads, d_ff 64; batch 4 × 16 tokens" in first_screen
    assert "; 12 steps; precision fp32." in first_screen
    assert "| best valid loss (" in report and "| final valid loss (whole split) |" in report

    summary = json.loads((out / "summary.json").read_text())
    assert summary["baseline"] == "vanilla" and summary["unit"] == "byte"
    assert [r["preset"] for r in summary["rows"]] == ["vanilla", "transformer-xl"]
    for run in summary["runs"]:
        assert run["complete"] and run["steps"] == 12
        assert [p["step"] for p in run["valid_curve"]] == [4, 8, 12]
        assert run["final_valid_loss"] == pytest.approx(run["valid_curve"][-1]["loss"])
    assert summary["runs"][0]["reach"]["reached"] and summary["runs"][0]["reach"]["baseline"]
    for row in summary["rows"]:  # over the split's bytes, not its targets (one fewer)
        assert rows[row["arm"]][9] == f"{row['final_bits_per_byte']:.4f}"
    assert summary["runs"][1]["params"] != summary["runs"][0]["params"]

    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000
        assert f"]({name})" in report
    html = (out / "report.html").read_text()
    assert html.count('src="data:image/png;base64,iVBORw0KGgo') == len(PLOTS)
    assert "<td>transformer-xl</td>" in html and "<td>vanilla</td>" in html


def test_interrupted_compare_resumes_where_it_stopped(tmp_path, corpus, capsys, monkeypatch):
    out = tmp_path / "cmp"
    args = [*compare_args(out, corpus, "vanilla", "primer-ez"), "--no-plots"]
    original_log = MetricsLog.log

    def ctrl_c_in_primer_at_step_6(self, kind, step, **values):
        original_log(self, kind, step, **values)
        if "primer-ez" in str(self.path) and kind == "train" and step == 6:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLog, "log", ctrl_c_in_primer_at_step_6)
    assert main(args) == 130
    err = capsys.readouterr().err.lower()
    assert "run the same command again" in err and "--resume" not in err  # one way, not two
    assert not (out / "report.md").exists()
    vanilla_metrics = out / "runs/vanilla/seed0/metrics.jsonl"
    primer = out / "runs/primer-ez/seed0"
    before = (vanilla_metrics.read_text(), vanilla_metrics.stat().st_mtime_ns)
    stopped = read_metrics(primer, "train")
    assert stopped[-1]["step"] == 6

    monkeypatch.setattr(MetricsLog, "log", original_log)
    calls = []
    original_train = compare_module.train

    def spy(cfg, run_dir, **kwargs):
        calls.append((cfg.preset, kwargs["resume"]))
        return original_train(cfg, run_dir, **kwargs)

    monkeypatch.setattr(compare_module, "train", spy)
    assert main(args) == 0
    assert calls == [("primer-ez", True)]  # vanilla was finished: not trained again
    assert (vanilla_metrics.read_text(), vanilla_metrics.stat().st_mtime_ns) == before
    resumed = read_metrics(primer, "train")
    assert [r["step"] for r in resumed] == list(range(1, 13))
    assert resumed[:6] == stopped  # the steps before Ctrl-C were kept, not retrained
    report = (out / "report.md").read_text()
    assert list(table_rows(report)) == ["vanilla", "primer-ez"]
    assert ".png" not in report and not list(out.glob("*.png"))


def test_other_settings_in_an_existing_folder_are_refused(tmp_path, corpus, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    saved = CompareSpec(("vanilla", "primer-ez"), corpus=str(corpus), overrides=TINY)
    (out / "compare.json").write_text(json.dumps(saved.to_dict()))
    code = main(compare_args(out, corpus, "vanilla", "primer-ez", **{"model.d_model": 64}))
    err = capsys.readouterr().err
    assert code == 2
    assert "model.d_model: 32 -> 64" in err and "or compare in another folder" in err
    assert not (out / "runs").exists()
    other = CompareSpec(
        ("vanilla", "primer-ez"), corpus=str(corpus), overrides={**TINY, "model.d_model": 64}
    )
    with pytest.raises(FormersError) as error:  # from Python: no flag to pass
        compare_module.run_compare(other, out, plots=False)
    assert "or compare in another folder" in str(error.value)
    assert "pick another --out" not in str(error.value)
    assert not (out / "runs").exists()


def test_unknown_preset_is_an_error_before_training(tmp_path, corpus, capsys):
    out = tmp_path / "cmp"
    assert main(compare_args(out, corpus, "vanilla", "primer-ezz")) == 2
    err = capsys.readouterr().err
    assert "unknown preset 'primer-ezz'" in err and "transformer-xl" in err
    assert not out.exists()


def test_spec_compares_resolved_values_and_guards_its_own_keys():
    spec = CompareSpec(("vanilla",), overrides={"train.lr": "1e-3", "model.d_model": "64"})
    same = CompareSpec(("vanilla",), overrides={"train.lr": 0.001, "model.d_model": 64})
    assert spec_differences(spec, same) == []
    assert spec_differences(spec, CompareSpec(("vanilla",), seeds=(1,))) != []
    with pytest.raises(Exception, match="--seeds"):
        CompareSpec(("vanilla",), overrides={"train.seed": 3})
    assert CompareSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(Exception, match=r"at least one seed, e\.g\. seeds=\(0,\)"):
        CompareSpec(("vanilla",), seeds=())


def test_missing_matplotlib_names_both_ways_to_leave_the_plots_out(monkeypatch):
    from formers.bench.plots import pyplot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(FormersError, match=r"--no-plots on the command line, plots=False in"):
        pyplot()


def test_crossing_interpolates_between_evals():
    points = [
        {"step": 10, "seconds": 1.0, "loss": 3.0},
        {"step": 20, "seconds": 2.0, "loss": 2.0},
    ]
    assert crossing(points, 2.5) == {"step": 15.0, "seconds": 1.5, "bound": False}
    assert crossing(points, 3.5)["bound"] is True
    assert crossing(points, 1.0) is None


def test_unknown_corpus_is_an_error_before_the_folder_is_made(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(compare_args(out, tmp_path / "no-such-corpus", "vanilla")) == 2
    assert "unknown corpus" in capsys.readouterr().err
    assert not out.exists()


def test_compare_trains_masked_lms_and_refuses_mixed_tasks(tmp_path, corpus, capsys):
    out = tmp_path / "mlm"
    extra = {"train.max_steps": 4}
    assert main(compare_args(out, corpus, "linformer", "bert", "--no-plots", **extra)) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {row["preset"]: row for row in summary["rows"]}
    assert rows["linformer"]["final_valid_loss"] > 0 and rows["bert"]["final_bits_per_byte"] > 0
    assert main(compare_args(tmp_path / "mixed", corpus, "vanilla", "bert")) == 2
    assert "one arch" in capsys.readouterr().err


def test_a_vocab_size_the_corpus_does_not_have_is_refused_before_the_folder_is_made(
    tmp_path, corpus, capsys
):
    out = tmp_path / "cmp"
    assert main(compare_args(out, corpus, "vanilla", **{"model.vocab_size": 10})) == 2
    err = capsys.readouterr().err
    assert "model.vocab_size=10" in err and "makes it 256" in err and err.count("\n") == 1
    assert not out.exists()


def test_a_diverging_preset_stops_the_comparison_with_one_line(tmp_path, corpus, capsys):
    args = compare_args(tmp_path / "cmp", corpus, "vanilla", **{"train.lr": "1e6"})
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines()[-1].startswith("error: [1/1] vanilla seed 0 in ")
    assert "training diverged: step" in err and "Traceback" not in err
