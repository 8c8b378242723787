"""Instance content: what is true of one attempt only — its values and its identity — and never part of a lesson.

Feedback mixes the lesson ("weights are in pounds: multiply by 0.4536") with facts about this attempt ("expected
412.77, got 910.0", "the right answer was 412.77", "正确答案是 412.77", "FAIL for vx-3", "check vx-3: mismatch").
Recalled for another task, those values are wrong, and a small model copies them into its answer; so they stay on
the feedback record and out of every lesson's recalled text. Numbers that are part of a convention — a factor
("multiply by 0.4536", "divide by 1,000"), a port, a version, "round to 2 decimals", an offset ("UTC+5") — stay.

How a number is judged, in this order (general rules of sentence structure, no list of known values):

1. **protected** when an operator or a naming word stands right before it ("by", "×", "/", "per", "port",
   "version", "UTC", "乘以", "除以", "保留" …) or a precision word right after it ("2 decimals", "3 位"): it is a
   parameter of a rule; or when the sentence defines it as a marker ("65535 means offline", "= 99, the no-data
   filler", "the sentinel 999", "表示缺失"): a sentinel is the convention itself, whatever its digits;
2. **instance** when it equals a value of this attempt — one of the verifier's expected/actual values, or a
   number of the agent's own answer — at the precision it is written with (numbers of three or more digits, or
   with decimals: a small integer matches too much by chance);
3. **instance** when it sits in an answer's place: after "expected", "got", "the answer/total/result is",
   "should be", "came out as", "instead of", "you had/wrote/got", "期望", "实际", "答案是", "应该是", "算出来
   是", "而不是" …; or two numbers are contrasted ("412.77, not 910").

A clause (the sentence cut at commas, semicolons, colons, dashes, parentheses and "but/so") holding an instance
number loses the phrase from its cue to the number; when what is left says nothing, the clause goes. A clause
made only of verdict words, identity tokens (the task id, "check <id>", the answer's field names) and numbers is
a verdict, not a lesson.

Pure.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from memos_bridge.rules.subjects import NUMBER, Number, numbers, units
from memos_bridge.rules.text import CJK_CHARS, squash
from memos_bridge.rules.tokens import content_tokens
from memos_bridge.rules.verbs import has_verb

#: Right before a number, these make it a parameter of a rule (checked on the 24 characters before it).
_PROTECT_BEFORE: Final = re.compile(
    r"(?:\b(?:by|times|per|every|each|port|version|ver|release|utc|gmt|offset|top|first|last|within|under|over|"
    r"above|below|least|most|max|maximum|min|minimum|limit|batch(?:es)?\s+of|chunks?\s+of|page\s+size|size|"
    r"exponent|base|factor|rate\s+of|step\s+of|mod|modulo|divided\s+by|multiplied\s+by|plus|minus|standard|"
    r"default|fixed|flat|nominal|usual|normal|regular|minimum|maximum|threshold|cut-?off|limit\s+of|cap\s+of|"
    r"http|status|code|error|exit|errno|signal|id|no\.|number|#|item_code|[a-z]+_(?:code|id|no))"
    r"|[×x*/÷^]|\bv|乘以|乘|除以|除|每|端口|版本|保留|前|后|偏移|加|减|时区|utc|gmt)\s*[-+−]?\s*[$€£¥]?$",
    re.IGNORECASE,
)
#: What a number is defined as, right after it: a value that stands for something ("65535 means offline", "= 99,
#: the no-data filler", "表示缺失"). Such a number is the convention itself (a sentinel, a marker code), not a result,
#: however arbitrary its digits look.
_DEFINED_AS: Final = re.compile(
    r"^\s*[`'\"”)]?\s*(?:[,(:—–-]\s*)?(?:(?:which|that)\s+)?(?:is|are|was|were|=|means?|meaning|stands?\s+for|"
    r"indicates?|marks?|signals?|denotes?|represents?|flags?|says?)?\s*(?:just\s+|only\s+|really\s+)?"
    r"(?:the|a|an|our|its|their|this|that)?\s*(?:[\w']+[\s-]+){0,6}?(?:placeholders?|sentinels?|fillers?|dummy|dummies|"
    r"markers?|flags?|(?:fault|error|status|null|special)\s+(?:codes?|values?)|no[- ]?(?:start[- ])?read(?:ing)?s?\b|"
    r"missing|unknown|(?:not|\w*n't)\s+(?:been\s+)?(?:recorded|read|weighed|measured|available|set|known|a\s+real)|offline|"
    r"no\s+(?:reading|data|value|measurement)s?)"
    r"|^\s*(?:[,，(（:：—–-]\s*)?(?:是|表示|代表|意思是|为|就是|指|即)?[^，。,.;；]{0,10}?(?:占位|缺失|故障|错误码|无效|没有读数|"
    r"没读到|未读到|未记录|没有记录|空值|哨兵|离线|特殊值|没称|未称)",
    re.IGNORECASE,
)
#: What a number is defined as, right before it: a marker named by its kind ("the placeholder 40713", "sentinel
#: value 999", "coded 00", "占位值 65535").
_DEFINED_BEFORE: Final = re.compile(
    r"(?:\b(?:placeholder|sentinel|filler|dummy|marker|flag|fault\s+code|error\s+code|status\s+code|null\s+value|"
    r"special\s+value|coded|code)(?:\s+value)?(?:\s+(?:but|except|other\s+than|besides|apart\s+from|not))?|"
    r"占位值?|哨兵值?|特殊值|故障码|错误码)\s*(?:of|is|=|:|：)?\s*[`'\"“]?$",
    re.IGNORECASE,
)
#: A number that is a value found in the data, not a result: seen in it ("whenever you see 999", "a few days show
#: 999", "rows with 999", "entries of 999", "the meter writes 999 when…"), or said right after it not to be a real
#: value ("999 = sensor dropout, not a value", "999 is not a reading; the meter writes it when…", "999 — that's the
#: sensor telling us it dropped out"). A result is said otherwise ("should be", "you got", "came to"); a value of
#: the data that way is a marker the rule is about.
_IN_DATA_BEFORE: Final = re.compile(
    r"\b(?:see|seeing|sees|shows?|showing|shown|readings?\s+of|entries\s+of|values?\s+of|"
    r"(?:rows?|records?|lines?|entries|days?|loads?|cells?)\s+(?:with|of|showing|reading|holding|at)|any|every|"
    r"contains?|containing|carr(?:y|ies|ying)|holds?|holding|logged\s+as|recorded\s+as|written\s+as|flagged|marked|"
    r"(?:writes?|writing|logs?|records?|stores?|enters?|emits?|puts?\s+(?:in|down))|"
    r"tagged)\s*[`'\"“]?$|(?:出现|看到|显示|写着|记为|标为)\s*$",
    re.IGNORECASE,
)
#: Rows of the data that hold a value in a named field ("rows with dwell_s 40713", "entries where code = 77"): the
#: value is the data's, named with its field.
_FIELD_IN_DATA_BEFORE: Final = re.compile(
    r"\b(?:rows?|records?|lines?|entries|readings?|tickets?|cells?)\s+(?:with|where|whose|having)\s+[\w.-]+\s*"
    r"(?:=|==|of|at|as)?\s*[`'\"“]?$",
    re.IGNORECASE,
)
_NOT_A_VALUE_AFTER: Final = re.compile(
    r"^\s*[`'\"”]?\s*(?:[=:]\s*)?(?:[\w-]+(?:\s+|\s*,\s*(?=not\b))){0,3}?(?:[,;:—–-]+\s*)?"
    r"(?:(?:that|which|it|this)\s*(?:'s|is|are)?\s+)?"
    r"(?:(?:'s|is|are|isn'?t|aren'?t|is\s+not|are\s+not|was\s+not|wasn'?t)\s+)?(?:not\s+|never\s+)?"
    r"(?:a\s+real|an?\s+actual|a\s+valid|what\s+\w+|the\s+\w+\s+(?:telling|saying|reporting)|"
    r"an?\s+(?:weight|reading|measurement|count|value|number|price|temperature|time|figure|amount)\b|trap\b)|"
    r"^\s*(?:不是|并不是|并非)(?:真实|实际|有效)?的?",
    re.IGNORECASE,
)
#: A plural noun and "of" before a small number: a group size ("boxes of 12", "packs of 6").
_GROUP_OF: Final = re.compile(r"\b[a-z]{3,}s\s+of\s*$", re.IGNORECASE)
#: Right after a number, these make it a precision or a size in a rule ("2 decimals", "3 digits", "2 位小数").
_PROTECT_AFTER: Final = re.compile(
    r"^\s*(?:decimal|decimals|decimal\s+places|places|digits|significant|sig\.?\s+figs?|dp\b|位|个小数|hours?\s+(?:ahead|behind)|"
    r"[×x](?=\s|$))",
    re.IGNORECASE,
)
#: "like", "e.g.", "for example", "比如": what follows illustrates the rule …
_EXAMPLE_BEFORE: Final = re.compile(
    r"(?:\blike|\be\.g\.?|\bfor\s+example|\bfor\s+instance|\bsuch\s+as|\bsay|\bi\.e\.?|比如|例如|像|如)\s*[:,]?\s*[`'\"“]?$",
    re.IGNORECASE,
)
_EXAMPLE_OPENING: Final = re.compile(
    r"^\W*(?:like|e\.g\.?|for\s+example|for\s+instance|such\s+as|i\.e\.?|比如|例如)\b", re.IGNORECASE
)
#: … when it shows a format (a clock, a date, a code with letters), not just a quantity.
_FORMATTED: Final = re.compile(r"\d{1,4}[:/.-]\d{1,4}|\d+[A-Za-z]|[A-Za-z]+-?\d")
#: A range ("0-100", "1–12", "0 到 100") is a parameter of a rule, both ends of it.
_RANGE_AFTER: Final = re.compile(r"^\s*(?:[-–~]|to|到|至)\s*[-+]?\d")
_RANGE_BEFORE: Final = re.compile(r"\d\s*(?:[-–~]|to|到|至)\s*$")
#: Words that put the number after them in an answer's place (up to ~40 characters before it, same clause).
_ANSWER_CUE: Final = re.compile(
    r"(?:\b(?:expected|expecting|expect|got|getting|gets|get|want(?:ed)?|received|actual|actually|answer(?:ed)?|"
    r"result(?:s|ed)?|"
    r"totals?|sums?|values?|figures?|outputs?|scores?|came\s+out|comes?\s+out|comes?\s+to|come\s+to|amounts?\s+to|"
    r"should\s+(?:have\s+)?(?:be(?:en)?|equal|read|come\s+to|give|total)|must\s+be|would\s+be|is\s+really|"
    r"instead\s+of|rather\s+than|not|vs\.?|versus|was|were|you\s+(?:had|have|got|wrote|reported|returned|gave|"
    r"computed|calculated|summed|counted|said|put|submitted|produced|printed|output|answered)|reported|returned|"
    r"computed|calculated|printed|produced|gave|equals?|correct(?:\s+one)?|right(?:\s+one)?|real|true|"
    r"(?:counted|summed|found|picked|chose|listed|used|wrote|reported|returned|got|gave|added\s+up)(?:\s+\w+)?|"
    r"it'?s|it\s+is|that'?s|that\s+is|this\s+is|needs|wants|requires|expects)\b"
    r"|[=≠→]|->|!=|期望|预期|实际|得到|算出|算成|算的是|算出来|答案|结果|应为|应是|应该是|应该为|应当是|正确的是|正确值|"
    r"正确|而不是|不是|却是|给出|写成|写的是|报了|等于|才对|得出|总计|合计|共计|共有|一共|总共|总额|平均值?|均值|"
    r"大约是?|大概是?|约为|约是|差不多是?)"
    r"(?:\s*(?:is|was|be|of|at|as|to|about|around|only|just|a|an|the|just|是|为|了|的)\b)*\s*[$€£¥]?\s*$",
    re.IGNORECASE,
)
#: A unit or currency word right after a number with decimals ("812.5 dollars", "41.2 kg", "7.5 hours").
_MEASURE_AFTER: Final = re.compile(r"^\s*(?P<word>[A-Za-z]{1,12}\b|%|[\u4e00-\u9fff]{1,3})")
#: A clause that states a result: "the top customer is …", "the latest real file is …", "your total was …",
#: "it should be assets/x.glb" (a value, not a rule: what follows the copula is a name, a path or a number).
#: Superlatives by shape: a listed word, or one ending in "-most" (westernmost), or in "-est" past six letters
#: (cheapest, fastest) that is not one of the common non-superlatives.
_SUPERLATIVE = (
    r"(?:top|best|worst|most|least|first|last|(?!(?:request|interest|honest|modest|forest|digest|suggest|protest|"
    r"contest|harvest|manifest|earnest|arrest|invest|attest|ingest|detest|latest\s+version)\b)[a-z]{2,}(?:est|most))"
)
_RESULT_CLAUSE: Final = re.compile(
    r"\b(?:the|your|its|their)\s+(?:\w+\s+){0,2}?(?:" + _SUPERLATIVE + r"|right|correct|real|actual|final|true|"
    r"full|complete|whole|exact|proper|working|fixed|corrected|expected)\b"
    r"[^,;:]*?\b(?:is|was|are|were|would\s+be|comes?\s+(?:out\s+)?(?:to|at))\b|"
    r"\b(?:is|was|are|were)\s+(?:the\s+)?" + _SUPERLATIVE + r"\b|"
    r"\bthe\s+(?:\w+\s+)?(?:line|command|value|answer|path|result|figure|total|number|query|call|url|request|output|"
    r"invocation|count|amount|sum)\s+(?:is|was|would\s+be|should\s+be|comes\s+to)\s+\S|"
    r"\b(?:gives|yields|leaves|makes|leads\s+with|ends\s+up\s+(?:at|with)|lands\s+on|comes\s+to|brings\s+it\s+to)\s+"
    r"(?:you\s+)?[`'\"“]?(?:[A-Za-z][\w.-]*\d|\d)[\w.,-]*|"
    r"\b[A-Z][\w-]+\s+(?:has|had|leads|led|wins|won|tops|topped)\s+(?:with\s+)?\d|"
    r"^\W*(?:而是|应是|就是|是)\s*[A-Za-z][\w.-]*\W*$|之后是|算下来是|结果是|一共是|合计是|总共是|"
    r"^\W*(?:it|this|that|the\s+(?:answer|result|value|path|command|output|figure|total))\s+"
    r"(?:should|must|would|needs?\s+to)\s+(?:have\s+)?(?:be(?:en)?|read|say)\s+[`'\"“]?[\w./-]*[\d/_.][\w./-]*|"
    r"(?:正确答案|答案|结果|正确的[\u4e00-\u9fff]{0,8}?)(?:应该)?(?:是|为)|最[\u4e00-\u9fff]{1,3}的[\u4e00-\u9fff]{0,4}(?:是|为)|最[\u4e00-\u9fff]{1,6}?(?:是|为)\s*[`'\"“]?(?:[A-Za-z][\w.-]*\d|\d)|"
    r"(?:排名?|名列)第[一二三1-3]名?的?[\u4e00-\u9fff]{0,4}(?:是|为)|第[一二三1-3]名(?:是|为)|"
    r"\b(?:comes?|came)\s+out\s+on\s+top\b|\btop\s+(?:is|was)\b|\bis\s+on\s+top\b|"
    r"\b" + _SUPERLATIVE + r"\s+(?:\w+\s+)?(?:is\s+|was\s+)?[`'\"“]?[A-Za-z][\w.-]*\d[\w.-]*|"
    r"\b(?:that|this|which|so|hence|thus)\b[^,;:]*\b(?:is|was|are|were|comes\s+to|equals)\s+[`'\"“]?[A-Za-z]*\d[\w./-]*"
    r"[`'\"”]?\W*$",
    re.IGNORECASE,
)
#: A quoted value in an answer's place ("expected 'ferryctl scale …'", "got \"2024-Q1\"", "should be `x.glb`").
_QUOTED_ANSWER: Final = re.compile(
    r"\b(?:expected|got|want(?:ed)?|received|actual|should\s+(?:have\s+)?be(?:en)?|must\s+be|answer\s+(?:is|was)|"
    r"result\s+(?:is|was))\s*[:=]?\s*"
    r"[`'\"“]",
    re.IGNORECASE,
)
#: A terse note that ends on one value after ":", "→" or "=" ("academic terms (year from September): AY23-T2"): the
#: value is this attempt's answer, the words before it the rule.
_TRAILING_VALUE: Final = re.compile(r"\s*(?:[:=→]|->)\s*[`'\"“]?[\w.$€£¥%-]*\d[\w.%-]*[`'\"”]?\s*$")
#: A clause that only labels the value after it ("expected", "got", "actual", "want", "期望", "实际").
_ANSWER_LABEL: Final = re.compile(
    r"\W*(?:expected|got|actual|want|wanted|answer|result|output|yours|mine|correct|right|should\s+be|期望|预期|实际|"
    r"应为|答案|结果)\W*",
    re.IGNORECASE,
)
_VALUE_SEPARATORS: Final = frozenset({":", "：", "=", "→", "->"})
_SINGLE_VALUE: Final = re.compile(r"[`'\"“]?[\w./$€£¥%-]*\d[\w./%-]*[`'\"”]?")
#: "expected header X", "got delimiter ';'", "wanted encoding UTF-8": a value named with its kind is a convention
#: (which header, which delimiter), not an answer.
_KIND_VALUE: Final = re.compile(
    r"\b(?:expected|expecting|got|wanted|wants|requires?|needs?)\s+(?:a\s+|an\s+|the\s+)?(?:header|flag|option|"
    r"format|unit|encoding|charset|delimiter|separator|prefix|suffix|scheme|method|verb|time\s*zone|timezone|"
    r"locale|case|key\s+name|field\s+name|column\s+name|extension|protocol)\b",
    re.IGNORECASE,
)
#: Words that carry a verdict, not content ("FAIL for vx-3", "check total_kg: mismatch").
VERDICT_WORDS: Final = frozenset(
    """pass passed passes passing fail failed fails failing failure failures mismatch mismatched mismatches error
    errors wrong incorrect correct ok okay check checks checked assert assertion verifier verdict score scored
    result results test tests status expected expect got actual value values answer answers field fields output
    outputs for task case off differs differ differed match matched matches bad good fine right points point
    total totals sum""".split()
)
_VERDICT_ZH: Final = re.compile("不对|错误|错了|失败|通过|不匹配|不一致|检查|结果|答案|正确|有误|不通过|未通过")
#: An id of a task, a check or a case: letters then a digit after a separator (`vx-3`, `T3`, `case_12`).
_ID_SHAPE: Final = re.compile(r"\b[A-Za-z]{1,12}[-_#]?\d{1,6}[A-Za-z]?\b")
#: Clause boundaries inside a sentence (kept with the clause text so it can be put back together).
_CLAUSE: Final = re.compile(
    r"(\s*[;；，、]\s*|,\s+|\s*[:：]\s+|：|\s*(?:→|->)\s*|\s+=\s+|\s+[—–-]{1,2}\s+|—|\s*[(（]|[)）]\s*|"
    r"\s+(?:but|so|and\s+so|because|whereas|"
    r"while)\s+|但是|但|所以|因此|因为)",
    re.IGNORECASE,
)
_CJK_ONLY: Final = re.compile(f"[{CJK_CHARS}]+")
#: Chinese function characters: a bigram made of these alone carries no content.
_ZH_FUNCTION: Final = frozenset(
    "的了是在和与也就都而及或但所以因为这那个些着过吗呢吧啊呀之其被把将对于为从到向即还又再很更最"
)
_CONTRAST: Final = re.compile(r"\bnot\b|\bvs\.?|\binstead\b|\bbut\b|而不是|不是|却|->|→|=", re.IGNORECASE)
_SENTENCE_PUNCT: Final = re.compile(r"^(?:[\s,.;:!?，。；：！？、)）(（—–]|-(?![-\w]))+|[\s,;:，；：、(（\-—–]+$")


def _flat_values(value: Any, depth: int = 0) -> Iterable[Any]:
    if depth > 6:
        return
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _flat_values(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _flat_values(item, depth + 1)
    else:
        yield value


def _flat_keys(value: Any, depth: int = 0) -> Iterable[str]:
    if depth > 6:
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _flat_keys(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _flat_keys(item, depth + 1)


_QUOTED_VALUE: Final = re.compile(r"\"([^\"\n]{3,120})\"\s*[,}\]]|:\s*\"([^\"\n]{3,120})\"")


def _answer_strings(text: str) -> list[str]:
    """String values of the agent's own answer as its reply quotes them (JSON values: `"top": "acct_Zr4m"`); the
    keys stay out (an answer's field names are not its values)."""
    out: list[str] = []
    for match in _QUOTED_VALUE.finditer(text):
        value = (match.group(1) or match.group(2) or "").strip()
        if value and not re.fullmatch(r"[\w.-]+\.(?:json|csv|txt|md)", value):
            out.append(value)
    return out


#: A JSON key as an answer quotes it (`"top_customer": …`).
_ANSWER_KEY: Final = re.compile(r"[\"“]([A-Za-z_][\w.-]{1,40})[\"”]\s*:")


def _answer_keys(text: str) -> list[str]:
    """The field names of the agent's own answer as its reply quotes it: labels, not content, next to a value."""
    return [match.group(1) for match in _ANSWER_KEY.finditer(text)]


@dataclass(frozen=True)
class InstanceContext:
    """What is known to be this attempt's: its values (numbers and strings), its ids and its answer's fields."""

    values: tuple[float, ...] = ()
    strings: frozenset[str] = frozenset()
    ids: frozenset[str] = frozenset()
    fields: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls,
        *,
        expected: Any = None,
        actual: Any = None,
        answer_texts: Iterable[str] = (),
        ids: Iterable[str] = (),
        fields: Iterable[str] = (),
    ) -> InstanceContext:
        """From the verifier's expected/actual answers, the agent's own answer texts (its reply: every number in
        it is a value of this attempt), the task's ids and the answer's field names."""
        values: list[float] = []
        strings: set[str] = set()
        for item in (*_flat_values(expected), *_flat_values(actual)):
            if isinstance(item, bool) or item is None:
                continue
            if isinstance(item, int | float) and math.isfinite(float(item)):
                values.append(float(item))
            elif isinstance(item, str) and item.strip():
                text = squash(item)
                parsed = numbers(text)
                if len(parsed) == 1 and parsed[0].text == text:
                    values.append(parsed[0].value)
                elif len(text) >= 4:
                    strings.add(text.casefold())
        for text in answer_texts:
            values.extend(n.value for n in numbers(text or "") if n.digits >= 3 or n.decimals)
            strings.update(s.casefold() for s in _answer_strings(text or ""))
        keys = [key for text in answer_texts for key in _answer_keys(text or "")]
        names = {*_flat_keys(expected), *_flat_keys(actual), *fields, *keys}
        return cls(
            values=tuple(dict.fromkeys(values)),
            strings=frozenset(strings),
            ids=frozenset(i.casefold() for i in ids if i and i.strip()),
            fields=frozenset(n.casefold() for n in names if n),
        )

    def has_value(self, number: Number) -> bool:
        """Whether `number`, at the precision it is written with, is one of this attempt's values."""
        if number.digits < 3 and not number.decimals:
            return False
        for value in self.values:
            if math.isclose(value, number.value, rel_tol=1e-9, abs_tol=1e-9):
                return True
            if number.decimals < 6 and round(value, number.decimals) == number.value:
                return True
            if abs(value) == abs(number.value):
                return True
        return False


@dataclass(frozen=True)
class Filtered:
    """A sentence with this attempt's content taken out."""

    text: str  # what is left ("" when nothing is)
    removed: tuple[str, ...] = ()  # the instance phrases taken out (for the record)
    parameters: tuple[Number, ...] = field(default_factory=tuple)  # numbers that stay as parameters of a rule
    cut: bool = False  # a kept clause lost part of itself (what is left may not read as a sentence)


def number_role(sentence: str, number: Number, context: InstanceContext) -> str:
    """ "protected", "instance" or "neutral" for one number of `sentence` (module docstring, in that order)."""
    before = sentence[max(0, number.start - 24) : number.start]
    after = sentence[number.end : number.end + 24]
    if _PROTECT_BEFORE.search(before) or _PROTECT_AFTER.match(after) or _RANGE_AFTER.match(after):
        return "protected"
    said = _past_unit(sentence[number.end : number.end + 90])  # what is said of it: "40713 s (11:18:33) means …"
    if _DEFINED_AS.match(said) or _DEFINED_BEFORE.search(before):
        return "protected"  # a sentinel or a marker code: the value the convention is about
    if not context.has_value(number) and (
        _IN_DATA_BEFORE.search(before) or _FIELD_IN_DATA_BEFORE.search(before) or _NOT_A_VALUE_AFTER.match(said)
    ):
        return "protected"  # a value of the data said not to be a real one: the marker the rule is about
    if _EXAMPLE_BEFORE.search(before) and _FORMATTED.match(sentence[number.start :]):
        return "protected"  # "like 5:10", "e.g. 08/01/2024": a value shown to illustrate a format
    if _RANGE_BEFORE.search(before):
        return "protected"
    if _GROUP_OF.search(before) and _significant_digits(number) <= 2 and not number.decimals:
        return "protected"  # "boxes of 12", "packs of 6": the size of a unit the data counts in
    if context.has_value(number):
        return "instance"
    clause_start = max(
        (m.end() for m in _CLAUSE.finditer(sentence[: number.start]) if not m.group(0).strip().startswith("(")),
        default=0,
    )
    if _ANSWER_CUE.search(sentence[clause_start : number.start]):
        return "instance"
    measure = _MEASURE_AFTER.match(after)
    if number.decimals and (number.text[:1] in "$€£¥" or (measure is not None and units(measure.group("word")))):
        return "instance"  # a measured amount ("812.5 dollars", "$63.75", "41.2 kg"): a result, not a rule
    if number.decimals >= 2:
        return "instance"  # a computed figure (647.18); a rule's own decimals sit after an operator (× 0.4536)
    year = not number.decimals and 1900 <= number.value <= 2100 and not (measure and units(measure.group("word")))
    if _significant_digits(number) >= 3 and not year and not number.text.startswith(("+", "-", "−")):
        return "instance"  # an arbitrary figure (1960 GB); a rule's numbers are small, round or after a label
    return "neutral"


#: A unit written right after a number, and a parenthesis after it ("40713 s (11:18:33)"): what is said of the
#: value comes after them.
_UNIT_AFTER: Final = re.compile(
    r"^\s*(?:s|secs?|ms|min|mins|h|hrs?|kg|g|lbs?|l|ml|km|m|mm|cm|%|°\s*[cf]|°)(?=[\s,;:()]|$)", re.IGNORECASE
)
_PAREN_AFTER: Final = re.compile(r"^\s*\([^()\n]{1,24}\)")


def _past_unit(text: str) -> str:
    """`text` (what follows a number) past the number's unit and a short parenthesis."""
    unit = _UNIT_AFTER.match(text)
    text = text[unit.end() :] if unit else text
    paren = _PAREN_AFTER.match(text)
    return text[paren.end() :] if paren else text


def _significant_digits(number: Number) -> int:
    """Digits of a number without its leading and trailing zeros (1960 → 3, 1000 → 1, 0.4536 → 4); a number of one
    repeated digit (77777777, a code) counts as one."""
    digits = re.sub(r"\D", "", number.text).strip("0")
    return 1 if len(set(digits)) <= 1 else len(digits)


def _contrasted(sentence: str, found: list[Number]) -> set[int]:
    """Indexes of numbers contrasted with another number ("412.77, not 910", "910 vs 412.77", "412.77 而不是 910")."""
    out: set[int] = set()
    for i, (a, b) in enumerate(itertools.pairwise(found)):
        between = sentence[a.end : b.start]
        if len(between) <= 24 and _CONTRAST.search(between):
            out.update({i, i + 1})
    return out


_QUOTED_SPAN: Final = re.compile(r"`[^`\n]*`|'[^'\n]{1,80}'|\"[^\"\n]{1,120}\"|“[^”\n]{1,120}”")


def clauses(sentence: str) -> list[tuple[str, str]]:
    """(separator before it, clause) pairs; joining them gives the sentence back. Nothing inside quotes splits a
    clause ('Okafor, T.' is one value)."""
    quoted = list(_QUOTED_SPAN.finditer(sentence))
    masked = sentence
    for match in quoted:
        masked = masked[: match.start()] + "\x00" * (match.end() - match.start()) + masked[match.end() :]
    out: list[tuple[str, str]] = []
    separator = ""
    position = 0
    for match in _CLAUSE.finditer(masked):
        out.append((separator, sentence[position : match.start()]))
        separator = sentence[match.start() : match.end()]
        position = match.end()
    out.append((separator, sentence[position:]))
    return out


#: A clause that opens on a verdict and names an id or a field ("FAIL vx-3", "check vx-3 total_kg", "Verifier:
#: FAIL for t3_weights") reports on one task: it is a verdict, whatever words follow the id.
_VERDICT_OPENING: Final = re.compile(
    r"^\W*(?:(?:the\s+)?verifier\s*[:：]?\s*)?(?:fail(?:ed|ure)?|pass(?:ed)?|error|mismatch|check|test|case|task|"
    r"assert(?:ion)?)\b",
    re.IGNORECASE,
)
_VERDICT_WORD: Final = re.compile(r"\b(?:fail(?:ed|s|ure)?|pass(?:ed|es)?|mismatch(?:ed)?|errors?|ok)\b", re.I)
_LEADING_ID: Final = re.compile(r"^\W*\[?([A-Za-z]{1,12}[-_#]?\d{1,6}[A-Za-z]?)\]?(?=[\s:,.;)\]]|$)")
_WORD_WITH_DIGIT: Final = re.compile(r"\b[A-Za-z][\w.-]*\d[\w.-]*\b|\b\d+[A-Za-z_][\w.-]*\b")


def _identity_tokens(text: str, context: InstanceContext) -> set[str]:
    """Tokens of `text` that name this task or check rather than say anything: the known ids, id-shaped words
    (`vx-3`, `case_12`) and the word after "for"/"check"/"task" in a verdict."""
    verdict = _VERDICT_OPENING.match(text) or _VERDICT_WORD.search(text)
    out = {t.casefold() for t in _ID_SHAPE.findall(text)} if verdict else set()
    leading = _LEADING_ID.match(text)
    if leading:  # verifier lines open with the task or check they report on ("jb-1 command", "[mk-2] FAIL")
        out.add(leading.group(1).casefold())
    out |= {i for i in context.ids if i in text.casefold()}
    for match in re.finditer(r"\b(?:for|check|task|test|case)\s+([\w.-]+)", text, re.IGNORECASE):
        if re.search(r"\d", match.group(1)):
            out.add(match.group(1).casefold())
    return out


def has_content(text: str, context: InstanceContext, *, names_count: bool = False) -> bool:
    """Whether `text` says anything beyond verdict words, numbers, ids and the answer's field names.

    `names_count`: the answer's field names are content — in a sentence that states no value of this attempt,
    "(issuer, shares, …)" lists the names a rule is about; next to a value they are what the value was of.
    """
    identity = _identity_tokens(text, context)
    if _VERDICT_OPENING.match(text) and (
        _WORD_WITH_DIGIT.search(text) or any(f in text.casefold() for f in context.fields)
    ):
        return False
    stripped = _VERDICT_ZH.sub(" ", text)
    for token in sorted(identity, key=len, reverse=True):
        stripped = re.sub(re.escape(token), " ", stripped, flags=re.IGNORECASE)
    stripped = NUMBER.sub(" ", stripped)
    for token in content_tokens(stripped):
        if token in VERDICT_WORDS or token.isdigit() or (token in context.fields and not names_count):
            continue
        if _CJK_ONLY.fullmatch(token) and (len(token) < 2 or all(ch in _ZH_FUNCTION for ch in token)):
            continue  # one character, or function characters only ("也就", "是"): no content in Chinese
        return True
    return False


#: Words a clause cannot end on once the value after them is gone ("… to get", "… is", "… came out as").
_DANGLING: Final = re.compile(
    r"(?:\s+(?:to\s+get|to|giving|gives|which\s+gives|is|are|was|were|be|of|and|or|which|that|with|as|at|for|"
    r"(?:and|so|then)\s+(?:you|we|it)(?:\s+(?:get|got|have|had|end\s+up\s+with|should\s+get))?|"
    r"means|mean|equals|becomes|reads|"
    r"by\s+about|about|around|roughly|approximately|came\s+out|comes\s+out|come\s+to|comes\s+to)|\s*[=:→])+\s*$"
    r"|(?:是|为|成|到|得|约)$",
    re.IGNORECASE,
)


#: A Chinese clause that ends where its value stood: "…平均是", "…总额是", "…应该为"; or a verb done with "了"
#: whose object was the value ("…一共卖了 <N> 件"): what an attempt did or came to, not a rule.
_ZH_RESULT_END: Final = re.compile(r"[\u4e00-\u9fff](?:(?:应该|应当|应)?(?:是|为|等于|就是)|了)\s*$")


def _strip_phrase(clause: str, number: Number, offset: int) -> str:
    """`clause` without the answer phrase that ends it (from its cue word, or the number alone, to the number and
    its unit): "Multiply by 2.54 to get 318.77" → "Multiply by 2.54". A value in the middle of a clause ("there
    are 9 referrals") leaves no sentence behind, so the clause goes ("")."""
    start, end = number.start - offset, number.end - offset
    head = clause[:start]
    cue = _ANSWER_CUE.search(head)
    cut_from = cue.start() if cue else start
    tail = clause[end:]
    unit = re.match(rf"^\s*(?:[A-Za-z%]{{1,12}}|[{CJK_CHARS}]{{1,3}})?(?=[\s,.;:)）。]|$)", tail)
    rest = tail[unit.end() if unit else 0 :]
    if re.search(rf"[\w{CJK_CHARS}]", rest):
        return ""
    kept = clause[:cut_from]
    if _ZH_RESULT_END.search(head):
        return ""  # "五金类平均是 27.36 元": a Chinese clause that only said what the value is
    if cue is not None and len(kept.strip()) <= 6 and _CJK_ONLY.fullmatch(kept.strip(" ，,、")):
        return ""  # "周二共有 5 单" → "周二": only the subject of the count is left, which says nothing
    while True:
        shorter = _DANGLING.sub("", kept)
        if shorter == kept:
            break
        kept = shorter
    return squash(kept)


def strip_instance(sentence: str, context: InstanceContext) -> Filtered:
    """`sentence` without this attempt's values and identity (see the module docstring)."""
    found = numbers(sentence)
    contrasted = _contrasted(sentence, found)
    roles = []
    for index, number in enumerate(found):
        role = number_role(sentence, number, context)
        roles.append("instance" if index in contrasted and role != "protected" else role)
    pieces: list[tuple[str, str | None]] = []  # (separator, clause text); None = a dropped clause
    cut = False
    previous_label = False
    tail = _result_tail(sentence, found, roles)
    dropped = _has_instance(sentence, found, roles, context)
    removed: list[str] = []
    offset = 0
    result_before = False  # the clause before was a result this attempt should have given
    held: tuple[int, str, str] | None = None  # a value's subject left as a fragment, kept if an aside explains it
    judged = bool(_JUDGED.search(sentence))  # a verdict names the fields it judged: no content in them
    # a sentence that quotes this attempt's answer ("top_customer: got 'X', want 'Y'") names fields as labels
    stated = any(value in sentence.casefold() for value in context.strings) or bool(_QUOTED_ANSWER.search(sentence))
    parts = clauses(sentence)
    for index, (separator, clause) in enumerate(parts):
        clause_start = sentence.find(clause, offset) if clause else offset
        clause_end = clause_start + len(clause)
        offset = max(offset, clause_end)
        if not clause.strip():
            pieces.append((separator, ""))
            continue
        label_before = previous_label
        previous_label = bool(_ANSWER_LABEL.fullmatch(clause.strip()))
        defined = any(
            role == "protected" and clause_start <= n.start < clause_end for n, role in zip(found, roles, strict=True)
        )
        if (
            separator.strip() in _VALUE_SEPARATORS
            and not defined  # "net_x = 999, the no-data filler": the value the rule is about
            and (_SINGLE_VALUE.fullmatch(clause.strip(" .;。")) or label_before or _near_answer(clause, context))
        ):
            # "…(year from September): AY23-T2", "expected: tw --workspace … run x", ": tw run x --flag": the value
            # after a colon that is this attempt's answer (or a corrected copy of it)
            removed.append(squash(clause))
            pieces.append(("", None))
            continue
        if tail is not None and clause_start >= tail:
            removed.append(squash(clause))  # the values after "Leave those out:" ("9 buckets, 2730 MB reclaimed")
            pieces.append(("", None))
            continue
        shown = [r for n, r in zip(found, roles, strict=True) if n.text in clause]
        if _EXAMPLE_OPENING.match(clause) and _FORMATTED.search(clause) and "instance" not in shown:
            pieces.append((separator, clause))  # "like 5:10", "e.g. FY24-Q1": an example of the format
            continue
        if len(clause.strip(" .;,")) <= 3 and not re.search(r"\d", clause) and pieces and pieces[-1][1]:
            pieces.append((separator, clause))  # "Surname, I.": a tiny tail belongs to the kept clause before it
            continue
        inside = [(n, r) for n, r in zip(found, roles, strict=True) if clause_start <= n.start < clause_end]
        text = clause
        for number, role in sorted(inside, key=lambda item: item[0].start, reverse=True):
            if role == "instance" and text and number.end - clause_start <= len(text):
                text = _strip_phrase(text, number, clause_start)
        listed = result_before and (
            separator in _LIST_SEPARATORS
            or (separator.strip() in (",", "，") and not has_verb(text))
            or bool(_REJECTED_AFTER.match(text))  # "…是 Calloway Timber，而不是 Brantley 的": the rejected one
        )
        result_before = False
        if _KIND_VALUE.search(clause):
            pass  # "expected header X-Token, got Authorization": what kind of thing, and which: a convention
        elif (
            listed  # "正确答案是文具 15 盒、餐具 3 套": the items after a result belong to it
            or any(value in text.casefold() for value in context.strings)
            or _states_result(text)
            or (any(role == "instance" for _, role in inside) and _states_result(clause))  # "X leads with 6318.4"
            or _QUOTED_ANSWER.search(text)
            or _near_answer(text, context)
        ):
            # "Skip the header row and the total is 8264.35": the command before the result stays
            text = _command_before_result(clause, [n.text for n, r in inside if r == "instance"])
            result_before = True
            if _PREDICATE_ONLY.match(clause):
                _trim_dangling_subject(pieces)  # "… and the kettle, with 3 sales, is the lowest": its subject goes
        else:
            text = _TRAILING_VALUE.sub("", text) if _TRAILING_VALUE.search(text) and not has_verb(text) else text
        parameter = any(role == "protected" and number.text in text for number, role in inside)
        spec = separator.strip() in (":", "：") and bool(pieces) and bool(pieces[-1][1]) and not label_before
        # "qty = boxes (×12)": the left side of a relation is its subject, not a stray fragment
        relation = index + 1 < len(parts) and parts[index + 1][0].strip() == "="
        fragment = dropped and not spec and not relation and _fragment(text, inside)
        names_count = not inside and "instance" not in roles and not dropped and not judged and not stated
        if text.strip() and (has_content(text, context, names_count=names_count) or parameter) and not fragment:
            if text != clause:
                removed.append(squash(clause))
                cut = True
            if held is not None and held[0] == len(pieces) - 1 and separator.strip() in ("(", "（"):
                pieces[held[0]] = (held[1], held[2])  # "the batch date must be 20231130 (no slashes)": its subject
            pieces.append((separator, text))
            held = None
        else:
            removed.append(squash(clause))
            held = (len(pieces), separator, text) if text.strip() and fragment else None
            pieces.append(("", None))
    rebuilt = _rebuild(pieces)
    original = squash(sentence)
    if rebuilt and original[:1].isupper() and rebuilt[0].islower() and not _starts_with_name(rebuilt):
        rebuilt = rebuilt[0].upper() + rebuilt[1:]
    if rebuilt and not re.search(r"[.!?。！？]$", rebuilt) and re.search(r"[.!?。！？]$", original):
        rebuilt += original[-1]
    parameters = tuple(n for n, r in zip(found, roles, strict=True) if r == "protected" and n.text in rebuilt)
    removed = [piece for piece in removed if piece.strip(" .,;:!?。，；：")]
    return Filtered(rebuilt, tuple(dict.fromkeys(removed)), parameters, cut)


_VALUE_TOKEN: Final = re.compile(r"[\w.$€£¥%/-]+")


def _near_answer(clause: str, context: InstanceContext) -> bool:
    """Whether a clause restates this attempt's answer with edits ("app --profile p-17 run sync" for
    the answer "app run sync"): most of the answer's words, in its order, and mostly those words (a rule
    that names part of the answer, "app needs the global flag --profile p-17", is not a restatement); or every
    word of the answer, in order, within a span at most twice its length, whatever surrounds it."""
    words = [w.rstrip(".") for w in _VALUE_TOKEN.findall(clause.casefold())]
    for value in context.strings:
        wanted = [w.rstrip(".") for w in _VALUE_TOKEN.findall(value)]
        if len(wanted) < 2:
            continue
        position = 0
        places: list[int] = []
        for token in wanted:
            if token in words[position:]:
                position = words.index(token, position) + 1
                places.append(position - 1)
        own = sum(1 for word in words if word in wanted)
        if len(places) / len(wanted) >= 0.6 and own / max(1, len(words)) >= 0.5:
            return True
        if len(places) == len(wanted) and places[-1] - places[0] + 1 <= 2 * len(wanted):
            return True  # "Write it as app --profile p-17 status sync": the whole answer, a few edits
    return False


def _result_tail(sentence: str, found: list[Number], roles: list[str]) -> int | None:
    """Where a tail of bare results starts after a colon or an arrow ("Leave those out: 9 buckets, 2730 MB
    reclaimed", "…: Dunmore, 5", "include the archived files too → 17 warnings, hx-node-04"): no verb after it, and a
    number that is no rule's parameter. The earliest such place wins; None when there is none."""
    marks = sorted((m.end(), m.start()) for m in re.finditer(r":\s|：|\s*(?:→|->|=>)\s*", sentence))
    for end, start in marks:
        rest = sentence[end:]
        numbers_after = [(n, r) for n, r in zip(found, roles, strict=True) if n.start >= end]
        if not numbers_after or has_verb(rest):
            continue
        if all(r == "protected" or n.text.startswith(("+", "-", "−")) for n, r in numbers_after):
            continue
        return start + 1 if sentence[start] in ":：" else end
    return None


def _has_instance(sentence: str, found: list[Number], roles: list[str], context: InstanceContext) -> bool:
    """Whether the sentence states anything of this attempt (then its verbless pieces are suspect)."""
    if "instance" in roles or _RESULT_CLAUSE.search(sentence):
        return True
    lowered = sentence.casefold()
    return any(value in lowered for value in context.strings)


#: A token shaped like a format or a name (`FYyy-Qn`, `H:MM`, `snake_case`): a clause of one such token says
#: something even without a verb.
_PATTERN_TOKEN: Final = re.compile(r"\b[A-Za-z]+[-_:/][A-Za-z]+\b")


#: A constraint said as a negated noun ("no dashes", "without spaces", "不带横线"): content, however short.
_NEGATED: Final = re.compile(r"\b(?:no|without|never)\s+[a-z]{3,}|不(?:带|要|用|加|含)|没有|无", re.IGNORECASE)


def _fragment(text: str, inside: list[tuple[Number, str]]) -> bool:
    """A clause left next to this attempt's values that is no lesson on its own: no verb and fewer than two
    content words, or an unexplained number ("the lamp", "with 8 units", "kitchen 45")."""
    if has_verb(text) or _PATTERN_TOKEN.search(text) or units(text) or _NEGATED.search(text):
        return False
    shown = [(number, role) for number, role in inside if number.text in text]
    if any(role == "protected" for _, role in shown):
        return False  # "standard 1.00": a rule's parameter
    unexplained = any(role != "protected" for _, role in shown)
    return unexplained or len(content_tokens(NUMBER.sub(" ", text))) < 2


_JUDGED: Final = re.compile(
    r"\b(?:wrong|incorrect|mismatch(?:ed)?|fail(?:ed|s|ure)?|pass(?:ed)?|missing|error)\b|不对|错|失败|不匹配",
    re.IGNORECASE,
)
#: A rule, not a result: "the first call is always a --validate", "每次都先…" (a result states one attempt's value).
_GENERIC: Final = re.compile(
    r"\b(?:always|never|usually|normally|generally|by\s+default|every|each|any)\b|总是|永远|一律|每次|始终|默认|通常",
    re.IGNORECASE,
)
#: "the first/last X is …" describes a layout ("the last line is the control total") unless a value follows.
_ORDINAL_RESULT: Final = re.compile(
    r"^\W*(?:the|your|its|their)\s+(?:\w+\s+){0,2}?(?:first|last)\b[^,;:]*?\b(?:is|was|are|were)\b(?P<rest>.*)$",
    re.IGNORECASE,
)
_VALUE_LIKE: Final = re.compile(r"\d|(?<!\w)[`'\"“]|\b[A-Z][a-z]+\b")


def _states_result(text: str) -> bool:
    """Whether a clause states the value this attempt should have given ("the top month was 2024-03", "the
    correct total is 1,204"), not a rule ("the first call is always a --validate", "the last line is the feed's
    control total")."""
    return _result_start(text) is not None


def _result_start(text: str) -> int | None:
    """Where the result statement in `text` starts (`_states_result`), or None."""
    match = _RESULT_CLAUSE.search(text)
    if match is None or _GENERIC.search(text):
        return None
    ordinal = _ORDINAL_RESULT.match(text)
    if ordinal is not None and not _VALUE_LIKE.search(ordinal.group("rest")):
        return None
    return match.start()


#: Where a command ends and a result joined to it starts ("Merge the refunds and Calloway Timber leads with 6318.4").
_JOINED_RESULT: Final = re.compile(r"\s+(?:and|so|then)\s+", re.IGNORECASE)


def _command_before_result(clause: str, values: Sequence[str]) -> str:
    """The command a clause gives before the result it goes on to state ("Skip the header row and the total is
    8264.35" → "Skip the header row"; `values`: this attempt's numbers in the clause), or "" when it gives
    none."""
    for join in reversed(list(_JOINED_RESULT.finditer(clause))):
        head, tail = clause[: join.start()], clause[join.end() :]
        result = _states_result(tail) or any(value in tail for value in values)
        if result and has_verb(head) and not _states_result(head) and not any(value in head for value in values):
            return head
    return ""


#: A clause that names what a result replaces ("…, not 9", "…，而不是 Mereworth 的").
_REJECTED_AFTER: Final = re.compile(r"^\W*(?:而不是|不是|rather\s+than\b|instead\s+of\b|not\b)", re.IGNORECASE)
#: Separators that join the items of one list, never two clauses.
_LIST_SEPARATORS: Final = frozenset({"、"})
#: A clause that is a predicate without its subject ("is the lowest", "comes to 182").
_PREDICATE_ONLY: Final = re.compile(r"^\W*(?:is|are|was|were|has|had|comes?|came|makes?|gives?)\b", re.IGNORECASE)
_TRAILING_SUBJECT: Final = re.compile(r"\s+(?:and|or)\s+((?:[\w'-]+\s*){1,4})$", re.IGNORECASE)


def _trim_dangling_subject(pieces: list[tuple[str, str | None]]) -> None:
    """Take the subject of a dropped predicate off the kept clause it ended ("Merge the aliases and the kettle" →
    "Merge the aliases"): the words after its last "and"/"or", when they hold no verb."""
    for index in range(len(pieces) - 1, -1, -1):
        separator, text = pieces[index]
        if text is None or not text.strip():
            continue
        match = _TRAILING_SUBJECT.search(text)
        if match and not has_verb(match.group(1)):
            pieces[index] = (separator, text[: match.start()])
        return


def _rebuild(pieces: list[tuple[str, str | None]]) -> str:
    """The kept clauses with the separators between them; a dropped clause takes its separator with it, and an
    opening bracket whose content was dropped goes too."""
    out = ""
    for separator, text in pieces:
        if text is None:
            out = re.sub(r"\s*[(（]\s*$", "", out)
            continue
        out += (separator if out else "") + text
    return _balanced(_SENTENCE_PUNCT.sub("", squash(out)))


def _balanced(text: str) -> str:
    """`text` with brackets that lost their partner to a dropped clause mended: an unmatched closing bracket is
    removed, an unclosed opening one is closed at the end."""
    pairs = {")": "(", "）": "（"}
    stack: list[str] = []
    out: list[str] = []
    for ch in text:
        if ch in ("(", "（"):
            stack.append(ch)
        elif ch in pairs:
            if not stack or stack[-1] != pairs[ch]:
                continue
            stack.pop()
        out.append(ch)
    closing = {"(": ")", "（": "）"}
    return squash("".join(out) + "".join(closing[ch] for ch in reversed(stack)))


def _starts_with_name(text: str) -> bool:
    """Whether the text opens on an identifier (`shipments.weight`, `order_id`) that keeps its case."""
    head = text.split(" ", 1)[0]
    return bool(re.search(r"[._`\d]|[a-z][A-Z]", head))


def states_instance(text: str, context: InstanceContext) -> bool:
    """Whether a line written by someone else (a model's rewording) carries this attempt's own values: a known
    value of it, or one of its answer strings."""
    lowered = text.casefold()
    if any(value in lowered for value in context.strings):
        return True
    return any(context.has_value(number) for number in numbers(text))


# ---------------------------------------------------------------------------------------------------------
# lines already written: does a stored guidance line restate one attempt?

#: "`total` should be 13970, got 14070", "`x` must be 42 (this attempt: 40)": a wanted value and this attempt's.
_ATTEMPT_VALUE: Final = re.compile(
    r"\b(?:should|must)\s+be\b[^;\n]*?(?:,\s*got\b|\(this attempt\b)|\(this attempt had\b", re.IGNORECASE
)
#: "expected 12 rows, got 9" outside parentheses (inside them it is the sample of a general rule).
_EXPECTED_GOT: Final = re.compile(r"\bexpected\b[^.;\n]*\bgot\b|期望.{0,40}实际|应为.{0,30}而不是", re.IGNORECASE)
_PARENTHESISED: Final = re.compile(r"\([^()]*\)")
#: Lines that name one task's output fields: the verifier's "`x` is missing from answers.json" and schema
#: templates ("Use the fields the task asks for …: x, y", "Do not write fields the task did not ask for (z)").
_TASK_FIELDS: Final = re.compile(
    r"^\W*`[^`]+`\s+is\s+missing\s+from\b|\b(?:use|remove)\s+the\s+fields\s+the\s+task\s+(?:asks|did\s+not\s+ask)\s+for\b"
    r"[^:]*:|\bdo\s+not\s+write\s+fields\s+the\s+task\s+did\s+not\s+ask\s+for\s*\(",
    re.IGNORECASE,
)
#: A verdict about one task: "FAIL for vx-3", "check vx-3: mismatch", "Verifier: FAIL".
_VERDICT_LINE: Final = re.compile(
    r"^\W*(?:verifier\s*[:：]\s*)?(?:fail(?:ed)?|pass(?:ed)?|mismatch|error)\b.{0,40}$|\bfail(?:ed)?\s+for\s+\S+$|"
    r"^\W*check\s+\S+\s*[:：]\s*(?:mismatch|fail(?:ed)?|error)",
    re.IGNORECASE,
)


#: Arithmetic on figures only, with its result ("31 × 7 = 217", "5 x 12.6 = 63"): a worked example of one task.
_WORKED_EXAMPLE: Final = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s*[×x*/÷+−-]\s*\d[\d,]*(?:\.\d+)?\s*=\s*\d", re.IGNORECASE
)


def instance_specific(line: str) -> bool:
    """Whether an already written guidance line only restates one attempt: its wanted and given values, one task's
    output fields, or a verdict on one task. A rule that merely has a number ("round to 2 decimals") or a sample
    in parentheses is not. (Lines the lesson builder writes now never restate an attempt; this judges lines
    stored earlier, and those a skill or a world model quotes.)"""
    if _ATTEMPT_VALUE.search(line) or _TASK_FIELDS.search(line) or _VERDICT_LINE.search(squash(line)):
        return True
    if _WORKED_EXAMPLE.search(line):
        return True  # "14 × 12 = 168": one task's figures worked through, not the rule
    return _EXPECTED_GOT.search(_PARENTHESISED.sub(" ", line)) is not None
