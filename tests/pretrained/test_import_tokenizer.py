"""`formers import` refuses a tokenizer that cannot be the model's, naming its file: an empty
vocabulary, or one that turns text into no tokens (eval and generate would otherwise fail far
from the cause). The model folder is written by `formers export`, so no transformers is needed.
"""

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import formers
from formers.cli import main
from formers.train.checkpoint import TrainState, save_checkpoint
from formers.train.config import RunConfig

GPT2_SHAPE = {
    "norm": "pre", "position": "learned", "embed_scale": 1.0, "ffn.activation": "gelu_tanh",
    "n_layers": 1, "d_model": 32, "n_heads": 4, "d_ff": 64, "max_len": 16,
    "tie_embeddings": False, "vocab_size": 300,
}  # fmt: skip


@pytest.fixture
def hf_folder(tmp_path, capsys):
    """A GPT-2 folder (config.json + model.safetensors) of a fresh 300-token model, no tokenizer."""
    cfg = formers.config("vanilla", **GPT2_SHAPE)
    run_dir = tmp_path / "run"
    save_checkpoint(
        run_dir, model=formers.build(cfg), optimizer=None,
        config=RunConfig(model=cfg).to_dict(), state=TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "hf")]) == 0
    capsys.readouterr()
    return tmp_path / "hf"


def byte_level_bpe(vocab_size: int) -> Tokenizer:
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    hf.train_from_iterator(["to be or not to be"] * 20, trainer=trainer)
    return hf


def import_line(folder, run_dir, capsys) -> tuple[int, str]:
    code = main(["import", str(folder), "--run-dir", str(run_dir)])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def test_a_tokenizer_of_the_models_kind_imports(hf_folder, tmp_path, capsys):
    byte_level_bpe(280).save(str(hf_folder / "tokenizer.json"))
    code, err = import_line(hf_folder, tmp_path / "ok", capsys)
    assert code == 0, err
    assert formers.load_run(tmp_path / "ok").tokenizer.encode("to be") != []


def test_an_empty_vocabulary_is_refused_naming_the_file(hf_folder, tmp_path, capsys):
    Tokenizer(models.BPE(vocab={}, merges=[])).save(str(hf_folder / "tokenizer.json"))
    code, err = import_line(hf_folder, tmp_path / "empty", capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert err == (
        f"error: {hf_folder / 'tokenizer.json'} has an empty vocabulary (0 tokens, for a model "
        f"of vocab_size=300): copy the model's own tokenizer files into {hf_folder}"
    )
    assert not (tmp_path / "empty").exists()


def test_a_tokenizer_that_makes_no_tokens_of_text_is_refused(hf_folder, tmp_path, capsys):
    # two entries, no unknown token and no byte fallback: every character of the probe is dropped
    vocab = {"§": 0, "¶": 1}
    Tokenizer(models.BPE(vocab=vocab, merges=[])).save(str(hf_folder / "tokenizer.json"))
    code, err = import_line(hf_folder, tmp_path / "none", capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert f"{hf_folder / 'tokenizer.json'} turns text into no tokens" in err
    assert "from its 2 tokens" in err
    assert not (tmp_path / "none").exists()

