"""Content tokens shared by every stage that compares texts: lower-cased Latin words without stopwords,
numbers of three or more digits and CJK bigrams (Chinese has no spaces, so two-character windows stand in for
words), with the set similarity and the normalised key built on them.

Pure and dependency-free: imported by the learning stages, retrieval and the lesson rules alike.
"""

from __future__ import annotations

import re
from typing import Final

from memos_bridge.rules.text import CJK_CHARS, CJK_RUN, squash

LATIN_WORD: Final = re.compile(r"[a-z][a-z0-9_\-]*[a-z0-9]|\b\d{3,}\b")
_NON_WORD: Final = re.compile(rf"[^\w{CJK_CHARS}]+")

#: Words that carry no intent (English function words and request filler).
STOPWORDS: Final = frozenset(
    """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can cannot could did do does doing done down during each either else few for from
    further get got had has have having he her here hers him his how i if in into is it its itself just
    let lets like make me more most must my myself need needs no nor not now of off on once only or other
    our ours out over own please same she should so some such than thank thanks that the their theirs them
    then there these they this those through to too try under until up us use used using very via want was
    we were what when where which while who whom why will with would yes yet you your yours ok okay hi
    hello hey instead still really maybe able help run""".split()
)


def _cjk_bigrams(run: str) -> list[str]:
    return [run] if len(run) < 2 else [run[i : i + 2] for i in range(len(run) - 1)]


def content_tokens(text: str) -> list[str]:
    """Content words in order: lower-cased Latin words (≥ 2 chars, no stopwords), numbers of ≥ 3 digits
    (status and error numbers: `404`, `418`) and CJK bigrams."""
    lowered = text.lower()
    tokens: list[tuple[int, str]] = [
        (m.start(), m.group(0)) for m in LATIN_WORD.finditer(lowered) if m.group(0) not in STOPWORDS
    ]
    for run in CJK_RUN.finditer(lowered):
        tokens.extend((run.start() + i, gram) for i, gram in enumerate(_cjk_bigrams(run.group(0))))
    return [token for _, token in sorted(tokens)]


def token_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the content-token sets (0 when either side has none)."""
    left, right = set(content_tokens(a)), set(content_tokens(b))
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def normalised_key(text: str) -> str:
    """Case, punctuation and spacing removed: two texts with this key equal say the same thing."""
    return squash(_NON_WORD.sub(" ", text.lower()))
