"""What a run says about itself on stderr: the precision it computes in (and config.json's
record of it), how long it will take, why a resumed run trains no further and which flag lets
it, a run that stops during its warmup, and one way to continue an interrupted run."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from formers import cli
from formers.train import startup, trainer
from formers.train.config import TrainConfig
from formers.train.metrics import MetricsLog, read_metrics
from formers.train.pace import Pace, duration
from formers.train.precision import resolve_precision
from formers.train.run_record import resolved_at_start

MODEL = [
    *("--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "2"),
    *("--model.d_ff", "64", "--train.batch_size", "2", "--train.seq_len", "16"),
    *("--train.eval_tokens", "200", "--train.log_every", "1"),
]
TINY = [*MODEL, "--train.eval_every", "0", "--no-progress"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


def train(capsys, run, corpus, *extra) -> tuple[int, dict, str]:
    code = cli.main([str(a) for a in ["train", "--run-dir", run, "--train.corpus", corpus,
                                      *TINY, *extra]])  # fmt: skip
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else {}, out.err


def test_a_run_says_its_precision_and_config_json_records_what_auto_chose(
    tmp_path, corpus, capsys
):
    code, _, err = train(capsys, tmp_path / "a", corpus, "--train.max_steps", "1")
    chosen = resolve_precision("auto", torch.device("cpu"))
    assert code == 0 and f"precision: {chosen} (train.precision=auto: this CPU " in err
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["train"]["precision"] == "auto"
    assert saved["resolved"] == {
        "precision": chosen,
        "device": "cpu",
        "precisions": [{"step": 0, "precision": chosen}],
    }

    code, _, err = train(
        capsys, tmp_path / "b", corpus, "--train.max_steps", "1", "--train.precision", "fp32"
    )
    assert code == 0 and "precision: fp32 (train.precision=fp32)" in err
    assert json.loads((tmp_path / "b" / "config.json").read_text())["resolved"]["precision"] == (
        "fp32"
    )


def test_a_resume_after_its_time_budget_says_the_budget_is_the_runs_total(
    tmp_path, corpus, capsys
):
    run = tmp_path / "run"
    code, result, _ = train(capsys, run, corpus, "--train.time_budget", "0.001s")
    assert code == 0 and result["stopped"] == "time_budget" and result["step"] == 1
    code, result, err = train(capsys, run, corpus, "--resume")
    assert code == 0 and result["stopped"] == "finished"
    assert "time budget, train.time_budget=0.001s, is the total for the run" in err
    assert "give a larger --train.time_budget" in err
    # and with a larger budget it does train on
    code, result, _ = train(
        capsys, run, corpus, "--resume", "--train.time_budget", "1h", "--train.max_steps", "3"
    )
    assert code == 0 and result["step"] == 3 and result["stopped"] == "max_steps"


def test_a_resume_of_a_run_that_took_its_steps_names_max_steps(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    assert train(capsys, run, corpus, "--train.max_steps", "2")[0] == 0
    code, result, err = train(capsys, run, corpus, "--resume")
    assert code == 0 and result["stopped"] == "finished"
    assert "has taken its train.max_steps=2 steps: give a larger --train.max_steps" in err
    assert "time_budget" not in err


def test_a_resume_with_fewer_steps_says_it_stops_during_the_warmup(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    warmup = ("--train.warmup_steps", "10", "--train.lr", "0.002")
    code, result, _ = train(capsys, run, corpus, *warmup, "--train.time_budget", "0.001s")
    assert code == 0 and result["step"] == 1  # of max_steps 1000
    code, result, err = train(
        capsys, run, corpus, "--resume", "--train.max_steps", "4", "--train.time_budget", "1h"
    )
    assert code == 0 and result["step"] == 4
    assert (
        "note: train.max_steps=4 stops the run at that step, during its warmup "
        "(train.warmup_steps=10)" in err
    )
    # at step 4 of a linear warmup to 0.002 over 10 steps, the rate was 4/10 of it
    assert "during the warmup (step 4 of train.warmup_steps=10): the learning rate had " in err
    assert "reached 0.0008, 40% of train.lr=0.002" in err


def test_a_resume_with_fewer_steps_after_the_warmup_says_where_the_schedule_stops(
    tmp_path, corpus, capsys
):
    run = tmp_path / "run"
    flags = ("--train.warmup_steps", "1", "--train.max_steps", "10", "--train.save_every", "2")
    original_log = MetricsLog.log

    def ctrl_c_at_step_2(self, kind, step, **values):
        original_log(self, kind, step, **values)
        if kind == "train" and step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MetricsLog, "log", ctrl_c_at_step_2)
        code, result, err = train(capsys, run, corpus, *flags)
    assert code == 130 and result["interrupted"]
    # one way to continue, the command's own
    assert f"continue it with: formers train --run-dir {run} --resume" in err
    assert err.count("--resume") == 1 and "same command" not in err
    code, result, err = train(capsys, run, corpus, "--resume", "--train.max_steps", "5")
    assert code == 0 and result["step"] == 5
    assert "stops the run at that step, before its cosine schedule ends (at step 10" in err
    assert "during the warmup" not in err


def test_the_pace_is_timed_after_the_first_step_and_said_once():
    pace = Pace(TrainConfig(max_steps=1000), step=0)
    seconds = 5.0  # the first step: slow, not counted
    assert pace.observe(1, seconds) is None
    lines = []
    for step in range(2, 40):
        seconds += 0.5
        lines.append(pace.observe(step, seconds))
    said = [line for line in lines if line]
    assert len(said) == 1 and lines.index(said[0]) == 19  # after 20 timed steps (2..21)
    # 979 steps left at 0.5 s: 489.5 s
    assert said[0] == (
        "pace: 0.5 s a step over steps 2–21; the 979 steps left take about 8 min 10 s of "
        "training here (evaluations excluded)"
    )


def test_the_pace_skips_as_many_first_steps_as_it_is_told_the_compiling_ones():
    pace = Pace(TrainConfig(max_steps=1000), step=0, skipped=2)
    assert pace.observe(1, 100.0) is None  # compiles
    assert pace.observe(2, 150.0) is None  # compiles again: 50 s, more than the 30 s timed
    lines = [pace.observe(step, 150.0 + 0.5 * (step - 2)) for step in range(3, 40)]
    said = [line for line in lines if line]
    assert len(said) == 1 and said[0].startswith("pace: 0.5 s a step over steps 3–22; the 978 ")


def test_the_pace_of_a_run_with_a_time_budget_names_where_the_budget_ends_it():
    pace = Pace(TrainConfig(max_steps=1000, time_budget="60s"), step=100)  # resumed at 100
    assert pace.observe(101, 30.0) is None
    line = None
    for step in range(102, 130):  # 2 s a step: 30 s of the budget left end it at step 116
        line = line or pace.observe(step, 30.0 + 2.0 * (step - 101))
    assert line is not None and line.startswith("pace: 2 s a step over steps 102–")
    assert "the time budget (60s) ends the run near step 116 of 1,000" in line


def test_a_run_says_its_pace_once_after_timing_its_first_steps(tmp_path, corpus, capsys):
    code, _, err = train(capsys, tmp_path / "run", corpus, "--train.max_steps", "25")
    assert code == 0
    paces = [line for line in err.splitlines() if line.startswith("pace: ")]
    assert len(paces) == 1, err  # said once, between the first steps and the end
    assert " a step over steps 2–21; the 4 steps left take about " in paces[0]


@pytest.mark.parametrize(
    ("seconds", "text"), [(45.4, "45 s"), (600, "10 min 00 s"), (7_530, "2 h 05 min")]
)
def test_durations_read_as_a_person_would_say_them(seconds, text):
    assert duration(seconds) == text


def test_without_a_terminal_a_run_draws_no_progress_bar_and_says_each_evaluation(
    tmp_path, corpus, capsys
):
    # capsys's stderr is no terminal, as a log file or a pipe is not; no --no-progress given
    argv = ["train", "--run-dir", tmp_path / "run", "--train.corpus", corpus, *MODEL]
    argv += ["--train.eval_every", "2", "--train.max_steps", "5"]
    assert cli.main([str(a) for a in argv]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "train:" not in err  # no bar, no redraws
    lines = err.splitlines()
    assert [line.split(":")[0] for line in lines if ": valid loss" in line] == [
        "step 2",
        "step 4",
        "step 5",  # the final evaluation, a line like the others
    ]
    final = read_metrics(tmp_path / "run", "valid")[-1]
    assert final["final"] and final["step"] == 5
    assert f"step 5: valid loss {final['loss']:.4f} " in err
    assert lines[-2].endswith("(final: the whole split)")  # then why it stopped


def interrupted_at(step: int):
    """A MetricsLog.log that sends this process a Ctrl-C once it has logged `step`'s train
    record: the run saves that step and stops."""
    original_log = MetricsLog.log

    def log(self, kind, at, **values):
        original_log(self, kind, at, **values)
        if kind == "train" and at == step:
            os.kill(os.getpid(), signal.SIGINT)

    return log


def test_a_final_evaluation_a_resume_trained_past_does_not_finish_the_run(
    tmp_path, corpus, capsys
):
    run = tmp_path / "run"
    assert train(capsys, run, corpus, "--train.max_steps", "2")[0] == 0  # its final: step 2
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MetricsLog, "log", interrupted_at(4))
        code, result, _ = train(capsys, run, corpus, "--resume", "--train.max_steps", "6",
                                "--train.save_every", "2")  # fmt: skip
    assert code == 130 and result["step"] == 4
    assert [r["step"] for r in read_metrics(run, "valid") if r.get("final")] == [2]  # kept
    assert cli.main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["step"] == 4 and not info["finished"]
    # ended at step 4 now, it runs its final evaluation there
    code, result, err = train(capsys, run, corpus, "--resume", "--train.max_steps", "4")
    assert code == 0 and result["stopped"] == "max_steps" and "already finished" not in err
    assert result["valid"]["loss"] == read_metrics(run, "valid")[-1]["loss"]
    assert [r["step"] for r in read_metrics(run, "valid") if r.get("final")] == [2, 4]
    # then it is finished; fewer steps than it took are named as such
    code, result, err = train(capsys, run, corpus, "--resume", "--train.max_steps", "3")
    assert code == 0 and result["stopped"] == "finished"
    assert "It is at step 4, past train.max_steps=3: give a --train.max_steps above 4" in err
    assert "has taken its train.max_steps" not in err


def test_a_run_resumed_in_another_precision_records_each_and_info_says_both(
    tmp_path, corpus, capsys, monkeypatch
):
    # train.precision=auto resolves on the machine each start runs on: bf16 on one, fp32 on
    # another (the record is what is checked here; the autocast is this CPU's either way)
    run = tmp_path / "run"
    monkeypatch.setattr(startup, "resolve_precision", lambda precision, device: "bf16")
    assert train(capsys, run, corpus, "--train.max_steps", "2", "--train.save_every", "2")[0] == 0
    monkeypatch.setattr(startup, "resolve_precision", lambda precision, device: "fp32")
    assert train(capsys, run, corpus, "--resume", "--train.max_steps", "4")[0] == 0
    resolved = json.loads((run / "config.json").read_text())["resolved"]
    assert resolved["precisions"] == [
        {"step": 0, "precision": "bf16"},
        {"step": 2, "precision": "fp32"},
    ]
    assert cli.main(["info", str(run)]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["precision"] == "bf16 to step 2, then fp32 (train.precision=auto)"


def test_a_start_keeps_the_precisions_of_the_steps_it_continues_from():
    saved = {"resolved": resolved_at_start({}, 0, "bf16", "cpu")}
    saved = {"resolved": resolved_at_start(saved, 400, "fp32", "cpu")}
    assert saved["resolved"]["precisions"] == [
        {"step": 0, "precision": "bf16"},
        {"step": 400, "precision": "fp32"},
    ]
    # resumed again from step 400's checkpoint on a bf16 machine: the fp32 start trained
    # nothing that is kept, so the run trained in bf16 alone
    again = resolved_at_start(saved, 400, "bf16", "cuda:0")
    assert again == {
        "precision": "bf16",
        "device": "cuda:0",
        "precisions": [{"step": 0, "precision": "bf16"}],
    }
    # a run saved before the list was kept: its one record, from step 0
    old = {"resolved": {"precision": "fp32", "device": "cpu"}}
    assert resolved_at_start(old, 10, "fp32", "cpu")["precisions"] == [
        {"step": 0, "precision": "fp32"}
    ]


def test_an_interrupted_run_started_from_python_says_how_to_continue_from_python(
    tmp_path, capsys, monkeypatch
):
    from helpers import tiny_training_config

    cfg = tiny_training_config("vanilla", tmp_path, max_steps=5, log_every=1, eval_every=0)
    monkeypatch.setattr(MetricsLog, "log", interrupted_at(2))
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.interrupted and result.step == 2
    err = capsys.readouterr().err
    assert "continue it with: train(cfg, run_dir, resume=True)" in err
    assert "formers train" not in err


def test_an_interrupted_torchrun_run_is_continued_by_torchrun(tmp_path, monkeypatch):
    from formers.commands.train import resume_command

    run = tmp_path / "my run"
    assert resume_command(run) == f"continue it with: formers train --run-dir '{run}' --resume"
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert resume_command(run) == (
        f"continue it with: torchrun --nproc_per_node=2 -m formers train --run-dir '{run}' "
        "--resume"
    )
    monkeypatch.setenv("WORLD_SIZE", "8")  # two machines of 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    hint = resume_command(run)
    assert hint.startswith("continue it with: torchrun --nproc_per_node=4 -m formers train ")
    assert hint.endswith("on each of the 2 machines, with torchrun's other options as before")
