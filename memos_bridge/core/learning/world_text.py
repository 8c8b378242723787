"""Turning guidance into declarative statements: the language part of the deterministic L3 abstraction.

Experiences are written as guidance — "Do not multiply value by 1000 / values are in thousands", "Confirm
the current task schema, then parse all infoTable rows". A world model holds what that guidance reveals
about the environment, stated as facts (reference §7: the `l3.abstraction` prompt forbids imperative
verbs). This module does the rewriting without a model:

* **clauses** — a guidance line is split into clauses (sentences, `;`, ` / `, dashes, "because"), list
  markers and labels ("Avoid:", "Next time,") are stripped;
* **kinds** — each clause is an *avoid* (negative imperative, or any line of an anti-pattern list), a *do*
  (starts with an imperative verb), a *mismatch* ("expected X but got Y"), a *requirement* (a declarative
  with a modal: must, should, exactly, each…), a *fact* (any other statement) or a *phrase* (no verb at
  all: a scope or a name such as "SEC 13F family tasks" — dropped). A word that can be a verb starts an
  instruction only when its object follows ("Use the fields…"), not its own verb ("Output fields differ…");
* **bookkeeping** — memory ids, provenance ("From verifier feedback fb_…"), status lines ("not yet
  confirmed by a success") and remarks about one past run ("(this attempt: 0/4 passed)") are dropped;
* **gerunds** — an action becomes the subject of a statement ("multiply value by 1000" → "Multiplying
  value by 1000"), with the English spelling rules (drop the silent e, double a final consonant after a
  single short vowel, -ie → -ying) and verbs after "and"/"then" converted too;
* **identifiers** — file names, snake_case and camelCase names (`answers.json`, `top_class_labels`,
  `infoTable`) are the objects of the environment; ids of memories are not.

Chinese guidance gets the same treatment for its cue words (不要/别/避免 → avoid; 必须/应该/需要 →
requirement); its verbs are not conjugated, so an avoided action is quoted as it stands.

Everything here is pure.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from memos_bridge.rules.text import clip, squash
from memos_bridge.rules.tokens import content_tokens

ClauseKind = Literal["avoid", "do", "mismatch", "requirement", "fact", "phrase"]

#: A clause needs this many content words to say something about an environment.
MIN_CONTENT_TOKENS: Final = 2
LABEL_CHARS: Final = 80
DESCRIPTION_CHARS: Final = 300

#: Common imperative verbs of agent guidance (the first word of a "do" clause).
VERBS: Final = frozenset(
    """
    add aggregate align apply ask assert avoid backup build bump calculate call cast change check clean clear
    clone close collect combine commit compare compile compute configure confirm convert copy count create
    debug decode deduplicate dedupe define delete deploy detect disable divide document double download drop
    edit emit enable encode ensure escape exclude execute expand export extract fetch filter find fix flatten
    follow format generate get group handle identify ignore import include inspect install join keep label
    limit list load locate log look make map mark match measure merge migrate mock move multiply name
    normalise normalize note open order output pad paginate parse pass patch pick pin pipe place prefer
    prepend print process provide pull push put quote read rebase rebuild record recompute reduce refresh
    reload remove rename render reorder repeat replace report request rerun reset resolve restart restore
    retry return reuse review rewrite round run save scale scan search select send separate set show skip
    sort specify split start stop store strip submit subtract sum switch tag test track transform translate
    treat trim truncate try type uninstall unpack update upgrade upload use validate verify wait watch wrap
    write zip
    """.split()
)

#: Verbs that state how things are ("values are…", "the verifier checks…"), besides the imperative ones.
STATE_VERBS: Final = frozenset(
    """
    accept allow appear belong break carry cause contain cost count depend describe differ end exist expect
    fail give hold lead lose mean need produce reject represent require return stay take vary work yield
    """.split()
)
_AUXILIARIES: Final = frozenset(
    """
    is are was were be been being am has have had does do did can cannot could will would may might must
    shall should isn't aren't wasn't weren't doesn't don't didn't can't won't
    """.split()
)
_CJK: Final = re.compile(r"[\u3400-\u9fff]")
_PAST: Final = frozenset("was were did had wasn't weren't didn't".split())
_DETERMINERS: Final = frozenset("the a an all each every its their this that these those any no some".split())

#: Gerunds that the spelling rules get wrong (stress on the last syllable of a longer verb, -c verbs).
_IRREGULAR_GERUNDS: Final = {
    "be": "being",
    "see": "seeing",
    "commit": "committing",
    "submit": "submitting",
    "omit": "omitting",
    "admit": "admitting",
    "refer": "referring",
    "prefer": "preferring",
    "forget": "forgetting",
    "begin": "beginning",
    "rerun": "rerunning",
    "upset": "upsetting",
    "panic": "panicking",
    "mimic": "mimicking",
}
_SHORT_CVC: Final = re.compile(r"^[^aeiou]*[aeiou][bcdfgjklmnpqrstvz]$")

_NEGATIVE_CUE: Final = re.compile(
    r"^(?:please\s+)?(?:do\s+not|don['’]t|never|avoid|stop|no\s+longer|must\s+not|should\s+not|shouldn['’]t)\b\s*",
    re.IGNORECASE,
)
_NEGATIVE_CUE_ZH: Final = re.compile(r"^(?:请)?(?:不要|别|避免|禁止|勿|不能|不可以)\s*")
_DO_CUE_ZH: Final = re.compile(r"^(?:请|先|务必)?(?:使用|用|先|确认|检查|解析|读取|按照|保持|核对)")
_MODAL: Final = re.compile(
    r"\b(?:must|should|shall|needs?\s+to|has\s+to|have\s+to|required?|requires|expects?|expected|exact(?:ly)?|"
    r"only|always|never|each|every|at\s+least|at\s+most|no\s+more\s+than)\b|必须|应该|需要|要求|只能|每个|每次",
    re.IGNORECASE,
)
_MISMATCH: Final = re.compile(
    r"\bexpected\b.{1,200}?\b(?:but|got|actual(?:ly)?|instead|while|whereas)\b|期望.{1,100}?实际", re.IGNORECASE
)
#: Leading list markers and guidance labels that carry no content.
_MARKER: Final = re.compile(r"^\s*(?:[-*•·>]+|\d{1,2}[.)]|\(\d{1,2}\)|[a-z][.)](?=\s))\s*", re.IGNORECASE)
_LABEL: Final = re.compile(
    r"^\s*(?:avoid|prefer|do|don['’]t|check|scope|fix|instead|trigger|note|lesson|rule|repair|success|failure|"
    r"caveat|why|reason|hint|next\s+time|in\s+future|going\s+forward|偏好|避免|注意|下次)\s*[:：,，]\s*",
    re.IGNORECASE,
)
_AVOID_LABEL: Final = re.compile(r"^\s*(?:avoid|don['’]t|避免)\s*[:：]", re.IGNORECASE)
_SPLIT: Final = re.compile(
    r"(?<=[.!?。！？；;])\s+|[;；]\s*|\s+/\s+|\s+[—–]\s+|\s+-{1,2}\s+|\n+|,?\s+\b(?:because|since)\b\s+(?=\w+\s+\w+)"
)
#: "Make sure that X is Y" states a requirement X is Y, not an action.
_THAT_CLAUSE: Final = re.compile(
    r"^(?:ensure|make\s+sure|verify|check|confirm|note|remember)\s+(?:that\s+)?(?P<rest>.*?\b(?:is|are|has|have|"
    r"must|should|matches|match|equals|contains|uses|stays|remain|remains)\b.*)$",
    re.IGNORECASE,
)
_THEN: Final = re.compile(r"\b(and|then|and\s+then|before|after|while)\s+([A-Za-z]+)\b")
_DETERMINER: Final = re.compile(r"^(?:the|a|an|this|that|these|those|its|their|previous|old|same|any)\b", re.I)
#: Memory ids (`po_01HX…`) and provenance wording are bookkeeping, not environment.
_MEMORY_ID: Final = re.compile(r"\b(?:se|ep|tr|po|wm|sk|fb|dr|st)_[0-9A-Z]{12}\b")  # `ids.new_id` shape
_PROVENANCE: Final = re.compile(
    r"\b(?:source|derived|learned|learnt|induced)\s+(?:from|episodes?|feedback|traces?)\b|\bfeedback\s+id\b|"
    r"^\s*(?:sources?|provenance|evidence)\s*[:：]|^\s*from\s+(?:(?:user|verifier)\s+)?feedback\b|"
    r"\b(?:not\s+yet\s+)?(?:confirmed|validated)\s+by\s+a\s+(?:later\s+)?success|"
    r"\bpass(?:es)?\s+(?:at\s+full\s+credit|all\s+(?:checks|tests))\b",
    re.IGNORECASE,
)
#: "(this attempt: 0/4 passed)": about one past run, not about the environment.
_EPISODIC: Final = re.compile(
    r"\s*\((?:this|that|the\s+last|the\s+previous)\s+(?:attempt|run|answer|try)\b[^)]*\)", re.I
)
#: After an imperative verb these start its object or complement ("Use the fields…", "Sum by issuer").
_OBJECT_START: Final = frozenset(
    "to by in on for with from into it them only both your my our as at via without before after".split()
)
_FILE: Final = re.compile(
    r"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:json|jsonl|csv|tsv|xml|txt|py|md|ya?ml|toml|html?|sql|parquet|xlsx?|ini|"
    r"cfg|log|sh|js|ts|rs|go|java|lock)\b",
    re.IGNORECASE,
)
_SNAKE: Final = re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b")
_CAMEL: Final = re.compile(r"\b[a-z]+(?:[A-Z][a-z0-9]+)+\b")
_TRAILING: Final = re.compile(r"[\s,;:.。!！?？]+$")


@dataclass(frozen=True)
class Clause:
    """One clause of guidance, classified; `text` is the clause without cue words (the action, for avoid/do)."""

    kind: ClauseKind
    text: str


# ---------------------------------------------------------------- words


def gerund(verb: str) -> str:
    """`multiply` → `multiplying`, `parse` → `parsing`, `stop` → `stopping`, `tie` → `tying`."""
    word = verb.lower()
    if word in _IRREGULAR_GERUNDS:
        out = _IRREGULAR_GERUNDS[word]
    elif word.endswith("ing") and len(word) > 4:
        out = word
    elif word.endswith("ie"):
        out = word[:-2] + "ying"
    elif word.endswith(("ee", "ye", "oe")):
        out = word + "ing"
    elif word.endswith("e") and len(word) > 2:
        out = word[:-1] + "ing"
    elif _SHORT_CVC.match(word) and not word.endswith(("w", "x", "y")):
        out = word + word[-1] + "ing"
    else:
        out = word + "ing"
    return out.capitalize() if verb[:1].isupper() else out


def gerund_phrase(action: str, *, after_negation: bool = False) -> str:
    """The action as a noun phrase that can start a statement.

    The first word is conjugated when it is a known verb, or whatever it is after a negation ("do not
    hardcode…": the word after "do not" is a verb); a phrase starting with a determiner ("avoid the old
    schema") gets "using"; verbs after "and"/"then" follow. Chinese text is returned as it stands.
    """
    text = squash(action).strip(" .,:;")
    if not text:
        return ""
    words = text.split(" ")
    head = words[0]
    if not head.isascii() or not head[:1].isalpha():
        return text
    if _DETERMINER.match(text):
        words = ["using", *words]
    elif head.lower() in VERBS or after_negation:
        words[0] = gerund(head.lower())
    elif not head.lower().endswith("ing"):
        return text
    phrase = " ".join(words)
    return _THEN.sub(
        lambda m: f"{m.group(1)} {gerund(m.group(2)) if m.group(2).lower() in VERBS else m.group(2)}", phrase
    )


def sentence(text: str) -> str:
    """Capitalised, one space between words, ending with a full stop (Chinese: as it stands)."""
    text = _TRAILING.sub("", squash(text))
    if not text:
        return ""
    if not text[0].isascii():
        return text + "。"
    head = text.split(" ", 1)[0]
    if re.fullmatch(r"[a-z][a-z'’-]*", head):  # a plain word; `answers.json` or `top_class_labels` stay as named
        text = text[0].upper() + text[1:]
    return text + "."


def label_of(text: str, limit: int = 60) -> str:
    """A short label: the first words of a statement, without its final punctuation."""
    return clip(_TRAILING.sub("", squash(text)), limit)


def normalised(text: str) -> str:
    """Case, punctuation and spacing removed (for equality of labels)."""
    return " ".join(content_tokens(text))


# ---------------------------------------------------------------- clauses


def _is_bookkeeping(text: str) -> bool:
    """Ids and provenance phrases only (e.g. "source: ep_01H… / fb_01H…")."""
    stripped = _MEMORY_ID.sub(" ", text)
    return bool(_PROVENANCE.search(text)) or len(content_tokens(stripped)) < MIN_CONTENT_TOKENS


def _verb_forms(word: str) -> set[str]:
    """A verb lemma's plausible lemmas (`checks` → check, `matches` → match, `carried` → carry)."""
    forms = {word}
    if word.endswith("ies"):
        forms.add(word[:-3] + "y")
    if word.endswith("es"):
        forms.add(word[:-2])
    if word.endswith("s"):
        forms.add(word[:-1])
    if word.endswith("ied"):
        forms.add(word[:-3] + "y")
    if word.endswith("ed"):
        forms.update({word[:-2], word[:-1]})
    return forms


def has_finite_verb(text: str) -> bool:
    """Whether a clause states something (an auxiliary, or a conjugated verb after its first word), as
    opposed to a bare noun phrase such as "SEC 13F family tasks". Chinese clauses are taken as statements."""
    if _CJK.search(text):
        return True
    words = [w.strip(".,;:()[]\"'`").lower() for w in text.split()]
    if any(w in _AUXILIARIES for w in words):
        return True
    for previous, word in itertools.pairwise(words):
        if previous in _DETERMINERS:
            continue  # "the requested fields": a participle used as an adjective
        if word.endswith(("s", "ed")) and len(word) > 3 and (_verb_forms(word) - {word}) & (VERBS | STATE_VERBS):
            return True
        if word in STATE_VERBS and previous.endswith("s") and len(previous) > 3:
            return True  # "output fields differ": a plural subject and its verb
    return False


def present_tense(text: str) -> bool:
    """Whether a statement is about how things are (is/are/has/must…, "checks") rather than what happened
    once (was/were/did, "handled"). Chinese statements count as present."""
    if _CJK.search(text):
        return True
    words = [w.strip(".,;:()[]\"'`").lower() for w in text.split()]
    if any(w in _PAST for w in words):
        return False
    if any(w in _AUXILIARIES for w in words):
        return True
    return any(
        word.endswith("s")
        and len(word) > 3
        and previous not in _DETERMINERS
        and (_verb_forms(word) - {word}) & (VERBS | STATE_VERBS)
        for previous, word in itertools.pairwise(words)
    )


def _is_instruction(text: str) -> bool:
    """Starts with an imperative verb ("Parse all rows", "Use the fields the task asks for"), as opposed to
    a statement whose subject starts with a word that can be a verb ("Output fields differ between tasks",
    "Map files are generated"): an instruction's verb is followed by its object (a determiner, a
    preposition…), a statement's subject by its own verb within the next few words."""
    words = text.split()
    head = words[0].lower().strip(",:") if words else ""
    if head not in VERBS:
        return bool(_DO_CUE_ZH.match(text))
    if len(words) == 1 or words[1].lower().strip("`'\"") in _DETERMINERS | _OBJECT_START:
        return True
    return not has_finite_verb(" ".join(words[:4]))


def split_clauses(text: str) -> list[str]:
    """Clauses of a guidance text, markers and labels stripped, bookkeeping dropped."""
    out: list[str] = []
    for part in _SPLIT.split(text or ""):
        if not part or not part.strip():
            continue
        clause = _EPISODIC.sub("", _MARKER.sub("", part)).strip()
        clause = _TRAILING.sub("", clause)
        if clause and not _is_bookkeeping(clause):
            out.append(clause)
    return out


def classify(clause: str, *, anti_pattern: bool = False) -> Clause:
    """The kind of one clause (see the module docstring); `anti_pattern` marks lines of an Avoid list."""
    avoid_label = bool(_AVOID_LABEL.match(clause))
    text = _LABEL.sub("", clause).strip()
    negative = _NEGATIVE_CUE.match(text)
    if negative:
        return Clause("avoid", text[negative.end() :].strip())
    negative_zh = _NEGATIVE_CUE_ZH.match(text)
    if negative_zh:
        return Clause("avoid", text[negative_zh.end() :].strip())
    if (anti_pattern or avoid_label) and (_is_instruction(text) or not has_finite_verb(text)):
        return Clause("avoid", re.sub(r"^not\s+", "", text, flags=re.IGNORECASE))
    that = _THAT_CLAUSE.match(text)
    if that and len(content_tokens(that.group("rest"))) >= MIN_CONTENT_TOKENS:
        return Clause("requirement", that.group("rest"))
    if _is_instruction(text):
        return Clause("do", text)
    if _MISMATCH.search(text):
        return Clause("mismatch", text)
    if not has_finite_verb(text):
        return Clause("phrase", text)  # a scope or a name, not a statement
    if _MODAL.search(text):
        return Clause("requirement", text)
    return Clause("fact", text)


def clauses(text: str, *, anti_pattern: bool = False) -> list[Clause]:
    """Every classified clause of `text`, empty ones dropped."""
    out: list[Clause] = []
    for raw in split_clauses(text):
        clause = classify(raw, anti_pattern=anti_pattern)
        if clause.text and len(content_tokens(clause.text)) >= MIN_CONTENT_TOKENS - (clause.kind == "avoid"):
            out.append(clause)
    return out


def declarative(text: str) -> str:
    """A statement with no leading imperative: an instruction becomes "<Gerund phrase> is …" or stays a fact.

    Used on the LLM's entries too: a model that writes "Confirm the schema" despite the prompt gets
    "Confirming the schema is part of what works here."
    """
    clause = classify(text)
    if clause.kind == "avoid":
        phrase = gerund_phrase(clause.text, after_negation=True)
        return sentence(f"{phrase} leads to failures") if phrase else ""
    if clause.kind == "do":
        phrase = gerund_phrase(clause.text)
        if phrase and phrase != clause.text:
            return sentence(f"{phrase} is part of what works here")
    return sentence(text)


# ---------------------------------------------------------------- identifiers


def identifiers(text: str) -> list[str]:
    """Objects named in `text` in order: file names, snake_case and camelCase identifiers (no memory ids)."""
    found: list[tuple[int, str]] = []
    for pattern in (_FILE, _SNAKE, _CAMEL):
        found.extend((m.start(), m.group(0)) for m in pattern.finditer(text or ""))
    seen: set[str] = set()
    out: list[str] = []
    for _, name in sorted(found):
        key = name.lower()
        if key in seen or _MEMORY_ID.fullmatch(name):
            continue
        if any(key != other.lower() and key in other.lower() for _, other in found):
            continue  # `answers` inside `answers.json`, `parse_13f` inside `parse_13f.py`
        seen.add(key)
        out.append(name)
    return out


def join_names(names: Iterable[str], limit: int = 6) -> str:
    """`a, b and c` (at most `limit`, then "and N more")."""
    items = list(dict.fromkeys(names))
    if not items:
        return ""
    shown = items[:limit]
    rest = len(items) - len(shown)
    if rest:
        return ", ".join(shown) + f" and {rest} more"
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " and " + shown[-1]
