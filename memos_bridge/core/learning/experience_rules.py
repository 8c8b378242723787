"""Typed experiences from explicit feedback, the pure half: classification, significance, type and
polarity, rule drafting, merge arithmetic and domain tags.

Why this exists (issue 5, seed 000): a failed task with actionable verifier or user feedback must become a
recallable lesson before the next task starts, while noise ("wrong", "不对", "try again", a negative trace
nobody commented on) must not. Everything here is deterministic and free of I/O; the stage that feeds it
(storage, embeddings, the LLM refinement) is `core/learning/experiences.py`.

* **Verifier data is structured evidence**, parsed by `experience_verifier` (credit, expected vs actual
  diffed into typed mismatches, failing fields, concrete fix/avoid hints). A pass counts only at full
  credit; partial credit is a failure.
* **Actionable** means the evidence says what to do next time, what not to do, what was wrong or what it
  should be: EN and ZH cue sets per sentence, and at least one specific word beyond the cue words (two
  for praise and bare complaints), so "wrong", "不对", "try again" or "this is correct" alone say
  nothing. Verifier data that names what was wrong is actionable by itself; a full-credit pass is
  actionable when the episode has steps to anchor a procedure.
* **Significance** = explicit AND actionable AND (magnitude ≥ 0.5 OR classifier confidence ≥ 0.6 OR
  |rTask| ≥ 0.5 OR verifier severity ≥ 0.5); salience = clamp01(max of those four).
* **Type**: the objective outcome decides first (verifier → episode outcome → feedback polarity → the
  words): a pass is a `success_pattern`; a failure whose evidence says what it should be (expected
  values, a correction, a "next time do X") is a `repair_instruction`, otherwise a `failure_avoidance`;
  a stated taste without a verifier is a `preference`. `repair_validated` only arises when a later
  success follows a repair instruction (a similar task, and the success followed the repair: it was
  recalled for that task or its distinctive words show up there, `repair_adherence`). Only
  success_pattern and repair_validated are skill evidence. Polarity is positive, negative or mixed on
  every row.
* **Rule drafts** are specific by construction: the task, its domain tags and tools in the trigger; the
  feedback's own sentences and the verifier's concrete hints as the procedure (steps that passed, fix
  steps, or lines to avoid); the verifier's check as the verification; where the lesson came from and
  what it does not cover as the boundary.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from memos_bridge.config import WorldSettings
from memos_bridge.core.learning.experience_verifier import (
    MESSAGE_KEYS,
    Outcome,
    VerifierView,
    file_in,
    verifier_lines,
)
from memos_bridge.llm.prompts import FeedbackRefineOutput
from memos_bridge.rules.text import (
    clip,
    first_sentence,
    instance_specific,
    numbered,
    numbered_steps,
    squash,
    unnumbered,
)
from memos_bridge.rules.tokens import STOPWORDS, content_tokens, token_similarity

ExperienceType = Literal["success_pattern", "repair_validated", "failure_avoidance", "repair_instruction", "preference"]
EvidencePolarity = Literal["positive", "negative", "mixed"]
Shape = Literal["avoidance", "correction", "preference", "instruction", "success", "complaint", "unknown"]
DraftedBy = Literal["rules", "llm"]

EXPERIENCE_TYPES: Final[frozenset[str]] = frozenset(get_args(ExperienceType))
#: Types that may be a skill's main evidence (a success anchor); the others are recallable lessons only.
SKILL_ELIGIBLE_TYPES: Final[frozenset[str]] = frozenset({"success_pattern", "repair_validated"})
#: `induced_by` of every row this builder writes.
INDUCED_BY: Final = "feedback.experience"

#: Significance gates (issue 5).
MIN_MAGNITUDE: Final = 0.5
MIN_CLASSIFIER_CONFIDENCE: Final = 0.6
MIN_ABS_REWARD: Final = 0.5
MIN_SEVERITY: Final = 0.5
#: A new experience below this confidence starts as `candidate` (still recallable), else `active`; a
#: candidate becomes active when merged evidence reaches it, or when a second verdict confirms it.
ACTIVE_CONFIDENCE: Final = 0.5
#: Support (independent verdicts merged into one experience) that makes a candidate active on its own.
CONFIRMING_SUPPORT: Final = 2
#: Confidence of an experience backed by objective verifier data.
VERIFIER_CONFIDENCE: Final = 0.9
#: Gain floor of a typed experience (the skill stage's minimum gain).
MIN_GAIN: Final = 0.02

#: Field caps (reference §6.14: title 120, line 360).
TITLE_CHARS: Final = 120
LINE_CHARS: Final = 360
TRIGGER_TASK_CHARS: Final = 200
MAX_LINES: Final = 6
MAX_STEPS: Final = 6
STEP_CHARS: Final = 160
#: Lines kept in each list of an experience's decision guidance.
GUIDANCE_CAP: Final = 8

# ---------------------------------------------------------------------------------------------------------
# Domain tags


#: Domain key → regex over lower-cased text. Extend by passing `extra` to `domain_tags`.
DOMAIN_PATTERNS: Final[Mapping[str, str]] = {
    "sec13f": (
        r"sec\s*13-?f|(?<![0-9a-z])13-?f(?![0-9a-z])|form\s*13|info_?tables?|\bcusips?\b|\bedgar\b|"
        r"\baccession\b|\bholdings?\b|\b13f_|持仓"
    ),
    "python": r"\bpython3?\b|\bpip3?\b|\bpytest\b|\bvenv\b|\bpandas\b|\bnumpy\b|\w\.py\b|\bpyproject\b|\bmypy\b",
    "git": r"\bgit\b|\bcommit(?:s|ted)?\b|\brebase\b|\bbranch(?:es)?\b|merge conflict|pull request|\bgithub\b",
    "docker": r"\bdocker(?:file)?\b|docker-compose|\bcontainers?\b|\bkubectl\b|\bk8s\b",
    "sql": r"\bsql(?:ite)?3?\b|\bpostgres(?:ql)?\b|\bmysql\b|\bselect\s+[\w*,.\s]+\s+from\b|数据库",
    "http": r"\bhttps?\b|\bcurl\b|\bendpoints?\b|\brest(?:ful)?\s+api\b|\bapi\s+(?:call|request)s?\b|\bwebhooks?\b",
    "xml": r"\bxml\b|\w\.xml\b|\bxpath\b|\blxml\b|\betree\b",
    "json": r"\bjson\b|\w\.json\b|\bjq\b",
    "csv": r"\bcsv\b|\w\.csv\b|\btsv\b",
    "testing": r"\btests?\b|\bpytest\b|\bunittest\b|\bjest\b|\bassert(?:ions?)?\b|\btest suite\b|测试",
    "node": r"\bnode(?:js)?\b|\bnpm\b|\byarn\b|\bpnpm\b|package\.json",
}


def domain_tags(texts: Iterable[str], extra: Mapping[str, str] | None = None) -> list[str]:
    """Domain tags of a task (task text, tool names, verifier task name, file names), in table order.

    World models group experiences by these keys; `extra` (key → regex) extends or overrides the table
    (`tag_patterns` builds it from the configuration).
    """
    table = {**DOMAIN_PATTERNS, **(extra or {})}
    blob = "\n".join(t for t in texts if t).lower()
    return [key for key, pattern in table.items() if re.search(pattern, blob)]


def _any_of(patterns: Iterable[str]) -> str:
    """One regex for several configured (case-insensitive) patterns, usable on the lower-cased blob."""
    return "|".join(f"(?i:{pattern})" for pattern in patterns)


def tag_patterns(world: WorldSettings) -> dict[str, str]:
    """The tagger's table with the configured world-model domains merged in, so one config section
    extends both: `[learning.world.extra_domains]` adds its patterns to a tag of the same key or adds the
    tag, and a replaced `[learning.world.domains]` table adds the domains no tag covers yet (by key or
    alias). The built-in world table is not merged: its broad domains (shell, network) would tag nearly
    every task and blur skill families, and world models already find them by text and aliases."""
    table = dict(DOMAIN_PATTERNS)
    for key, spec in world.extra_domains.items():
        if spec.patterns:
            table[key] = f"{table[key]}|{_any_of(spec.patterns)}" if key in table else _any_of(spec.patterns)
    if "domains" in world.model_fields_set:
        for key, spec in world.domains.items():
            names = {key.lower(), *(alias.lower() for alias in spec.aliases)}
            if spec.patterns and not names & set(table):
                table[key] = _any_of(spec.patterns)
    return table


# ---------------------------------------------------------------------------------------------------------
# Feedback text: sentences, cues, classification

_TEXT_KEYS: Final = ("feedback", "text", "message", "rationale", "reason", "verdict", "summary", "comment", "userText")
_SENTENCE: Final = re.compile(r"(?<=[!?;。！？；])\s*|(?<=\.)(?=\s|$)\s*|\n+")
_AVOID: Final = re.compile(
    r"\b(?:do\s+not|don'?t|never|avoid|stop|no\s+longer|must\s+not|mustn'?t|should\s+not|shouldn'?t|"
    r"can\s*not|can'?t)\b|不要|别再|(?<![区特分个级类识告])别(?![的人处])|不能|禁止|避免|切勿|不可|不应",
    re.IGNORECASE,
)
_CORRECT: Final = re.compile(
    r"\b(?:should|must|needs?\s+to|has\s+to|have\s+to|expected|actual(?:ly)?|instead|rather\s+than|fix|"
    r"use\s+\S+\s+instead|the\s+(?:right|correct)\s+\w+\s+(?:is|are)|correct\s+(?:value|answer|format|schema)s?)\b|"
    r"应该|应当|应为|应是|必须|需要|务必|改成|改为|换成|期望|实际|而不是|正确的",
    re.IGNORECASE,
)
_INSTRUCT: Final = re.compile(
    r"\b(?:next\s+time|from\s+now\s+on|in\s+(?:the\s+)?future|going\s+forward|always|make\s+sure|ensure|"
    r"remember\s+to|be\s+sure\s+to|first\b.{1,80}\bthen)\b|下次|以后|今后|记得|一定要|先.{1,30}再",
    re.IGNORECASE,
)
_PREFER: Final = re.compile(
    r"\b(?:i\s+(?:would\s+|'d\s+)?prefer|i\s+(?:really\s+)?like|i'd\s+like|i\s+want|my\s+preference|"
    r"prefer(?:ably)?)\b|偏好|喜欢|希望你|我想要",
    re.IGNORECASE,
)
_SUCCESS: Final = re.compile(
    r"\b(?:correct(?:ly)?|works?|worked|passe[sd]|pass|success(?:ful(?:ly)?)?|succeeded|matche[sd]|right|"
    r"good\s+job|well\s+done|perfect|exactly|handled)\b|正确|成功|通过|对了|很好|没错",
    re.IGNORECASE,
)
_NEGATED_SUCCESS: Final = re.compile(
    r"\b(?:not|isn'?t|wasn'?t|aren'?t|weren'?t|didn'?t|doesn'?t|never|no\s+longer)\s+(?:\w+\s+){0,2}?"
    r"(?:correct(?:ly)?|right|work(?:s|ed|ing)?|pass(?:ed|es)?|success(?:ful)?|match(?:ed|es)?)\b|"
    r"\bincorrect(?:ly)?\b|不正确|没通过|未通过|不成功|没成功|不对",
    re.IGNORECASE,
)
_COMPLAINT: Final = re.compile(
    r"\b(?:wrong|incorrect(?:ly)?|not\s+right|not\s+correct|broken|failed|fails?|mistakes?|bug(?:gy)?|"
    r"missing|missed|off\s+by)\b|不对|错了|错误|不正确|有误|失败|不行|缺少|漏了",
    re.IGNORECASE,
)
_RETRY: Final = re.compile(r"\b(?:try\s+again|retry|redo|again)\b|再试试?|重试|重新", re.IGNORECASE)
#: A sentence that opens with a bare imperative ("Convert every order line to USD", "Read dates day-first")
#: is an instruction even without a cue word: verifier and user feedback is often written that way.
_IMPERATIVE: Final = re.compile(
    r"^\s*(?:please\s+)?(?:use|convert|read|sort|order|break|include|exclude|drop|skip|divide|multiply|report|"
    r"write|keep|set|add|remove|check|parse|treat|count|round|format|pass|rename|return|group|filter|sum|"
    r"compute|calculate|normali[sz]e|strip|escape|quote|encode|decode|load|save|call|run|list|rank)\b",
    re.IGNORECASE,
)
_TEXT_MISMATCH: Final = re.compile(
    r"\bexpected\b\s*:?\s*(?P<e>[^;\n]+?)\s*[,;]?\s*\b(?:but|got|actual(?:ly)?|instead)\b\s*:?\s*(?P<a>[^;\n]+)|"
    r"期望(?:是|为)?\s*(?P<ze>[^，,；;。]+)[，,；;]?\s*(?:但|实际|却)(?:是|为|上)?\s*(?P<za>[^。；;\n]+)|"
    r"应(?:该)?(?:是|为)\s*(?P<se>[^，,；;。]+)[，,]?\s*而不是\s*(?P<sa>[^。；;\n]+)",
    re.IGNORECASE,
)
#: "Do not X: Y" — an avoid sentence whose second half says what to do instead (the usual shape of review
#: feedback: "Don't read dates month-first: the exports write them day-first").
#: The colon must end a clause (followed by a space, or a full-width colon): "http://…" is not one.
_REMEDY: Final = re.compile(
    r"^(?:[^:：]|:(?!\s))*?(?:\bdo\s+not|\bdon'?t|\bnever|\bavoid|不要|别再|切勿)(?:[^:：]|:(?!\s))*(?::\s+|：\s*)"
    r"(?P<remedy>\S.*)$",
    re.IGNORECASE,
)
#: A remedy that opens on a pronoun ("leave them out") means nothing without the first half: not a line alone.
_LEADING_PRONOUN: Final = re.compile(r"^(?:\S+\s+){0,2}?(?:it|its|them|they|this|these|those|that)\b", re.IGNORECASE)
#: Words that carry the cue, not the content: a sentence needs specific words beyond these.
CUE_WORDS: Final = frozenset(
    """next time future forward always never avoid stop instead should must need needs expected actual actually
    correct correctly wrong incorrect incorrectly right try again retry redo good great perfect works work worked
    passed pass passes success successful successfully succeeded fix fixed make sure ensure remember prefer
    preference like answer result output response thanks thank please job done well exactly matched matches
    handled broken failed fail fails mistake mistakes bug buggy missing missed nice awesome ok okay yes no task
    attempt rather don dont""".split()
)
#: CJK cue phrases, removed before counting specific words (CJK text has no word boundaries to strip).
_ZH_CUES: Final = re.compile(
    "不正确|没通过|未通过|不成功|没成功|不要|别再|不能|禁止|避免|切勿|不可|不应|应该|应当|应为|应是|必须|需要|务必|"
    "改成|改为|换成|期望|实际|而不是|正确的|下次|以后|今后|记得|一定要|偏好|喜欢|希望你|我想要|正确|成功|通过|对了|"
    "很好|没错|不对|错了|错误|有误|失败|不行|缺少|漏了|再试试|再试|重试|重新|别"
)
_SHAPE_CONFIDENCE: Final[Mapping[str, float]] = {
    "avoidance": 0.8,
    "correction": 0.8,
    "preference": 0.75,
    "instruction": 0.7,
    "success": 0.7,
    "complaint": 0.45,
    "unknown": 0.2,
}
VAGUE_CONFIDENCE: Final = 0.4


def feedback_text(rationale: str | None, raw: Any) -> str:
    """Rationale plus the text-ish fields of `raw` (and of `raw.verifier`), line-deduplicated."""
    parts: list[str] = [rationale or ""]
    if isinstance(raw, Mapping):
        parts += [str(raw[k]) for k in _TEXT_KEYS if isinstance(raw.get(k), str)]
        verifier = raw.get("verifier")
        if isinstance(verifier, Mapping):
            parts += [str(verifier[k]) for k in MESSAGE_KEYS if isinstance(verifier.get(k), str)]
    lines: list[str] = []
    seen: set[str] = set()
    for part in parts:
        for line in part.splitlines():
            key = squash(line).casefold()
            if key and key not in seen:
                seen.add(key)
                lines.append(squash(line))
    return "\n".join(lines)


def sentences(text: str) -> list[str]:
    return [squash(s) for s in _SENTENCE.split(text) if s and squash(s).strip(" .;。；")]


def specific_tokens(text: str) -> list[str]:
    """Content words of `text` that are not cue words (CJK cue phrases removed before the bigrams)."""
    stripped = _ZH_CUES.sub(" ", text)
    return [t for t in content_tokens(stripped) if t not in CUE_WORDS and t not in STOPWORDS]


@dataclass(frozen=True)
class Classification:
    """What the feedback text says, sentence by sentence."""

    shape: Shape
    confidence: float
    avoid: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()
    prefer: tuple[str, ...] = ()
    success: tuple[str, ...] = ()
    wrong: tuple[str, ...] = ()
    text_mismatch: bool = False

    @property
    def actionable(self) -> bool:
        return bool(self.avoid or self.fix or self.prefer or self.success or self.wrong)


def classify(text: str) -> Classification:
    """Rule classifier: each sentence's cues and specificity decide which kind of line it is."""
    avoid: list[str] = []
    fix: list[str] = []
    prefer: list[str] = []
    success: list[str] = []
    wrong: list[str] = []
    cues: set[str] = set()
    for sentence in sentences(text):
        specific = len(specific_tokens(sentence))
        positive = _SUCCESS.search(_NEGATED_SUCCESS.sub(" ", sentence)) is not None
        if _PREFER.search(sentence):
            cues.add("preference")
            if specific >= 1:
                prefer.append(sentence)
        elif _AVOID.search(sentence):
            cues.add("avoidance")
            if specific >= 1:
                avoid.append(sentence)
                fix.extend(_remedy(sentence))
        elif _CORRECT.search(sentence) or _INSTRUCT.search(sentence) or _IMPERATIVE.search(sentence):
            cues.add("correction" if _CORRECT.search(sentence) else "instruction")
            if specific >= 1:
                fix.append(sentence)
        elif _COMPLAINT.search(sentence) or _NEGATED_SUCCESS.search(sentence):
            cues.add("complaint")
            if specific >= 2:
                wrong.append(sentence)
        elif positive:
            cues.add("success")
            if specific >= 2:
                success.append(sentence)
        elif _RETRY.search(sentence):
            cues.add("complaint")
    shape = _shape(cues)
    confidence = _SHAPE_CONFIDENCE[shape] + 0.05 * max(0, len(cues - {"complaint"}) - 1)
    lines = avoid or fix or prefer or success or wrong
    if not lines:
        confidence = min(confidence, VAGUE_CONFIDENCE)
    return Classification(
        shape=shape,
        confidence=round(min(confidence, 0.95), 4),
        avoid=tuple(_unique(clip(s, LINE_CHARS) for s in avoid)),
        fix=tuple(_unique(clip(s, LINE_CHARS) for s in fix)),
        prefer=tuple(_unique(clip(s, LINE_CHARS) for s in prefer)),
        success=tuple(_unique(clip(s, LINE_CHARS) for s in success)),
        wrong=tuple(_unique(clip(s, LINE_CHARS) for s in wrong)),
        text_mismatch=_TEXT_MISMATCH.search(text) is not None,
    )


def _remedy(sentence: str) -> list[str]:
    """The do-instead half of a "Do not X: Y" sentence as a line of its own, when it stands alone."""
    found = _REMEDY.match(sentence)
    if found is None:
        return []
    remedy = found.group("remedy").strip()
    if _AVOID.search(remedy) or _LEADING_PRONOUN.match(remedy) or len(specific_tokens(remedy)) < 2:
        return []
    return [_capitalised(remedy)]


def general_first(lines: Iterable[str]) -> list[str]:
    """`lines` with the ones that carry over to another task before the ones that restate this attempt's
    values (stable otherwise): a repair's title and first steps should be its transferable part."""
    return sorted(lines, key=instance_specific)


_SHAPE_ORDER: Final[tuple[Shape, ...]] = (
    "preference",
    "avoidance",
    "correction",
    "instruction",
    "success",
    "complaint",
)


def _shape(cues: set[str]) -> Shape:
    """The dominant shape: a stated taste, then what not to do, what it should be, what to do, praise."""
    return next((shape for shape in _SHAPE_ORDER if shape in cues), "unknown")


def _unique(lines: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if line and not any(same_line(line, kept) for kept in out):
            out.append(line)
    return out


def same_line(a: str, b: str) -> bool:
    """Two guidance lines say the same thing: equal up to case and spacing, or ≥ 0.9 token overlap."""
    if squash(a).casefold().rstrip(" .。") == squash(b).casefold().rstrip(" .。"):
        return True
    return token_similarity(a, b) >= 0.9


# ---------------------------------------------------------------------------------------------------------
# The evidence of one feedback row, and its assessment


@dataclass(frozen=True)
class EpisodeFacts:
    """The judged episode as the builder sees it."""

    episode_id: str
    task: str
    latest_request: str = ""
    tools: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()  # successful tool steps, in order ("bash(cmd=…) → …")
    failed_steps: tuple[str, ...] = ()
    reply: str = ""
    trace_ids: tuple[str, ...] = ()
    r_task: float | None = None
    outcome: str = "unknown"  # the reward stage's: success | partial | failure | unknown
    outcome_source: str = ""  # where that came from: verifier | llm | feedback | heuristic
    started_at: int = 0


@dataclass(frozen=True)
class FeedbackFacts:
    """One stored feedback row as the builder sees it."""

    id: str
    ts: int
    polarity: str
    magnitude: float
    explicit: bool
    text: str
    verifier: VerifierView | None = None
    trace_id: str | None = None
    trace_ids: tuple[str, ...] = ()  # the steps the host bound the verdict to (`raw.traceIds`), in order


@dataclass(frozen=True)
class Assessment:
    """Whether a feedback row becomes an experience, and of which kind."""

    significant: bool
    reason: str  # why not ("" when significant)
    classification: Classification
    actionable: bool
    severity: float
    salience: float
    confidence: float
    outcome: Outcome
    experience_type: ExperienceType | None = None
    polarity: EvidencePolarity = "negative"


_EPISODE_OUTCOME: Final[Mapping[str, Outcome]] = {"success": "pass", "failure": "fail", "partial": "fail"}


def objective_outcome(feedback: FeedbackFacts, episode: EpisodeFacts, classification: Classification) -> Outcome:
    """Objective evidence first: this row's verifier (full credit only), then a verifier result elsewhere in
    the episode; then this row's own verdict (polarity), the episode's (non-objective) score, the words."""
    if feedback.verifier is not None and feedback.verifier.outcome != "unknown":
        return feedback.verifier.outcome
    scored = _EPISODE_OUTCOME.get(episode.outcome)
    if scored is not None and episode.outcome_source == "verifier":
        return scored
    if feedback.polarity == "positive":
        return "pass"
    if feedback.polarity == "negative":
        return "fail"
    if scored is not None:
        return scored
    if classification.shape == "success":
        return "pass"
    return "unknown" if classification.shape == "unknown" else "fail"


def assess(feedback: FeedbackFacts, episode: EpisodeFacts) -> Assessment:
    """Significance gate, salience and type of one feedback row (issue 5, seed 000)."""
    classification = classify(feedback.text)
    verifier = feedback.verifier
    outcome = objective_outcome(feedback, episode, classification)
    severity = verifier.severity if verifier is not None else 0.0
    verified_run = verifier is not None and verifier.outcome == "pass" and bool(episode.steps or episode.reply)
    # a verified run's steps are the procedure; otherwise the words (or the verifier's diff) must say it
    actionable = classification.actionable or bool(verifier and verifier.names_problem) or verified_run
    r_abs = abs(episode.r_task) if episode.r_task is not None else 0.0
    salience = round(min(1.0, max(r_abs, feedback.magnitude, classification.confidence, severity)), 4)
    base = Assessment(
        significant=False,
        reason="",
        classification=classification,
        actionable=actionable,
        severity=severity,
        salience=salience,
        confidence=classification.confidence,
        outcome=outcome,
    )
    if not feedback.explicit:
        return replace(base, reason="not_explicit")
    if not actionable:
        return replace(base, reason="not_actionable")
    strong = (
        feedback.magnitude >= MIN_MAGNITUDE
        or classification.confidence >= MIN_CLASSIFIER_CONFIDENCE
        or r_abs >= MIN_ABS_REWARD
        or severity >= MIN_SEVERITY
    )
    if not strong:
        return replace(base, reason="below_significance")
    kind, polarity = experience_kind(feedback, outcome, classification)
    return replace(
        base,
        significant=True,
        experience_type=kind,
        polarity=polarity,
        confidence=lesson_confidence(classification, verifier),
    )


def lesson_confidence(classification: Classification, verifier: VerifierView | None) -> float:
    """How far the lesson can be trusted — not how much the verdict matters (that is salience): objective
    verifier data in the verdict makes it `VERIFIER_CONFIDENCE`; the user's words alone are as trustworthy
    as the classifier's reading of them. A strongly felt but vague complaint ("the totals look off",
    magnitude 1) is significant and salient, yet low-confidence: it starts as a `candidate` (seed 000:
    "低置信但可行动反馈 → candidate"), recallable, out of skills and world models until more evidence
    confirms it. (Lifting confidence to the salience, as before, made every new experience active.)"""
    objective = verifier is not None and verifier.outcome != "unknown"
    confidence = max(classification.confidence, VERIFIER_CONFIDENCE if objective else 0.0)
    return round(min(confidence, 1.0), 4)


def experience_kind(
    feedback: FeedbackFacts, outcome: Outcome, classification: Classification
) -> tuple[ExperienceType, EvidencePolarity]:
    """Type and polarity: objective outcome first; the fix decides repair vs avoidance."""
    verifier = feedback.verifier
    if classification.shape == "preference" and verifier is None:
        return "preference", "positive" if feedback.polarity == "positive" or outcome == "pass" else "negative"
    if outcome == "pass":
        return "success_pattern", "positive"
    knows_fix = bool(classification.fix or classification.text_mismatch or (verifier and verifier.knows_fix))
    return ("repair_instruction" if knows_fix else "failure_avoidance"), "negative"


# ---------------------------------------------------------------------------------------------------------
# Rule drafts

_TITLE_PREFIX: Final[Mapping[str, str]] = {
    "success_pattern": "Success",
    "repair_validated": "Repair",
    "failure_avoidance": "Avoid",
    "repair_instruction": "Repair",
    "preference": "Prefer",
}
_PREFIX_RE: Final = re.compile(r"^\s*(?:avoid|repair|success|prefer|fix|do)\s*(?:\([^)]*\))?\s*[:：]\s*", re.IGNORECASE)
_LEAD_AVOID: Final = re.compile(r"^\s*(?:do\s+not|don'?t|never|avoid)\s+", re.IGNORECASE)


@dataclass
class ExperienceDraft:
    """The text and typed fields of an experience before it is stored or merged."""

    experience_type: ExperienceType
    polarity: EvidencePolarity
    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    preference: list[str] = field(default_factory=list)
    anti_pattern: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    confidence: float = 0.5
    salience: float = 0.0
    verifier_meta: dict[str, Any] | None = None
    sources: list[str] = field(default_factory=list)
    drafted_by: DraftedBy = "rules"

    def embed_text(self) -> str:
        """What the experience's vector encodes: title, trigger and procedure."""
        return "\n".join(part for part in (self.title, self.trigger, self.procedure) if part)

    @property
    def skill_eligible(self) -> bool:
        return self.experience_type in SKILL_ELIGIBLE_TYPES


def titled(experience_type: str, body: str, tags: Sequence[str] = ()) -> str:
    """ "Avoid (sec13f): …" — the type's prefix, the leading domain, the lesson's head."""
    head = _PREFIX_RE.sub("", squash(body)).rstrip(" .。;；")
    domain = f" ({tags[0]})" if tags else ""
    return clip(f"{_TITLE_PREFIX.get(experience_type, 'Lesson')}{domain}: {head}", TITLE_CHARS)


def _trigger(episode: EpisodeFacts, verifier: VerifierView | None, tags: Sequence[str]) -> str:
    details = []
    if tags:
        details.append(f"domain: {', '.join(tags)}")
    if episode.tools:
        details.append(f"tools: {', '.join(episode.tools[:5])}")
    if verifier is not None and verifier.task:
        details.append(f"verifier task: {verifier.task}")
    task = clip(first_sentence(episode.task) or episode.task, TRIGGER_TASK_CHARS) or "a similar request"
    suffix = f" ({'; '.join(details)})" if details else ""
    return clip(f"Tasks like “{task}”{suffix}", 400)


#: The last step of a repair's procedure, with and without a verifier (not a lesson of its own when merging).
_CLOSING_CHECK: Final[Mapping[bool, str]] = {
    True: "Check the output against the verifier's fields before finishing.",
    False: "Check the result against what the feedback asked for before finishing.",
}


def _capitalised(line: str) -> str:
    return line[:1].upper() + line[1:]


def draft_experience(
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    assessment: Assessment,
    domains: Mapping[str, str] | None = None,
) -> ExperienceDraft:
    """The rule template: a specific, actionable experience from the feedback, the verifier data and the
    episode (needs a significant assessment); `domains` is the tag table (`tag_patterns`, default built-in)."""
    kind = assessment.experience_type
    if kind is None:
        raise ValueError("draft_experience needs a significant assessment")
    c = assessment.classification
    verifier = feedback.verifier
    file = (verifier.file if verifier else "") or file_in(feedback.text, episode.task, *episode.steps)
    v_fix, v_avoid = verifier_lines(verifier, file) if verifier is not None else ([], [])
    tags = domain_tags(
        [episode.task, feedback.text, *episode.tools, verifier.task if verifier else "", file], extra=domains
    )
    check = _verification(verifier, c, episode)
    boundary = _boundary(kind, feedback, episode, verifier)
    avoid_lines = _unique([*c.avoid, *v_avoid, *c.wrong])[:MAX_LINES]
    if kind == "success_pattern":
        what = [_capitalised(line) for line in (c.success or c.fix or c.prefer)]
        steps = list(episode.steps[:MAX_STEPS])
        if not steps and episode.reply:
            steps = [clip(first_sentence(episode.reply), STEP_CHARS)]
        procedure = numbered(_unique([*what[:2], *steps]))
        title = titled(kind, what[0] if what else episode.task, tags)
        preference: list[str] = []
        anti = avoid_lines
    elif kind == "repair_instruction":
        # the feedback's own words before the diff, and what carries over to the next task before this one's values
        fixes = general_first(_unique([*c.fix, *c.prefer, *v_fix]))[:MAX_LINES]
        procedure = numbered([*fixes, _CLOSING_CHECK[verifier is not None]])
        title = titled(kind, fixes[0] if fixes else c.avoid[0] if c.avoid else episode.task, tags)
        preference, anti = [], avoid_lines
    elif kind == "failure_avoidance":
        lines = avoid_lines or [_unfinished(verifier, c, episode)]
        procedure = "\n".join(lines)
        title = titled(kind, _LEAD_AVOID.sub("", lines[0]), tags)
        preference, anti = _unique([*c.fix, *v_fix])[:MAX_LINES], []
    else:  # preference
        lines = _unique([*c.prefer, *c.fix])[:MAX_LINES] or list(c.success[:1])
        procedure = "\n".join(lines)
        title = titled(kind, lines[0] if lines else episode.task, tags)
        preference, anti = [], list(c.avoid)
    sources = ["verifier_feedback"] if verifier is not None else []
    if feedback.text.strip():
        sources.append("user_feedback" if verifier is None else "feedback_text")
    return ExperienceDraft(
        experience_type=kind,
        polarity=assessment.polarity,
        title=title,
        trigger=_trigger(episode, verifier, tags),
        procedure=procedure,
        verification=check,
        boundary=boundary,
        preference=preference,
        anti_pattern=anti,
        tags=tags,
        confidence=assessment.confidence,
        salience=assessment.salience,
        verifier_meta=verifier.meta([*v_fix, *v_avoid]) if verifier is not None else None,
        sources=sources,
    )


def _unfinished(verifier: VerifierView | None, c: Classification, episode: EpisodeFacts) -> str:
    """The avoid line of a failure whose feedback only praised something: what looked done was not."""
    judged = f"the verifier gave {verifier.summary()}" if verifier is not None else "the user rejected it"
    claim = (c.success[0] if c.success else first_sentence(episode.reply)).rstrip(" .。")
    return clip(f"Do not treat this result as final ({judged}) even when “{claim}”.", LINE_CHARS)


def _verification(verifier: VerifierView | None, c: Classification, episode: EpisodeFacts) -> str:
    if verifier is not None:
        fields = [m.field for m in verifier.mismatches if m.field] or list(verifier.failing_fields)
        target = f"`{verifier.task}`" if verifier.task else "the verifier"
        check = f"{target} passes at full credit (this attempt: {verifier.summary().split(': ')[-1]})"
        if fields:
            check += f"; re-check {', '.join(dict.fromkeys(fields[:6]))} before submitting"
        return clip(check + ".", 400)
    if c.success:
        return clip(f"The user confirmed: {c.success[0]}", 400)
    said = (c.avoid or c.fix or c.wrong or c.prefer or ("",))[0]
    return clip(f"The result no longer draws this feedback: {said}", 400)


def _boundary(
    kind: ExperienceType, feedback: FeedbackFacts, episode: EpisodeFacts, verifier: VerifierView | None
) -> str:
    source = "verifier" if verifier is not None else "user"
    note = {
        "success_pattern": "Confirmed by one successful run; re-verify when the requested output schema differs.",
        "repair_instruction": "Not yet confirmed by a successful run.",
        "failure_avoidance": "Says what to avoid, not a proven procedure.",
        "preference": "A stated preference of this user.",
        "repair_validated": "",
    }[kind]
    task = clip(first_sentence(episode.task), 80)
    return clip(f"From {source} feedback {feedback.id} on “{task}” (episode {episode.episode_id}). {note}", 400)


def apply_refinement(draft: ExperienceDraft, output: FeedbackRefineOutput, evidence: str) -> ExperienceDraft | None:
    """The LLM's wording of a rule draft; None when it is unusable (an empty field, or a procedure that
    shares no specific word with the evidence: an invented lesson is worse than the template).

    The type, polarity, confidence, salience, tags and verifier data stay the rule draft's: the objective
    outcome decides them, not the wording. The rule draft's guidance lines are kept after the model's,
    so concrete values the model dropped are not lost.
    """
    title, trigger, procedure = squash(output.title), squash(output.trigger), output.procedure.strip()
    if not title or not trigger or not procedure:
        return None
    if not set(specific_tokens(procedure)) & set(content_tokens(evidence)):
        return None
    avoid = [squash(line) for line in output.avoid if line.strip()]
    prefer = [squash(line) for line in output.prefer if line.strip()]
    procedure_lines = lesson_lines(draft.experience_type, procedure, [], [])
    said = [*procedure_lines[0], *procedure_lines[1], *procedure_lines[2]]
    return replace(
        draft,
        title=titled(draft.experience_type, title, draft.tags),
        trigger=clip(trigger, 400),
        procedure=procedure,
        verification=squash(output.verification) or draft.verification,
        boundary=squash(output.boundary) or draft.boundary,
        anti_pattern=merge_lines([], [*avoid, *draft.anti_pattern], exclude=said, cap=MAX_LINES),
        preference=merge_lines([], [*prefer, *draft.preference], exclude=said, cap=MAX_LINES),
        drafted_by="llm",
    )


def lesson_lines(
    experience_type: str, procedure: str, preference: Sequence[str], anti_pattern: Sequence[str]
) -> tuple[list[str], list[str], list[str]]:
    """(do, avoid, check) lines of a stored experience, by type — how skills fold experiences into their
    Procedure / Avoid / Check sections: a failure avoidance's procedure lines are things to avoid, a repair
    instruction's are checks, a success's are steps."""
    lines = numbered_steps(procedure)
    if experience_type == "failure_avoidance":
        return list(preference), _unique([*lines, *anti_pattern]), []
    if experience_type == "repair_instruction":
        return list(preference), list(anti_pattern), lines
    return _unique([*lines, *preference]), list(anti_pattern), []


def guidance_of(draft: ExperienceDraft) -> tuple[list[str], list[str]]:
    """(prefer, avoid) lines a draft contributes when it is merged into an existing experience."""
    do, avoid, check = lesson_lines(draft.experience_type, draft.procedure, draft.preference, draft.anti_pattern)
    do = [line for line in do if line not in _CLOSING_CHECK.values()]
    check = [line for line in check if line not in _CLOSING_CHECK.values()]
    return _unique([*check, *do]), avoid


# ---------------------------------------------------------------------------------------------------------
# Merging


def may_merge(
    existing_type: str, new_type: str, similarity: float, same_type_min: float, cross_type_min: float
) -> bool:
    """Same type at ≥ `same_type_min`, another type at ≥ `cross_type_min` when the result keeps a coherent
    type (a failure lesson never absorbs a success: the success becomes its own anchor)."""
    if existing_type == new_type:
        return similarity >= same_type_min
    return similarity >= cross_type_min and merged_type(existing_type, new_type) is not None


def merged_type(existing_type: str, new_type: str) -> str | None:
    """The type after merging evidence of `new_type` into an experience of `existing_type` (None: no merge).

    Successes keep their type when failures are added (polarity goes mixed); an avoidance absorbing a fix
    becomes a repair instruction; a repair instruction only becomes validated through `validate_repair`.
    """
    if existing_type == new_type:
        return existing_type
    if existing_type in SKILL_ELIGIBLE_TYPES:
        return existing_type if new_type != "preference" else None
    if existing_type == "failure_avoidance" and new_type == "repair_instruction":
        return "repair_instruction"
    if existing_type == "repair_instruction" and new_type == "failure_avoidance":
        return "repair_instruction"
    return None


def merged_polarity(a: str, b: str) -> EvidencePolarity:
    if a == b and a in ("positive", "negative"):
        return a  # type: ignore[return-value]
    if {a, b} <= {"positive", "negative", "mixed"}:
        return "mixed"
    return "positive" if "positive" in (a, b) else "negative"


def merge_lines(
    existing: Iterable[Any], new: Iterable[str], exclude: Iterable[str] = (), cap: int = GUIDANCE_CAP
) -> list[str]:
    """The `new` lines not already said (there or in `exclude`) first, then `existing`, at most `cap`.

    Newest first: recall shows only the first few guidance lines of an experience, and the latest lesson is
    the one the agent has not applied yet; when over `cap`, the oldest lines go."""
    kept = [str(line) for line in existing if isinstance(line, str) and line.strip()]
    taken = [*kept, *exclude]
    fresh: list[str] = []
    for line in new:
        if line.strip() and not any(same_line(line, old) for old in taken):
            fresh.append(line)
            taken.append(line)
    return [*fresh, *kept][:cap]


_THOUSANDS_SEPARATOR: Final = re.compile(r"(?<=\d),(?=\d{3})")
_SUFFIX: Final = re.compile(r"(?:ing|ed|es|s|ly)$")


def _stems(text: str) -> set[str]:
    """Content words reduced to a crude stem ("divided", "divide" → "divid"; "1,000" → "1000"), so a repair
    and the episode that followed it match across inflections."""
    stems: set[str] = set()
    for token in content_tokens(_THOUSANDS_SEPARATOR.sub("", text)):
        if token.isascii() and token.isalpha() and len(token) > 4:
            token = _SUFFIX.sub("", token).rstrip("e")
        stems.add(token)
    return stems


def repair_adherence(repair_text: str, trigger: str, episode_text: str) -> float:
    """Share of a repair's distinctive words (its fix, minus the task words its trigger already has) that a
    later episode's text uses: whether that episode followed the same repair."""
    fix = "\n".join(line for line in repair_text.splitlines() if unnumbered(line) not in _CLOSING_CHECK.values())
    distinctive = _stems(" ".join(specific_tokens(fix))) - _stems(trigger)
    if not distinctive:
        return 0.0
    return len(distinctive & _stems(episode_text)) / len(distinctive)
