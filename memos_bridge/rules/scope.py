"""Which requests a lesson's kind of rule can bear on.

The lessons of one piece of work come back together (`retrieval.work_gate`), yet a task of that work often needs
none of them: "which kiosk took the most orders?" touches no clock, and "how many parcels per depot?" adds no
mass. A small model applies what it is shown, so a clock rule shown to a task that asks about no time of day makes
it filter a day it was never asked for. Two kinds of rule say by their structure what they can bear on:

* a **clock or calendar** rule ("the kiosk clock writes UTC, add two hours", "the trading day closes at 03:00")
  bears on a request that involves time: a date, a time of day, a day, week, month, quarter or year, a weekday or
  month name, morning or night. A request that says its time does not matter ("whatever its time") involves none;
* a **unit, scale or missing-value** rule about a quantity ("masses are in grams", "-999 is the sensor's
  placeholder", "fees are in cents") bears on a request about a quantity of the same dimension — named by a unit
  ("in kilograms") or by a word for it ("heaviest", "fees", "how long", "temperature") — or on one that names the
  lesson's field itself.

Every other rule (rows left out, formats, options, duplicates) may bear on any task of its work and is kept: which
rows count changes any count. A placeholder value to leave out is still a rule about its quantity's values, not
about which rows count. The word lists are the vocabulary of time and of quantities in English and Chinese, not of
any task. Pure.
"""

from __future__ import annotations

import re
from typing import Final

from memos_bridge.rules.kinds import rule_kinds
from memos_bridge.rules.subjects import DATE_OR_TIME, identifiers, units

#: Words that name a quantity of a dimension without naming its unit ("the heaviest load", "the total fees").
_QUANTITY_WORDS: Final[dict[str, str]] = {
    "mass": r"weigh\w*|heav(?:y|ier|iest)|tonnage|mass|payload|重量|称重|吨位",
    "length": r"length|distance|far(?:ther|thest)?|height|tall(?:er|est)?|depth|deep|elevation|altitude|"
    r"长度|距离|高度|里程",
    "volume": r"volume|capacity|体积|容量|用水",
    "time": r"duration\w*|how\s+long|long(?:er|est)?\s+(?:call|wait|job|run|visit|stay|session|trip|ride|delay)\w*|"
    r"elapsed|latency|runtime|run\s+time|wait\w*|时长|耗时|多久",
    "money": r"refund\w*|amounts?|deposits?|balances?|fees?|price\w*|cost\w*|revenue|spen[dt]\w*|paid|pay\w*|"
    r"charge\w*|income|earn\w*|sales|bill\w*|invoice\w*|turnover|bring\s+in|brought\s+in|money|"
    r"费用|价格|收入|金额|营业额|花费|钱",
    "temperature": r"temperatures?|temp|warm\w*|hot(?:ter|test)?|cold\w*|cool\w*|degrees?|温度|气温",
    "size": r"size|storage|disk|space|bytes?|大小|存储",
    "energy": r"energy|power|consum\w*|electric\w*|能耗|电量|用电",
}
_QUANTITY: Final = {
    dimension: re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.IGNORECASE) for dimension, words in _QUANTITY_WORDS.items()
}
_CURRENCY_SIGN: Final = re.compile(r"[€$£¥]")
#: A calendar word or a time of day in words (dates and clock times are `rules.subjects.DATE_OR_TIME`), or a span
#: of time a request counts records within ("during the shift", "within the spring campaign"); a bare "May" is left out:
#: it is as often the verb.
_TEMPORAL_WORDS: Final = re.compile(
    r"\b\d{1,2}(?:st|nd|rd|th)\b|\b\d{1,2}\s?(?:am|pm)\b|"
    r"\b(?:mornings?|afternoons?|evenings?|nights?|overnight|noon|midday|midnight|hours?|hourly|o'clock|a\.m\.|"
    r"p\.m\.|days?|daily|dates?|dated|weeks?|weekly|weekends?|weekdays?|months?|monthly|years?|yearly|annual|"
    r"today|yesterday|tomorrow|(?:mon|tues|wednes|thurs|fri|satur|sun)days?|january|february|march|april|june|"
    r"july|august|september|october|november|december|local\s+time|time\s+of\s+day|clock|quarters?|fiscal|"
    r"fy\s?\d*|q[1-4]|when|during|periods?|durations?|shifts?|campaigns?)\b|[点时日号天周月年]|星期|早上|"
    r"上午|下午|晚上|凌晨|中午|期间|促销|活动期",
    re.IGNORECASE,
)
#: "whatever its time", "regardless of the date": the request says time does not matter to it.
_TIMELESS: Final = re.compile(
    r"\b(?:whatever|regardless\s+of|irrespective\s+of|no\s+matter)\s+(?:its|their|the)?\s*(?:time|date|day|hour)s?"
    r"\b|\b(?:at\s+)?any\s+time\b|不管.{0,4}时间|不论.{0,4}时间|无论.{0,4}时间",
    re.IGNORECASE,
)
_TIME_KINDS: Final = frozenset({"clock", "calendar"})
#: Kinds whose rule is about one quantity's value; rows left out and formats bear on any task of the work.
_QUANTITY_KINDS: Final = frozenset({"scale", "missing"})
_ANY_TASK_KINDS: Final = frozenset({"exclude", "format"})


def involves_time(request: str) -> bool:
    """Whether the request involves a date, a time of day or a calendar period (module docstring)."""
    text = _TIMELESS.sub(" ", request)
    return bool(DATE_OR_TIME.search(text) or _TEMPORAL_WORDS.search(text))


def dimensions(text: str) -> frozenset[str]:
    """The dimensions of the quantities `text` is about: those of the units it names (a bare "second" only after
    a number: "the second element" is no time) and those its quantity words name."""
    out = {
        unit.dimension
        for unit in units(text)
        if unit.dimension not in ("scale", "ratio")
        and not (unit.surface.casefold() == "second" and not re.search(r"\d\s*seconds?\b", text, re.IGNORECASE))
    }
    out |= {dimension for dimension, pattern in _QUANTITY.items() if pattern.search(text)}
    if _CURRENCY_SIGN.search(text):
        out.add("money")
    return frozenset(out)


def bears_on(lesson: str, request: str) -> bool:
    """Whether a lesson's kind of rule can bear on `request` (module docstring). A lesson of no such kind, or of
    another kind as well, always can."""
    kinds = rule_kinds(lesson)
    if kinds & _TIME_KINDS and not kinds - _TIME_KINDS:
        return involves_time(request)
    if not kinds & _QUANTITY_KINDS or kinds & _TIME_KINDS or (kinds & _ANY_TASK_KINDS and "missing" not in kinds):
        return True  # a placeholder value to leave out is still about its quantity's values
    about = dimensions(lesson)
    if not about or about & dimensions(request):
        return True
    fields = {name.casefold() for name in identifiers(lesson)}
    return bool(fields & {name.casefold() for name in identifiers(request)})
