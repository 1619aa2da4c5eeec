"""`formers train → eval → generate → train --resume` end to end, as a user runs them: the
command line's own entry point with its output captured, in this process (a fresh process
spends most of its time importing torch; tests/test_readme.py and the closed-stdout test below
run the command in one)."""

import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import run_formers_here

formers = run_formers_here


TINY = [
    "--model.n_layers",
    "1",
    "--model.d_model",
    "32",
    "--model.n_heads",
    "2",
    "--model.d_ff",
    "64",
    "--train.batch_size",
    "2",
    "--train.seq_len",
    "16",
    "--train.eval_every",
    "0",
    "--train.precision",
    "fp32",
    "--train.log_every",
    "1",
    "--no-progress",
]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


def test_train_eval_generate_resume(tmp_path, corpus):
    run = tmp_path / "run"
    trained = formers(
        "train", "--run-dir", run, "--train.corpus", corpus, "--train.max_steps", "4", *TINY
    )
    summary = json.loads(trained.stdout)
    assert summary["step"] == 4 and summary["valid"]["tokens"] > 0

    evaluated = json.loads(formers("eval", run, "--split", "test").stdout)
    assert evaluated["split"] == "test" and evaluated["step"] == 4
    assert evaluated["tokens"] > 0 and evaluated["bits_per_byte"] > 0

    sample = formers("generate", run, "--prompt", "to be", "--max-new-tokens", "20", "--seed", "1")
    assert sample.stdout.startswith("to be") and len(sample.stdout) > len("to be")
    again = formers("generate", run, "--prompt", "to be", "--max-new-tokens", "20", "--seed", "1")
    assert again.stdout == sample.stdout

    refused = formers("train", "--run-dir", run, "--train.corpus", corpus, *TINY, check=False)
    assert refused.returncode == 2 and "--resume" in refused.stderr

    resumed = formers("train", "--run-dir", run, "--resume", "--train.max_steps", "6", *TINY)
    assert json.loads(resumed.stdout)["step"] == 6
    # the same losses, step for step, as one run straight to step 6 with the decay of 4 steps
    # the resumed run started with
    straight = tmp_path / "straight"
    formers(
        "train", "--run-dir", straight, "--train.corpus", corpus, "--train.max_steps", "6",
        "--train.schedule_steps", "4", *TINY,
    )  # fmt: skip

    def train_rows(folder):
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["lr"]) for r in rows if r["kind"] == "train"]

    assert [row[0] for row in train_rows(run)] == [1, 2, 3, 4, 5, 6]
    assert train_rows(run) == train_rows(straight)


def test_yaml_config_and_unknown_keys(tmp_path, corpus):
    config = tmp_path / "run.yaml"
    config.write_text(f"preset: vanilla\nmodel:\n  d_model: 32\ntrain:\n  corpus: {corpus}\n")
    result = formers(
        "train", "--config", config, "--run-dir", tmp_path / "r", "--train.max_steps", "1", *TINY
    )
    assert json.loads(result.stdout)["step"] == 1
    saved = json.loads((tmp_path / "r" / "config.json").read_text())
    assert saved["model"]["d_model"] == 32

    bad = formers("train", "--run-dir", tmp_path / "x", "--model.d_modle", "32", check=False)
    assert bad.returncode == 2 and "did you mean 'd_model'" in bad.stderr
    bad = formers("train", "--run-dir", tmp_path / "x", "--train.lr", "fast", check=False)
    assert bad.returncode == 2 and "train.lr='fast' must be of type float" in bad.stderr
    bad = formers(
        "train", "--run-dir", tmp_path / "x", "--train.corpus", tmp_path / "nope.txt", check=False
    )
    assert bad.returncode == 2 and "nope.txt" in bad.stderr and "Traceback" not in bad.stderr


def test_a_runs_config_json_trains_again_as_a_config_file(tmp_path, corpus):
    # `formers config` prints that form too: a run's settings, with what its machine chose
    # ("resolved": a record, not a setting) beside them
    args = ("--train.corpus", corpus, "--train.max_steps", "2", *TINY)
    formers("train", "--run-dir", tmp_path / "r1", "--model.dropout", "0.05", *args)
    first = json.loads((tmp_path / "r1" / "config.json").read_text())
    assert "resolved" in first
    result = formers("train", "--config", tmp_path / "r1" / "config.json", "--run-dir",
                     tmp_path / "r2", "--no-progress")  # fmt: skip
    assert json.loads(result.stdout)["step"] == 2
    again = json.loads((tmp_path / "r2" / "config.json").read_text())
    assert again == first and again["model"]["dropout"] == 0.05


def test_eval_of_a_missing_run_is_a_clear_error(tmp_path):
    result = formers("eval", tmp_path / "nothing", check=False)
    assert result.returncode == 2 and "no run folder" in result.stderr
    result = formers("generate", "--help")
    assert "--temperature" in result.stdout


def test_eval_names_the_damaged_file_of_the_latest_checkpoint(tmp_path, corpus):
    run = tmp_path / "run"
    formers("train", "--run-dir", run, "--train.corpus", corpus, "--train.max_steps", "2", *TINY)
    weights = run / "checkpoints" / "step_000002" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-4] ^= 0x10  # inside the last weight's bytes: the same size, a header that parses
    weights.write_bytes(bytes(data))
    result = formers("eval", run, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {weights}: ") and result.stderr.count("\n") == 1
    assert "checksum" in result.stderr and "--" not in result.stderr  # no flag: it's Python's


def test_train_on_an_unknown_corpus_leaves_no_run_folder(tmp_path):
    run = tmp_path / "run"
    corpus = tmp_path / "missing.txt"
    result = formers("train", "--train.corpus", corpus, "--run-dir", run, *TINY, check=False)
    assert result.returncode == 2 and "unknown corpus" in result.stderr
    assert not run.exists()


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_closed_stdout_ends_the_command_quietly(unbuffered):
    """`formers presets | head -1`: the reader is gone before the output is written (buffered:
    at the interpreter's final flush; unbuffered: at the first print). No traceback, and no
    'Exception ignored' at exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    try:
        result = subprocess.run(
            [sys.executable, "-m", "formers", "presets"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 128 + signal.SIGPIPE


def test_eval_of_part_of_a_byte_split_reports_its_bits_per_byte(tmp_path, corpus):
    # each byte token is one byte of text, so a part of the split has bits per byte too
    run = tmp_path / "run"
    formers(
        "train", "--run-dir", run, "--train.corpus", corpus, "--train.tokenizer", "byte",
        "--train.max_steps", "1", *TINY,
    )  # fmt: skip
    part = json.loads(formers("eval", run, "--max-tokens", "200", "--no-progress").stdout)
    assert part["unit"] == "byte" and part["tokens"] == 200
    assert part["bits_per_byte"] == pytest.approx(part["bits_per_token"], rel=1e-12)
    # a probe's flag on a corpus run: one line naming it
    refused = formers("eval", run, "--eval-samples", "8", check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "which --eval-samples does not apply to" in refused.stderr
