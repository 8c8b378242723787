"""Whether two short statements say the same thing, for merging a memory remembered twice.

Sentence vectors put a statement and its opposite close together ("I prefer tabs over spaces" and "I
prefer spaces over tabs" score 0.98 with MiniLM; "use X" and "do not use X" well above 0.9), so a cosine
threshold alone would merge a correction into the memory it corrects and lose it. A merge therefore also
needs the statements to agree on what a vector blurs:

- the same numbers (a port, a limit, a version: "5433" is not "6543");
- the same polarity: a negation word on one side only flips the statement (negation is a small closed
  class of words in each language; the lists below cover the scripts the tokenizer knows);
- the words both share in the same order (swapping who does what to whom reverses the meaning).

Pure and dependency-free.
"""

from __future__ import annotations

import re
from typing import Final

from memos_bridge.rules.subjects import number_key, numbers
from memos_bridge.rules.tokens import content_tokens, normalised_key

_WORD: Final = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
#: Negation words (English, German, French, Spanish, Italian, Portuguese, Dutch) and contractions.
NEGATIONS: Final = frozenset(
    """not no never none nobody nothing neither nor without cannot can't don't doesn't didn't won't
    wouldn't shouldn't isn't aren't wasn't weren't mustn't avoid nicht kein keine keinen nie niemals ohne
    ne pas jamais aucun aucune sans nunca nada ningún ninguna sin non mai senza nenhum nenhuma sem niet
    geen nooit zonder""".split()
)
#: Negation in CJK text: characters that negate what follows (不/没/别/勿/未/非/無/无; ない/ず in Japanese).
_CJK_NEGATION: Final = re.compile(r"[不没沒别別勿未非無无]|ない|ません|않|못|안 ")


def _negated(text: str) -> bool:
    lowered = text.casefold()
    return any(word in NEGATIONS for word in _WORD.findall(lowered)) or bool(_CJK_NEGATION.search(text))


def _same_order(a: list[str], b: list[str]) -> bool:
    """Whether the words shared by `a` and `b` appear in the same relative order in both."""
    shared = set(a) & set(b)
    left = [w for w in dict.fromkeys(a) if w in shared]
    right = [w for w in dict.fromkeys(b) if w in shared]
    return left == right


def same_statement(a: str, b: str) -> bool:
    """True when `a` and `b` (already close in meaning) make the same claim: same numbers, same polarity,
    shared words in the same order."""
    if {number_key(n.value) for n in numbers(a)} != {number_key(n.value) for n in numbers(b)}:
        return False
    if _negated(a) != _negated(b):
        return False
    return _same_order(content_tokens(a), content_tokens(b))


#: Share of the shorter request's content words the longer one must hold to be the same request again.
SAME_REQUEST_COVERAGE: Final = 0.8
#: Words a user opens a retry with ("Please redo: …", "Try again —", "再算一次："); they are not the request.
_RETRY_LEAD: Final = re.compile(
    r"^\W*(?:(?:please|pls|ok|okay|so|now|then)\W+)*(?:re-?do|redo|retry|repeat|try(?:\s+it)?\s+again|again|"
    r"one\s+more\s+(?:time|try)|(?:re-?run|recompute|recalculate))\b[^:：—-]{0,60}?[:：—-]+\s*|"
    r"^\W*(?:请|麻烦)?(?:重新|再)(?:算|做|来|试|跑)?(?:一次|一遍|下)?[:：，,]\s*",
    re.IGNORECASE,
)


def same_request(a: str, b: str) -> bool:
    """Whether two user requests ask for the same thing: a retry of a task, verbatim or reworded a little
    ("Please redo: <request>"). The shorter one's content words are nearly all in the longer one and both name
    the same numbers; a retry lead-in is not part of the request. Requests about the same data that ask for
    something else share their nouns but not their numbers or the rest of their words."""
    a, b = _RETRY_LEAD.sub("", a.strip()), _RETRY_LEAD.sub("", b.strip())
    if normalised_key(a) == normalised_key(b):
        return bool(normalised_key(a))
    left, right = set(content_tokens(a)), set(content_tokens(b))
    if not left or not right:
        return False
    if {number_key(n.value) for n in numbers(a)} != {number_key(n.value) for n in numbers(b)}:
        return False
    shorter, longer = (left, right) if len(left) <= len(right) else (right, left)
    return len(shorter & longer) / len(shorter) >= SAME_REQUEST_COVERAGE and len(shorter) >= 3
