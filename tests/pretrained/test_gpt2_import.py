"""GPT-2 imported from a Hugging Face checkpoint equals transformers' own model: logits in
float32 and float64 (padded batches too), greedy generation, and the tokenizer."""

import json
import shutil

import pytest
import torch
from hf_gpt2 import TEXT, VOCAB

import formers
from formers.infer import generate

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_logits_equal_transformers(gpt2, dtype, tol):
    folder, hf = gpt2
    run = formers.from_pretrained(folder)
    tokens = torch.randint(0, VOCAB, (3, 40))
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want, got = hf(tokens).logits, ours(tokens).logits
    assert want.abs().max() > 1  # logits of a size where a mapping error shows
    torch.testing.assert_close(got, want, atol=tol, rtol=0)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_padded_batch_equals_transformers_at_every_real_position(gpt2, dtype, tol):
    folder, hf = gpt2
    run = formers.from_pretrained(folder)
    lengths = [40, 23, 7]
    tokens = torch.randint(1, VOCAB, (3, 40))
    real = torch.arange(40)[None, :] < torch.tensor(lengths)[:, None]  # right padding
    tokens = tokens.masked_fill(~real, 0)
    hf, ours = hf.to(dtype), run.model.to(dtype)
    with torch.no_grad():
        want = hf(tokens, attention_mask=real.long()).logits
        got = ours(tokens).logits
    torch.testing.assert_close(got[real], want[real], atol=tol, rtol=0)


def test_greedy_generation_equals_transformers_generate(gpt2):
    folder, hf = gpt2
    run = formers.from_pretrained(folder)
    prompt = torch.randint(1, VOCAB, (2, 9))
    hf = hf.float()
    want = hf.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=30,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    got = generate(run.model, prompt, 30, temperature=0.0, use_cache=True)
    assert torch.equal(got, want)


def test_weights_from_a_bin_file_and_from_shards_equal_safetensors(gpt2, tmp_path):
    folder, hf = gpt2
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        want = formers.from_pretrained(folder).model(tokens).logits
    pickled = tmp_path / "bin"
    shutil.copytree(folder, pickled)
    state = {k: v for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    (pickled / "model.safetensors").unlink()
    torch.save(state, pickled / "pytorch_model.bin")
    sharded = tmp_path / "shards"
    hf.save_pretrained(sharded, max_shard_size="20KB")
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(folder / name, sharded)
    assert (sharded / "model.safetensors.index.json").is_file()
    for other in (pickled, sharded):
        with torch.no_grad():
            got = formers.from_pretrained(other).model(tokens).logits
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_a_gpt2model_checkpoint_without_the_transformer_prefix_imports(gpt2, tmp_path):
    """Hugging Face's own gpt2 checkpoints hold GPT2Model names ("h.0.attn.c_attn.weight") and
    the causal-mask buffers older versions saved ("h.0.attn.bias")."""
    folder, hf = gpt2
    old = tmp_path / "old"
    shutil.copytree(folder, old)
    state = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items()}
    state.pop("lm_head.weight")
    state["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
    (old / "model.safetensors").unlink()
    torch.save(state, old / "pytorch_model.bin")
    tokens = torch.randint(0, VOCAB, (2, 12))
    with torch.no_grad():
        got = formers.from_pretrained(old).model(tokens).logits
        want = hf.float()(tokens).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


SAMPLES = [TEXT, "  leading spaces and a trailing one ", "Speak, speak.<|endoftext|>All:", ""]


@pytest.mark.parametrize("files", ["vocab+merges", "tokenizer.json"])
def test_tokenizer_encodes_and_decodes_as_transformers_does(gpt2, tmp_path, files):
    folder, _ = gpt2
    if files == "tokenizer.json":  # as save_pretrained writes it; no vocab.json beside it
        saved = tmp_path / "tok"
        transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(saved)
        shutil.copy(folder / "config.json", saved)
        shutil.copy(folder / "model.safetensors", saved)
        for name in ("vocab.json", "merges.txt"):
            (saved / name).unlink(missing_ok=True)
        folder = saved
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    ours = formers.from_pretrained(folder).tokenizer
    for text in SAMPLES:
        ids = ours.encode(text)
        assert ids == reference(text)["input_ids"]
        assert ours.decode(ids) == reference.decode(ids) == text
    assert ours.encode("<|endoftext|>") == [0]  # the special token is one token


def test_the_run_config_names_the_pretrained_tokenizer_and_the_positions(gpt2):
    folder, _ = gpt2
    run = formers.from_pretrained(folder, corpus="tinyshakespeare")
    config = json.loads(json.dumps(run.config.to_dict()))
    assert config["train"]["tokenizer"] == "pretrained"
    assert config["train"]["seq_len"] == 64
    assert config["train"]["corpus"] == "tinyshakespeare"
    assert config["model"]["ffn"]["activation"] == "gelu_tanh"
    assert config["model"]["norm_eps"] == 1e-3


def test_an_untied_output_layer_and_the_dropout_rates_map(tmp_path):
    from hf_gpt2 import save_gpt2

    dropouts = {"resid_pdrop": 0.2, "embd_pdrop": 0.2, "attn_pdrop": 0.05}
    hf = save_gpt2(tmp_path, tie_word_embeddings=False, **dropouts)
    run = formers.from_pretrained(tmp_path)
    cfg = run.config.model
    assert (cfg.dropout, cfg.attn_dropout, cfg.ffn_dropout) == (0.2, 0.05, 0.0)
    assert not cfg.tie_embeddings
    assert not torch.equal(run.model.lm_head.weight, run.model.embed.token.weight)
    tokens = torch.randint(0, VOCAB, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(run.model(tokens).logits, hf(tokens).logits, atol=1e-5, rtol=0)
