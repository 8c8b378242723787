"""The kind of rule a lesson states: what sort of house convention it is, whatever it is about.

Data conventions come in a few kinds, the same in every domain: a quantity's unit or scale ("in tenths", "÷ 1000",
"cents"), a clock's time zone or offset ("UTC", "add 2 hours", "local time"), a calendar boundary or date order
("day-first", "the week starts on Monday", "the financial year opens in April"), rows left out ("skip the voided
ones", "don't count test rows"), a value that stands for "missing" ("999 means no reading", "placeholder"), a
written format ("decimal comma", "surname first", "pad to six digits"), an option of a tool or a request ("--flag",
"header"), and duplicates ("a re-run replaces the first result", "the same row twice"). Two sentences of one
feedback that state the same kind of rule, one naming its field and the other saying what to do ("the clock is UTC;
add two hours for local time"), are one convention; two sentences of different kinds ("amounts are cents, and
voided rows don't count") are two. Two lessons learnt on the same inputs are the same convention again only when
their kinds meet.

The word lists below are the vocabulary of the kinds in English and Chinese, not of any task. Pure.
"""

from __future__ import annotations

import re
from typing import Final

from memos_bridge.rules.subjects import units

#: Each kind and the words that state it (case-insensitive; Latin words whole, Chinese as they stand).
_KINDS: Final[dict[str, re.Pattern[str]]] = {
    "scale": re.compile(
        r"\b(?:multipl\w*|divid\w*|scale[ds]?|scaling|factor|times\s+(?:too\s+)?(?:big|large|small|high|low)|"
        r"tenths?|hundredths?|thousandths?|minor\s+units?|units?\s+of|per\s+(?:cent|mille)|halve[ds]?|half|"
        r"twice|double[ds]?|counted\s+twice|convert\w*\s+(?:to|into)\s+(?!local|utc|gmt)\w+)\b|[×÷]|"
        r"(?<![\w/])/\s?\d+(?:\.\d+)?(?![\w/])|"
        r"乘以?|除以?|换算|折算|单位|分之|倍|一半|减半",
        re.IGNORECASE,
    ),
    "clock": re.compile(
        r"\b(?:utc|gmt|time\s*zones?|timezones?|local\s+(?:time|clock|hours?)|offset|"
        r"(?:hours?|h)\s+(?:ahead|behind)|ahead\s+of|behind\s+utc|daylight|dst|clock\s+(?:runs|is|reads))\b|"
        r"[+−-]\s?\d{1,2}(?::\d\d)?\s*(?:h\b|hours?)|\b(?:add|adding|subtract|subtracting|plus|minus|shift\w*)\s+"
        r"(?:\w+\s+)?\d{1,2}\s*(?:h\b|hours?)|\b(?:\d{1,2}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|"
        r"twelve)\s+hours?\s+(?:ahead|behind|later|earlier|offset)|\bto\s+get\s+(?:the\s+)?[\w-]+\s+time\b|"
        r"时区|本地时间|世界时|当地时间|北京时间|东\d+区|小时时差|(?:加|减|加上|减去)\s*\d{1,2}\s*个?小时",
        re.IGNORECASE,
    ),
    "calendar": re.compile(
        r"\b(?:day[- ]first|month[- ]first|dd/mm|mm/dd|yyyy|fiscal|financial\s+year|fy\d*|"
        r"week\s+(?:starts|begins|runs)|"
        r"starts?\s+on\s+(?:mon|tues|wednes|thurs|fri|satur|sun)day|business\s+day|trading\s+day|working\s+day|"
        r"day\s+(?:starts|begins|ends|closes|rolls\s+over)|(?:season|year|vintage|period|quarter|term)\s+"
        r"(?:starts|begins|runs|ends)|cut-?off\s+(?:time|hour)|night\s+audit|midnight|inclusive|exclusive|"
        r"end\s+date|start\s+date)\b|日在前|月在前|财年|财务年度|营业日|交易日|(?:周|星期)从|年度从|季度|切换|截止|"
        r"不含|包含",
        re.IGNORECASE,
    ),
    "exclude": re.compile(
        r"\b(?:exclud\w*|skip\w*|drop\w*|ignor\w*|omit\w*|leave\s+(?:\w+\s+)?out|left\s+out|filter\w*\s+out|"
        r"(?:don'?t|doesn'?t|do\s+not|does\s+not|never|not|no\s+longer)\s+(?:\w+\s+)?count\w*|remove\w*|"
        r"(?:throw|thrown|threw|take|taken|took|keep|kept|come|leave|left)\s+(?:\w+\s+)?out|not\s+(?:averaged|summed|"
        r"added|included)\s+in|"
        r"voided|void|cancel+ed|refused|rejected|comped|reversal|reversed|test\s+(?:rows?|runs?|records?|"
        r"entries|sessions|accounts?)|internal|decommissioned|out\s+of\s+(?:the\s+)?(?:total|sum|average|count))\b|"
        r"排除|不计|不算|去掉|剔除|跳过|忽略|不要算|别算|不应计|作废|撤销|测试",
        re.IGNORECASE,
    ),
    "missing": re.compile(
        r"\b(?:placeholders?|sentinels?|fillers?|dummy|missing|unknown|no\s+(?:reading|data|value|read|record)s?|"
        r"not\s+(?:recorded|read|weighed|measured|available|entered|known)|null|n/?a|blank|offline|"
        r"no[- ]?(?:start[- ])?read|fault\s+codes?|error\s+codes?|faults?|not\s+(?:a\s+)?(?:real|valid|actual)\b)\b|"
        r"缺失|占位|没有读数|没读到|未读到|未记录|空值|离线|故障",
        re.IGNORECASE,
    ),
    "format": re.compile(
        r"\b(?:decimal\s+(?:comma|point|separator)|thousands?\s+separator|delimit\w*|separat\w*|comma|semicolon|"
        r"pipe|format\w*|pad\w*|leading\s+zeros?|zero-?padded|upper-?case|lower-?case|case-?(?:in)?sensitive|"
        r"prefix\w*|suffix\w*|surname|last\s+name|initial|iso\s*8601|h:mm|hh:mm|round\w*|decimals?\s+places?|"
        r"encod\w*|utf-?8|quot\w*|spell\w*|written\s+as|label\w*)\b|格式|分隔|小数点|千分位|补零|大小写|前缀|后缀|四舍五入|"
        r"保留.{0,4}位",
        re.IGNORECASE,
    ),
    "option": re.compile(
        r"(?<![\w-])--[a-z][\w-]*|\b(?:flag|option|header|token|argument|parameter|endpoint|path|folder|"
        r"directory|subcommand|command)\b|参数|选项|标志|请求头|路径|目录",
        re.IGNORECASE,
    ),
    "duplicate": re.compile(
        r"\b(?:duplicat\w*|dedup\w*|re-?runs?|supersed\w*|replac\w+\s+the\s+(?:first|earlier|original)|"
        r"once\s+per|same\s+(?:row|record|entry|sample)|merge\w*|ditto|inherit\w*|from\s+the\s+row\s+above|"
        r"channels?\s+of)\b|重复|去重|覆盖|合并|同一",
        re.IGNORECASE,
    ),
}
#: Time units a quantity is measured in ("milliseconds, not seconds"); hours and days are mostly a clock's offset.
_SCALE_TIME: Final = frozenset({"ns", "us", "ms", "s", "min"})
#: Kinds that one convention often states together: a sentinel value is a reason to leave rows out.
_COMPATIBLE: Final[frozenset[frozenset[str]]] = frozenset({frozenset({"missing", "exclude"})})


def rule_kinds(text: str) -> frozenset[str]:
    """The kinds of rule `text` states (module docstring); a unit named in it makes it a scale rule, an hour
    offset or a time zone a clock rule."""
    found = {kind for kind, pattern in _KINDS.items() if pattern.search(text)}
    if any(unit.dimension not in ("time", "ratio") or unit.canonical in _SCALE_TIME for unit in units(text)):
        found.add("scale")
    return frozenset(found)


def kinds_meet(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two sets of kinds can be one convention: they share a kind, or pair kinds that go together."""
    if a & b:
        return True
    return any(pair <= (a | b) and pair & a and pair & b for pair in _COMPATIBLE)


def kinds_differ(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether two statements are of different kinds: both state a kind, and none that can be one convention."""
    return bool(a) and bool(b) and not kinds_meet(a, b)
