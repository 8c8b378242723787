"""Does recalled memory teach a lesson? Regex detection over the injected text, EN and ZH.

The simulated agent drops a habit only when the text the service injected says so, in any wording the
service may produce: the verifier's own sentence, the service's rule templates built from expected/actual
diffs ("divide the raw values by 1,000"), a world model's environment facts, or a Chinese phrasing. Each
family declares its patterns per pitfall (`recognise` in family.json); they look for the *lesson* (a
negated or corrective statement), never for the mistake itself, so the agent's own earlier steps ("converted
value to USD (value * 1000)") recalled as traces do not count as learning.

Caveat: the patterns know a finite set of wordings. Without an LLM the service keeps the verifier's sentence as
the experience's Avoid line, so most lessons reach the agent in the verifier's own words; `service_wording`
measures what remains recognisable once those sentences (whole or clipped) are taken out — the lessons the
service carried in words of its own (rule templates, titles, world-model facts, the agent's recalled steps).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from skillflow.family import Pitfall


@cache
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


@dataclass(frozen=True)
class Evidence:
    """Where a lesson was found: the pitfall, the pattern and the matched text."""

    pitfall: str
    pattern: str
    excerpt: str


def _normalise(text: str) -> str:
    """Collapse whitespace and markdown emphasis so a line break or `backticks` do not split a phrase, and
    turn the dot inside names (answers.json, 2.5) into "_" so patterns may treat "." as a sentence end."""
    flat = re.sub(r"\s+", " ", text.replace("`", "").replace("**", ""))
    return re.sub(r"(?<=\w)\.(?=\w)", "_", flat)


def find_lessons(text: str, pitfalls: Mapping[str, Pitfall]) -> list[Evidence]:
    """Every pitfall whose lesson `text` contains (first match each), in the family's order."""
    if not text.strip():
        return []
    flat = _normalise(text)
    found: list[Evidence] = []
    for pid, pitfall in pitfalls.items():
        for pattern, compiled in zip(pitfall.recognise, _compiled(pitfall.recognise), strict=True):
            match = compiled.search(flat)
            if match:
                start, end = max(0, match.start() - 40), min(len(flat), match.end() + 40)
                found.append(Evidence(pid, pattern, flat[start:end]))
                break
    return found


def learnt(texts: Iterable[str], pitfalls: Mapping[str, Pitfall]) -> frozenset[str]:
    """Ids of the pitfalls whose lesson appears in any of `texts`."""
    return frozenset(e.pitfall for text in texts for e in find_lessons(text, pitfalls))


#: A verifier sentence clipped by the service's snippet budget still counts as the verifier's words from here on.
_CLIPPED_PREFIX = 40


def strip_sentences(text: str, sentences: Iterable[str]) -> str:
    """`text` (normalised) without any copy of `sentences`, whole or clipped ("…") after its first 40 characters."""
    flat = _normalise(text)
    for sentence in sentences:
        wanted = _normalise(sentence)
        head = wanted[:_CLIPPED_PREFIX]
        if len(head) < _CLIPPED_PREFIX:
            flat = flat.replace(wanted, " ")
            continue
        start = flat.find(head)
        while start >= 0:
            end = start + len(head)
            while end < len(flat) and end - start < len(wanted) and flat[end] == wanted[end - start]:
                end += 1
            flat = flat[:start] + " " + flat[end:]
            start = flat.find(head, start + 1)
    return flat


def service_wording(text: str, pitfalls: Mapping[str, Pitfall]) -> frozenset[str]:
    """Pitfalls whose lesson `text` carries in words other than the verifier's own feedback sentences."""
    stripped = strip_sentences(text, [p.feedback for p in pitfalls.values()])
    return frozenset(e.pitfall for e in find_lessons(stripped, pitfalls))
