"""What `formers import` refuses of a Marian checkpoint: a config field formers cannot honour,
an incomplete SentencePiece tokenizer, a missing sentencepiece package; one line each, nothing
written."""

import builtins
import shutil

import pytest
from test_import_errors import edit_config, refused

pytest.importorskip("transformers")


@pytest.fixture
def marian_copy(marian_folder, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(marian_folder, folder)
    return folder


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("share_encoder_decoder_embeddings", False),
        ("tie_word_embeddings", False),
        ("decoder_attention_heads", 2),
        ("decoder_ffn_dim", 64),
        ("decoder_layerdrop", 0.1),
        ("decoder_start_token_id", 0),
        ("activation_function", "tanh"),
    ],
)
def test_a_config_field_formers_cannot_honour_is_named(marian_copy, tmp_path, capsys, field, value):
    edit_config(marian_copy, **{field: value})
    line = refused(marian_copy, tmp_path / "run", capsys)
    assert f"sets {field}={value!r}, which formers cannot honour" in line


def test_a_sentencepiece_tokenizer_without_its_target_model(marian_copy, tmp_path, capsys):
    (marian_copy / "target.spm").unlink()
    line = refused(marian_copy, tmp_path / "run", capsys)
    assert "has no target.spm, which its SentencePiece tokenizer" in line


def test_without_the_sentencepiece_package(marian_copy, tmp_path, capsys, monkeypatch):
    real_import = builtins.__import__

    def no_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sentencepiece)
    line = refused(marian_copy, tmp_path / "run", capsys)
    assert "needs the sentencepiece package: pip install 'formers[hf]'" in line
