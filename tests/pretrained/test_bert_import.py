"""BERT imported from a Hugging Face checkpoint equals transformers' BertForMaskedLM: masked-LM
logits in float32 and float64 (token types and padded batches too), the export back, old
checkpoint layouts, and the WordPiece tokenizer."""

import json
import shutil

import pytest
import torch
from hf_bert import TEXT, VOCAB, save_bert, train_vocab

import formers
from formers.cli import main
from formers.pretrained import import_pretrained
from formers.pretrained.exporter import export_hf

transformers = pytest.importorskip("transformers")

TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-10)]


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_mlm_logits_equal_transformers(bert, dtype, tol):
    folder, hf = bert
    run = formers.from_pretrained(folder)
    tokens = torch.randint(5, VOCAB, (3, 40))
    types = torch.randint(0, 3, (3, 40))
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want, got = hf(tokens, token_type_ids=types).logits, ours(tokens, token_types=types).logits
        want0, got0 = hf(tokens).logits, ours(tokens).logits  # no types given: all type 0
    assert want.abs().max() > 1  # logits of a size where a mapping error shows
    torch.testing.assert_close(got, want, atol=tol, rtol=0)
    torch.testing.assert_close(got0, want0, atol=tol, rtol=0)


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_padded_batch_equals_transformers_at_every_real_position(bert, dtype, tol):
    """transformers is given attention_mask; formers masks the keys equal to pad_token_id."""
    folder, hf = bert
    run = formers.from_pretrained(folder)
    assert run.model.cfg.pad_id == 0
    lengths = [40, 23, 7]
    real = torch.arange(40)[None, :] < torch.tensor(lengths)[:, None]  # right padding
    tokens = torch.randint(5, VOCAB, (3, 40)).masked_fill(~real, 0)
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want = hf(tokens, attention_mask=real.long()).logits
        got = ours(tokens).logits
        alone = hf(tokens[2:, :7]).logits  # the shortest text without its padding
    torch.testing.assert_close(got[real], want[real], atol=tol, rtol=0)
    torch.testing.assert_close(got[2, :7], alone[0], atol=tol, rtol=0)


@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_a_config_whose_pad_token_id_is_null_masks_no_key(tmp_path, dtype, tol):
    """pad_token_id: null says the model has no padding token: id 0 is then a token like any
    other, and its keys are attended to (the default 0 must not fill the null in)."""
    hf = save_bert(tmp_path, pad_token_id=None)
    assert json.loads((tmp_path / "config.json").read_text())["pad_token_id"] is None
    run = formers.from_pretrained(tmp_path)
    assert run.model.cfg.pad_id is None
    tokens = torch.randint(5, VOCAB, (3, 40))
    tokens[:, ::4] = 0  # ten ordinary tokens of id 0 in every row
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want, got = hf(tokens).logits, ours(tokens).logits
    torch.testing.assert_close(got, want, atol=tol, rtol=0)


def test_untied_decoder_and_tanh_gelu_import_and_export(tmp_path):
    folder = tmp_path / "untied"
    hf = save_bert(folder, tie_word_embeddings=False, hidden_act="gelu_new")
    run = formers.from_pretrained(folder)
    assert run.model.cfg.ffn.activation == "gelu_tanh"
    assert run.model.lm_head.weight is not run.model.embed.token.weight
    import_pretrained(folder, tmp_path / "run")
    export_hf(tmp_path / "run", tmp_path / "out")
    back = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokens = torch.randint(5, VOCAB, (2, 30))
    with torch.no_grad():
        want, got, again = hf(tokens).logits, run.model(tokens).logits, back(tokens).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(again, want, atol=1e-5, rtol=0)


def test_a_tensorflow_converted_pretraining_checkpoint_imports(bert, tmp_path):
    """BertModel names without "bert.", LayerNorm gamma / beta, the decoder's copies of the
    tied matrix and bias, the pooler, the next-sentence head and position_ids: all read."""
    folder, hf = bert
    old = tmp_path / "old"
    shutil.copytree(folder, old)
    state = {}
    for key, value in hf.state_dict().items():
        key = key.removeprefix("bert.").replace("LayerNorm.weight", "LayerNorm.gamma")
        state[key.replace("LayerNorm.bias", "LayerNorm.beta")] = value.clone()
    state["cls.predictions.decoder.weight"] = state["embeddings.word_embeddings.weight"]
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    state["pooler.dense.weight"] = torch.randn(32, 32)
    state["pooler.dense.bias"] = torch.randn(32)
    state["cls.seq_relationship.weight"] = torch.randn(2, 32)
    state["cls.seq_relationship.bias"] = torch.randn(2)
    state["embeddings.position_ids"] = torch.arange(64)[None]
    (old / "model.safetensors").unlink()
    torch.save(state, old / "pytorch_model.bin")
    tokens = torch.randint(5, VOCAB, (2, 20))
    with torch.no_grad():
        got = formers.from_pretrained(old).model(tokens).logits
        want = hf.float()(tokens).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_export_loads_in_transformers_with_equal_logits(bert, tmp_path):
    folder, hf = bert
    run_dir = tmp_path / "run"
    import_pretrained(folder, run_dir)
    written = export_hf(run_dir, tmp_path / "out")
    assert written["family"] == "bert"
    back = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    tokens = torch.randint(5, VOCAB, (2, 30))
    types = torch.randint(0, 3, (2, 30))
    with torch.no_grad():
        want = hf(tokens, token_type_ids=types).logits
        got = back(tokens, token_type_ids=types).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["layer_norm_eps"] == 1e-3 and config["hidden_act"] == "gelu"
    assert written["tokenizer"]  # and transformers reads it as the original's
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    original = transformers.AutoTokenizer.from_pretrained(folder)
    assert exported(TEXT)["input_ids"] == original(TEXT)["input_ids"]
    assert exported.mask_token_id == 4


SAMPLES = [TEXT, "  leading spaces and a trailing one ", "[MASK] is [SEP] special[PAD].", ""]


@pytest.mark.parametrize("files", ["vocab.txt", "vocab.txt cased", "tokenizer.json"])
def test_tokenizer_encodes_and_decodes_as_transformers_does(bert_folder, tmp_path, files):
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(bert_folder / name, folder)
    train_vocab(folder, lowercase=files != "vocab.txt cased")
    if files == "vocab.txt cased":
        (folder / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    if files == "tokenizer.json":  # as save_pretrained writes it; no vocab.txt beside it
        saved = tmp_path / "saved"
        transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(saved)
        (folder / "vocab.txt").unlink()
        shutil.copy(saved / "tokenizer.json", folder)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ours = formers.from_pretrained(folder).tokenizer
    for text in SAMPLES:
        ids = ours.encode(text)
        assert ids == reference(text, add_special_tokens=False)["input_ids"]
        assert ours.decode(ids) == reference.decode(ids)
    assert ours.encode("[MASK]") == [4]  # a special token is one token
    assert ours.decode(ours.encode("Speak, speak.")) == (
        "Speak, speak." if files == "vocab.txt cased" else "speak, speak."
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
        ({"is_decoder": True}, "is_decoder=True"),
        ({"hidden_act": "silu"}, "hidden_act='silu'"),
        ({"type_vocab_size": 0}, "type_vocab_size=0"),
    ],
)
def test_a_config_formers_cannot_honour_is_refused_naming_the_field(
    bert_folder, tmp_path, capsys, changes, field
):
    folder = tmp_path / "model"
    shutil.copytree(bert_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    args = ["import", str(folder), "--run-dir", str(tmp_path / "run")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder}/config.json sets {field}, which formers cannot honour")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def saved_run(run_dir, cfg):
    """A run folder holding a fresh model of `cfg` (byte tokenizer)."""
    formers.train.checkpoint.save_checkpoint(
        run_dir, model=formers.build(cfg), optimizer=None,
        config=formers.train.config.RunConfig(model=cfg).to_dict(),
        state=formers.train.checkpoint.TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')


TINY = dict(n_layers=1, d_model=32, n_heads=4, d_ff=64, vocab_size=258, max_len=32)


@pytest.mark.parametrize(
    ("preset", "overrides", "message"),
    [
        # the bert preset is pre-LN, which BERT is not
        ("bert", {}, "the model has norm='pre', which a BERT checkpoint cannot express: it "
         "needs norm='post'"),
        ("bert", {"norm": "post", "embed_norm": True, "head_transform": True,
                  "output_bias": True, "embed_scale": 1.0},
         "the model has type_vocab_size=0, which a BERT checkpoint cannot express: it needs "
         "type_vocab_size >= 1"),
        ("vanilla", {"norm": "pre", "position": "learned", "embed_scale": 1.0,
                     "embed_norm": True},
         "the model has embed_norm=True, which a GPT-2 checkpoint cannot express: it needs "
         "embed_norm=False"),
        ("transformer", {}, "the model has position='sinusoidal', which a Marian checkpoint "
         "cannot express: it needs position='sinusoidal_halves'"),
    ],
)  # fmt: skip
def test_export_refuses_a_model_no_family_expresses(tmp_path, capsys, preset, overrides, message):
    run_dir = tmp_path / "run"
    saved_run(run_dir, formers.config(preset, **{**TINY, **overrides}))
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out").exists()


def test_a_from_scratch_bert_shaped_encoder_exports(tmp_path):
    """Not only imported runs: an encoder built here with BERT's settings is a BERT."""
    cfg = formers.config(
        "bert", **TINY, norm="post", embed_norm=True, head_transform=True, output_bias=True,
        embed_scale=1.0, type_vocab_size=2, pad_id=257, dropout=0.0,
    )  # fmt: skip
    saved_run(tmp_path / "run", cfg)
    export_hf(tmp_path / "run", tmp_path / "out")
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "out").eval()
    ours = formers.run.load_run(tmp_path / "run").model
    tokens = torch.randint(0, 257, (2, 32))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens).logits, hf(tokens).logits, atol=1e-5, rtol=0)
