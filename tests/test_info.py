"""`formers info RUN`: a run folder summarised from its files, each value checked against the
folder read another way."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

import formers
from formers import cli
from formers.train.metrics import read_metrics

TINY = [
    *("--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "2"),
    *("--model.d_ff", "64", "--train.batch_size", "2", "--train.seq_len", "16"),
    *("--train.eval_every", "2", "--train.eval_tokens", "100", "--train.save_every", "2"),
    *("--train.keep_checkpoints", "2", "--train.precision", "fp32", "--no-progress"),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("info")
    corpus = folder / "text.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    run = folder / "run"
    args = ["train", "--run-dir", run, "--train.corpus", corpus, "--train.max_steps", "6", *TINY]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main([str(a) for a in args]) == 0
    return run


def test_info_summarises_the_run_as_its_files_say(run, capsys):
    assert cli.main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    loaded = formers.load_run(run)
    train = read_metrics(run, "train")
    valid = read_metrics(run, "valid")
    assert info["preset"] == "vanilla" and info["model"]["n_layers"] == 1
    assert info["model"]["vocab_size"] == loaded.config.model.vocab_size
    assert info["parameters"] == sum(p.numel() for p in loaded.model.parameters())
    assert info["step"] == 6 and info["tokens"] == 6 * 2 * 16
    assert info["precision"] == "fp32"
    assert info["precisions_used"] == [{"step": 0, "precision": "fp32"}]
    assert info["last_train"] == {"step": train[-1]["step"], "loss": train[-1]["loss"]}
    assert info["last_valid"]["loss"] == valid[-1]["loss"] and info["last_valid"]["final"]
    assert info["finished"] and info["checkpoints"] == [4, 6]  # the 2 kept


def test_info_in_words_names_each_part(run, capsys):
    assert cli.main(["info", str(run)]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["preset"].startswith("vanilla (decoder, 1 layer, d_model 32, 2 heads, d_ff 64")
    assert lines["trained"].startswith("6 of 6 steps, 192 tokens, ")
    assert lines["trained"].endswith("; finished")
    assert lines["precision"] == "fp32"
    assert lines["checkpoints"] == "steps 4, 6 (the latest is 6)"
    assert "(the whole split)" in lines["last"]  # "last losses ..."


def test_info_of_a_folder_that_is_no_run_is_one_line(tmp_path, capsys):
    assert cli.main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} is not a run folder") and err.count("\n") == 1


def test_info_says_what_auto_chose_not_auto(tmp_path, capsys):
    import torch

    from formers.train.precision import resolve_precision

    corpus = tmp_path / "text.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    run = tmp_path / "run"
    auto = [a if a != "fp32" else "auto" for a in TINY]  # the same run, precision left to auto
    args = ["train", "--run-dir", run, "--train.corpus", corpus, "--train.max_steps", "2", *auto]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main([str(a) for a in args]) == 0
    chosen = resolve_precision("auto", torch.device("cpu"))  # bf16 or fp32, by this CPU
    assert cli.main(["info", str(run), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["precision"] == "auto"  # what was asked
    assert info["precisions_used"] == [{"step": 0, "precision": chosen}]  # what it computed in
    assert cli.main(["info", str(run)]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["precision"] == f"{chosen} (train.precision=auto)"
