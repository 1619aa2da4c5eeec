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


def test_export_to_hf_loads_in_transformers_with_equal_logits(imported, tmp_path, capsys):
    run_dir, _ = imported
    out = tmp_path / "exported"
    assert main(["export", str(run_dir), "--to", "hf", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["architectures"] == ["GPT2LMHeadModel"] and report["tokenizer"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    run = load_run(run_dir)
    tokens = torch.randint(0, 300, (2, 30))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens).logits, run.model(tokens).logits, atol=1e-5, rtol=0)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(TEXT)["input_ids"] == run.tokenizer.encode(TEXT)


def test_a_run_from_scratch_with_gpt2s_shape_exports_too(tmp_path, capsys):
    settings = {
        "norm": "pre", "position": "learned", "embed_scale": 1.0, "ffn.activation": "gelu_tanh",
        "n_layers": 1, "d_model": 32, "n_heads": 4, "d_ff": 64, "max_len": 16,
        "tie_embeddings": False,
    }  # fmt: skip
    cfg = formers.config("vanilla", **settings)
    model = formers.build(cfg).eval()
    run_dir = tmp_path / "run"
    run_cfg = formers.train.config.RunConfig(model=cfg)
    formers.train.checkpoint.save_checkpoint(
        run_dir, model=model, optimizer=None, config=run_cfg.to_dict(),
        state=formers.train.checkpoint.TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["tokenizer"] is False
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out").eval()
    tokens = torch.randint(0, 256, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens).logits, model(tokens).logits, atol=1e-5, rtol=0)


def test_export_refuses_a_model_gpt2_cannot_express(tmp_path, capsys):
    cfg = formers.config("vanilla", n_layers=1, d_model=32, n_heads=4, d_ff=64)
    run_dir = tmp_path / "run"
    formers.train.checkpoint.save_checkpoint(
        run_dir, model=formers.build(cfg), optimizer=None,
        config=formers.train.config.RunConfig(model=cfg).to_dict(),
        state=formers.train.checkpoint.TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: the model has norm='post', which a GPT-2 checkpoint cannot express: it needs "
        "norm='pre'\n"
    )
    assert not (tmp_path / "out").exists()
