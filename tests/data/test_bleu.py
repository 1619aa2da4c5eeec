"""BLEU and chrF come from sacreBLEU on detokenized text, with its own signatures."""

from __future__ import annotations

import pytest
import sacrebleu

from formers.data import DataError
from formers.data.bleu import score_translations

REFERENCES = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people wearing winter jackets and helmets stand in the snow.",
]
HYPOTHESES = [
    "A man with an orange hat looks at something.",
    "A Boston terrier runs on green grass in front of a white fence.",
    "A girl in a karate suit breaks a board with a kick.",
    "Five people in winter jackets and helmets are standing in the snow.",
]


def test_scores_equal_sacrebleu_called_directly() -> None:
    scores = score_translations(HYPOTHESES, REFERENCES)
    assert scores.bleu == sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score
    assert scores.chrf == sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score
    assert 20 < scores.bleu < 60 and 40 < scores.chrf < 80  # a partial match, not 0 or 100


def test_perfect_and_unrelated_output() -> None:
    assert score_translations(REFERENCES, REFERENCES).bleu == pytest.approx(100.0)
    assert score_translations(REFERENCES, REFERENCES).chrf == pytest.approx(100.0)
    unrelated = ["xyz qq"] * len(REFERENCES)
    assert score_translations(unrelated, REFERENCES).bleu < 1.0


def test_case_and_order_matter() -> None:
    # Mixed case (sacreBLEU's default), and hypothesis i is scored against reference i only.
    lower = score_translations([r.lower() for r in REFERENCES], REFERENCES)
    assert lower.bleu < 100.0
    swapped = score_translations(REFERENCES[::-1], REFERENCES)
    assert swapped.bleu < 10.0


def test_signatures_are_sacrebleus_own() -> None:
    scores = score_translations(HYPOTHESES, REFERENCES)
    assert scores.bleu_signature == (
        f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    )
    assert scores.chrf_signature == (
        f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{sacrebleu.__version__}"
    )
    assert str(scores).startswith(f"BLEU {scores.bleu:.2f} (nrefs:1|")


def test_counts_must_match() -> None:
    with pytest.raises(DataError, match="3 translations but 4 references"):
        score_translations(HYPOTHESES[:3], REFERENCES)
    with pytest.raises(DataError, match="no sentences to score"):
        score_translations([], [])
