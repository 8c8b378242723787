"""Turn a user's text into what each keyword channel should search for.

Function words match nearly every stored step, and with FTS5 every matching row must be scored, so they
cost most and tell least: they are dropped (unless the query has nothing else). The trigram index is
kept for what the word index cannot serve well — CJK text and identifier-like tokens (paths, snake_case,
camelCase, dotted names, codes with digits) — instead of repeating every English word at higher cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memos_bridge.rules.text import CJK_RUN, has_cjk
from memos_bridge.storage.fts import query_terms

STOPWORDS = frozenset(
    """
    a an the and or but if then else of to in on at by for with from into onto over under about as is are
    was were be been being am do does did doing have has had having i me my mine we us our you your he him
    his she her it its they them their this that these those what which who whom whose when where why how
    can could should would will shall may might must not no yes so than too very just also only again
    please thanks thank hi hello ok okay up down out there here some any all each every more most other
    such own same few both s t don didn doesn isn aren wasn weren won let lets get got make made need want
    的 了 是 在 我 你 他 她 它 们 这 那 和 与 或 也 就 都 吗 呢 吧 啊 把 被 给 让 请 一个 怎么 什么 如何 为什么
    """.split()
)

_IDENTIFIER = re.compile(r"[_./\\:#@$-]|\d|[a-z][A-Z]")


_PATH = re.compile(r"(?:[A-Za-z]:)?[\w.\-]*[/\\][\w.\-/\\]+")
_HASH = re.compile(r"\b[0-9a-f]{7,40}\b")
_CODE = re.compile(r"\b(?:[A-Z][A-Z0-9]*_[A-Z0-9_]+|E[A-Z]{3,}|E\d{3,5}|TS\d{4,5}|[A-Z][a-zA-Z]+(?:Error|Exception))\b")
_DOTTED = re.compile(r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+\b")
_SNAKE_CAMEL = re.compile(r"\b(?:[a-z0-9]+_[a-z0-9_]+|[a-z]+[A-Z][A-Za-z0-9]+)\b")


@dataclass(frozen=True)
class KeywordQuery:
    word: str  # text for the word (porter) index
    trigram: str  # text for the trigram index ("" = skip the channel)
    pattern: tuple[str, ...] = ()  # 2-character tokens and CJK bigrams (LIKE channel)
    identifiers: tuple[str, ...] = ()  # paths, hashes, error codes, dotted/snake/camel names (exact channel)


def identifiers_in(text: str) -> list[str]:
    """Literal identifiers worth an exact match: paths, hashes, error codes, dotted and snake/camel names."""
    found: list[str] = []
    for pattern in (_PATH, _HASH, _CODE, _DOTTED, _SNAKE_CAMEL):
        for match in pattern.finditer(text):
            token = match.group(0).strip(".,;:()[]{}'\"")
            if len(token) >= 4 and token not in found and not any(token in f for f in found):
                found.append(token)
    return found[:8]


def pattern_terms(text: str) -> list[str]:
    """What neither the word nor the trigram index can find: CJK bigrams (of runs of 2+ characters).

    Chinese and Japanese write words without spaces, so a 2-character word is a substring of the text and is
    found with a substring scan. A Latin 2-letter word ("DB", "CI") is a token of its own, which the word
    index already matches whole; a substring scan would also find it inside longer words ("DB" in
    "feedback") and rank unrelated rows above the exact one.
    """
    out: list[str] = []
    for run in CJK_RUN.findall(text):
        if len(run) >= 2:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return list(dict.fromkeys(t for t in out if t not in STOPWORDS))[:12]


def keyword_query(text: str) -> KeywordQuery:
    terms = query_terms(text)
    content = [t for t in terms if t.casefold() not in STOPWORDS]
    if not content:
        content = terms
    trigram = [t for t in content if has_cjk(t) or _IDENTIFIER.search(t)]
    return KeywordQuery(
        word=" ".join(content),
        trigram=" ".join(trigram),
        pattern=tuple(pattern_terms(text)),
        identifiers=tuple(identifiers_in(text)),
    )
