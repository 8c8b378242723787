"""Turn a user's text into what each keyword channel should search for.

Function words match nearly every stored step, and with FTS5 every matching row must be scored, so they
cost most and tell least: they are dropped (unless the query has nothing else). The trigram index is
kept for what the word index cannot serve well — CJK text and identifier-like tokens (paths, snake_case,
camelCase, dotted names, codes with digits) — instead of repeating every English word at higher cost.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_IDENTIFIER = re.compile(r"[_./\\:#@$-]|\d|[a-z][A-Z]")


@dataclass(frozen=True)
class KeywordQuery:
    word: str  # text for the word (porter) index
    trigram: str  # text for the trigram index ("" = skip the channel)


def keyword_query(text: str) -> KeywordQuery:
    terms = query_terms(text)
    content = [t for t in terms if t.casefold() not in STOPWORDS]
    if not content:
        content = terms
    trigram = [t for t in content if _CJK.search(t) or _IDENTIFIER.search(t)]
    return KeywordQuery(word=" ".join(content), trigram=" ".join(trigram))
