"""`formers train --init-from`: a new run from an imported model's (or a Hugging Face folder's)
weights, with their tokenizer and a fresh optimizer; a change the weights cannot take is one
line naming the field."""

import json

import pytest
from hf_gpt2 import TEXT

from formers.cli import main
from formers.run import load_run

pytest.importorskip("transformers")

SHORT = [
    "--train.max_steps", "1", "--train.batch_size", "2", "--train.seq_len", "16",
    "--train.eval_every", "0", "--train.precision", "fp32", "--train.device", "cpu",
    "--train.lr", "1e-3", "--train.warmup_steps", "0", "--no-progress",
]  # fmt: skip


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT * 8)
    return path


@pytest.mark.parametrize("origin", ["run", "folder"])
def test_one_step_from_the_weights_changes_them_and_keeps_the_tokenizer(
    gpt2_folder, corpus, tmp_path, capsys, origin
):
    source = gpt2_folder
    if origin == "run":
        source = tmp_path / "imported"
        assert main(["import", str(gpt2_folder), "--run-dir", str(source)]) == 0
        capsys.readouterr()
    run_dir = tmp_path / "tuned"
    args = ["train", "--init-from", str(source), "--run-dir", str(run_dir)]
    assert main([*args, "--train.corpus", str(corpus), *SHORT]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    from formers import from_pretrained

    start, tuned = from_pretrained(gpt2_folder), load_run(run_dir)
    assert tuned.config.model == start.config.model
    assert tuned.config.train.tokenizer == "pretrained"
    assert tuned.tokenizer.to_dict() == start.tokenizer.to_dict()
    before, after = start.model.state_dict(), tuned.model.state_dict()
    moved = max((after[k] - before[k]).abs().max().item() for k in before)
    assert 0 < moved < 1e-2  # one Adam step of lr 1e-3 from the weights, not from scratch


def test_the_tuned_run_resumes_with_its_own_tokenizer(gpt2_folder, corpus, tmp_path, capsys):
    run_dir = tmp_path / "tuned"
    args = ["train", "--init-from", str(gpt2_folder), "--run-dir", str(run_dir)]
    assert main([*args, "--train.corpus", str(corpus), *SHORT]) == 0
    capsys.readouterr()
    resume = ["train", "--resume", "--run-dir", str(run_dir), "--train.max_steps", "2"]
    assert main([*resume, "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 2


def test_a_shape_the_weights_cannot_take_is_named(gpt2_folder, corpus, tmp_path, capsys):
    run_dir = tmp_path / "tuned"
    args = ["train", "--init-from", str(gpt2_folder), "--run-dir", str(run_dir)]
    assert main([*args, "--train.corpus", str(corpus), "--model.max_len", "128", *SHORT]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: model.max_len=128 does not fit the weights of {gpt2_folder}, made with "
        "max_len=64: a run started from weights keeps their shape; leave model.max_len out\n"
    )
    assert not run_dir.exists()


def test_another_tokenizer_is_refused(gpt2_folder, corpus, tmp_path, capsys):
    args = ["train", "--init-from", str(gpt2_folder), "--run-dir", str(tmp_path / "tuned")]
    assert main([*args, "--train.corpus", str(corpus), "--train.tokenizer", "byte"]) == 2
    assert "train.tokenizer='byte': a run started from weights reads its corpus with their" in (
        capsys.readouterr().err
    )



def test_weights_without_a_tokenizer_are_refused(
    gpt2_folder, corpus, tmp_path, capsys, monkeypatch
):
    # a checkpoint read without a tokenizer (Transformer-XL's pickled vocabulary is never read):
    # the corpus's own tokenizer would give the ids other meanings than the weights learned
    import dataclasses

    from formers.pretrained import init_from

    origin = init_from._origin

    def without_tokenizer(source):
        return dataclasses.replace(origin(source), tokenizer=None)

    monkeypatch.setattr(init_from, "_origin", without_tokenizer)
    run_dir = tmp_path / "tuned"
    args = ["train", "--init-from", str(gpt2_folder), "--run-dir", str(run_dir)]
    assert main([*args, "--train.corpus", str(corpus), *SHORT]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no tokenizer formers can read" in err, err
    assert "tokenizer.json" in err
    assert not run_dir.exists()
