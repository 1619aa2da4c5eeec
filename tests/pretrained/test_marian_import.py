"""Marian imported from a Hugging Face checkpoint equals transformers' own model: logits in
float32 and float64 on padded source and target batches, greedy and beam search, the
SentencePiece tokenizer, `formers translate` text to text, and export back."""

import json

import pytest
import torch
from hf_marian import SOURCE, TARGET, exact_positions

import formers
from formers.cli import main
from formers.infer.seq2seq import beam_search, greedy_search
from formers.infer.translate import translate

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")


def hf_tokenizer(folder):
    with pytest.warns(UserWarning, match="sacremoses"):  # no punctuation normalisation
        return transformers.MarianTokenizer.from_pretrained(folder)


def padded_batch(folder, n_tgt=11):
    """Sources of three lengths, right-padded, and targets from <pad> (the start token) with
    three lengths of random tokens, right-padded: (src, src_real, tgt, tgt_real)."""
    enc = hf_tokenizer(folder)(SOURCE[:3], padding=True, return_tensors="pt")
    pad = enc.input_ids[0, -1].item()
    lengths = torch.tensor([n_tgt, 6, 1])
    tgt_real = torch.arange(n_tgt)[None, :] < lengths[:, None]  # (3, T)
    tgt = torch.randint(0, pad, (3, n_tgt)).masked_fill(~tgt_real, pad)
    tgt[:, 0] = pad  # decoder_start_token_id
    return enc.input_ids, enc.attention_mask.bool(), tgt, tgt_real


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_logits_on_padded_batches_equal_transformers(marian, dtype, tol):
    folder, hf = marian
    run = formers.from_pretrained(folder)
    src, src_real, tgt, tgt_real = padded_batch(folder)
    assert not src_real.all() and not tgt_real.all()  # both sides padded
    hf, ours = hf.to(dtype), run.model.to(dtype)
    exact_positions(hf)
    with torch.no_grad():
        want = hf(
            input_ids=src,
            attention_mask=src_real.long(),
            decoder_input_ids=tgt,
            decoder_attention_mask=tgt_real.long(),
        ).logits
        got = ours(src, tgt).logits
    assert want[tgt_real].abs().max() > 1  # logits of a size where a mapping error shows
    torch.testing.assert_close(got[tgt_real], want[tgt_real], atol=tol, rtol=0)


def hf_outputs(hf, src, real, max_len_b, **search):
    """transformers' output ids per sentence (the start token and </s> left out), each
    decoded alone with the length limit formers gives it: source length + max_len_b, then
    </s> (forced_eos_token_id); <pad> never produced (formers never produces it; Opus-MT's
    configs say so with bad_words_ids)."""
    pad = hf.config.pad_token_id
    out = []
    for row, keep in zip(src, real, strict=True):
        ids = row[keep][None]
        generated = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=ids.shape[1] + max_len_b + 1,
            do_sample=False,
            bad_words_ids=[[pad]],
            **search,
        )[0, 1:].tolist()
        assert generated[-1] == 0  # every output ends in </s>
        out.append(generated[:-1])
    return out


def ids_of(folder):
    run = formers.from_pretrained(folder)
    tok = run.tokenizer
    return run, dict(bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)


@pytest.mark.slow  # the greedy translate command below checks the same search by default
def test_greedy_search_equals_transformers_generate(marian):
    folder, hf = marian
    run, ids = ids_of(folder)
    src, real, _, _ = padded_batch(folder)
    want = hf_outputs(hf, src, real, 10, num_beams=1)
    got = greedy_search(run.model, src, max_len_b=10, **ids)
    assert [h.tokens for h in got] == want
    assert len({len(w) for w in want}) > 1  # outputs of several lengths


@pytest.mark.slow  # tens of seconds: transformers' beam search on CPU
@pytest.mark.parametrize(("alpha", "penalty"), [(0.0, "gnmt"), (1.0, "power")])
def test_beam_search_equals_transformers_beam_search(marian, alpha, penalty):
    """Beam 4 with transformers' length penalty, log P / |y|^α (formers' penalty="power";
    at α = 0 formers' own form agrees too), stopping once a sentence has 4 finished
    hypotheses (transformers' early_stopping=True)."""
    folder, hf = marian
    run, ids = ids_of(folder)
    src, real, _, _ = padded_batch(folder)
    search = dict(num_beams=4, length_penalty=alpha, early_stopping=True)
    want = hf_outputs(hf, src, real, 4, **search)
    got = beam_search(run.model, src, beam=4, alpha=alpha, penalty=penalty, max_len_b=4, **ids)
    assert [h.tokens for h in got] == want
    greedy = greedy_search(run.model, src, max_len_b=4, **ids)
    assert [h.tokens for h in greedy] != want  # the search matters on these sentences


SAMPLES = [*SOURCE, ">>fr<< Ein Mann fährt.", "  Leerzeichen  und 日本語 ", "x", ""]


def test_tokenizer_encodes_and_decodes_as_marian_tokenizer_does(marian_folder):
    reference = hf_tokenizer(marian_folder)
    ours = formers.from_pretrained(marian_folder).tokenizer
    for text in SAMPLES:
        ids = ours.encode(text)
        assert ids == reference(text).input_ids
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True)
    assert ours.encode(SOURCE[0])[-1] == ours.eos_id == 0
    assert ours.bos_id == ours.pad_id == reference.pad_token_id
    assert ours.unk_id in ours.encode("日本語")


@pytest.mark.parametrize(
    ("flags", "search"),
    [
        (["--beam", "1"], dict(num_beams=1)),
        pytest.param(
            ["--beam", "4", "--alpha", "1", "--penalty", "power"],
            dict(num_beams=4, length_penalty=1.0, early_stopping=True),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_translate_command_turns_text_into_transformers_text(
    marian, tmp_path, capsys, flags, search
):
    folder, hf = marian
    run_dir = tmp_path / "run"
    assert main(["import", str(folder), "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    source = tmp_path / "source.de"
    source.write_text("\n".join(SOURCE[:3]) + "\n")
    assert main(["translate", str(run_dir), str(source), *flags, "--max-len-b", "10"]) == 0
    got = capsys.readouterr().out.splitlines()
    tokenizer = hf_tokenizer(folder)
    want = []
    for text in SOURCE[:3]:
        ids = tokenizer(text, return_tensors="pt").input_ids
        out = hf.generate(
            ids,
            max_new_tokens=ids.shape[1] + 11,
            do_sample=False,
            bad_words_ids=[[hf.config.pad_token_id]],
            **search,
        )
        want.append(tokenizer.decode(out[0], skip_special_tokens=True))
    assert got == want
    assert any(got)  # not all empty


@pytest.mark.slow
def test_translate_in_python_equals_the_command(marian_folder):
    run = formers.from_pretrained(marian_folder)
    texts = translate(run.model, run.tokenizer, SOURCE[:2], beam=1, max_len_b=10)
    ids = [
        greedy_search(
            run.model,
            torch.tensor([run.tokenizer.encode(s)]),
            max_len_b=10,
            bos_id=run.tokenizer.bos_id,
            eos_id=0,
            pad_id=run.tokenizer.pad_id,
        )[0]
        for s in SOURCE[:2]
    ]
    assert texts == [run.tokenizer.decode(h.tokens) for h in ids]


def test_export_loads_in_transformers_with_equal_logits(marian_folder, tmp_path, capsys):
    run_dir, out = tmp_path / "run", tmp_path / "hf"
    assert main(["import", str(marian_folder), "--run-dir", str(run_dir)]) == 0
    assert main(["export", str(run_dir), "--to", "hf", str(out)]) == 0
    capsys.readouterr()
    exported = transformers.MarianMTModel.from_pretrained(out).eval()
    original = transformers.MarianMTModel.from_pretrained(marian_folder).eval()
    src, src_real, tgt, tgt_real = padded_batch(marian_folder)
    inputs = dict(input_ids=src, attention_mask=src_real.long(), decoder_input_ids=tgt)
    with torch.no_grad():
        torch.testing.assert_close(
            exported(**inputs).logits, original(**inputs).logits, atol=1e-6, rtol=0
        )
    config = json.loads((out / "config.json").read_text())
    assert config["activation_function"] == "swish" and config["scale_embedding"] is True
    assert (
        hf_tokenizer(out)(SOURCE[0]).input_ids == hf_tokenizer(marian_folder)(SOURCE[0]).input_ids
    )


def test_eval_scores_the_references_as_transformers_labels(marian, tmp_path, capsys):
    """`formers eval --source --reference` of the imported run: its loss is transformers' loss
    of the references as labels (the target SentencePiece model, </s> scored once)."""
    folder, hf = marian
    run_dir = tmp_path / "run"
    assert main(["import", str(folder), "--run-dir", str(run_dir)]) == 0
    source, reference = tmp_path / "src.de", tmp_path / "ref.en"
    source.write_text("\n".join(SOURCE[:3]) + "\n")
    reference.write_text("\n".join(TARGET[:3]) + "\n")
    capsys.readouterr()
    flags = ["--source", str(source), "--reference", str(reference), "--beam", "1"]
    assert main(["eval", str(run_dir), *flags, "--max-len-b", "2"]) == 0
    out = capsys.readouterr().out
    report = json.loads(out[: out.rindex("}") + 1])
    tokenizer = hf_tokenizer(folder)
    total, count = 0.0, 0
    for text, target in zip(SOURCE[:3], TARGET[:3], strict=True):
        batch = tokenizer(text, text_target=target, return_tensors="pt")
        with torch.no_grad():
            loss = hf(input_ids=batch.input_ids, labels=batch.labels).loss.item()
        total, count = total + loss * batch.labels.shape[1], count + batch.labels.shape[1]
    assert report["tokens"] == count
    assert report["loss"] == pytest.approx(total / count, rel=1e-6)


def from_scratch(tmp_path, **settings):
    """A run folder of a fresh encoder-decoder (byte tokenizer) with `settings`; its model."""
    cfg = formers.config(
        "vanilla", arch="encoder_decoder", n_layers=1, d_model=32, n_heads=4, d_ff=64,
        max_len=16, vocab_size=256, pad_id=0, **settings,
    )  # fmt: skip
    model = formers.build(cfg).eval()
    if model.lm_head.bias is not None:  # away from its initial zeros
        torch.nn.init.normal_(model.lm_head.bias)
    run_dir = tmp_path / "run"
    formers.train.checkpoint.save_checkpoint(
        run_dir, model=model, optimizer=None,
        config=formers.train.config.RunConfig(model=cfg).to_dict(),
        state=formers.train.checkpoint.TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')
    return run_dir, model


def test_a_run_from_scratch_with_marians_shape_exports_too(tmp_path, capsys):
    run_dir, model = from_scratch(
        tmp_path, position="sinusoidal_halves", output_bias=True, embed_init="paper",
        **{"ffn.activation": "silu"},
    )  # fmt: skip
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["architectures"] == ["MarianMTModel"]
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "out").eval()
    assert hf.config.scale_embedding
    src, tgt = torch.randint(1, 256, (2, 9)), torch.randint(1, 256, (2, 7))
    with torch.no_grad():
        want = hf(input_ids=src, decoder_input_ids=tgt).logits
        torch.testing.assert_close(model(src, tgt).logits, want, atol=1e-5, rtol=0)


def test_export_refuses_an_encoder_decoder_marian_cannot_express(tmp_path, capsys):
    run_dir, _ = from_scratch(tmp_path, output_bias=True)
    assert main(["export", str(run_dir), "--to", "hf", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "error: the model has position='sinusoidal', which a Marian checkpoint cannot express: "
        "it needs position='sinusoidal_halves'\n"
    )
    assert not (tmp_path / "out").exists()
