"""`formers train --init-from` of a translation model: an imported Marian model (its run folder
or its Hugging Face folder) or a formers translation run, fine-tuned on a parallel corpus with
its own tokenizer; the new run is read back by `formers translate` and `formers eval`."""

import dataclasses
import json

import pytest
from helpers import write_parallel_corpus
from hf_marian import SOURCE, TARGET

from formers.cli import main
from formers.infer.translate import translate
from formers.run import load_run

SHORT = [
    "--train.max_steps", "1", "--train.max_tokens", "256", "--train.eval_every", "0",
    "--train.precision", "fp32", "--train.device", "cpu", "--train.lr", "1e-3",
    "--train.warmup_steps", "0", "--no-progress",
]  # fmt: skip
TINY = [
    "--preset", "transformer", "--model.n_layers", "1", "--model.d_model", "32",
    "--model.n_heads", "2", "--model.d_ff", "64", "--train.tokenizer_vocab", "300",
]  # fmt: skip


def fine_tune(source, run_dir, corpus, *flags) -> int:
    args = ["train", "--init-from", str(source), "--run-dir", str(run_dir)]
    return main([*args, "--train.corpus", corpus, *SHORT, *flags])


def largest_move(before: dict, after: dict) -> float:
    return max((after[k] - before[k]).abs().max().item() for k in before)


@pytest.fixture
def marian_corpus(tmp_path):
    """The tiny Marian model's own sentences, four times: 18 training pairs, 1 valid, 1 test."""
    for name, lines in (("corpus.de", SOURCE), ("corpus.en", TARGET)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines * 4))
    return f"{tmp_path / 'corpus.de'},{tmp_path / 'corpus.en'}"


@pytest.mark.parametrize("origin", [pytest.param("run", marks=pytest.mark.slow), "folder"])
def test_one_step_from_marian_changes_the_weights_and_keeps_its_tokenizer(
    marian_folder, marian_corpus, tmp_path, capsys, origin
):
    source = marian_folder
    if origin == "run":
        source = tmp_path / "imported"
        assert main(["import", str(marian_folder), "--run-dir", str(source)]) == 0
        capsys.readouterr()
    run_dir = tmp_path / "tuned"
    assert fine_tune(source, run_dir, marian_corpus) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    from formers import from_pretrained

    start, tuned = from_pretrained(marian_folder), load_run(run_dir)
    assert tuned.config.model == start.config.model
    assert tuned.config.train.tokenizer == "pretrained"
    assert tuned.tokenizer.to_dict() == start.tokenizer.to_dict()  # the same pieces and ids
    moved = largest_move(start.model.state_dict(), tuned.model.state_dict())
    assert 0 < moved < 1e-2  # one Adam step of lr 1e-3 from the weights, not from scratch
    text = tmp_path / "source.de"
    text.write_text(SOURCE[2] + "\n")
    assert main(["translate", str(run_dir), str(text), "--beam", "1", "--max-len-b", "5"]) == 0
    got = capsys.readouterr().out.splitlines()
    want = translate(tuned.model, start.tokenizer, SOURCE[2:3], beam=1, max_len_b=5)
    assert got == want and any(got)


@pytest.fixture(scope="module")
def translation_run(tmp_path_factory):
    """A formers translation run of one step on the toy corpus, and that corpus."""
    folder = tmp_path_factory.mktemp("translation")
    corpus = write_parallel_corpus(folder, n=100)
    run = folder / "run"
    args = ["train", "--run-dir", str(run), "--train.corpus", corpus, *TINY, *SHORT]
    assert main(args) == 0
    return run, corpus


def test_a_formers_translation_run_starts_a_new_run_that_resumes_and_evaluates(
    translation_run, tmp_path, capsys
):
    origin, corpus = translation_run
    run_dir = tmp_path / "tuned"
    capsys.readouterr()
    assert fine_tune(origin, run_dir, corpus, "--model.dropout", "0.0") == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    start, tuned = load_run(origin), load_run(run_dir)
    assert tuned.config.model == dataclasses.replace(start.config.model, dropout=0.0)
    assert tuned.tokenizer.to_dict() == start.tokenizer.to_dict()
    assert 0 < largest_move(start.model.state_dict(), tuned.model.state_dict()) < 1e-2
    resume = ["train", "--resume", "--run-dir", str(run_dir), "--train.max_steps", "2"]
    assert main([*resume, "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 2
    assert main(["eval", str(run_dir), "--split", "test", "--beam", "1"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[: out.rindex("}") + 1])
    assert report["step"] == 2 and report["sentences"] == 5


def test_a_shape_the_weights_cannot_take_is_named(translation_run, tmp_path, capsys):
    origin, corpus = translation_run
    run_dir = tmp_path / "tuned"
    capsys.readouterr()
    assert fine_tune(origin, run_dir, corpus, "--model.d_ff", "128") == 2
    assert capsys.readouterr().err == (
        f"error: model.d_ff=128 does not fit the weights of {origin}, made with d_ff=64: a run "
        "started from weights keeps their shape; leave model.d_ff out\n"
    )
    assert not run_dir.exists()
