"""`formers import` writes an ordinary run folder, which `formers eval`, `generate` and
`convert` read: the perplexity and the greedy text are transformers' own."""

import json

import pytest
import torch
from helpers import assert_checksummed
from hf_gpt2 import TEXT

import formers
from formers.cli import main
from formers.data.corpora import load_corpus
from formers.run import load_run

transformers = pytest.importorskip("transformers")


@pytest.fixture
def imported(gpt2_folder, tmp_path, capsys):
    """The tiny GPT-2 imported into a run folder whose corpus is a small text file."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 3)
    run_dir = tmp_path / "run"
    args = ["import", str(gpt2_folder), "--run-dir", str(run_dir), "--corpus", str(corpus)]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run_dir"] == str(run_dir)
    return run_dir, corpus


def test_the_run_folder_is_an_ordinary_one(imported, gpt2_folder):
    run_dir, corpus = imported
    assert {p.name for p in run_dir.iterdir()} == {"config.json", "tokenizer.json", "checkpoints"}
    assert_checksummed(run_dir / "checkpoints" / "step_000000")
    run, direct = load_run(run_dir), formers.from_pretrained(gpt2_folder)
    assert run.config.model == direct.config.model
    assert run.config.train.corpus == str(corpus)
    assert run.tokenizer.to_dict() == direct.tokenizer.to_dict()
    tokens = torch.randint(0, 300, (2, 20))
    with torch.no_grad():
        assert torch.equal(run.model(tokens).logits, direct.model(tokens).logits)


def test_eval_scores_the_corpus_as_transformers_does(imported, gpt2, capsys):
    run_dir, corpus = imported
    _, hf = gpt2
    assert main(["eval", str(run_dir), "--no-progress", "--batch-size", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    ids = load_corpus(str(corpus), tokenizer=load_run(run_dir).tokenizer).splits["valid"]
    seq_len = 64  # the run's windows: n_positions
    total, count = 0.0, 0
    for start in range(1, len(ids), seq_len):  # every target scored once, fresh windows
        window = ids[start - 1 : min(start + seq_len, len(ids))]
        with torch.no_grad():
            logits = hf(window[None, :-1]).logits[0]
        total += torch.nn.functional.cross_entropy(logits, window[1:], reduction="sum").item()
        count += len(window) - 1
    assert report["tokens"] == count
    assert report["loss"] == pytest.approx(total / count, rel=1e-6)


def test_greedy_generate_prints_what_transformers_generates(imported, gpt2, capsys):
    run_dir, _ = imported
    folder, hf = gpt2
    prompt = "First Citizen:\nBefore we"
    args = ["generate", str(run_dir), "--prompt", prompt, "--temperature", "0"]
    assert main([*args, "--max-new-tokens", "12"]) == 0
    printed = capsys.readouterr().out
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    out = hf.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=12,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    assert printed == tokenizer.decode(out[0]) + "\n"


def test_convert_rewrites_the_imported_checkpoint_as_shards(imported, capsys):
    run_dir, _ = imported
    before = load_run(run_dir).model.state_dict()
    assert main(["convert", str(run_dir), "--to", "sharded"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"] == "sharded"
    after = load_run(run_dir).model.state_dict()
    assert after.keys() == before.keys()
    for name, tensor in after.items():
        assert torch.equal(tensor, before[name]), name
