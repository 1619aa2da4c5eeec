"""What a comparison report says before its tables (what was compared and how), what its plots
draw (the final evaluation, the labelled target line, every train loss), and the mistakes
`formers compare` names: no budget, a misspelt spec key."""

from __future__ import annotations

import json

import pytest

from formers.cli import main
from formers.compare import report_plots
from formers.compare.report_plots import FINAL_LABEL, draw_plots
from formers.compare.report_setup import setup_lines
from formers.compare.spec import Arm, CompareSpec, run_path
from formers.compare.spec_file import load_spec_file
from formers.errors import ConfigError


def test_the_setup_says_what_was_compared_and_how(tmp_path):
    spec = CompareSpec(
        (Arm("vanilla"), Arm("window-8", "longformer", {"model.attention.window": 8})),
        corpus="tinyshakespeare",
        seeds=(0, 1),
        overrides={"model.n_layers": 2, "model.d_model": 64, "train.max_steps": 300,
                   "train.time_budget": "4m", "train.eval_every": 100,
                   "train.eval_tokens": 5000},
    )  # fmt: skip
    # one run recorded what auto chose; the others have not trained yet
    first = run_path(tmp_path, "vanilla", 0)
    first.mkdir(parents=True)
    (first / "config.json").write_text(json.dumps({"resolved": {"precision": "fp32"}}))
    assert setup_lines(spec, tmp_path, "char") == [
        "Compared: vanilla (baseline), window-8 = longformer; on tinyshakespeare (characters); "
        "seeds 0, 1.",
        "Each run (the baseline's settings; arms differ only by their preset and own overrides): "
        "2 layers, d_model 64, 8 heads, d_ff 2048; batch 16 × 128 tokens; adamw, lr 0.001, "
        "cosine schedule after 100 warmup steps; 300 steps or 4m of training, whichever comes "
        "first; precision fp32 (train.precision=auto, as the training machine resolved it).",
        "Valid loss: scored every 100 steps on at most its first 5,000 tokens, and on the whole "
        "valid split at the end.",
        "Shared overrides: model.n_layers=2, model.d_model=64, train.max_steps=300, "
        "train.time_budget=4m, train.eval_every=100, train.eval_tokens=5000.",
        "Arms' own overrides: window-8: model.attention.window=8.",
    ]


def test_a_probes_setup_names_the_probe_not_a_corpus(tmp_path):
    spec = CompareSpec(
        (Arm("vanilla"),), task={"kind": "mqar", "vocab": 64, "pairs": 4},
        overrides={"model.n_layers": 2, "train.seq_len": 64, "train.max_steps": 10},
    )  # fmt: skip
    first = setup_lines(spec, tmp_path, None)[0]
    assert first == (
        "Compared: vanilla (baseline); on the mqar probe (sequences generated from the run's "
        "seed); seed 0."
    )


def run(arm: str, curve: list[tuple[int, float]], final: float, train: list[float]) -> dict:
    """A run of a summary as `formers.compare.report_summary.summarise` makes it."""
    return {
        "arm": arm, "context": None, "seed": 0, "steps": curve[-1][0],
        "train_seconds": curve[-1][0] / 10, "final_valid_loss": final,
        "valid_curve": [{"step": s, "seconds": s / 10, "loss": loss} for s, loss in curve],
        "train_curve": [{"step": i + 1, "loss": loss} for i, loss in enumerate(train)],
        "reach": {"target_loss": curve[-1][1]} if arm == "vanilla" else None,
    }  # fmt: skip


@pytest.fixture
def figures(monkeypatch):
    """The figures draw_plots makes, kept open instead of written."""
    pytest.importorskip("matplotlib")
    kept = {}

    def keep(fig, path):
        kept[path.name] = fig
        return path

    monkeypatch.setattr(report_plots, "save_figure", keep)
    return kept


def test_the_plots_draw_each_final_evaluation_and_name_the_target_line(tmp_path, figures):
    train = [5.5, 4.0, 3.0] + [2.0 - 0.01 * i for i in range(40)]
    summary = {
        "spec": {"seeds": [0]}, "contexts": [], "baseline": "vanilla",
        "runs": [
            run("vanilla", [(10 * i, 3.0 - 0.1 * i) for i in range(1, 11)], 2.05, train),
            run("primer-ez", [(10 * i, 2.9 - 0.1 * i) for i in range(1, 11)], 1.95, train),
        ],
    }  # fmt: skip
    draw_plots(summary, tmp_path)
    ax = figures["valid_loss_vs_step.png"].axes[0]
    labels = ax.get_legend().get_texts()
    assert [t.get_text() for t in labels] == [
        "vanilla", "primer-ez", FINAL_LABEL, "vanilla's last periodic eval: the 'to baseline' loss"
    ]  # fmt: skip
    crosses = [c for c in ax.get_lines() if c.get_marker() == "x" and c.get_xdata().size]
    assert [(list(c.get_xdata()), list(c.get_ydata())) for c in crosses] == [
        ([100], [2.05]),
        ([100], [1.95]),
    ]
    target = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert list(target[0].get_ydata()) == [pytest.approx(2.0)] * 2
    low, high = ax.get_ylim()
    assert low <= 1.95  # the lowest final evaluation is on the plot
    time_ax = figures["valid_loss_vs_time.png"].axes[0]
    assert [list(c.get_xdata()) for c in time_ax.get_lines() if c.get_marker() == "x"][:2] == [
        [10.0],
        [10.0],
    ]
    train_ax = figures["train_loss_vs_step.png"].axes[0]
    low, high = train_ax.get_ylim()
    assert low <= min(train) and high >= max(train)  # the first losses are not cut off


def test_a_comparison_without_a_budget_is_refused_as_a_spec_without_one_is(
    tmp_path, capsys, monkeypatch
):
    def trains(*args, **kwargs):
        raise AssertionError("compare started training without a budget")

    monkeypatch.setattr("formers.compare.harness.run_compare", trains)
    args = ["compare", "vanilla", "primer-ez", "--out", str(tmp_path / "cmp")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no budget: add --train.max_steps N or --train.time_budget 5m")
    assert not (tmp_path / "cmp").exists()
    spec = tmp_path / "spec.yaml"
    spec.write_text("arms: [vanilla, primer-ez]\n")
    with pytest.raises(ConfigError, match="no budget: add budget"):
        load_spec_file(spec)


def test_a_misspelt_spec_key_is_named_before_a_missing_one_is_blamed(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("arm: [vanilla, primer-ez]\nbudget: {train.max_steps: 10}\n")
    with pytest.raises(ConfigError) as error:
        load_spec_file(spec)
    assert str(error.value).startswith(f"{spec}: unknown key 'arm' (did you mean 'arms'?)")
