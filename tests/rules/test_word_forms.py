"""`WordForms` answers `_same_word` against every word of a text with set lookups; it must agree exactly."""

from __future__ import annotations

import itertools
import random

from memos_bridge.rules.subjects import WordForms, _same_word, shares_words


def _brute_force(word: str, text_words: set[str]) -> bool:
    return any(_same_word(word, other) for other in text_words)


def test_word_forms_agree_with_the_pairwise_rule_on_inflections_and_near_misses() -> None:
    text_words = {"invoice", "weights", "run", "shipping", "report", "export", "xy", "abcd"}
    forms = WordForms.of(text_words)
    probes = [
        "invoices",
        "invoiced",
        "invoice",
        "invoic",
        "invo",
        "inv",  # stems and inflections of a text word
        "weight",
        "weigh",
        "wei",
        "weightsxyz",
        "weightsxyzw",  # the text word as the inflection, limits
        "running",
        "runs",
        "run",
        "shipped",
        "ship",
        "reports",
        "reporting",
        "reportings",
        "exports",
        "xyz",
        "xy",
        "abcdefg",
        "abcdefgh",
        "abc",
        "",
        "zzzz",
    ]
    for word in probes:
        assert forms.has_form(word) == _brute_force(word, text_words), word


def test_word_forms_agree_with_the_pairwise_rule_on_random_words() -> None:
    rng = random.Random(7)
    letters = "abe"  # a small alphabet makes shared prefixes, and so near misses, common
    for _ in range(300):
        text_words = {"".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(6)}
        forms = WordForms.of(text_words)
        for length in range(1, 11):
            for word in ("".join(p) for p in itertools.islice(itertools.product(letters, repeat=length), 40)):
                assert forms.has_form(word) == _brute_force(word, text_words), (word, sorted(text_words))


def test_shares_words_counts_inflections_once_per_lesson_word() -> None:
    assert shares_words("the invoices were exported twice", ["invoice", "export"])
    assert not shares_words("the invoices were sent", ["invoice", "export"])
    assert shares_words("the invoices were sent", ["invoice", "export"], need=1)
