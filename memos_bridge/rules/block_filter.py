"""The one instance filter every line of an injected block passes: nothing of another task's attempt reaches it.

A block is read by an agent working on *this* task. A line that carries another task's values — its answer, the
expected or actual value a verifier reported, a name that was that task's result, a figure its script typed in —
is worse than no line: a small model copies it into its own answer. So before a block is assembled, every line of
every kind (lessons, repairs, skills, world models, past steps, remembered memories) is checked here against the
values the recalled memories' own tasks produced (`BlockValues`), and dropped when it carries one the request does
not name. A line that restates an attempt by its shape ("expected 412, got 980", "FAIL for t-3") is dropped too
(`rules.instance.instance_specific`).

What counts as another task's value is collected from the memories themselves: the phrases the learning stage took
out of a lesson as its attempt's content, the answers a past step reported (its reply, the content it wrote), the
rejected attempt a repair names. Values a recalled lesson states as its rule (a sentinel, a factor) are never
another task's unless they were that task's answer: a lesson line passed the learning-time filter, so a value it
keeps that no attempt answered is the convention. Values of the task the request repeats (a retry) are its own.

Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from memos_bridge.rules.instance import InstanceContext, instance_specific
from memos_bridge.rules.subjects import numbers

#: A number that can identify a task's value: three significant digits or more, or written with decimals (small
#: integers and round numbers occur in every rule).
MIN_DIGITS: Final = 3
#: A string value must be at least this long to be recognised in a line (shorter ones match by chance).
MIN_STRING: Final = 4


@dataclass(frozen=True)
class BlockValues:
    """The values a block must not carry (another task's), and those it may (the request's, the lessons' own)."""

    values: tuple[float, ...] = ()
    strings: frozenset[str] = frozenset()
    allowed_text: str = ""  # the request and the texts of the task it repeats, casefolded

    @classmethod
    def build(
        cls,
        answers: Iterable[str],
        *,
        attempts: Iterable[str] = (),
        request: str = "",
        rules: Iterable[str] = (),
        own: Iterable[str] = (),
    ) -> BlockValues:
        """`answers`: what other tasks answered or were expected to answer (a lesson's instance phrases, a step's
        reply) — never allowed in a line, wherever else they occur; `attempts`: other content of their attempts (the
        tool calls and results of a past step) — allowed where a recalled lesson states them as its rule (`rules`:
        a sentinel in a script is the same value as in the lesson); `request`: this request and `own`: texts of the
        task it repeats, whose values are allowed."""
        given = "\n".join([request, *own]).casefold()
        ruled = "\n".join(rules).casefold()
        given_numbers = {_key(n.value) for n in numbers(given)}
        ruled_numbers = given_numbers | {_key(n.value) for n in numbers(ruled)}
        answered = InstanceContext.build(answer_texts=[text for text in answers if text])
        tried = InstanceContext.build(answer_texts=[text for text in attempts if text])
        values = [v for v in answered.values if _key(v) not in given_numbers and _significant(v)]
        values += [v for v in tried.values if _key(v) not in ruled_numbers and _significant(v)]
        strings = {s for s in answered.strings if len(s) >= MIN_STRING and s not in given}
        # a clock reading to the second is an answer's shape: when the attempts answered with one, any such
        # reading a line states is another task's result ("the final batch closed at 09:12:51")
        if any(_CLOCK.search(text) for text in answers):
            strings |= {m.group(0) for text in (*answers, *rules) for m in _CLOCK.finditer(text)} - {
                m.group(0) for m in _CLOCK.finditer(given)
            }
        strings |= {s for s in tried.strings if len(s) >= MIN_STRING and s not in given and s not in ruled}
        return cls(tuple(dict.fromkeys(values)), frozenset(strings), given)

    def carries_other(self, line: str) -> bool:
        """Whether `line` carries one of the values (module docstring)."""
        lowered = line.casefold()
        if any(string in lowered for string in self.strings):
            return True
        for number in numbers(line):
            if number.digits < MIN_DIGITS and not number.decimals:
                continue
            if any(math.isclose(number.value, value, rel_tol=1e-9, abs_tol=1e-9) for value in self.values):
                return True
        return False

    def passes(self, line: str) -> bool:
        """Whether a rendered line may be shown: it restates no attempt and carries no other task's value."""
        text = line.strip()
        if not text:
            return True
        return not instance_specific(text) and not self.carries_other(text)


#: A clock reading to the second.
_CLOCK: Final = re.compile(r"(?<![\d:])\d{1,2}:\d{2}:\d{2}(?![\d:])")


def _key(value: float) -> str:
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _significant(value: float) -> bool:
    digits = re.sub(r"\D", "", _key(abs(value))).strip("0")
    return len(digits) >= MIN_DIGITS or not float(value).is_integer()


NO_VALUES: Final = BlockValues()
