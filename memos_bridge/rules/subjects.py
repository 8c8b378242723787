"""What a lesson is about: the identifiers, unit words and numbers that name its subject.

A lesson ("the `length` field is in inches: multiply by 2.54 to get centimetres") is about something the next
task can name again — a field, a file, a flag, a header, a unit. These terms are what lets the service find the
lesson again by subject (the identifier and trigram channels match them, in any language, since identifiers and
numbers are written the same way in English and Chinese), tell two conventions apart (a lesson about `length` is
not one about `cost`), and recognise the same convention taught twice in other words (same identifier, same unit,
same factor).

Everything is found by the shape of the text, never by a list of known subjects:

* **identifiers** — anything in backticks or quotes; file names (`shipments.csv`); dotted, snake_case, camelCase
  and kebab-case names with a digit or a second part (`orders.created_at`, `eu-west-1`); command-line flags
  (`--region`); header-like names (`X-Api-Key`); codes in capitals with digits or underscores (`HTTP_404`); and a
  plain word that the sentence calls a field, column, flag, header, file, table… ("the weight column",
  "the field status", "weight 字段");
* **units** — a lexicon of common measurement, money, time, size and energy units in English and Chinese, each
  mapped to a canonical unit and its dimension, so "pounds", "lbs" and "磅" are one unit (lb, mass);
* **numbers** — every number as written, with its value, for the instance filter and the merge test.

Pure.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from memos_bridge.rules.text import CJK_CHARS
from memos_bridge.rules.tokens import STOPWORDS

# ---------------------------------------------------------------------------------------------------------
# identifiers

_QUOTED: Final = re.compile(r"`([^`\n]{1,80})`|(?<![\w'])'([^'\n]{1,40})'(?!\w)|\"([^\"\n]{1,40})\"|“([^”\n]{1,40})”")
FILE: Final = re.compile(
    r"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:json|jsonl|ndjson|csv|tsv|psv|xml|txt|py|md|ya?ml|toml|html?|sql|parquet|"
    r"xlsx?|ini|cfg|conf|env|log|sh|js|ts|rs|go|java|lock|dat|gz|zip)\b",
    re.IGNORECASE,
)
#: "Write answer.json …", "save it to out.csv", "output the list as report.json": the file a request asks for.
OUTPUT_CUE: Final = re.compile(
    # the words between the cue and the file never end a sentence ("Write a.json. Tasks on b.csv" outputs a.json)
    r"\b(?:write|writes|save|saves|output|produce|create|dump)\b(?:\s+\S*[^\s.…!?。])??(?:\s+\S*[^\s.…!?。]){0,2}?"
    r"\s+(?:(?:to|into|as)\s+)?$",
    re.IGNORECASE,
)


def requested_outputs(text: str) -> set[str]:
    """The files a request asks to be written ("Write {…} to answer.json"), casefolded: they are what every task of
    a harness names, not what the task is about."""
    return {
        m.group(0).casefold()
        for m in FILE.finditer(text)
        if OUTPUT_CUE.search(text[max(0, m.start() - 40) : m.start()])
    }


#: `a.b` / `a.b.c` (not a number, not a sentence end: both sides are word characters)
_DOTTED: Final = re.compile(r"\b[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+\b")
_SNAKE: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_CAMEL: Final = re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
#: kebab-case with a digit somewhere (`eu-west-1`, `utf-8`) or three parts (`day-first-dates` is not one: words)
_KEBAB: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+\b")
_FLAG: Final = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")
#: a path with a slash (`archive/`, `assets/models/`, `src/app.py`); lower-case, so "DD/MM/YYYY" is no path
_PATH: Final = re.compile(r"(?<![\w/.-])(?:[a-z0-9_.-]*[a-z][a-z0-9_.-]*/)+(?:[a-z0-9_.-]*[a-z0-9_])?(?![\w/])")
_HEADER: Final = re.compile(r"\b[A-Z][a-z0-9]*(?:-[A-Z][A-Za-z0-9]*)+\b")
_CODE: Final = re.compile(
    r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|\b[A-Z]{2,}[0-9]+[A-Z0-9]*\b|"
    r"\b[A-Z]{2,}-(?=[\s,.;:)\]]|$)"  # a code prefix: "OLD- codes", "MG- numbers"
)
#: nouns that say the word next to them is a name in the data or the environment
_NAMING_NOUNS: Final = (
    r"column|columns|field|fields|attribute|key|keys|property|header|headers|flag|option|parameter|param|setting|"
    r"variable|table|sheet|tab|file|folder|directory|endpoint|route|tag|label|code|codes|prefix|suffix|entry|"
    r"section|element|record type|status"
)
_NAMED_BEFORE: Final = re.compile(
    rf"\b(?:the|its|our|their|your|a|an|each|every|this|that)\s+([A-Za-z][\w-]*)\s+(?:{_NAMING_NOUNS})\b", re.IGNORECASE
)
_NAMED_AFTER: Final = re.compile(
    rf"\b(?:{_NAMING_NOUNS})\s+(?:called\s+|named\s+)?([A-Za-z][\w-]*)\b(?=\s+(?:is|are|means|holds|has|in|of|must|should|"
    rf"stores|records|uses|=|:))",
    re.IGNORECASE,
)
_NAMED_ZH: Final = re.compile(r"([A-Za-z][\w.-]*)\s*(?:字段|列|栏|参数|选项|文件|表|键|标志|前缀|后缀|状态)")
#: words that name the kind of thing, not the thing (never identifiers themselves)
_GENERIC: Final = frozenset(
    """the a an this that these those its our their each every any some all no one two value values number numbers
    data row rows file files field fields column columns result results answer answers total totals it them
    export exports report reports output input task tasks is are was were be has have in of to for and or not
    must should will can may means uses holds stores records""".split()
)
_MEMORY_ID: Final = re.compile(r"\b(?:se|ep|tr|po|wm|sk|fb|dr|st|me)_[0-9A-Z]{12}\b")
_NOT_PATHS: Final = frozenset({"and/or", "either/or", "w/o", "n/a", "i/o", "yes/no", "on/off", "true/false"})


def identifiers(text: str) -> list[str]:
    """Names in `text`, in order of appearance, each once (compared case-insensitively); a name inside a longer
    one (`answers` in `answers.json`) is dropped, and so are memory ids."""
    return list(_identifiers(text))


@functools.lru_cache(maxsize=4096)
def _identifiers(text: str) -> tuple[str, ...]:
    """`identifiers`, remembered per text: retrieval asks it about the same lessons, skills and records on
    every turn (a dozen regular expressions each), so a cache of recent texts saves most of that work."""
    found: list[tuple[int, str]] = []
    for match in _QUOTED.finditer(text):
        value = next(g for g in match.groups() if g is not None).strip()
        if value and len(value.split()) <= 4:
            found.append((match.start(), value))
    for pattern in (FILE, _PATH, _DOTTED, _SNAKE, _CAMEL, _KEBAB, _FLAG, _HEADER, _CODE):
        for match in pattern.finditer(text):
            name = match.group(0)
            if pattern is _PATH and (name.strip("/") in _NOT_PATHS or len(name.strip("/.")) < 3):
                continue
            if pattern is _KEBAB and not re.search(r"\d", name) and name.count("-") < 2:
                continue  # "day-first", "month-end": hyphenated words, not names
            if pattern is _DOTTED and re.fullmatch(r"[A-Za-z]\.[A-Za-z]\.?", name):
                continue  # "e.g", "i.e"
            found.append((match.start(), name))
    for pattern in (_NAMED_BEFORE, _NAMED_AFTER, _NAMED_ZH):
        for match in pattern.finditer(text):
            if match.group(1).casefold() not in STOPWORDS:
                found.append((match.start(1), match.group(1)))
    out: list[str] = []
    seen: set[str] = set()
    lowered = [(start, name, name.casefold()) for start, name in sorted(found)]
    for _, name, key in lowered:
        if key in seen or key in _GENERIC or _MEMORY_ID.fullmatch(name) or len(key) < 2:
            continue
        if any(key != other and key in other and len(other) > len(key) for _, _, other in lowered):
            continue
        seen.add(key)
        out.append(name)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------------
# units


@dataclass(frozen=True)
class Unit:
    canonical: str
    dimension: str
    surface: str = field(default="", compare=False)  # as the text wrote it ("pounds", "磅")


#: canonical unit -> (dimension, surface forms). Surface forms are matched as whole words (Latin) or as they
#: stand (Chinese). A general lexicon of units, not of any task's conventions.
_UNITS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "kg": ("mass", ("kg", "kgs", "kilogram", "kilograms", "kilo", "kilos", "千克", "公斤")),
    "g": ("mass", ("gram", "grams", "克")),
    "lb": ("mass", ("lb", "lbs", "pound", "pounds", "磅")),
    "oz": ("mass", ("oz", "ounce", "ounces", "盎司")),
    "t": ("mass", ("tonne", "tonnes", "ton", "tons", "吨")),
    "m": ("length", ("metre", "metres", "meter", "meters", "米")),
    "km": ("length", ("km", "kilometre", "kilometres", "kilometer", "kilometers", "公里", "千米")),
    "cm": ("length", ("cm", "centimetre", "centimetres", "centimeter", "centimeters", "厘米")),
    "mm": ("length", ("mm", "millimetre", "millimetres", "millimeter", "millimeters", "毫米")),
    "mi": ("length", ("mile", "miles", "英里")),
    "ft": ("length", ("ft", "foot", "feet", "英尺")),
    "in": ("length", ("inch", "inches", "英寸")),
    "l": ("volume", ("litre", "litres", "liter", "liters", "升")),
    "m3": ("volume", ("cubic metre", "cubic metres", "cubic meter", "cubic meters", "m³", "m3", "立方米")),
    "ml": ("volume", ("ml", "millilitre", "millilitres", "milliliter", "milliliters", "毫升")),
    "gal": ("volume", ("gal", "gallon", "gallons", "加仑")),
    "s": ("time", ("sec", "secs", "second", "seconds", "秒")),
    "ms": ("time", ("ms", "millisecond", "milliseconds", "毫秒")),
    "us": ("time", ("microsecond", "microseconds", "微秒")),
    "ns": ("time", ("nanosecond", "nanoseconds", "纳秒")),
    "min": ("time", ("minute", "minutes", "mins", "分钟")),
    "h": ("time", ("hour", "hours", "hrs", "小时")),
    "d": ("time", ("day", "days", "天")),
    "wk": ("time", ("week", "weeks", "周")),
    "cent": (
        "money",
        ("cent", "cents", "美分", "分钱", "minor unit", "minor units", "pence", "penny", "pennies", "便士"),
    ),
    "usd": ("money", ("usd", "dollar", "dollars", "us$", "美元")),
    "eur": ("money", ("eur", "euro", "euros", "欧元")),
    "gbp": ("money", ("gbp", "sterling", "英镑")),
    "jpy": ("money", ("jpy", "yen", "日元")),
    "cny": ("money", ("cny", "rmb", "yuan", "人民币", "元")),
    "percent": ("ratio", ("percent", "percentage", "percentages", "per cent", "%", "百分比", "百分数")),
    "fraction": ("ratio", ("fraction", "fractions", "ratio", "分数")),
    "bp": ("ratio", ("basis point", "basis points", "bps", "基点")),
    "byte": ("size", ("byte", "bytes", "字节")),
    "kb": ("size", ("kb", "kib", "kilobyte", "kilobytes", "kibibyte", "kibibytes")),
    "mb": ("size", ("mb", "mib", "megabyte", "megabytes", "mebibyte", "mebibytes")),
    "gb": ("size", ("gb", "gib", "gigabyte", "gigabytes", "gibibyte", "gibibytes")),
    "wh": ("energy", ("wh", "watt-hour", "watt-hours", "瓦时")),
    "kwh": ("energy", ("kwh", "kilowatt-hour", "kilowatt-hours", "kilowatt hour", "kilowatt hours", "千瓦时", "度电")),
    "mwh": ("energy", ("mwh", "megawatt-hour", "megawatt-hours", "兆瓦时")),
    "j": ("energy", ("joule", "joules", "焦耳")),
    "celsius": ("temperature", ("celsius", "°c", "摄氏", "摄氏度")),
    "fahrenheit": ("temperature", ("fahrenheit", "°f", "华氏", "华氏度")),
    "kelvin": ("temperature", ("kelvin", "开尔文")),
    "thousand": ("scale", ("thousand", "thousands", "千")),
    "million": ("scale", ("million", "millions", "百万")),
    "billion": ("scale", ("billion", "billions", "十亿")),
}
_SURFACE: Final[dict[str, str]] = {form: unit for unit, (_, forms) in _UNITS.items() for form in forms}
_LATIN_FORMS: Final = sorted((f for f in _SURFACE if re.fullmatch(r"[a-z$°%][a-z$°%\- ]*", f)), key=len, reverse=True)
_CJK_FORMS: Final = sorted((f for f in _SURFACE if re.search(f"[{CJK_CHARS}]", f)), key=len, reverse=True)
_LATIN_UNIT: Final = re.compile(
    r"(?<![\w/-])(?:" + "|".join(re.escape(f) for f in _LATIN_FORMS if f != "%") + r")(?![\w/-])|%", re.IGNORECASE
)
#: Chinese single-character units ("克", "米", "元", "千", "分") only next to a number or after 单位/以/按/用,
#: where they cannot be part of another word.
_CJK_UNIT: Final = re.compile("|".join(re.escape(f) for f in _CJK_FORMS))
_CJK_UNIT_CONTEXT: Final = re.compile(r"(?:\d\s*|单位[是为]?|以|按|用|成|换算成|转换成|换成|折算成|是)$")


def units(text: str) -> list[Unit]:
    """The units `text` names, canonical and in order of first appearance."""
    found: list[tuple[int, str, str]] = []
    for match in _LATIN_UNIT.finditer(text):
        form = match.group(0).casefold()
        unit = _SURFACE.get(form) or _SURFACE.get(form.rstrip("s"))
        if unit is None:
            continue
        found.append((match.start(), unit, match.group(0)))
    for match in _CJK_UNIT.finditer(text):
        form = match.group(0)
        if len(form) == 1 and not _CJK_UNIT_CONTEXT.search(text[: match.start()]):
            continue
        found.append((match.start(), _SURFACE[form], form))
    out: list[Unit] = []
    for _, unit, surface in sorted(found):
        if all(u.canonical != unit for u in out):
            out.append(Unit(unit, _UNITS[unit][0], surface))
    return out


# ---------------------------------------------------------------------------------------------------------
# numbers

#: A number as written: optional sign and currency, thousands separators, decimals, a percent sign; clock offsets
#: such as +05:30 are one number too. A number written against Chinese characters ("乘以10", "是53吨") is one too:
#: those characters are word characters to the regex engine, not letters of the number's word.
NUMBER: Final = re.compile(
    r"(?:(?<![^\W\u3400-\u9fff])(?<!\.)|(?<=(?<![A-Za-z])[xX]))(?<![A-Za-z][-_])(?P<sign>[-+−])?(?P<cur>[$€£¥])?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?P<clock>:\d{2})?(?P<pct>%)?(?![^\W\u3400-\u9fff])"
)


@dataclass(frozen=True)
class Number:
    text: str
    value: float
    decimals: int
    start: int
    end: int

    @property
    def digits(self) -> int:
        """How many digits it is written with (small integers are weak evidence of anything)."""
        return sum(ch.isdigit() for ch in self.text)


_MONTH: Final = (
    r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
    r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\.?"
)
#: Dates and clock times are values of their own, not numbers ("08/01/2024", "2024-03-05", "14:30",
#: "8 January 2024", "Aug 1, 2024", "2024年1月8日").
DATE_OR_TIME: Final = re.compile(
    r"\b\d{1,4}[/.-]\d{1,2}[/.-]\d{1,4}\b|\b\d{1,2}:\d{2}(?::\d{2})?\b(?!\s*(?:hours?|h\b))|"
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}(?:\s+\d{{4}})?\b|"
    rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b|"
    r"(?<!\d)(?:\d{4}年)?\d{1,2}月(?:\d{1,2}[日号])?",
    re.IGNORECASE,
)


def numbers(text: str) -> list[Number]:
    """Every number in `text` as written (dates and clock times excepted)."""
    out: list[Number] = []
    spans = [m.span() for m in DATE_OR_TIME.finditer(text)]
    for match in NUMBER.finditer(text):
        if any(start <= match.start() < end for start, end in spans) and not match.group("sign"):
            continue
        raw = match.group("num").replace(",", "")
        try:
            value = float(raw)
        except ValueError:
            continue
        if match.group("sign") in ("-", "−"):
            value = -value
        decimals = len(raw.split(".", 1)[1]) if "." in raw else 0
        out.append(Number(match.group(0), value, decimals, match.start(), match.end()))
    return out


def number_key(value: float) -> str:
    """A canonical text of a number (`1,000` and `1000.0` are "1000"; `0.45360` is "0.4536")."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


# ---------------------------------------------------------------------------------------------------------
# a lesson's subject


@dataclass(frozen=True)
class Subject:
    """The terms a lesson is about: what recall matches and what tells two conventions apart."""

    identifiers: tuple[str, ...] = ()
    units: tuple[Unit, ...] = ()
    numbers: tuple[str, ...] = ()  # canonical keys of the convention numbers

    @property
    def names(self) -> frozenset[str]:
        return frozenset(i.casefold() for i in self.identifiers)

    @property
    def unit_keys(self) -> frozenset[str]:
        return frozenset(u.canonical for u in self.units)

    @property
    def dimensions(self) -> frozenset[str]:
        return frozenset(u.dimension for u in self.units)

    def terms(self) -> list[str]:
        """The searchable terms: identifiers first, then the units as written, then numbers."""
        return [*self.identifiers, *(u.surface or u.canonical for u in self.units), *self.numbers]

    def union(self, other: Subject) -> Subject:
        names = {i.casefold() for i in self.identifiers}
        return Subject(
            identifiers=(*self.identifiers, *(i for i in other.identifiers if i.casefold() not in names)),
            units=(*self.units, *(u for u in other.units if u not in self.units)),
            numbers=(*self.numbers, *(n for n in other.numbers if n not in self.numbers)),
        )


def subject_of(text: str, convention_numbers: Iterable[Number] = ()) -> Subject:
    """The subject of one lesson text; `convention_numbers` are the numbers the instance filter kept."""
    return Subject(
        identifiers=tuple(identifiers(text)),
        units=tuple(units(text)),
        numbers=tuple(dict.fromkeys(number_key(n.value) for n in convention_numbers)),
    )


# ---------------------------------------------------------------------------------------------------------
# does a request name a subject?

_PART: Final = re.compile(r"[a-z]{4,}|[\u3400-\u9fff]{2,}")
_EXTENSIONS: Final = frozenset(
    "json jsonl ndjson csv tsv xml txt yaml toml html sql parquet xlsx conf config data file files".split()
)


def _parts(term: str) -> set[str]:
    """The word parts of a name (`brantley_orders_2023-11.json` → brantley, orders): file extensions, digits and
    short pieces carry no subject."""
    return {part for part in _PART.findall(term.casefold()) if part not in _EXTENSIONS and part not in STOPWORDS}


def _same_word(a: str, b: str) -> bool:
    """Equal, or one a plural or inflection of the other ("invoice"/"invoices", "weight"/"weights")."""
    if a == b:
        return True
    short, long = sorted((a, b), key=len)
    return len(short) >= 4 and long.startswith(short) and len(long) - len(short) <= MAX_INFLECTION


MAX_INFLECTION: Final = 3
"""Letters an inflection may add to a word of at least 4 letters ("weight" → "weights", "invoice" → "invoiced")."""


def _stems(word: str) -> set[str]:
    """The shorter words `word` is an inflection of, by `_same_word`: its prefixes of at least 4 letters that lack
    at most MAX_INFLECTION of its letters."""
    return {word[:k] for k in range(max(4, len(word) - MAX_INFLECTION), len(word))}


@dataclass(frozen=True)
class WordForms:
    """A text's words, and every shorter word one of them inflects: `has_form(w)` answers "does the text use `w`
    or an inflection of it" (`_same_word` against each of its words) with set lookups, as the subject gate asks
    it of one request for every candidate lesson."""

    words: frozenset[str]
    stems: frozenset[str]

    @classmethod
    def of(cls, words: Iterable[str]) -> WordForms:
        own = frozenset(words)
        return cls(own, frozenset(stem for word in own for stem in _stems(word)))

    def has_form(self, word: str) -> bool:
        # word == other; word the shorter (a stem of other); other the shorter (other a stem of word)
        return word in self.words or word in self.stems or any(stem in self.words for stem in _stems(word))


def _strength(term: str) -> str:
    """How a name is matched: "literal" (a flag, a path, a header: `--region` is not the word "region"),
    "compound" (a file or a snake/dotted name: by its word parts) or "word" (a plain word, and its inflections)."""
    if re.search(r"^[-$@#]|[/:=$]", term) or re.search(r"[A-Z].*-[A-Z]", term):
        return "literal"
    if re.search(r"[_.]|\d", term) or len(_parts(term)) >= 2:
        return "compound"
    return "word"


def _named(term: str, lowered: str, words: set[str], pieces: set[str]) -> bool:
    """Whether the request (`lowered`; its word parts `words` and letter/digit runs `pieces`) names `term`."""
    key = term.casefold().strip()
    if len(key) >= 3 and re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", lowered):
        return True
    kind = _strength(term)
    if kind == "literal":
        return False
    parts = _parts(key)
    matched = sum(any(_same_word(part, word) for word in words) for part in parts)
    if kind == "word":
        return bool(parts) and matched >= 1
    # a compound name (`harlow_stocklist.csv`) needs two of its words, or a request naming a file of the same
    # family (`dunmore_picklist_oct08.txt` for `dunmore_picklist_oct07.txt`: the same leading word); a field or a
    # code that is no file needs every piece (`line_total` is not `line_total_eur`, `eu_west` not `eu-west-1`)
    if not FILE.fullmatch(term):
        own = _PIECE.findall(key)
        return bool(own) and all(p in pieces or any(_same_word(p, w) for w in words) for p in own)
    if parts and matched >= min(2, len(parts)):
        return True
    lead = _LEAD_PART.match(key)
    return bool(lead and lead.group(1) not in _EXTENSIONS and re.search(rf"(?<![\w]){lead.group(1)}[_.-]\w", lowered))


_LEAD_PART: Final = re.compile(r"([a-z]{4,})[_.-]")
#: The letter and digit runs of a name (`line_total_eur` → line, total, eur; `eu-west-1` → eu, west, 1).
_PIECE: Final = re.compile(r"[a-z]+|\d+")


def mentions(request: str, terms: Iterable[str]) -> bool:
    """Whether `request` names one of a lesson's subject terms: a flag, path or header literally; a file by two
    of its words or by a sibling file; a field or code by all of its pieces; a plain word by itself or an
    inflection; a unit by any of its names; a company by its leading word. When a lesson has names stronger than
    plain words, one of those must be named: a plain word ("returns", "status") is as likely another subject's."""
    lowered = request.casefold()
    words = set(_PART.findall(lowered))
    pieces = set(_PIECE.findall(lowered))
    request_units = {u.canonical for u in units(request)}
    listed = [t for t in terms if t.strip()]
    if any(_names_owner(term, request) for term in listed):
        return True
    listed = [t for t in listed if not _OWNER.fullmatch(t)]  # a company not named: its other terms decide
    strong = [t for t in listed if _strength(t) != "word"]
    for term in strong or listed:
        named_units = {u.canonical for u in units(term)}
        if named_units and named_units <= request_units and _strength(term) != "literal":
            return True
        if _named(term, lowered, words, pieces):
            return True
    return False


_OWNER: Final = re.compile(r"([A-Z][a-z]{3,})(?:\s+[A-Z][a-z]+)+")


def _names_owner(term: str, request: str) -> bool:
    """A proper name (`owner_names`) is named by its own leading word, capitalised ("the Ossory loom log" names
    "Ossory Linen")."""
    match = _OWNER.fullmatch(term)
    if match is None or match.group(1).casefold() in STOPWORDS:
        return False
    return bool(re.search(rf"(?<![\w-]){match.group(1)}(?![\w-])", request))


def shares_words(request: str, words: Iterable[str], need: int = 2) -> bool:
    """Whether `request` uses at least `need` of a lesson's own words (or their inflections): how a lesson that
    names nothing ("Never force-push to main") is found for a request about the same thing."""
    have = _request_forms(request)
    found = sum(have.has_form(word) for word in dict.fromkeys(words))
    return found >= min(need, len(set(words))) > 0


@functools.lru_cache(maxsize=256)
def _request_forms(request: str) -> WordForms:
    """A request's words and 2-3 letter pieces, with their stems (cached: one request meets many lessons)."""
    lowered = request.casefold()
    return WordForms.of(set(_PART.findall(lowered)) | set(re.findall(r"[a-z]{2,3}", lowered)))


def same_inputs(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two lessons were learnt on the same inputs: a term in common, or sibling files (one leading word,
    `harlow_orders_2023.csv` and `harlow_refunds_2023.csv`: one company's exports)."""
    left = {t.casefold() for t in a}
    right = {t.casefold() for t in b}
    if left & right:
        return True

    def leads(terms: set[str]) -> set[str]:
        found = (_LEAD_PART.match(t) for t in terms if FILE.fullmatch(t))
        return {m.group(1) for m in found if m is not None and m.group(1) not in _EXTENSIONS}

    return bool(leads(left) & leads(right))


_NAME_TOKEN: Final = re.compile(r"[a-z0-9]+")


def file_kinds(files: Iterable[str]) -> set[str]:
    """The words that say what kind of file a name is (`acme_13f_2024q1.xml` → acme, 13f): its stem's tokens of
    three or more characters, without extensions and without dates or counters (tokens of four or more digits)."""
    out: set[str] = set()
    for name in files:
        stem = name.casefold().rsplit("/", 1)[-1]
        for token in _NAME_TOKEN.findall(stem):
            digits = sum(c.isdigit() for c in token)
            if len(token) >= 3 and token not in _EXTENSIONS and digits < 4 and token not in STOPWORDS:
                out.add(token)
    return out


def same_kind_files(a: Iterable[str], b: Iterable[str]) -> bool:
    """Whether two sets of files share a word of what kind they are (`acme_13f_2024q1.xml`, `beacon_13f_2024q2.xml`:
    two filings of one kind by different filers)."""
    return bool(file_kinds(a) & file_kinds(b))


#: A run of two or more capitalised words ("Ossory Linen's", "Calloway Timber Co."): an organisation's or a
#: product's proper name. All-caps words (acronyms, log levels) and single words do not start one.
_PROPER_RUN: Final = re.compile(r"\b[A-Z][a-z]+(?:[ \t]+(?:&[ \t]+)?[A-Z][a-z]+\.?)+")


def owner_names(text: str) -> list[str]:
    """The proper names `text` is about ("Ossory Linen", "Harlow Garden Supplies"): two or more capitalised
    words in a row, possessive dropped, less the function words a sentence may open with ("For Calloway Timber"
    is "Calloway Timber"). Tasks on one company's data name the company; its house conventions hold for all of
    its files, so a lesson learnt on one file is recalled for another file of the same company."""
    out: list[str] = []
    for match in _PROPER_RUN.finditer(text):
        words = [w.rstrip(".") for w in match.group(0).split() if w != "&"]
        while words and words[0].casefold() in STOPWORDS:
            words.pop(0)
        if len(words) >= 2:
            out.append(" ".join(words))
    return list(dict.fromkeys(out))
