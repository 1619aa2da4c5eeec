"""The translation task: data from aligned files, one shared vocabulary, the label-smoothed
loss over real target tokens, and evaluation (loss, sacreBLEU, chrF) against references."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch
from helpers import toy_pairs, toy_translation_settings, write_parallel_corpus

import formers
from formers.data.errors import DataError
from formers.errors import ConfigError
from formers.infer.seq2seq import greedy_search
from formers.train.config import run_config
from formers.train.tasks import TranslationTask, task_for
from formers.train.tasks.translation import first_pairs

SIZES = {"model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 64}


@pytest.fixture
def corpus(tmp_path):
    return write_parallel_corpus(tmp_path, n=200)


def task_of(corpus: str, **train) -> TranslationTask:
    overrides = {**SIZES, "train.corpus": corpus, "train.tokenizer_vocab": 300}
    overrides.update({f"train.{k}": v for k, v in train.items()})
    return task_for(run_config("transformer", overrides))


def test_the_task_of_an_encoder_decoder_is_translation(corpus):
    task = task_of(corpus)
    assert isinstance(task, TranslationTask)
    source, target = toy_pairs(200)
    assert task.data.raw["train"] == (source[:180], target[:180])  # 90 / 5 / 5 by position
    assert task.data.raw["test"] == (source[190:], target[190:])


def test_one_vocabulary_and_one_matrix_for_source_target_and_output(corpus):
    task = task_of(corpus)
    cfg = task.cfg.model
    assert cfg.vocab_size == task.data.tokenizer.vocab_size and cfg.tgt_vocab_size is None
    assert cfg.pad_id == task.data.tokenizer.pad_id == 0
    model = formers.build(cfg)
    assert model.tgt_embed.token is model.src_embed.token
    assert model.lm_head.weight is model.src_embed.token.weight


def test_batches_stay_within_max_tokens(corpus):
    batches = task_of(corpus, max_tokens=40).train_batches(0, 1)
    for _ in range(20):
        batch = next(batches)
        assert batch.src.numel() <= 40 and batch.tgt_in.numel() <= 40
        assert batch.tokens == int((batch.tgt_out != 0).sum())


def smoothed_loss_reference(logits, targets, eps, pad):
    """Σ over real targets of -(1-ε)·log p(y) - ε/V·Σ_v log p(v), divided by their count."""
    logp = torch.log_softmax(logits.double(), -1)
    total, count = 0.0, 0
    for b in range(targets.shape[0]):
        for t in range(targets.shape[1]):
            y = int(targets[b, t])
            if y == pad:
                continue
            total += -(1 - eps) * float(logp[b, t, y]) - eps * float(logp[b, t].mean())
            count += 1
    return total / count


def test_the_step_loss_is_label_smoothed_over_real_target_tokens(corpus):
    task = task_of(corpus, label_smoothing=0.1, max_tokens=64)
    model = formers.build(task.cfg.model).double()
    batches = task.train_batches(0, 1)
    batch = next(b for b in batches if bool((b.tgt_out == 0).any()))  # with padding to ignore
    out = task.step(model.eval(), batch, None)
    with torch.no_grad():
        logits = model(batch.src, batch.tgt_in).logits
    expected = smoothed_loss_reference(logits, batch.tgt_out, 0.1, pad=0)
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)  # token_loss runs in fp32


def test_evaluation_scores_every_pair_and_bleu_is_sacrebleus(corpus):
    task = task_of(corpus, max_tokens=64)
    torch.manual_seed(0)
    model = formers.build(task.cfg.model).double()
    result = task.evaluate(model, "valid")
    source, target = task.data.splits["valid"]
    tok = task.data.tokenizer
    total, count, hyps = 0.0, 0, []
    for src, tgt in zip(source, target, strict=True):  # one pair at a time, no padding
        tgt_in = torch.cat([torch.tensor([tok.bos_id]), tgt])[None]
        tgt_out = torch.cat([tgt, torch.tensor([tok.eos_id])])[None]
        with torch.no_grad():
            logp = torch.log_softmax(model.eval()(src[None], tgt_in).logits, -1)
        total -= float(logp[0].gather(1, tgt_out[0][:, None]).sum())
        count += tgt_out.numel()
        ids = dict(bos_id=tok.bos_id, eos_id=tok.eos_id, pad_id=tok.pad_id)
        hyps.append(tok.decode(greedy_search(model, src[None], **ids)[0].tokens))
    assert result.tokens == count and result.sentences == len(source)
    assert result.loss == pytest.approx(total / count, rel=1e-6)  # token_loss runs in fp32
    assert result.perplexity == pytest.approx(math.exp(total / count), rel=1e-6)
    assert result.hypotheses == hyps
    references = task.data.raw["valid"][1]
    assert result.bleu == sacrebleu.corpus_bleu(hyps, [references]).score
    assert result.chrf == sacrebleu.corpus_chrf(hyps, [references]).score
    assert result.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "hypotheses" not in result.as_dict() and result.as_dict()["bleu"] == result.bleu


def test_translations_are_scored_against_the_target_side(corpus, monkeypatch):
    # a perfect translator (the reference ids themselves) scores BLEU and chrF 100
    from formers.infer.seq2seq import Hypothesis
    from formers.train.tasks import translation

    task = task_of(corpus)
    source, target = task.data.splits["valid"]
    by_source = {tuple(s.tolist()): t.tolist() for s, t in zip(source, target, strict=True)}

    def perfect(model, sources, **options):
        return [Hypothesis(by_source[tuple(s.tolist())], 0.0, 0.0) for s in sources]

    monkeypatch.setattr(translation, "translate_ids", perfect)
    result = task.evaluate(formers.build(task.cfg.model), "valid")
    assert result.hypotheses == task.data.raw["valid"][1]
    assert result.bleu == pytest.approx(100.0) and result.chrf == pytest.approx(100.0)


def test_periodic_evaluation_takes_the_first_pairs_within_max_tokens():
    target = [torch.ones(n, dtype=torch.long) for n in (3, 4, 2, 5)]  # +1 end token each
    assert first_pairs(target, None) == 4
    assert first_pairs(target, 9) == 2 and first_pairs(target, 12) == 3
    assert first_pairs(target, 1) == 1  # at least one pair


def test_a_task_limited_by_max_tokens_scores_only_those_pairs(corpus):
    task = task_of(corpus)
    model = formers.build(task.cfg.model)
    result = task.evaluate(model, "valid", max_tokens=30, translate=False)
    n = first_pairs(task.data.splits["valid"][1], 30)
    assert 1 <= result.sentences == n < len(task.data.splits["valid"][1])
    assert result.bleu is None


def test_another_tokenizer_is_refused(corpus):
    with pytest.raises(DataError, match="train.tokenizer='bpe': translation learns one joint BPE"):
        task_of(corpus, tokenizer="bpe")


def test_an_unknown_split_names_the_splits(corpus):
    task = task_of(corpus)
    with pytest.raises(DataError, match="has no 'test2016' split; it has train, valid, test"):
        task.evaluate(formers.build(task.cfg.model), "test2016")


@pytest.mark.slow
def test_a_small_model_learns_the_toy_language(tmp_path):
    from formers.train import trainer

    corpus = write_parallel_corpus(tmp_path, n=2000)
    cfg = run_config("transformer", toy_translation_settings(corpus))
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    # an untrained model scores about 0
    assert result.valid.bleu > 70 and result.valid.loss < 0.5, result.valid.summary()


def test_a_vocab_size_the_joint_bpe_does_not_have_is_refused(corpus):
    overrides = {**SIZES, "train.corpus": corpus, "train.tokenizer_vocab": 300}
    with pytest.raises(ConfigError, match=r"model.vocab_size=37000 .* joint BPE makes it 300"):
        task_for(run_config("transformer", {**overrides, "model.vocab_size": 37000}))
    assert task_for(run_config("transformer", overrides)).cfg.model.vocab_size == 300
