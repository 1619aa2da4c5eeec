"""The README's Python blocks run as written (a stale example is a bug users hit first)."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from formers.compare.spec_file import load_spec_file

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index):
    exec(compile(BLOCKS[index], f"README.md python block {index}", "exec"), {})


COMMANDS = [
    line.strip()
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    for line in block.splitlines()
    if line.strip().split(" #")[0].strip() in ("formers presets", "formers data list")
]


def test_the_readme_shows_the_quick_commands():
    assert {c.split(" #")[0].strip() for c in COMMANDS} == {"formers presets", "formers data list"}


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_quick_commands_run(command):
    words = command.split(" #")[0].split()
    result = subprocess.run(
        [sys.executable, "-m", "formers", *words[1:]], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout, result.stderr


# a file with a slow test that imports neither torch nor the conftest's (which does)
SLOW_TESTS = ["tests/test_demo_script.py", "--noconftest"]


def test_the_readmes_slow_test_command_finds_tests():
    # `bash scripts/test.sh -m slow` must run something: `-m slow` overrides the default
    # `-m 'not slow ...'` of pyproject.toml (one file collected: the whole suite takes a minute)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", *SLOW_TESTS],
        capture_output=True,
        text=True,
        cwd=README.parent,
    )
    counts = result.stdout.strip().splitlines()[-1]  # "2/611 tests collected (609 deselected)"
    assert result.returncode == 0 and not counts.startswith("0/"), counts


# The shell commands of the README, run top to bottom at a small size. Each command runs as
# written, followed by flags that shrink it (overrides given later win): a 1-layer model, tiny
# batches, and every step count divided by STEP_SCALE, so the checkpoints a command names and the
# checkpoints the settings shown keep are scaled alike.
STEP_SCALE = 50
STEP_FIELDS = ("max_steps", "save_every", "eval_every", "warmup_steps")
TINY_MODEL = ["--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "4",
              "--model.d_ff", "64"]  # fmt: skip
TINY_TRAIN = ["--train.batch_size", "2", "--train.seq_len", "16", "--train.eval_tokens", "300",
              "--train.eval_batch_size", "256",
              "--train.precision", "fp32", "--no-progress"]  # fmt: skip
TINY_BENCH = ["--n-layers", "2", "--d-model", "32", "--n-heads", "4", "--d-ff", "64",
              "--seq-len", "16", "--batch-size", "2", "--repeats", "1", "--warmup", "0",
              "--matmul-size", "64", "--threads", "1", "--no-plots"]  # fmt: skip


def readme_section(title: str) -> str:
    """The README's text under `## title`, up to the next section."""
    return README.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def shell_blocks(section: str) -> list[list[list[str]]]:
    """A README section's ```bash blocks: their commands as words (continuations joined,
    comments dropped)."""
    blocks = re.findall(r"```bash\n(.*?)```", readme_section(section), re.S)
    lines = [block.replace("\\\n", " ").splitlines() for block in blocks]
    return [[shlex.split(line, comments=True) for line in block if line.strip()] for block in lines]


def dotted_flags(words: list[str]) -> dict[str, str]:
    """A command's `--model.x VALUE` / `--train.x VALUE` overrides."""
    return {
        word[2:]: value
        for word, value in zip(words, words[1:], strict=False)
        if word.startswith(("--model.", "--train."))
    }


def option(words: list[str], name: str, default: str | None = None) -> str | None:
    return words[words.index(name) + 1] if name in words else default


def scaled_step(value: int, what: str) -> int:
    assert value % STEP_SCALE == 0, f"{what}={value}: the test divides steps by {STEP_SCALE}"
    return value // STEP_SCALE


def fewer_steps(preset: str, overrides: dict[str, str]) -> list[str]:
    """The step counts these settings train with, divided by STEP_SCALE."""
    from formers.train.config import run_config

    tc = run_config(preset, overrides).train
    flags = [[f"--train.{name}", str(scaled_step(getattr(tc, name), name))] for name in STEP_FIELDS]
    return sum(flags, [])


def shrink(words: list[str]) -> list[str]:
    """The flags that make a README command small (after `formers`)."""
    from formers.commands.translate import is_translation_run

    command = words[1]
    if command == "train" and "--resume" not in words:
        preset = option(words, "--preset", "vanilla")
        tiny = TINY_MODEL + TINY_TRAIN + fewer_steps(preset, dotted_flags(words))
        return tiny + (["--train.max_tokens", "128"] if "--train.max_tokens" in words else [])
    if command == "compare":
        preset = words[2]
        return TINY_MODEL + TINY_TRAIN + fewer_steps(preset, dotted_flags(words)) + ["--no-plots"]
    if command == "eval":
        translation = is_translation_run(words[2])
        return ["--max-tokens", "300", "--no-progress"] + (["--max-len-b", "5"] * translation)
    extra = {
        "generate": ["--max-new-tokens", "20"],
        "translate": ["--max-len-b", "5"],
        "bench": TINY_BENCH + (["--sweep", "16", "32"] if "--sweep" in words else []),
    }
    return extra.get(command, [])


def scaled_checkpoint(words: list[str]) -> list[str]:
    """`--checkpoint STEP` names the same checkpoint of the scaled run."""
    if "--checkpoint" not in words:
        return words
    at = words.index("--checkpoint") + 1
    step = scaled_step(int(words[at]), "--checkpoint")
    return [*words[:at], str(step), *words[at + 1 :]]


def corpus_absent(commands: list[list[str]]) -> str | None:
    """The first named corpus the commands train on that is not in the data folder."""
    from formers.data import CORPORA
    from formers.data.errors import DataError
    from formers.data.translation_corpora import read_parallel_corpus

    for words in commands:
        name = dotted_flags(words).get("train.corpus") or option(words, "--corpus")
        if name in CORPORA and not CORPORA[name].present():
            return name
        if name is not None and name.startswith("multi30k"):
            try:
                read_parallel_corpus(name)
            except DataError:
                return name
    return None


def run_readme_commands(commands: list[list[str]], tmp_path, monkeypatch, capsys) -> None:
    """Run README commands in order in `tmp_path`, scaled down; a failing one fails the test."""
    from formers import cli

    missing = corpus_absent(commands)
    if missing:
        pytest.skip(f"these README commands train on {missing}, which is absent")
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    try:
        for words in commands:
            torch.set_num_threads(1)  # tiny models: one thread beats two that wait on each other
            if words[0] == "torchrun":  # "the same command" under torchrun: its `...` is no flag
                assert words[-1] == "...", words  # DDP runs: tests/train/test_ddp.py
                continue
            if words[:2] == ["ulimit", "-v"]:  # the shell's memory cap for the next command
                continue
            stdin = "\n"
            if "|" in words:  # echo "..." | formers translate ...
                at = words.index("|")
                assert words[0] == "echo", words
                stdin, words = " ".join(words[1:at]) + "\n", words[at + 1 :]
            assert words[0] == "formers", words
            if words[1] == "compare" and "--spec" in words:
                # hours of training on a real corpus: checked as compare checks it before any
                # work (the spec loads, every run resolves); tests/compare/test_compare_spec.py
                # runs specs end to end at a small size
                spec = load_spec_file(README.parent / option(words, "--spec"))
                assert all(spec.run_config(a, s, context=c) for a, c, s in spec.runs())
                continue
            argv = scaled_checkpoint(words[1:]) + shrink(words)
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
            code = cli.main(argv)
            err = capsys.readouterr().err
            assert code == 0, f"`{shlex.join(words)}` failed: {err.strip()[-1500:]}"
    finally:
        torch.set_num_threads(threads)


def translates(words: list[str]) -> bool:
    """Whether a README command trains or uses the Multi30k translation run."""
    return any("m30k" in word for word in words)


def test_readme_command_line_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    first, *_ = shell_blocks("Command line")
    run_readme_commands([w for w in first if not translates(w)], tmp_path, monkeypatch, capsys)


@pytest.mark.slow  # a joint BPE learned on Multi30k's 29,000 pairs, then training and search
def test_readme_translation_commands_run(tmp_path, monkeypatch, capsys):
    first, *_ = shell_blocks("Command line")
    assert sum(map(translates, first)) == 4
    run_readme_commands([w for w in first if translates(w)], tmp_path, monkeypatch, capsys)


# The next two train on real corpora or measure every preset: their commands' parts are tested
# at a small size by tests/bench and tests/compare in the default suite.
@pytest.mark.slow
def test_readme_bench_and_compare_examples_run(tmp_path, monkeypatch, capsys):
    _, *examples = shell_blocks("Command line")
    assert [words[1] for block in examples for words in block] == ["bench"] * 3 + ["compare"]
    run_readme_commands(sum(examples, []), tmp_path, monkeypatch, capsys)


@pytest.mark.slow
def test_readme_results_commands_run(tmp_path, monkeypatch, capsys):
    run_readme_commands(sum(shell_blocks("Results"), []), tmp_path, monkeypatch, capsys)


QUICKSTART = README.parent / "scripts" / "quickstart.sh"


def quickstart_commands() -> list[list[str]]:
    """The README's Quickstart commands (its second block; the first runs the script)."""
    (script,), commands = shell_blocks("Quickstart")
    assert script == ["bash", "scripts/quickstart.sh"]
    return commands


def test_the_quickstart_script_runs_the_readmes_commands():
    text = QUICKSTART.read_text().replace("\\\n", " ")
    lines = [line.split(" > ")[0] for line in text.splitlines() if line.startswith("formers ")]
    run = re.search(r'^run="(runs/quickstart)-', text, re.M).group(1)
    words = [shlex.split(line.replace('"$run"', run)) for line in lines]
    assert words == quickstart_commands()


def with_the_source_here(tmp_path: Path) -> None:
    """The quickstart trains on `formers` (the package's folder, beside the README): the same
    folder, seen from the test's working directory."""
    (tmp_path / "formers").symlink_to(README.parent / "formers", target_is_directory=True)


def test_readme_quickstart_runs(tmp_path, monkeypatch, capsys):
    with_the_source_here(tmp_path)
    run_readme_commands(quickstart_commands(), tmp_path, monkeypatch, capsys)


@pytest.mark.slow  # the quickstart at its own size: under a minute of training on 2 cores
def test_the_quickstart_as_written_learns_what_the_readme_says(tmp_path, monkeypatch, capsys):
    from formers import cli
    from formers.train.metrics import read_metrics

    with_the_source_here(tmp_path)
    monkeypatch.chdir(tmp_path)
    train, generate = quickstart_commands()
    assert cli.main([*train[1:], "--no-progress"]) == 0
    final = [r for r in read_metrics(tmp_path / "runs/quickstart", "valid") if r.get("final")]
    assert final[0]["loss"] < 2.8  # "a valid loss of about 2.6" nats per byte (ln 256 = 5.5)
    capsys.readouterr()
    assert cli.main(generate[1:]) == 0
    sample = capsys.readouterr().out
    assert "\n    " in sample  # a line break, then indentation
