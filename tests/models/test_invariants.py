"""Causality, padding invariance, determinism and cached decoding for every model shape."""

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers


@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_decoder_lm_is_causal(norm, position):
    model = formers.build(tiny_config("vanilla", norm=norm, position=position)).eval()
    tokens = random_tokens(2, 12, 50)
    base = model(tokens).logits
    for t in (0, 5, 10):
        changed = tokens.clone()
        changed[:, t + 1 :] = random_tokens(2, 12 - t - 1, 50)
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=1e-6)
        assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :])


def test_encoder_decoder_decoder_is_causal():
    model = formers.build(tiny_config("transformer")).eval()
    src, tgt = random_tokens(2, 9, 50), random_tokens(2, 10, 50)
    base = model(src, tgt).logits
    for t in (0, 4, 8):
        changed = tgt.clone()
        changed[:, t + 1 :] = random_tokens(2, 10 - t - 1, 50)
        logits = model(src, changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=1e-6)
        assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :])


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_appending_source_padding_changes_nothing(norm):
    model = formers.build(tiny_config("transformer", norm=norm)).eval()
    src, tgt = random_tokens(2, 9, 50), random_tokens(2, 6, 50)
    base = model(src, tgt).logits
    padded = torch.cat([src, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, tgt).logits, base, atol=1e-6, rtol=1e-6)
    # and the padding really is masked: a non-pad token in its place changes the output
    unmasked = padded.clone()
    unmasked[:, 9:] = 7
    assert not torch.allclose(model(unmasked, tgt).logits, base, atol=1e-4)


def test_appending_target_padding_keeps_real_positions():
    model = formers.build(tiny_config("transformer")).eval()
    src, tgt = random_tokens(2, 9, 50), random_tokens(2, 6, 50)
    base = model(src, tgt).logits
    padded = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(src, padded).logits[:, :6], base, atol=1e-6, rtol=1e-6)


def test_padding_is_ignored_by_the_loss():
    model = formers.build(tiny_config("transformer")).eval()
    src, tgt = random_tokens(2, 9, 50), random_tokens(2, 6, 50)
    targets = random_tokens(2, 6, 50)
    base = model(src, tgt, targets).loss
    padded_targets = torch.cat([targets, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    padded_tgt = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(src, padded_tgt, padded_targets).loss, base)


@pytest.mark.parametrize("name", ["vanilla", "transformer"])
def test_eval_mode_switches_dropout_off_and_train_mode_uses_it(name):
    model = formers.build(tiny_config(name, dropout=0.3, attn_dropout=0.2)).eval()
    plain = formers.build(tiny_config(name)).eval()  # the same network without any dropout
    plain.load_state_dict(model.state_dict())
    inputs = (random_tokens(2, 8, 50),) * (2 if name == "transformer" else 1)
    torch.testing.assert_close(model(*inputs).logits, plain(*inputs).logits, atol=0, rtol=0)
    model.train()
    assert not torch.equal(model(*inputs).logits, model(*inputs).logits)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_cached_decoding_equals_full_pass(norm):
    model = formers.build(tiny_config("vanilla", norm=norm)).eval()
    tokens = random_tokens(2, 11, 50)
    full = model(tokens).logits
    cache = model.new_cache()
    steps = [model(tokens[:, :5], cache=cache).logits]
    steps += [model(tokens[:, i : i + 1], cache=cache).logits for i in range(5, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_encoder_decoder_cached_decoding_equals_full_pass():
    model = formers.build(tiny_config("transformer")).eval()
    src, tgt = random_tokens(2, 9, 50), random_tokens(2, 7, 50)
    with torch.no_grad():
        context, context_mask = model.encode(src)
        full = model.decode(tgt, context, context_mask)
        cache = model.new_cache()
        steps = [
            model.decode(tgt[:, i : i + 1], context, context_mask, cache=cache) for i in range(7)
        ]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_tied_embeddings_share_one_matrix():
    lm = formers.build(tiny_config("vanilla"))
    assert lm.lm_head.weight is lm.embed.token.weight
    seq2seq = formers.build(tiny_config("transformer"))
    assert seq2seq.src_embed.token is seq2seq.tgt_embed.token
    assert seq2seq.lm_head.weight is seq2seq.src_embed.token.weight
    separate = formers.build(tiny_config("transformer", tgt_vocab_size=40))
    assert separate.src_embed.token is not separate.tgt_embed.token
    assert separate.lm_head.weight is separate.tgt_embed.token.weight
    assert separate.lm_head.weight.shape == (40, 32)


def test_a_pre_norm_stack_ends_in_a_layer_norm():
    model = formers.build(tiny_config("vanilla", norm="pre")).eval()
    assert isinstance(model.final_norm, torch.nn.LayerNorm)
    tokens = random_tokens(2, 6, 50)
    with torch.no_grad():
        model.final_norm.weight.zero_()
        model.final_norm.bias.fill_(0.5)
    # the last norm decides what the output layer sees: with gain 0 every position is 0.5
    want = torch.full((2, 6, 32), 0.5) @ model.lm_head.weight.T
    torch.testing.assert_close(model(tokens).logits, want)
    post = formers.build(tiny_config("vanilla", norm="post"))
    assert isinstance(post.final_norm, torch.nn.Identity)  # post-norm layers end in one already
