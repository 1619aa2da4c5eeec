"""`formers train → average → eval → translate` on a translation run, as a user runs them."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
import sacrebleu
from helpers import write_parallel_corpus

from formers.cli import main

TINY = [
    "--preset",
    "transformer",
    "--model.n_layers",
    "1",
    "--model.d_model",
    "32",
    "--model.n_heads",
    "2",
    "--model.d_ff",
    "64",
    "--train.tokenizer_vocab",
    "300",
    "--train.max_tokens",
    "64",
    "--train.eval_every",
    "0",
    "--train.precision",
    "fp32",
    "--no-progress",
]


def formers(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run with checkpoints at steps 2, 4 and 6, and its corpus."""
    folder = tmp_path_factory.mktemp("translation")
    corpus = write_parallel_corpus(folder, n=200)
    run = folder / "run"
    args = ["train", "--run-dir", run, "--train.corpus", corpus, *TINY]
    args += ["--train.max_steps", "6", "--train.save_every", "2", "--train.keep_checkpoints", "3"]
    assert main([str(a) for a in args]) == 0
    return run, corpus


def test_train_prints_valid_bleu(trained):
    run, _ = trained
    final = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert final["kind"] == "valid" and final["final"] and final["search"] == "greedy"
    assert 0 <= final["bleu"] <= 100 and final["bleu_signature"].startswith("nrefs:1")
    assert json.loads((run / "tokenizer.json").read_text())["unit"] == "bpe-joint"


def test_eval_prints_bleu_chrf_signature_and_writes_the_hypotheses(trained, capsys):
    run, corpus = trained
    code, out, err = formers(capsys, "eval", run, "--split", "test", "--beam", "2")
    assert code == 0
    report = json.loads(out)
    assert (
        report["split"] == "test"
        and report["beam"] == 2
        and report["search"] == "beam 2, alpha 0.6"
    )
    hyps = read(report["hypotheses_file"]).split("\n")[:-1]
    references = read(corpus.split(",")[1]).split("\n")[190:200]
    assert len(hyps) == report["sentences"] == 10
    assert report["bleu"] == sacrebleu.corpus_bleu(hyps, [references]).score
    assert report["chrf"] == sacrebleu.corpus_chrf(hyps, [references]).score
    assert f"BLEU = {report['bleu']:.2f}  nrefs:1|case:mixed|eff:no|tok:13a" in err
    assert "chrF = " in err and report["chrf_signature"] in err


def test_eval_of_any_pair_of_files(trained, capsys, tmp_path):
    run, corpus = trained
    source, reference = corpus.split(",")
    hyps = tmp_path / "out.txt"
    args = ["eval", run, "--source", source, "--reference", reference, "--beam", "1"]
    code, out, _ = formers(capsys, *args, "--hyps", hyps, "--max-tokens", "50")
    report = json.loads(out)
    assert code == 0 and report["split"] == "files" and report["search"] == "greedy"
    assert 1 <= report["sentences"] == len(hyps.read_text().splitlines()) < 200


def test_misaligned_files_are_a_one_line_error(trained, capsys, tmp_path):
    run, corpus = trained
    short = tmp_path / "short.en"
    short.write_text("a dog\n")
    code, _, err = formers(
        capsys, "eval", run, "--source", corpus.split(",")[0], "--reference", short
    )
    assert code == 2 and "the sides are not aligned" in err and "has 200 lines" in err
    assert err.count("\n") == 1


def test_training_on_misaligned_files_fails_before_making_a_run(tmp_path, capsys):
    (tmp_path / "a.de").write_text("ein hund\nzwei\n")
    (tmp_path / "a.en").write_text("a dog\n")
    run = tmp_path / "run"
    code, _, err = formers(
        capsys,
        "train",
        "--run-dir",
        run,
        "--train.corpus",
        f"{tmp_path}/a.de,{tmp_path}/a.en",
        *TINY,
    )
    assert code == 2 and "not aligned" in err and not run.exists()


def test_average_writes_a_run_that_eval_and_translate_read(trained, capsys):
    run, _ = trained
    code, out, _ = formers(capsys, "average", run, "--last", "3")
    averaged = run.with_name("run-avg3")
    assert code == 0 and str(averaged) in out
    code, out, _ = formers(capsys, "eval", averaged, "--split", "valid", "--beam", "1")
    assert code == 0 and json.loads(out)["step"] == 6
    code, _, err = formers(capsys, "average", run, "--last", "4")
    assert code == 2 and "fewer than the last 4 asked for" in err


def test_translate_reads_stdin_and_keeps_blank_lines(trained, capsys, monkeypatch):
    run, _ = trained
    # in this process (a fresh one spends most of its time importing torch)
    monkeypatch.setattr(sys, "stdin", io.StringIO("ein hund läuft\n\nheute singt eine frau\n"))
    code, out, err = formers(capsys, "translate", run, "--beam", "2")
    assert code == 0, err[-2000:]
    lines = out.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""


def test_translate_of_a_file_equals_eval_hypotheses(trained, capsys, tmp_path):
    run, corpus = trained
    source = read(corpus.split(",")[0]).split("\n")[190:200]
    path = tmp_path / "test.de"
    path.write_text("\n".join(source) + "\n")
    code, out, _ = formers(capsys, "translate", run, path, "--beam", "2")
    assert code == 0
    code, report, _ = formers(capsys, "eval", run, "--split", "test", "--beam", "2")
    hyps = read(json.loads(report)["hypotheses_file"])
    assert out == hyps


def test_translate_refuses_a_language_model(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"line {i}\n" for i in range(200)))
    run = tmp_path / "lm"
    args = ["train", "--run-dir", run, "--train.corpus", text, "--train.max_steps", "1"]
    args += ["--model.n_layers", "1", "--model.d_model", "16", "--model.n_heads", "2"]
    args += [
        "--model.d_ff",
        "16",
        "--train.seq_len",
        "8",
        "--train.batch_size",
        "2",
        "--no-progress",
    ]
    assert formers(capsys, *args)[0] == 0
    code, _, err = formers(capsys, "translate", run, "--beam", "1")
    assert code == 2 and f"continue text with formers generate {run}" in err
    code, _, err = formers(capsys, "eval", run, "--beam", "2", "--source", text)
    assert code == 2 and "holds a language model, which --beam, --source do not apply" in err


def test_eval_of_a_translation_run_refuses_language_model_flags(trained, capsys):
    run, _ = trained
    code, _, err = formers(capsys, "eval", run, "--seq-len", "5", "--context-len", "2")
    assert code == 2 and "--seq-len, --context-len do not apply" in err
    assert err.count("\n") == 1


def test_generate_on_a_translation_run_names_formers_translate(trained, capsys):
    run, _ = trained
    code, out, err = formers(capsys, "generate", run)
    assert code == 2 and not out and err.count("\n") == 1
    assert f"translate with formers translate {run}" in err


def test_translate_and_generate_send_a_masked_lm_to_formers_eval(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"line {i}\n" for i in range(200)))
    run = tmp_path / "mlm"
    args = ["train", "--preset", "bert", "--run-dir", run, "--train.corpus", text]
    args += ["--model.n_layers", "1", "--model.d_model", "16", "--model.n_heads", "2"]
    args += ["--model.d_ff", "16", "--train.seq_len", "8", "--train.batch_size", "2"]
    args += ["--train.max_steps", "1", "--train.eval_every", "0", "--no-progress"]
    assert formers(capsys, *args)[0] == 0
    for command in ("translate", "generate"):
        code, out, err = formers(capsys, command, run)
        assert code == 2 and not out and err.count("\n") == 1
        assert f"score it with formers eval {run}" in err
        assert "use formers generate" not in err


@pytest.mark.parametrize(
    "flags", [["--context-len", "0"], ["--batch-size", "16"], ["--tgt-len", "5"]]
)
def test_eval_of_a_translation_run_refuses_a_language_model_flag_even_at_its_default(
    trained, capsys, flags
):
    run, _ = trained
    code, _, err = formers(capsys, "eval", run, *flags)
    assert code == 2 and err.count("\n") == 1
    assert f"holds a translation model, which {flags[0]} does not apply to" in err


def test_average_refuses_an_existing_folder_and_replace_leaves_no_stale_file(
    trained, capsys, tmp_path
):
    run, _ = trained
    out = tmp_path / "avg"
    assert formers(capsys, "average", run, "--last", "2", "--out", out)[0] == 0
    stale = out / "translations" / "test.beam4.txt"
    stale.parent.mkdir()
    stale.write_text("translations of the earlier average\n")
    code, _, err = formers(capsys, "average", run, "--last", "3", "--out", out)
    assert code == 2 and err.count("\n") == 1
    assert f"{out} already exists" in err and "--out" in err and "--replace" in err
    assert stale.exists()
    code, _, _ = formers(capsys, "average", run, "--last", "3", "--out", out, "--replace")
    assert code == 0 and not stale.exists()
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "config.json", "tokenizer.json"]
    code, report, _ = formers(capsys, "eval", out, "--max-tokens", "20", "--beam", "1")
    assert code == 0 and json.loads(report)["step"] == 6
    assert [p.name for p in tmp_path.iterdir()] == ["avg"]  # no temporary folder is left


def test_a_failed_replace_keeps_the_earlier_average_whole(trained, capsys, tmp_path, monkeypatch):
    from formers.train.checkpoint import average

    run, _ = trained
    out = tmp_path / "avg"
    assert formers(capsys, "average", run, "--last", "2", "--out", out)[0] == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def crash(folder, **_):
        (folder / "checkpoints").mkdir()
        (folder / "checkpoints" / "partial").write_text("half written")
        raise KeyboardInterrupt

    monkeypatch.setattr(average, "save_checkpoint", crash)
    with pytest.raises(KeyboardInterrupt):
        average.average_checkpoints(run, 3, out, replace=True)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before and [p.name for p in tmp_path.iterdir()] == ["avg"]


@pytest.mark.parametrize("made", [False, True])
def test_average_of_a_folder_that_is_not_a_run_says_so(tmp_path, capsys, made):
    folder = tmp_path / "typo"
    if made:
        folder.mkdir()
    code, _, err = formers(capsys, "average", folder)
    assert code == 2 and err.count("\n") == 1 and str(folder) in err
    assert ("is not a run folder" if made else "does not exist") in err
    assert "keep_checkpoints" not in err
