"""Built-in data sets, generated deterministically: no download, same rows on every machine.

``sentiment``: short reviews whose label is the majority polarity of their sentiment words, so a
tiny model learns it over a few epochs. ``tiny-stories``: sentences from a small grammar, for
causal language modelling. Both have variable-length rows and a validation split; so has
``chat-arithmetic`` (``chat_corpus``), conversations for chat fine-tuning, and
``preference-arithmetic`` (``preference_corpus``), its answers as preference pairs, and
``arithmetic-prompts`` (``prompt_corpus``), its questions as prompts for reinforcement.
"""

from __future__ import annotations

import random
from functools import cache

from trainer_core.builtin.chat_corpus import chat_arithmetic
from trainer_core.builtin.preference_corpus import preference_arithmetic
from trainer_core.builtin.prompt_corpus import arithmetic_prompts

POSITIVE = [
    "great",
    "wonderful",
    "excellent",
    "amazing",
    "lovely",
    "good",
    "brilliant",
    "enjoyable",
    "superb",
    "delightful",
    "charming",
    "moving",
    "clever",
    "fun",
    "beautiful",
]
NEGATIVE = [
    "terrible",
    "awful",
    "boring",
    "bad",
    "horrible",
    "dull",
    "poor",
    "disappointing",
    "weak",
    "dreadful",
    "clumsy",
    "tedious",
    "silly",
    "ugly",
    "messy",
]
FILLER = [
    "the",
    "movie",
    "film",
    "plot",
    "acting",
    "was",
    "and",
    "but",
    "really",
    "quite",
    "story",
    "characters",
    "music",
    "ending",
    "very",
    "a",
    "it",
    "i",
    "thought",
    "overall",
    "this",
    "scenes",
    "cast",
    "script",
    "director",
    "with",
    "of",
    "in",
    "at",
]

NAMES = ["anna", "ben", "cara", "dan", "eva", "finn", "gus", "hana", "ivo", "jade"]
VERBS = ["saw", "found", "liked", "painted", "carried", "watched", "chased", "kept"]
ADJECTIVES = ["red", "small", "old", "shiny", "quiet", "happy", "green", "tall"]
NOUNS = ["cat", "ball", "boat", "kite", "dog", "book", "hat", "apple"]
PLACES = ["park", "river", "garden", "house", "hill", "market", "school", "forest"]
PREPOSITIONS = ["near", "in", "behind", "under", "beside"]

SPLIT_SIZES = {"train": 2000, "validation": 400}


def _phrase(rng: random.Random, polarity: list[str], opposite: list[str]) -> str:
    """A phrase with the given polarity: a plain word, or "not" + a word of the opposite one.
    Negation makes the label depend on word order, so the task is not a bag-of-words lookup."""
    if rng.random() < 0.15:
        return f"not {rng.choice(opposite)}"
    return rng.choice(polarity)


def _review(rng: random.Random) -> tuple[str, int]:
    n_sentiment = rng.choice((1, 1, 3, 3, 5))
    label = rng.randint(0, 1)
    n_major = min(n_sentiment // 2 + 1 + rng.randint(0, n_sentiment // 2), n_sentiment)
    major, minor = (POSITIVE, NEGATIVE) if label == 1 else (NEGATIVE, POSITIVE)
    phrases = [_phrase(rng, major, minor) for _ in range(n_major)]
    phrases += [_phrase(rng, minor, major) for _ in range(n_sentiment - n_major)]
    phrases += [rng.choice(FILLER) for _ in range(rng.randint(3, 36))]
    rng.shuffle(phrases)
    return " ".join(phrases), label


def _story(rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(1, 4)):
        sentences.append(
            f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(ADJECTIVES)} "
            f"{rng.choice(NOUNS)} {rng.choice(PREPOSITIONS)} the {rng.choice(PLACES)} ."
        )
    return " ".join(sentences)


@cache  # deterministic: build once per process (callers copy it into a Dataset)
def sentiment(split: str) -> dict[str, list[object]]:
    rng = random.Random(f"sentiment-{split}")
    rows = [_review(rng) for _ in range(SPLIT_SIZES[split])]
    return {"text": [text for text, _ in rows], "label": [label for _, label in rows]}


@cache
def tiny_stories(split: str) -> dict[str, list[object]]:
    rng = random.Random(f"tiny-stories-{split}")
    return {"text": [_story(rng) for _ in range(SPLIT_SIZES[split])]}


TEXT_BUILDERS = {"builtin:sentiment": sentiment, "builtin:tiny-stories": tiny_stories}
BUILDERS = {
    **TEXT_BUILDERS,
    "builtin:chat-arithmetic": chat_arithmetic,
    "builtin:preference-arithmetic": preference_arithmetic,
    "builtin:arithmetic-prompts": arithmetic_prompts,
}


def all_texts() -> list[str]:
    """Every text of the text data sets: the corpus tiny-bert's and tiny-gpt2's tokenizers are
    trained on (tiny-chat's: ``chat_corpus.chat_texts``)."""
    texts: list[str] = []
    for build in TEXT_BUILDERS.values():
        for split in SPLIT_SIZES:
            texts += [str(text) for text in build(split)["text"]]
    return texts
