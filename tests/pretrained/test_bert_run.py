"""An imported BERT is an ordinary masked-LM run: `formers eval` scores the corpus with the
tokenizer's own [MASK] and [PAD] (transformers' loss on the same corrupted windows), and
`--init-from` fine-tunes it with them."""

import json

import pytest
import torch
from hf_bert import TEXT
from test_init_from import SHORT

from formers.cli import main
from formers.data.corpora import load_corpus
from formers.data.masking import MaskedVocab
from formers.run import load_run
from formers.train.tasks.masked_lm import _stack, eval_windows

pytest.importorskip("transformers")


@pytest.fixture
def imported(bert_folder, tmp_path, capsys):
    """The tiny BERT imported into a run folder whose corpus is a small text file."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 30)
    run_dir = tmp_path / "run"
    args = ["import", str(bert_folder), "--run-dir", str(run_dir), "--corpus", str(corpus)]
    assert main(args) == 0
    capsys.readouterr()
    return run_dir, corpus


def test_eval_scores_the_masked_positions_as_transformers_does(imported, bert, capsys):
    run_dir, corpus = imported
    _, hf = bert
    assert main(["eval", str(run_dir), "--no-progress", "--batch-size", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    ids = load_corpus(str(corpus), tokenizer=load_run(run_dir).tokenizer).splits["valid"]
    vocab = MaskedVocab(120, own=(4, 0))  # the tokenizer's [MASK] and [PAD]
    inputs, targets = _stack(list(eval_windows(ids, 64, vocab)), vocab.pad_id)
    assert (inputs == 4).any() and not (inputs >= 120).any()
    with torch.no_grad():
        logits = hf(inputs, attention_mask=(inputs != 0).long()).logits
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert report["tokens"] == int((targets != -100).sum()) > 20
    assert report["loss"] == pytest.approx(want.item(), rel=1e-5)


def test_init_from_fine_tunes_with_the_tokenizers_own_specials(imported, tmp_path, capsys):
    run_dir, corpus = imported
    tuned = tmp_path / "tuned"
    args = ["train", "--init-from", str(run_dir), "--run-dir", str(tuned)]
    assert main([*args, "--train.corpus", str(corpus), *SHORT]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    start, after = load_run(run_dir), load_run(tuned)
    assert after.config.model == start.config.model  # vocabulary and pad_id are the weights'
    assert after.tokenizer.to_dict() == start.tokenizer.to_dict()
    specials = json.loads((tuned / "special_tokens.json").read_text())
    assert specials == {"[MASK]": 4, "[PAD]": 0}
    moved = (after.model.embed.norm.weight - start.model.embed.norm.weight).abs().max()
    assert 0 < moved < 1e-2
