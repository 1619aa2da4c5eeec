"""What a new user runs into: devices that are not there, surprises on resume, two trainers in
one folder, fields that make no sense, generation output, and what each command prints where."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from formers import cli
from formers.train.metrics import read_metrics

TINY = [
    *("--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "2"),
    *("--model.d_ff", "64", "--train.batch_size", "2", "--train.seq_len", "16"),
    *("--train.eval_every", "0", "--train.precision", "fp32", "--train.log_every", "1"),
    *("--train.warmup_steps", "1", "--no-progress"),
]
PYTHON_ADVICE = ("load_config(", "strict=False", "tokenizer='byte'", "latest_checkpoint(", "unk=")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


def run_cli(capsys, *args) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def train(capsys, run, corpus, *extra) -> tuple[int, str, str]:
    return run_cli(capsys, "train", "--run-dir", run, "--train.corpus", corpus, *TINY, *extra)


@pytest.fixture
def trained(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    assert train(capsys, run, corpus, "--train.max_steps", "3", "--train.save_every", "2")[0] == 0
    return run


# --- 1. a device that is not there -------------------------------------------------------------

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@no_cuda
@pytest.mark.parametrize("command", ["eval", "generate"])
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "mps"])
def test_a_missing_device_is_named_before_anything_is_loaded(trained, capsys, command, device):
    code, out, err = run_cli(capsys, command, trained, "--device", device)
    assert code == 2 and out == ""
    assert "no such device" in err or "no CUDA device" in err
    assert "cpu" in err and "damaged" not in err and "delete" not in err


@no_cuda
def test_training_on_a_missing_device_is_one_line_and_makes_no_folder(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    code, _, err = train(capsys, run, corpus, "--train.device", "cuda")
    assert code == 2 and "train.device cuda" in err and "Traceback" not in err
    assert not run.exists()
    from formers.errors import FormersError
    from formers.train.config import run_config
    from formers.train.trainer import train as train_from_python

    cfg = run_config("vanilla", {"train.device": "cuda", "train.corpus": str(corpus)})
    with pytest.raises(FormersError, match="use train.device cpu") as error:
        train_from_python(cfg, run)
    assert "--" not in str(error.value)


# --- 2. resume -------------------------------------------------------------------------------


def test_resuming_a_missing_run_is_refused_and_names_the_folder(tmp_path, corpus, capsys):
    missing = tmp_path / "typo"
    code, _, err = train(capsys, missing, corpus, "--resume")
    assert code == 2 and str(missing) in err and "no run to continue" in err
    assert not missing.exists()


def test_resume_refuses_changed_training_settings_and_lists_them(trained, corpus, capsys):
    code, _, err = train(capsys, trained, corpus, "--resume", "--train.lr", "3e-4")
    assert code == 2 and "train.lr: 0.001 -> 0.0003" in err
    code, _, err = run_cli(
        capsys, "train", "--run-dir", trained, "--resume", "--preset", "primer-ez"
    )
    assert code == 2 and "--preset vanilla" in err
    other = trained.parent / "other.txt"
    other.write_text("something else entirely\n" * 100)
    code, _, err = train(capsys, trained, other, "--resume")
    assert code == 2 and "train.corpus" in err


def test_a_run_resumed_from_python_with_other_settings_is_refused(trained):
    # formers compare and the experiment scripts resume with the config they build today, whose
    # defaults may have changed since the run started
    from formers.errors import FormersError
    from formers.run import read_run_config
    from formers.train import trainer

    saved = read_run_config(trained)
    other = dataclasses.replace(saved, model=dataclasses.replace(saved.model, embed_init="paper"))
    with pytest.raises(FormersError, match=r"model.embed_init: small -> paper.*config.json"):
        trainer.train(other, trained, resume=True, progress=False)
    more = dataclasses.replace(saved, train=dataclasses.replace(saved.train, max_steps=4))
    assert trainer.train(more, trained, resume=True, progress=False).step == 4


def test_resume_with_more_steps_keeps_the_schedule_and_the_config_says_so(trained, corpus, capsys):
    code, out, _ = train(capsys, trained, corpus, "--resume", "--train.max_steps", "5")
    assert code == 0 and json.loads(out)["step"] == 5
    saved = json.loads((trained / "config.json").read_text())["train"]
    assert saved["max_steps"] == 5 and saved["schedule_steps"] == 3  # the decay it started with
    lrs = [r["lr"] for r in read_metrics(trained, "train")]
    assert lrs[3] == lrs[4] == pytest.approx(0.1 * 1e-3)  # past the decay: its final rate


def test_resuming_a_finished_run_adds_no_second_final_evaluation(trained, corpus, capsys):
    before = read_metrics(trained)
    code, out, err = train(capsys, trained, corpus, "--resume")
    assert code == 0 and json.loads(out)["stopped"] == "finished"
    assert "already finished" in err
    assert read_metrics(trained) == before


# --- 3. one trainer per run folder -----------------------------------------------------------


def test_a_second_trainer_in_a_busy_folder_is_refused(trained, corpus, capsys):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        owner = {"pid": holder.pid, "host": socket.gethostname(), "since": time.time()}
        (trained / ".lock").write_text(json.dumps(owner))
        code, _, err = train(capsys, trained, corpus, "--resume", "--train.max_steps", "5")
        assert code == 2 and f"pid {holder.pid}" in err and "in use" in err
        assert "or pick another run folder" in err  # raised in train(), from Python too
        assert read_metrics(trained, "train")[-1]["step"] == 3  # nothing was trained
    finally:
        holder.kill()
        holder.wait()
    # its process is gone: the lock is stale and the next trainer takes it over
    code, _, _ = train(capsys, trained, corpus, "--resume", "--train.max_steps", "5")
    assert code == 0 and not (trained / ".lock").exists()


def test_a_start_that_fails_after_the_folder_is_made_leaves_no_folder(tmp_path, corpus, capsys):
    run = tmp_path / "run"  # the corpus loads, but holds too few tokens for these batches
    code, _, err = train(capsys, run, corpus, "--train.batch_size", "64", "--train.seq_len", "512")
    assert code == 2 and "too few" in err
    assert not run.exists()


# --- 4. fields that make no sense --------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("log_every", "0"),
        ("keep_checkpoints", "0"),
        ("eval_every", "-1"),
        ("warmup_steps", "-1"),
        ("weight_decay", "-0.1"),
        ("grad_clip", "-1"),
        ("lr", "0"),
        ("lr", "-1e-3"),
        ("lr", "nan"),
        ("lr", "inf"),
        ("weight_decay", "nan"),
        ("grad_clip", "inf"),
        ("aux_loss_coef", "nan"),
    ],
)
def test_a_bad_training_field_is_refused_before_training(tmp_path, corpus, capsys, field, value):
    run = tmp_path / "run"
    code, _, err = train(capsys, run, corpus, f"--train.{field}", value)
    assert code == 2 and f"train.{field}" in err and err.count("\n") == 1
    assert not run.exists()


def test_a_misspelt_section_of_a_config_file_is_named(tmp_path, corpus, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("model:\n  d_model: 32\ntrian:\n  lr: 0.01\n")
    run = tmp_path / "run"
    code, _, err = train(capsys, run, corpus, "--config", config)
    assert code == 2 and err == (
        f"error: unknown section 'trian' in {config} (did you mean 'train'?): the sections are "
        "preset, model, train\n"
    )
    assert not run.exists()


def test_cli_errors_give_flags_not_python_advice(trained, tmp_path, corpus, capsys):
    messages = []
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 200)
    messages.append(train(capsys, tmp_path / "a", latin1, "--train.tokenizer", "char")[2])
    shakespeare = tmp_path / "chars.txt"
    shakespeare.write_text("abc\n" * 300)
    run = tmp_path / "chars"
    train(capsys, run, shakespeare, "--train.tokenizer", "char", "--train.max_steps", "1")
    messages.append(run_cli(capsys, "generate", run, "--prompt", "xyz")[2])
    (trained / "checkpoints" / "step_000003" / "model.safetensors").write_bytes(b"not a file")
    messages.append(run_cli(capsys, "eval", trained)[2])
    for message in messages:
        assert message.startswith("error: ") and message.count("\n") == 1, message
        assert not any(advice in message for advice in PYTHON_ADVICE), message
    assert "train.tokenizer=byte" in messages[0] and "train.tokenizer=byte" in messages[1]


# --- 6. what the commands print ----------------------------------------------------------------


def test_train_prints_one_json_result_on_stdout_and_why_it_stopped(tmp_path, corpus, capsys):
    code, out, err = train(capsys, tmp_path / "run", corpus, "--train.max_steps", "2")
    assert code == 0 and json.loads(out)["stopped"] == "max_steps"
    assert "stopped at step 2: reached max_steps" in err
    code, out, err = train(
        capsys, tmp_path / "budget", corpus, "--train.max_steps", "100000", "--train.time_budget",
        "1s",
    )  # fmt: skip
    assert json.loads(out)["stopped"] == "time_budget" and "time budget ran out" in err


class ClosedPipe:
    """A stdout whose reader has gone (`formers train ... | head -c 20`)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        pass


def test_train_on_a_closed_stdout_keeps_its_checkpoint(tmp_path, corpus, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    run = tmp_path / "run"
    code, _, err = train(capsys, run, corpus, "--train.max_steps", "2")
    assert code == 141 and "Traceback" not in err
    assert (run / "checkpoints" / "step_000002").is_dir()
    assert "stopped at step 2: reached max_steps" in err


def test_word_level_generation_spaces_its_words_and_names_unknown_ones(tmp_path, capsys):
    words = tmp_path / "words.txt"
    words.write_text("the company said the market rose\n" * 200)
    run = tmp_path / "run"
    assert train(capsys, run, words, "--train.tokenizer", "word", "--train.max_steps", "1")[0] == 0
    code, out, err = run_cli(
        capsys, "generate", run, "--prompt", "the company zebra said", "--max-new-tokens", "4"
    )
    assert code == 0 and out.startswith("the company <unk> said ")
    assert "zebra" in err and "<unk>" in err
    assert all(word for word in out.split(" ")[:6])  # no word glued to the next


def test_generate_checks_its_options_before_printing_anything(trained, capsys):
    code, out, err = run_cli(capsys, "generate", trained, "--prompt", "to be", "--top-p", "2")
    assert code == 2 and out == "" and "--top-p 2.0 must be in (0, 1]" in err


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--top-k", "0", "--top-k 0 must be at least 1: leave out --top-k to keep every token"),
        ("--top-p", "0", "--top-p 0.0 must be in (0, 1]: leave out --top-p to keep every token"),
    ],
)
def test_generate_advises_flags_and_python_arguments_where_each_is_given(
    trained, capsys, flag, value, message
):
    code, out, err = run_cli(capsys, "generate", trained, flag, value)
    assert code == 2 and out == "" and err == f"error: {message}\n"
    import formers
    from formers.infer import generate

    name = flag[2:].replace("-", "_")
    given = int(value) if name == "top_k" else float(value)
    with pytest.raises(formers.InputError) as error:
        generate(formers.load_run(trained).model, [1], 3, **{name: given})
    assert "or None to keep every token" in str(error.value) and "--" not in str(error.value)


def test_eval_and_generate_take_a_checkpoint_step(trained, capsys):
    code, out, _ = run_cli(capsys, "eval", trained, "--checkpoint", "2", "--max-tokens", "50")
    assert code == 0 and json.loads(out)["step"] == 2
    code, _, err = run_cli(capsys, "generate", trained, "--checkpoint", "7")
    assert code == 2 and "use checkpoint 2 or 3, or leave it out for the latest" in err
    code, out, _ = run_cli(
        capsys, "generate", trained, "--checkpoint", "2", "--max-new-tokens", "3"
    )
    assert code == 0 and out


def test_eval_of_a_folder_that_is_no_run_says_so_and_suggests_no_training_there(tmp_path, capsys):
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0\n")
    code, _, err = run_cli(capsys, "eval", folder)
    assert code == 2 and err == (
        f"error: {folder} is not a run folder (no config.json or checkpoints/): give the "
        "folder of a formers train run\n"
    )
    (folder / "config.json").write_text("{}")  # a run whose training has saved nothing yet
    code, _, err = run_cli(capsys, "eval", folder)
    assert code == 2 and f"{folder} holds no checkpoint yet: train it first" in err


def test_load_run_names_fixes_a_python_caller_can_apply(trained, tmp_path):
    """The messages `formers eval` prints, raised from Python, name no command-line flag."""
    import formers

    messages = []
    for folder, step in ((tmp_path / "missing", None), (tmp_path, None), (trained, 7)):
        with pytest.raises(formers.FormersError) as error:
            formers.load_run(folder, checkpoint=step)
        messages.append(str(error.value))
    assert "give the folder of a formers train run" in messages[0]
    assert f"{tmp_path} is not a run folder" in messages[1]
    assert "use checkpoint 2 or 3, or leave it out for the latest" in messages[2]
    assert not any("--" in message for message in messages), messages


def test_eval_shows_progress_on_stderr_only_and_only_on_a_terminal(trained, capsys, monkeypatch):
    code, out, err = run_cli(capsys, "eval", trained)  # capsys's stderr is no terminal
    assert code == 0 and json.loads(out)["tokens"] > 0 and "eval" not in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as a terminal's
    code, out, err = run_cli(capsys, "eval", trained)
    assert code == 0 and json.loads(out)["tokens"] > 0 and "eval" in err


def test_config_prints_every_field_with_its_value(capsys):
    code, out, _ = run_cli(capsys, "config", "vanilla", "--model.d_model", "128")
    config = json.loads(out)
    assert code == 0 and config["model"]["d_model"] == 128 and config["train"]["log_every"] == 10

    def help_of(command):
        text = subprocess.run(
            [sys.executable, "-m", "formers", command, "--help"], capture_output=True, text=True
        ).stdout
        return " ".join(text.split())

    assert "formers config PRESET" in help_of("train")
    generate_help = help_of("generate")
    assert "(default: 0.8)" in generate_help and "(default: 200)" in generate_help


def test_data_list_says_which_corpora_are_here(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "data", "list", "--data-dir", tmp_path)
    lines = {line.split()[0]: line for line in out.splitlines() if line and line[0] != " "}
    assert code == 0 and "present" in lines["stdlib"] and "missing" in lines["ptb"]
    assert "formers data get enwik8" in out


# --- 8. file modes -----------------------------------------------------------------------------


def test_checkpoint_files_all_have_one_mode(trained):
    folder = trained / "checkpoints" / "step_000003"
    modes = {path.name: os.stat(path).st_mode & 0o777 for path in folder.iterdir()}
    assert len(set(modes.values())) == 1, modes


def test_presets_lists_each_presets_whole_summary(capsys):
    """A summary that wraps in its docstring is printed whole, not cut at its first line."""
    from formers.cli import main
    from formers.presets import PRESETS

    assert main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(PRESETS)
    topk = next(line for line in lines if line.startswith("sparse-topk "))
    assert topk.rstrip().endswith("keep their 8 best keys.")


def test_scale_tied_output_without_a_tied_output_is_refused():
    import formers
    from formers.errors import ConfigError

    with pytest.raises(ConfigError, match="scale_tied_output scales the tied output projection"):
        formers.config("vanilla", scale_tied_output=True, tie_embeddings=False)


@pytest.mark.parametrize(
    "flag, value", [("--model.norm_eps", "inf"), ("--model.attention.commitment", "nan")]
)
def test_a_model_field_that_is_not_a_number_is_one_line(capsys, flag, value):
    code, out, err = run_cli(capsys, "config", "routing", flag, value)
    assert code == 2 and not out
    assert err == f"error: {flag[8:]}={value} must be a finite number\n"


@pytest.mark.parametrize("budget", ["0", "0s", "0m", "0h0m", "-5m", "-1"])
def test_a_time_budget_that_is_not_positive_is_refused(capsys, budget):
    code, out, err = run_cli(capsys, "config", "vanilla", f"--train.time_budget={budget}")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "train.time_budget must be positive" in err and "leave it out for no limit" in err


def test_version_prints_the_packages_one_version(capsys):
    import formers

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out == f"formers {formers.__version__}\n"
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(cli.__file__).parents[1] / "pyproject.toml").read_text())
    # the package metadata takes its version from formers.__version__, so the two cannot differ
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "formers.__version__"}


@pytest.mark.parametrize(
    "word, value",
    [(w, True) for w in ("true", "1", "yes", "on", "True", "ON")]
    + [(w, False) for w in ("false", "0", "no", "off", "False", "OFF")],
)
def test_a_yes_or_no_flag_reads_every_spelling(capsys, word, value):
    # the defaults are true and false, so a word read the wrong way (or ignored) fails one
    code, out, _ = run_cli(
        capsys, "config", "vanilla", "--model.tie_embeddings", word, "--train.compile", word
    )
    config = json.loads(out)
    assert code == 0 and config["model"]["tie_embeddings"] is value
    assert config["train"]["compile"] is value


def test_a_yes_or_no_flag_refuses_other_words_in_one_line(capsys):
    code, out, err = run_cli(capsys, "config", "vanilla", "--model.tie_embeddings", "maybe")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "tie_embeddings='maybe'" in err and "true or false" in err


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "RUN"],
        ["generate", "RUN"],
        ["translate", "RUN"],
        ["average", "RUN"],
        ["convert", "RUN"],
        ["data", "list"],
        ["data", "info", "ptb"],
        ["presets"],
    ],
)
def test_an_unknown_flag_is_one_line_naming_it(tmp_path, capsys, command):
    argv = [str(tmp_path / "run") if word == "RUN" else word for word in command]
    code, out, err = run_cli(capsys, *argv, "--bogus", "1")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("error: ") and "--bogus 1" in err
    assert f"formers {command[0]} --help" in err


@pytest.mark.parametrize(
    "flags",
    [
        ["--beam", "4"],
        ["--alpha", "0.6"],
        ["--penalty", "gnmt"],
        ["--precision", "fp32"],
        ["--max-len-b", "50"],
    ],
)
def test_eval_of_a_language_model_refuses_a_translation_flag_even_at_its_default(
    trained, capsys, flags
):
    code, out, err = run_cli(capsys, "eval", trained, *flags)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"holds a language model, which {flags[0]} does not apply to" in err


# --- a vocabulary the corpus decides -----------------------------------------------------------


def test_a_vocab_size_the_corpus_does_not_have_is_refused(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    code, out, err = train(capsys, run, corpus, "--model.vocab_size", "10")
    assert code == 2 and out == "" and err.count("\n") == 1 and not run.exists()
    assert "model.vocab_size=10" in err and "byte tokenizer makes it 256" in err
    assert "leave model.vocab_size unset" in err and "train.tokenizer_vocab" in err
    config = tmp_path / "run.yaml"
    config.write_text("model:\n  vocab_size: 300\n")
    code, _, err = train(capsys, run, corpus, "--config", config)
    assert code == 2 and "model.vocab_size=300" in err and not run.exists()


def test_the_vocab_size_the_corpus_has_and_a_presets_own_are_accepted(tmp_path, corpus, capsys):
    code, _, _ = train(
        capsys, tmp_path / "same", corpus, "--model.vocab_size", "256", "--train.max_steps", "1"
    )
    assert code == 0
    # the preset's own vocabulary (256) is a default, not a choice: the character tokenizer's
    # replaces it
    code, _, err = train(
        capsys, tmp_path / "chars", corpus, "--train.tokenizer", "char", "--train.max_steps", "1"
    )
    assert code == 0, err
    saved = json.loads((tmp_path / "chars" / "config.json").read_text())
    assert saved["model"]["vocab_size"] == len(set(corpus.read_text())) < 256


def test_data_list_names_the_translation_corpora_missing_here(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "data", "list", "--data-dir", tmp_path)
    lines = {line.split()[0]: line for line in out.splitlines() if line and line[0] != " "}
    assert (
        code == 0 and "missing" in lines["multi30k-de-en"] and "missing" in lines["multi30k-en-de"]
    )
    assert "formers data info multi30k-de-en" in out


@pytest.mark.parametrize("preset", ["vanilla", "bert"])
def test_a_language_model_on_a_translation_corpus_names_the_translation_preset(
    tmp_path, capsys, preset
):
    run = tmp_path / "run"
    code, _, err = run_cli(
        capsys, "train", "--preset", preset, "--run-dir", run, "--train.corpus", "multi30k-de-en"
    )
    assert code == 2 and err.count("\n") == 1 and not run.exists()
    assert "multi30k-de-en is a translation corpus" in err and "transformer preset" in err
    assert "unknown corpus" not in err
