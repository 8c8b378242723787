"""Instance content: what is true of one attempt only — its values and its identity — and never part of a lesson.

Feedback mixes the lesson ("weights are in pounds: multiply by 0.4536") with facts about this attempt ("expected
412.77, got 910.0", "the right answer was 412.77", "正确答案是 412.77", "FAIL for pw-3", "check pw-3: mismatch").
Recalled for another task, those values are wrong, and a small model copies them into its answer; so they stay on
the feedback record and out of every lesson's recalled text. Numbers that are part of a convention — a factor
("multiply by 0.4536", "divide by 1,000"), a port, a version, "round to 2 decimals", an offset ("UTC+5") — stay.

How a number is judged, in this order (general rules of sentence structure, no list of known values):

1. **protected** when an operator or a naming word stands right before it ("by", "×", "/", "per", "port",
   "version", "UTC", "乘以", "除以", "保留" …) or a precision word right after it ("2 decimals", "3 位"): it is a
   parameter of a rule;
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from memos_bridge.rules.subjects import NUMBER, Number, numbers
from memos_bridge.rules.text import CJK_CHARS, squash
from memos_bridge.rules.tokens import content_tokens

#: Right before a number, these make it a parameter of a rule (checked on the 24 characters before it).
_PROTECT_BEFORE: Final = re.compile(
    r"(?:\b(?:by|times|per|every|each|port|version|ver|release|utc|gmt|offset|top|first|last|within|under|over|"
    r"above|below|least|most|max|maximum|min|minimum|limit|batch(?:es)?\s+of|chunks?\s+of|page\s+size|size|"
    r"exponent|base|factor|rate\s+of|step\s+of|mod|modulo|divided\s+by|multiplied\s+by|plus|minus)"
    r"|[×x*/÷^]|\bv|乘以|乘|除以|除|每|端口|版本|保留|前|后|偏移|加|减|时区|utc|gmt)\s*[-+−]?\s*[$€£¥]?$",
    re.IGNORECASE,
)
#: Right after a number, these make it a precision or a size in a rule ("2 decimals", "3 digits", "2 位小数").
_PROTECT_AFTER: Final = re.compile(
    r"^\s*(?:decimal|decimals|decimal\s+places|places|digits|significant|sig\.?\s+figs?|dp\b|位|个小数|hours?\s+(?:ahead|behind)|"
    r"[×x](?=\s|$))",
    re.IGNORECASE,
)
#: Words that put the number after them in an answer's place (up to ~40 characters before it, same clause).
_ANSWER_CUE: Final = re.compile(
    r"(?:\b(?:expected|expecting|expect|got|getting|gets|get|actual|actually|answer(?:ed)?|result(?:s|ed)?|"
    r"totals?|sums?|values?|figures?|outputs?|scores?|came\s+out|comes?\s+out|comes?\s+to|come\s+to|amounts?\s+to|"
    r"should\s+(?:have\s+)?(?:be(?:en)?|equal|read|come\s+to|give|total)|must\s+be|would\s+be|is\s+really|"
    r"instead\s+of|rather\s+than|not|vs\.?|versus|was|were|you\s+(?:had|have|got|wrote|reported|returned|gave|"
    r"computed|calculated|summed|counted|said|put|submitted|produced|printed|output|answered)|reported|returned|"
    r"computed|calculated|printed|produced|gave|equals?|correct(?:\s+one)?|right(?:\s+one)?|real|true|"
    r"(?:counted|summed|found|picked|chose|listed|used|wrote|reported|returned|got|gave|added\s+up)(?:\s+\w+)?)\b"
    r"|[=≠→]|->|!=|期望|预期|实际|得到|算出|算成|算的是|算出来|答案|结果|应为|应是|应该是|应该为|应当是|正确的是|正确值|"
    r"正确|而不是|不是|却是|给出|写成|写的是|报了|等于|才对|得出|总计|合计|共计|一共)"
    r"[^,;:，；：。()（）]{0,40}$",
    re.IGNORECASE,
)
#: A unit or currency word right after a number with decimals ("533.75 dollars", "41.2 kg", "7.5 hours").
_MEASURE_AFTER: Final = re.compile(r"^\s*(?:[A-Za-z]{1,12}\b|%|[\u4e00-\u9fff])")
#: A clause that states a result: "the top customer is …", "the latest real file is …", "your total was …",
#: "it should be assets/x.glb" (a value, not a rule: what follows the copula is a name, a path or a number).
_RESULT_CLAUSE: Final = re.compile(
    r"\b(?:the|your|its|their)\s+(?:\w+\s+){0,2}?(?:top|latest|earliest|newest|oldest|biggest|largest|smallest|"
    r"highest|lowest|most|least|best|worst|right|correct|real|actual|final|true|busiest|cheapest|longest|shortest)\b"
    r"[^,;:]*?\b(?:is|was|are|were|would\s+be|comes?\s+(?:out\s+)?(?:to|at))\b|"
    r"^\W*(?:it|this|that|the\s+(?:answer|result|value|path|command|output|figure|total))\s+"
    r"(?:should|must|would|needs?\s+to)\s+(?:have\s+)?(?:be(?:en)?|read|say)\s+[`'\"“]?[\w./-]*[\d/_.][\w./-]*|"
    r"(?:正确答案|答案|结果|正确的(?:值|结果|路径|命令)?)(?:应该)?(?:是|为)",
    re.IGNORECASE,
)
#: Words that carry a verdict, not content ("FAIL for pw-3", "check total_kg: mismatch").
VERDICT_WORDS: Final = frozenset(
    """pass passed passes passing fail failed fails failing failure failures mismatch mismatched mismatches error
    errors wrong incorrect correct ok okay check checks checked assert assertion verifier verdict score scored
    result results test tests status expected expect got actual value values answer answers field fields output
    outputs for task case off differs differ differed match matched matches bad good fine right points point
    total totals sum""".split()
)
_VERDICT_ZH: Final = re.compile("不对|错误|错了|失败|通过|不匹配|不一致|检查|结果|答案|正确|有误|不通过|未通过")
#: An id of a task, a check or a case: letters then a digit after a separator (`pw-3`, `T3`, `case_12`).
_ID_SHAPE: Final = re.compile(r"\b[A-Za-z]{1,12}[-_#]?\d{1,6}[A-Za-z]?\b")
#: Clause boundaries inside a sentence (kept with the clause text so it can be put back together).
_CLAUSE: Final = re.compile(
    r"(\s*[;；，、]\s*|,\s+|\s*[:：]\s+|：|\s+[—–-]{1,2}\s+|—|\s*[(（]|[)）]\s*|\s+(?:but|so|and\s+so|because|whereas|"
    r"while)\s+|但是|但|所以|因此|因为)",
    re.IGNORECASE,
)
_CONTRAST: Final = re.compile(r"\bnot\b|\bvs\.?|\binstead\b|\bbut\b|而不是|不是|却|->|→|=", re.IGNORECASE)
_SENTENCE_PUNCT: Final = re.compile(r"^[\s,.;:!?，。；：！？、)）(（\-—–]+|[\s,;:，；：、(（\-—–]+$")


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
    """String values of the agent's own answer as its reply quotes them (JSON values: `"top": "cus_Qe8w"`); the
    keys stay out (an answer's field names are not its values)."""
    out: list[str] = []
    for match in _QUOTED_VALUE.finditer(text):
        value = (match.group(1) or match.group(2) or "").strip()
        if value and not re.fullmatch(r"[\w.-]+\.(?:json|csv|txt|md)", value):
            out.append(value)
    return out


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
        names = {*_flat_keys(expected), *_flat_keys(actual), *fields}
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


def number_role(sentence: str, number: Number, context: InstanceContext) -> str:
    """ "protected", "instance" or "neutral" for one number of `sentence` (module docstring, in that order)."""
    before = sentence[max(0, number.start - 24) : number.start]
    after = sentence[number.end : number.end + 24]
    if _PROTECT_BEFORE.search(before) or _PROTECT_AFTER.match(after):
        return "protected"
    if context.has_value(number):
        return "instance"
    clause_start = max(
        (m.end() for m in _CLAUSE.finditer(sentence[: number.start]) if not m.group(0).strip().startswith("(")),
        default=0,
    )
    if _ANSWER_CUE.search(sentence[clause_start : number.start]):
        return "instance"
    if number.decimals and (number.text[:1] in "$€£¥" or _MEASURE_AFTER.match(after)):
        return "instance"  # a measured amount ("533.75 dollars", "$63.75", "41.2 kg"): a result, not a rule
    return "neutral"


def _contrasted(sentence: str, found: list[Number]) -> set[int]:
    """Indexes of numbers contrasted with another number ("412.77, not 910", "910 vs 412.77", "412.77 而不是 910")."""
    out: set[int] = set()
    for i, (a, b) in enumerate(itertools.pairwise(found)):
        between = sentence[a.end : b.start]
        if len(between) <= 24 and _CONTRAST.search(between):
            out.update({i, i + 1})
    return out


def clauses(sentence: str) -> list[tuple[str, str]]:
    """(separator before it, clause) pairs; joining them gives the sentence back."""
    parts = _CLAUSE.split(sentence)
    out: list[tuple[str, str]] = []
    separator = ""
    for index, part in enumerate(parts):
        if index % 2 == 1:
            separator = part
        else:
            out.append((separator, part))
            separator = ""
    return out


#: A clause that opens on a verdict and names an id or a field ("FAIL pw-3", "check pw-3 total_kg", "Verifier:
#: FAIL for t3_weights") reports on one task: it is a verdict, whatever words follow the id.
_VERDICT_OPENING: Final = re.compile(
    r"^\W*(?:(?:the\s+)?verifier\s*[:：]?\s*)?(?:fail(?:ed|ure)?|pass(?:ed)?|error|mismatch|check|test|case|task|"
    r"assert(?:ion)?)\b",
    re.IGNORECASE,
)
_WORD_WITH_DIGIT: Final = re.compile(r"\b[A-Za-z][\w.-]*\d[\w.-]*\b|\b\d+[A-Za-z_][\w.-]*\b")


def _identity_tokens(text: str, context: InstanceContext) -> set[str]:
    """Tokens of `text` that name this task or check rather than say anything: the known ids, id-shaped words
    (`pw-3`, `case_12`) and the word after "for"/"check"/"task" in a verdict."""
    out = {t.casefold() for t in _ID_SHAPE.findall(text)}
    out |= {i for i in context.ids}
    for match in re.finditer(r"\b(?:for|check|task|test|case)\s+([\w.-]+)", text, re.IGNORECASE):
        if re.search(r"\d", match.group(1)):
            out.add(match.group(1).casefold())
    return out


def has_content(text: str, context: InstanceContext) -> bool:
    """Whether `text` says anything beyond verdict words, numbers, ids and the answer's field names."""
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
        if token in VERDICT_WORDS or token in context.fields or token.isdigit():
            continue
        return True
    return False


#: Words a clause cannot end on once the value after them is gone ("… to get", "… is", "… came out as").
_DANGLING: Final = re.compile(
    r"(?:\s+(?:to\s+get|to|giving|gives|which\s+gives|is|are|was|were|be|of|and|or|which|that|with|as|at|for|"
    r"by\s+about|about|around|roughly|approximately|came\s+out|comes\s+out|come\s+to|comes\s+to)|\s*[=:→])+\s*$"
    r"|(?:是|为|成|到|得|约)$",
    re.IGNORECASE,
)


def _strip_phrase(clause: str, number: Number, offset: int) -> str:
    """`clause` without the answer phrase that ends it (from its cue word, or the number alone, to the number and
    its unit): "Multiply by 0.4536 to get 412.77" → "Multiply by 0.4536". A value in the middle of a clause ("there
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
    removed: list[str] = []
    offset = 0
    for separator, clause in clauses(sentence):
        clause_start = sentence.find(clause, offset) if clause else offset
        clause_end = clause_start + len(clause)
        offset = max(offset, clause_end)
        if not clause.strip():
            pieces.append((separator, ""))
            continue
        inside = [(n, r) for n, r in zip(found, roles, strict=True) if clause_start <= n.start < clause_end]
        text = clause
        for number, role in sorted(inside, key=lambda item: item[0].start, reverse=True):
            if role == "instance" and text and number.end - clause_start <= len(text):
                text = _strip_phrase(text, number, clause_start)
        if any(value in text.casefold() for value in context.strings) or _RESULT_CLAUSE.search(text):
            text = ""
        parameter = any(role == "protected" and number.text in text for number, role in inside)
        if text.strip() and (has_content(text, context) or parameter):
            if text != clause:
                removed.append(squash(clause))
            pieces.append((separator, text))
        else:
            removed.append(squash(clause))
            pieces.append(("", None))
    rebuilt = _rebuild(pieces)
    original = squash(sentence)
    if rebuilt and original[:1].isupper() and rebuilt[0].islower() and not _starts_with_name(rebuilt):
        rebuilt = rebuilt[0].upper() + rebuilt[1:]
    if rebuilt and not re.search(r"[.!?。！？]$", rebuilt) and re.search(r"[.!?。！？]$", original):
        rebuilt += original[-1]
    parameters = tuple(n for n, r in zip(found, roles, strict=True) if r == "protected" and n.text in rebuilt)
    return Filtered(rebuilt, tuple(dict.fromkeys(removed)), parameters)


def _rebuild(pieces: list[tuple[str, str | None]]) -> str:
    """The kept clauses with the separators between them; a dropped clause takes its separator with it, and an
    opening bracket whose content was dropped goes too."""
    out = ""
    for separator, text in pieces:
        if text is None:
            out = re.sub(r"\s*[(（]\s*$", "", out)
            continue
        out += (separator if out else "") + text
    out = _SENTENCE_PUNCT.sub("", squash(out))
    for opening, closing in (("(", ")"), ("（", "）")):
        out += closing * max(0, out.count(opening) - out.count(closing))
        while out.count(closing) > out.count(opening):
            out = out.replace(closing, "", 1) if out.find(closing) < out.find(opening) or opening not in out else out
            if out.count(closing) > out.count(opening) and opening not in out:
                out = out.replace(closing, "")
                break
    return squash(out)


def _starts_with_name(text: str) -> bool:
    """Whether the text opens on an identifier (`shipments.weight`, `order_id`) that keeps its case."""
    head = text.split(" ", 1)[0]
    return bool(re.search(r"[._`\d]|[a-z][A-Z]", head))


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
#: A verdict about one task: "FAIL for pw-3", "check pw-3: mismatch", "Verifier: FAIL".
_VERDICT_LINE: Final = re.compile(
    r"^\W*(?:verifier\s*[:：]\s*)?(?:fail(?:ed)?|pass(?:ed)?|mismatch|error)\b.{0,40}$|\bfail(?:ed)?\s+for\s+\S+$|"
    r"^\W*check\s+\S+\s*[:：]\s*(?:mismatch|fail(?:ed)?|error)",
    re.IGNORECASE,
)


def instance_specific(line: str) -> bool:
    """Whether an already written guidance line only restates one attempt: its wanted and given values, one task's
    output fields, or a verdict on one task. A rule that merely has a number ("round to 2 decimals") or a sample
    in parentheses is not. (Lines the lesson builder writes now never restate an attempt; this judges lines
    stored earlier, and those a skill or a world model quotes.)"""
    if _ATTEMPT_VALUE.search(line) or _TASK_FIELDS.search(line) or _VERDICT_LINE.search(squash(line)):
        return True
    return _EXPECTED_GOT.search(_PARENTHESISED.sub(" ", line)) is not None
