"""Every preset, made tiny, learns: it memorises one small batch."""

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.train.optim import paper_adam


def batch_for(cfg):
    if cfg.arch == "encoder_decoder":
        src = random_tokens(4, 10, cfg.vocab_size)
        tgt = random_tokens(4, 9, cfg.vocab_size)
        return (src, tgt[:, :-1]), tgt[:, 1:]
    tokens = random_tokens(4, 17, cfg.vocab_size)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    if cfg.arch == "encoder":  # masked LM: hide a third of the positions, predict them
        hidden = torch.rand(inputs.shape) < 0.33
        targets = inputs.masked_fill(~hidden, -100)
        inputs = inputs.masked_fill(hidden, 1)
    return (inputs,), targets


# a few seconds of training each: vanilla in the default suite, the others slow (STYLE.md §3.8)
@pytest.mark.parametrize(
    "name",
    [
        name if name == "vanilla" else pytest.param(name, marks=pytest.mark.slow)
        for name in sorted(formers.PRESETS)
    ],
)
def test_tiny_preset_overfits_one_batch(name):
    torch.manual_seed(0)
    cfg = tiny_config(name)
    model = formers.build(cfg).train()
    inputs, targets = batch_for(cfg)
    optimizer = paper_adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(150):
        out = model(*inputs, targets=targets)
        loss = out.loss + out.aux_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0], losses[::25]
