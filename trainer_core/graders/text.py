"""``string_check`` and ``text_similarity``: comparisons of two rendered strings.

The similarity metrics come from the libraries that define them, so a score here is the score a
user gets from that library: rapidfuzz (fuzzy_match: ``fuzz.ratio``, the normalised Indel
similarity; OpenAI names rapidfuzz but not the scorer), sacrebleu (bleu: ``sentence_bleu`` with
its default exponential smoothing), nltk (gleu: ``sentence_gleu`` over whitespace tokens) and
rouge-score (rouge_1..5 and rouge_l: the F-measure, its default tokenizer, no stemming). Each is
scaled to [0, 1]. ``cosine`` and ``meteor`` are refused when a grader is parsed
(``trainer_core.spec.graders.UNSERVED_METRICS``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any


def string_check(operation: str, value: str, reference: str) -> float:
    """eq/ne: case-sensitive (in)equality; like: ``reference`` occurs in ``value``; ilike: the
    same ignoring case (OpenAI's guide)."""
    checks = {
        "eq": value == reference,
        "ne": value != reference,
        "like": reference in value,
        "ilike": reference.lower() in value.lower(),
    }
    return 1.0 if checks[operation] else 0.0


def _fuzzy(value: str, reference: str) -> float:
    from rapidfuzz import fuzz

    return float(fuzz.ratio(value, reference)) / 100.0


def _bleu(value: str, reference: str) -> float:
    import sacrebleu

    return float(sacrebleu.sentence_bleu(value, [reference]).score) / 100.0


def _gleu(value: str, reference: str) -> float:
    from nltk.translate.gleu_score import sentence_gleu

    return float(sentence_gleu([reference.split()], value.split()))


@cache
def _rouge_scorer(kind: str) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer([kind])


def _rouge(kind: str) -> Callable[[str, str], float]:
    def score(value: str, reference: str) -> float:
        return float(_rouge_scorer(kind).score(reference, value)[kind].fmeasure)

    return score


METRICS: dict[str, Callable[[str, str], float]] = {
    "fuzzy_match": _fuzzy,
    "bleu": _bleu,
    "gleu": _gleu,
    **{f"rouge_{n}": _rouge(f"rouge{n}") for n in range(1, 6)},
    "rouge_l": _rouge("rougeL"),
}


def text_similarity(metric: str, value: str, reference: str) -> float:
    return METRICS[metric](value, reference)
