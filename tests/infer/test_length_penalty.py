"""The two forms of beam search's length penalty, and a form it does not know."""

import pytest
import torch

from formers.errors import InputError
from formers.infer.seq2seq import beam_search, length_penalty


@pytest.mark.parametrize(("penalty", "want"), [("gnmt", ((5 + 7) / 6) ** 0.6), ("power", 7**0.6)])
def test_the_penalty_of_seven_tokens(penalty, want):
    assert length_penalty(7, 0.6, penalty) == pytest.approx(want, rel=1e-15)
    assert length_penalty(7, 0.0, penalty) == 1.0


def test_an_unknown_penalty_is_one_line_naming_the_argument():
    with pytest.raises(InputError, match="penalty='wu' is not one of 'gnmt', 'power'") as error:
        beam_search(
            torch.nn.Identity(),
            torch.ones(1, 3, dtype=torch.long),
            bos_id=1,
            eos_id=2,
            penalty="wu",
        )
    assert "\n" not in str(error.value)
