"""Corpus BLEU and chrF of detokenized translations, computed by sacreBLEU (Post 2018).

Scores are on plain detokenized text with sacreBLEU's defaults (BLEU: 13a tokenization,
mixed case, exponential smoothing; chrF: character 6-grams, beta 2), so they are comparable with
published sacreBLEU numbers; the signatures record exactly those settings and the version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from formers.data.errors import DataError


@dataclass(frozen=True)
class TranslationScores:
    """Corpus-level scores of one system output against one reference per sentence."""

    bleu: float  # 0..100
    chrf: float  # 0..100
    bleu_signature: str  # e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    chrf_signature: str

    def __str__(self) -> str:
        return (
            f"BLEU {self.bleu:.2f} ({self.bleu_signature}) | "
            f"chrF {self.chrf:.2f} ({self.chrf_signature})"
        )


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> TranslationScores:
    """sacreBLEU corpus BLEU and chrF of `hypotheses` against `references` (one each).

    Args:
        hypotheses: the system's detokenized translations, in corpus order.
        references: the reference translations, same order and count.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if len(hypotheses) != len(references):
        # sacreBLEU would silently score only the shorter prefix of the two.
        raise DataError(
            f"{len(hypotheses):,} translations but {len(references):,} references; score "
            "exactly one translation per reference sentence, in corpus order."
        )
    if not references:
        raise DataError("no sentences to score; give at least one translation and reference.")
    bleu, chrf = BLEU(), CHRF()
    hyps, refs = list(hypotheses), [list(references)]
    return TranslationScores(
        bleu=bleu.corpus_score(hyps, refs).score,
        chrf=chrf.corpus_score(hyps, refs).score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
    )
