"""Longformer imported from a Hugging Face checkpoint equals transformers' LongformerForMaskedLM
on sequences longer than its windows: masked-LM logits in float32 and float64 with the first
token global and with none, padded batches, the export back, the RoBERTa byte-level BPE
tokenizer, and `formers eval` of the imported run."""

import dataclasses
import json
import shutil

import pytest
import torch
from hf_longformer import (
    MASK,
    PAD,
    TEXT,
    VOCAB,
    first_token_global,
    float64_softmax,
)

import formers
from formers.cli import main
from formers.data.corpora import load_corpus
from formers.data.masking import MaskedVocab
from formers.models import build
from formers.pretrained import import_pretrained
from formers.pretrained.errors import PretrainedError
from formers.pretrained.exporter import export_hf, family_of
from formers.pretrained.longformer import FAMILY, without_global_tokens
from formers.run import load_run
from formers.train.tasks.masked_lm import _stack, eval_windows

transformers = pytest.importorskip("transformers")

TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-10)]
LENGTH = 40  # past both windows (4 and 8), and not a multiple of them


def real_tokens(batch: int, length: int) -> torch.Tensor:
    """Random ids of real (non-special) tokens."""
    return torch.randint(5, VOCAB, (batch, length), generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_mlm_logits_equal_transformers_with_the_first_token_global(
    longformer, dtype, tol, monkeypatch
):
    folder, hf = longformer
    float64_softmax(monkeypatch, dtype)
    run = formers.from_pretrained(folder)
    assert run.config.model.attention.global_tokens == (0,)
    tokens = real_tokens(3, LENGTH)
    types = torch.randint(0, 3, (3, LENGTH))
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want = hf(tokens, global_attention_mask=first_token_global(tokens)).logits
        got = ours(tokens).logits
        typed = hf(tokens, token_type_ids=types, global_attention_mask=first_token_global(tokens))
        got_typed = ours(tokens, token_types=types).logits
    assert want.abs().max() > 1  # logits of a size where a mapping error shows
    torch.testing.assert_close(got, want, atol=tol, rtol=0)
    torch.testing.assert_close(got_typed, typed.logits, atol=tol, rtol=0)


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_mlm_logits_equal_transformers_without_global_tokens(longformer, dtype, tol, monkeypatch):
    """global_tokens = []: transformers' default, without global_attention_mask."""
    folder, hf = longformer
    float64_softmax(monkeypatch, dtype)
    run = formers.from_pretrained(folder)
    model = build(without_global_tokens(run.config.model))
    model.load_state_dict(run.model.state_dict())  # the global projections stay, unused
    tokens = real_tokens(2, LENGTH)
    hf, model = hf.to(dtype), model.to(dtype).eval()
    with torch.no_grad():
        want, got = hf(tokens).logits, model(tokens).logits
        with_global = run.model.to(dtype)(tokens).logits
    torch.testing.assert_close(got, want, atol=tol, rtol=0)
    assert (with_global - want).abs().max() > 1e-3  # the global token makes a difference


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_padded_batch_equals_transformers_at_every_real_position(
    longformer, dtype, tol, monkeypatch
):
    """transformers is given attention_mask and pads to its window internally; formers masks
    the keys equal to pad_token_id."""
    folder, hf = longformer
    float64_softmax(monkeypatch, dtype)
    run = formers.from_pretrained(folder)
    assert run.model.cfg.pad_id == PAD
    lengths = [LENGTH, 23, 7]
    real = torch.arange(LENGTH)[None, :] < torch.tensor(lengths)[:, None]  # right padding
    tokens = real_tokens(3, LENGTH).masked_fill(~real, PAD)
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        global_mask = first_token_global(tokens)
        want = hf(tokens, attention_mask=real.long(), global_attention_mask=global_mask).logits
        got = ours(tokens).logits
        alone = hf(tokens[2:, :7], global_attention_mask=global_mask[2:, :7]).logits
    torch.testing.assert_close(got[real], want[real], atol=tol, rtol=0)
    torch.testing.assert_close(got[2, :7], alone[0], atol=tol, rtol=0)


def test_export_loads_in_transformers_with_equal_logits(longformer, tmp_path):
    folder, hf = longformer
    run_dir = tmp_path / "run"
    import_pretrained(folder, run_dir)
    written = export_hf(run_dir, tmp_path / "out")
    assert written["family"] == "longformer"
    back = transformers.LongformerForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokens = real_tokens(2, LENGTH)
    types = torch.randint(0, 3, (2, LENGTH))
    with torch.no_grad():
        for global_mask in (first_token_global(tokens), None):
            kwargs = {"token_type_ids": types, "global_attention_mask": global_mask}
            want, got = hf(tokens, **kwargs).logits, back(tokens, **kwargs).logits
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["attention_window"] == [4, 8]
    assert config["max_position_embeddings"] == 66 and config["pad_token_id"] == PAD


SAMPLES = [TEXT, "  leading spaces and a trailing one ", "Speak is <mask>. <s>hear</s> me", ""]


@pytest.mark.parametrize("files", ["vocab.json + merges.txt", "tokenizer.json"])
def test_tokenizer_encodes_and_decodes_as_transformers_does(longformer, tmp_path, files):
    folder, _ = longformer
    if files == "tokenizer.json":  # as save_pretrained writes it; no vocab.json beside it
        saved = tmp_path / "tok"
        transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(saved)
        for name in ("config.json", "model.safetensors"):
            shutil.copy(folder / name, saved)
        for name in ("vocab.json", "merges.txt"):
            (saved / name).unlink(missing_ok=True)
        folder = saved
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ours = formers.from_pretrained(folder).tokenizer
    for text in SAMPLES:
        ids = ours.encode(text)
        assert ids == reference(text, add_special_tokens=False)["input_ids"]
        assert ours.decode(ids) == reference.decode(ids) == text
    assert ours.encode("<mask>") == [MASK]  # the special token is one token


def test_eval_scores_the_masked_positions_as_transformers_does(longformer, tmp_path, capsys):
    folder, hf = longformer
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 30)
    run_dir = tmp_path / "run"
    assert main(["import", str(folder), "--run-dir", str(run_dir), "--corpus", str(corpus)]) == 0
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--no-progress", "--batch-size", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    ids = load_corpus(str(corpus), tokenizer=load_run(run_dir).tokenizer).splits["valid"]
    vocab = MaskedVocab(VOCAB, own=(MASK, PAD))  # the tokenizer's <mask> and <pad>
    inputs, targets = _stack(list(eval_windows(ids, 64, vocab)), vocab.pad_id)
    assert (inputs == MASK).any() and (inputs == PAD).any()  # a padded last window
    with torch.no_grad():
        mask, global_mask = (inputs != PAD).long(), first_token_global(inputs)
        logits = hf(inputs, attention_mask=mask, global_attention_mask=global_mask).logits
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert report["tokens"] == int((targets != -100).sum()) > 20
    assert report["loss"] == pytest.approx(want.item(), rel=1e-5)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attention_window": [4, 7]}, "sets attention_window=[4, 7], which formers cannot"),
        ({"attention_window": [4, 8, 8]}, "attention_window with 3 entries for num_hidden_layers"),
        ({"hidden_act": "relu"}, "sets hidden_act='relu', which formers cannot honour"),
    ],
)
def test_a_config_formers_cannot_honour_is_one_line(
    longformer_folder, tmp_path, capsys, changes, message
):
    folder = tmp_path / "model"
    shutil.copytree(longformer_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    run_dir = tmp_path / "run"
    assert main(["import", str(folder), "--run-dir", str(run_dir)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not run_dir.exists()


def test_export_refuses_a_window_transformers_cannot_hold(longformer_folder, tmp_path):
    run = formers.from_pretrained(longformer_folder)
    odd = dataclasses.replace(run.config.model.attention, window=(4, 7))
    cfg = dataclasses.replace(run.config.model, attention=odd)
    with pytest.raises(PretrainedError, match="attention.window=7, which a Longformer checkpoint"):
        FAMILY.hf_config(cfg, None)
    with pytest.raises(PretrainedError, match="attention.window=7"):  # not BERT's reason
        family_of(cfg)
    unshifted = dataclasses.replace(run.config.model, position_offset=0)
    with pytest.raises(PretrainedError, match="it needs position_offset = pad_id \\+ 1"):
        FAMILY.hf_config(unshifted, None)


def test_init_from_one_step_moves_the_global_projections_too(longformer_folder, tmp_path, capsys):
    from test_init_from import SHORT

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT * 30)
    tuned = tmp_path / "tuned"
    args = ["train", "--init-from", str(longformer_folder), "--run-dir", str(tuned)]
    assert main([*args, "--train.corpus", str(corpus), *SHORT]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 1
    start, after = formers.from_pretrained(longformer_folder), load_run(tuned)
    assert after.config.model == start.config.model
    assert after.tokenizer.to_dict() == start.tokenizer.to_dict()
    assert json.loads((tuned / "special_tokens.json").read_text()) == {"[MASK]": MASK, "[PAD]": PAD}
    for name in ("layers.1.attn.global_qkv_proj.weight", "embed.position.table.weight"):
        moved = (after.model.state_dict()[name] - start.model.state_dict()[name]).abs().max()
        assert 0 < moved < 1e-2, name
