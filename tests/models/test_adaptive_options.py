"""The adaptive input embedding and the projected adaptive softmax, usable from scratch: each
does exactly its formula, and a bad use is one message."""

import pytest
import torch

import formers
from formers.errors import ConfigError
from formers.models import build

TINY = dict(n_layers=1, d_model=32, n_heads=4, d_ff=48, vocab_size=50, dropout=0.0)
ADAPTIVE = dict(
    tie_embeddings=False,
    adaptive_cutoffs=(10, 30),
    adaptive_div_value=2.0,
    adaptive_d_embed=16,
    adaptive_input=True,
)


def model():
    torch.manual_seed(0)
    m = build(formers.config("transformer-xl", **TINY, **ADAPTIVE)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def test_the_adaptive_embedding_projects_each_clusters_own_table():
    token = model().embed.token
    tokens = torch.tensor([[0, 9, 10, 29, 30, 49]])
    want = []
    for t in tokens[0].tolist():
        c, start = (0, 0) if t < 10 else (1, 10) if t < 30 else (2, 30)
        assert token.tables[c].weight.shape[1] == 16 // 2**c  # width d_embed / div^c
        want.append(token.projs[c].weight @ token.tables[c].weight[t - start])
    torch.testing.assert_close(token(tokens)[0], torch.stack(want))


def test_the_projected_adaptive_softmax_is_head_plus_cluster_log_probs():
    head = model().lm_head
    hidden = torch.randn(1, 3, 32)
    got = head(hidden)[0]  # (3, V)

    def log_softmax(c, h):
        return torch.log_softmax(head.outs[c](head.projs[c](h)), -1)

    for h, row in zip(hidden[0], got, strict=True):
        top = log_softmax(0, h)  # 10 head tokens, then clusters 1 and 2
        want = torch.cat([top[:10], top[10] + log_softmax(1, h), top[11] + log_softmax(2, h)])
        torch.testing.assert_close(row, want)
    torch.testing.assert_close(got.exp().sum(-1), torch.ones(3))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"adaptive_input": True}, r"adaptive_input and adaptive_d_embed .* set adaptive_cutoffs"),
        (
            {**ADAPTIVE, "adaptive_d_embed": 3},
            r"adaptive_d_embed=3 leaves the last adaptive cluster no width",
        ),
    ],
)
def test_bad_adaptive_options_are_one_message(overrides, message):
    with pytest.raises(ConfigError, match=message):
        formers.config("transformer-xl", **{**TINY, **overrides})
