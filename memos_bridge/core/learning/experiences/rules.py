"""Typed experiences from explicit feedback, the pure half: significance, type and polarity, the lesson drafts,
merge arithmetic and domain tags.

A failed task with actionable feedback must become a recallable lesson before the next task starts, while noise
("wrong", "不对", "try again", a negative step nobody commented on) must not. Everything here is deterministic
and free of I/O; the stage that feeds it (storage, embeddings, the LLM rewording) is `stage.py`.

* **The lesson is the feedback's own words.** `rules.lessons.read_feedback` picks the actionable sentences —
  conventions, instructions, prohibitions, corrections, preferences, in English or Chinese — and takes this
  attempt's values and identity out of them (`rules.instance`). `group_lessons` splits them by subject, so
  feedback teaching two conventions gives two experiences. Verifier data adds observations after the words (a
  factor the wrong numbers share, the order of the expected rows), never an interpretation of them.
* **Significance** = explicit AND actionable AND (magnitude ≥ 0.5 OR classifier confidence ≥ 0.6 OR |rTask| ≥
  0.5 OR verifier severity ≥ 0.5); salience = clamp01(max of those four).
* **Type**: the objective outcome decides first (verifier → episode outcome → feedback polarity → the words): a
  pass is a `success_pattern`; a failure whose lesson says what holds or what to do (a convention, an
  instruction, a correction) is a `repair_instruction`, one that only says what not to do or what went wrong a
  `failure_avoidance`; a stated taste without a verifier is a `preference`. `repair_validated` only arises when
  a later success follows a repair instruction. Only success_pattern and repair_validated anchor skills.
* **Drafts**: the lesson lines are the procedure and the title's head; the trigger names the lesson's subject
  (its identifiers, units and the task's files), which the keyword channels match; the verification says what
  the verifier observed; the boundary where the lesson came from.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from memos_bridge.config import WorldSettings
from memos_bridge.core.learning.experiences.verifier import (
    FILE_NAME,
    MESSAGE_KEYS,
    Outcome,
    VerifierView,
    observations,
    record_lines,
)
from memos_bridge.llm.prompts import FeedbackRefineOutput
from memos_bridge.rules.instance import InstanceContext, instance_specific, states_instance
from memos_bridge.rules.kinds import rule_kinds
from memos_bridge.rules.lessons import (
    LessonGroup,
    LessonLine,
    Reading,
    group_lessons,
    key_terms,
    read_feedback,
    specific_tokens,
)
from memos_bridge.rules.subjects import (
    Subject,
    identifiers,
    number_key,
    numbers,
    owner_names,
    requested_outputs,
    subject_of,
    units,
)
from memos_bridge.rules.text import clip, first_sentence, numbered, numbered_steps, squash, unnumbered
from memos_bridge.rules.tokens import content_tokens, token_similarity

ExperienceType = Literal["success_pattern", "repair_validated", "failure_avoidance", "repair_instruction", "preference"]
EvidencePolarity = Literal["positive", "negative", "mixed"]
DraftedBy = Literal["rules", "llm"]

EXPERIENCE_TYPES: Final[frozenset[str]] = frozenset(get_args(ExperienceType))
#: Types that may be a skill's main evidence (a success anchor); the others are recallable lessons only.
SKILL_ELIGIBLE_TYPES: Final[frozenset[str]] = frozenset({"success_pattern", "repair_validated"})
#: `induced_by` of every row this builder writes.
INDUCED_BY: Final = "feedback.experience"

#: Significance gates.
MIN_MAGNITUDE: Final = 0.5
MIN_CLASSIFIER_CONFIDENCE: Final = 0.6
MIN_ABS_REWARD: Final = 0.5
MIN_SEVERITY: Final = 0.5
#: A new experience below this confidence starts as `candidate` (still recallable), else `active`.
ACTIVE_CONFIDENCE: Final = 0.5
#: Support (independent verdicts merged into one experience) that makes a candidate active on its own.
CONFIRMING_SUPPORT: Final = 2
#: Confidence of an experience backed by objective verifier data.
VERIFIER_CONFIDENCE: Final = 0.9
#: Gain floor of a typed experience (the skill stage's minimum gain).
MIN_GAIN: Final = 0.02

#: Field caps.
TITLE_CHARS: Final = 120
LINE_CHARS: Final = 360
TRIGGER_TASK_CHARS: Final = 160
MAX_LINES: Final = 6
MAX_STEPS: Final = 6
STEP_CHARS: Final = 160
#: Lesson lines an experience keeps: the first wording and a few others (another language, another angle).
MAX_LESSON_LINES: Final = 4
#: Lines kept in each list of an experience's decision guidance.
GUIDANCE_CAP: Final = 8
#: Subject terms named in a trigger.
SUBJECT_TERMS: Final = 8

# ---------------------------------------------------------------------------------------------------------
# Domain tags


#: Domain key → regex over lower-cased text. Extend by passing `extra` to `domain_tags`.
DOMAIN_PATTERNS: Final[Mapping[str, str]] = {
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
    """The tagger's table with the configured world-model domains merged in, so one config section extends
    both: `[learning.world.extra_domains]` adds its patterns to a tag of the same key or adds the tag, and a
    replaced `[learning.world.domains]` table adds the domains no tag covers yet (by key or alias). The built-in
    world table is not merged: its broad domains (shell, network) would tag nearly every task and blur skill
    families, and world models already find them by text and aliases."""
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
# The evidence of one feedback row

_TEXT_KEYS: Final = ("feedback", "text", "message", "rationale", "reason", "verdict", "summary", "comment", "userText")


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
    written: tuple[str, ...] = ()  # files the agent wrote (its output, not what a lesson is about)
    session_id: str = ""
    read: tuple[str, ...] = ()  # files the agent's tool calls named and did not write: what the work was on


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
    task_ids: tuple[str, ...] = ()  # ids the host gave the task (`raw.taskId`, the verifier's task)


def instance_context(feedback: FeedbackFacts, episode: EpisodeFacts) -> InstanceContext:
    """What is known to be this attempt's own: the verifier's expected and actual answers, the agent's reply
    (its answer), the task's ids and the output fields the task or the verifier names."""
    verifier = feedback.verifier
    ids = list(feedback.task_ids)
    fields: list[str] = []
    if verifier is not None:
        if verifier.task:
            ids.append(verifier.task)
        fields.extend(verifier.failing_fields)
    # output fields the task names (`total_kg`, `byRegion`): verdicts quote them, lessons rarely need them
    fields.extend(name for name in identifiers(episode.task) if re.fullmatch(r"[A-Za-z]+(?:_[A-Za-z0-9]+)+", name))
    return InstanceContext.build(
        expected=verifier.expected if verifier else None,
        actual=verifier.actual if verifier else None,
        answer_texts=[episode.reply],
        ids=ids,
        fields=fields,
    )


@dataclass(frozen=True)
class Assessment:
    """Whether a feedback row becomes experiences, which lessons it teaches, and of which kind."""

    significant: bool
    reason: str  # why not ("" when significant)
    reading: Reading
    lessons: tuple[LessonGroup, ...]
    observed: tuple[str, ...]  # what the verifier's data shows (after the words)
    actionable: bool
    severity: float
    salience: float
    confidence: float
    outcome: Outcome
    polarity: EvidencePolarity = "negative"
    verified_run: bool = False

    @property
    def experience_type(self) -> ExperienceType | None:
        """The type of the first lesson (None when not significant)."""
        if not self.significant:
            return None
        return self.kind_of(self.lessons[0] if self.lessons else None)

    def observed_for(self, group: LessonGroup | None) -> list[str]:
        """The verifier observations that belong with `group`'s lesson: each goes to the lessons about the aspect
        it observed (a factor to a lesson with a number, a unit or a scaling verb; text-versus-number to one about
        types; an order to one about ordering), to the first lesson when none is, never to every lesson of a
        feedback that taught several things."""
        if group is None or len(self.lessons) <= 1:
            return list(self.observed)
        out: list[str] = []
        for observation in self.observed:
            matching = [g for g in self.lessons if _about_aspect(g, observation)]
            if group in matching or (not matching and group is self.lessons[0]):
                out.append(observation)
        return out

    def kind_of(self, group: LessonGroup | None) -> ExperienceType:
        roles = set(group.roles) if group is not None else set()
        if self.outcome == "pass":
            return "success_pattern"
        if roles and roles <= {"preference"} and self.reading.has("preference"):
            return "preference"
        fixes = group is not None and any(line.says_what_to_do for line in group.lines)
        if fixes or roles & {"note", "observation"}:
            return "repair_instruction"  # it says what holds or what to do (a note states it tersely)
        if not roles and self.observed:
            return "repair_instruction"
        return "failure_avoidance"


#: Which lesson an observation concerns (`Assessment.observed_for`): the observation's opening, the words of a
#: lesson about that aspect.
_ASPECTS: Final[tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]] = (
    (
        re.compile(r"^The answer was .*\bthe expected value\b"),
        re.compile(
            r"\b(?:multipl\w*|divid\w*|scal\w*|convert\w*|units?|times|factor)\b|[×÷]|乘|除|换算|单位|倍",
            re.IGNORECASE,
        ),
    ),
    (
        re.compile(r"^The expected answer held "),
        re.compile(
            r"\b(?:text|strings?|numbers?|numeric|quot\w*|types?|integers?|floats?)\b|字符串|数字|文本|类型",
            re.IGNORECASE,
        ),
    ),
    (
        re.compile(r"^The expected entries were ordered "),
        re.compile(
            r"\b(?:order\w*|sort\w*|rank\w*|ascending|descending|ties?|first|last)\b|排序|顺序|升序|降序", re.IGNORECASE
        ),
    ),
)


def _about_aspect(group: LessonGroup, observation: str) -> bool:
    text = " ".join(group.texts)
    for opening, words in _ASPECTS:
        if opening.search(observation):
            scale = opening is _ASPECTS[0][0] and bool(group.subject.units or group.subject.numbers)
            return scale or bool(words.search(text))
    return False


_EPISODE_OUTCOME: Final[Mapping[str, Outcome]] = {"success": "pass", "failure": "fail", "partial": "fail"}


def objective_outcome(feedback: FeedbackFacts, episode: EpisodeFacts, reading: Reading) -> Outcome:
    """Objective evidence first: this row's verifier (full credit only), then a verifier result elsewhere in the
    episode; then this row's own verdict (polarity), the episode's (non-objective) score, the words."""
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
    if reading.has("praise") and not reading.has("complaint", "prohibition", "correction", "diagnosis"):
        return "pass"
    return "fail" if reading.lessons or reading.has("complaint") else "unknown"


def assess(feedback: FeedbackFacts, episode: EpisodeFacts) -> Assessment:
    """Significance gate, lessons, salience and type of one feedback row."""
    reading = read_feedback(feedback.text, instance_context(feedback, episode))
    lessons = substantive(group_lessons(reading.lessons))
    verifier = feedback.verifier
    observed = tuple(observations(verifier)) if verifier is not None else ()
    outcome = objective_outcome(feedback, episode, reading)
    severity = verifier.severity if verifier is not None else 0.0
    # a verified run's steps are the lesson of a success, and so are those of a run the user explicitly approved
    ran = bool(episode.steps or episode.reply)
    approved = verifier is None and feedback.polarity == "positive" and bool(reading.praise or lessons)
    verified_run = ran and ((verifier is not None and verifier.outcome == "pass") or approved)
    # a verified run's steps are the procedure; otherwise the words (or what the verifier observed) must say it
    actionable = bool(lessons or observed or verified_run)
    r_abs = abs(episode.r_task) if episode.r_task is not None else 0.0
    confidence = reading.confidence
    salience = round(min(1.0, max(r_abs, feedback.magnitude, confidence, severity)), 4)
    polarity: EvidencePolarity = "positive" if outcome == "pass" else "negative"
    if not verifier and lessons and all(set(g.roles) <= {"preference"} for g in lessons):
        polarity = "positive" if feedback.polarity == "positive" or outcome == "pass" else "negative"
    base = Assessment(
        significant=False,
        reason="",
        reading=reading,
        lessons=lessons,
        observed=observed,
        actionable=actionable,
        severity=severity,
        salience=salience,
        confidence=confidence,
        outcome=outcome,
        polarity=polarity,
        verified_run=verified_run,
    )
    if not feedback.explicit:
        return replace(base, reason="not_explicit")
    if not actionable:
        return replace(base, reason="not_actionable")
    strong = (
        feedback.magnitude >= MIN_MAGNITUDE
        or confidence >= MIN_CLASSIFIER_CONFIDENCE
        or r_abs >= MIN_ABS_REWARD
        or severity >= MIN_SEVERITY
    )
    if not strong:
        return replace(base, reason="below_significance")
    return replace(base, significant=True, confidence=lesson_confidence(confidence, verifier))


def substantive(groups: Sequence[LessonGroup]) -> tuple[LessonGroup, ...]:
    """The lessons of one feedback, one per rule it states. A group that states a kind of rule (`rules.kinds`)
    is a lesson; a group that states none — a sentence that only makes sense beside the lesson ("All three are
    one log.", "Have a look at the eu-west run in particular") — joins the lesson before it (the first one, when
    it comes first) instead of becoming a lesson of its own. A feedback that states no kind of rule keeps its
    groups that say something of their own (a subject, an instruction with content), or all of them."""
    ruled = [bool(rule_kinds(" ".join(group.texts))) for group in groups]
    if any(ruled):
        first = ruled.index(True)
        out: list[list[LessonLine]] = []
        for index in range(first, len(groups)):
            if ruled[index]:
                out.append(list(groups[index].lines))
            else:
                out[-1].extend(groups[index].lines)
        out[0] = [line for group in groups[:first] for line in group.lines] + out[0]
        return tuple(LessonGroup(tuple(lines)) for lines in out)
    kept = tuple(group for group in groups if _stands_alone(group))
    return kept or tuple(groups)


def _stands_alone(group: LessonGroup) -> bool:
    for line in group.lines:
        subject = line.subject
        if rule_kinds(line.text) or subject.identifiers or subject.units or subject.numbers:
            return True
        if (
            line.role in ("instruction", "prohibition", "correction", "preference")
            and len(specific_tokens(line.text)) >= 3
        ):
            return True
    return False


def lesson_confidence(confidence: float, verifier: VerifierView | None) -> float:
    """How far the lesson can be trusted — not how much the verdict matters (that is salience): objective
    verifier data in the verdict makes it `VERIFIER_CONFIDENCE`; the user's words alone are as trustworthy as the
    classifier's reading of them. A strongly felt but vague complaint is significant and salient, yet
    low-confidence: it starts as a `candidate`, recallable, out of skills and world models until more evidence
    confirms it."""
    objective = verifier is not None and verifier.outcome != "unknown"
    return round(min(max(confidence, VERIFIER_CONFIDENCE if objective else 0.0), 1.0), 4)


# ---------------------------------------------------------------------------------------------------------
# Drafts

_TITLE_PREFIX: Final = re.compile(r"^\s*(?:avoid|repair|success|prefer|fix|do)\s*(?:\([^)]*\))?\s*[:：]\s*", re.I)


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
    #: the lesson in the feedback's words (one line per sentence) and its roles: what recall renders
    lesson: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    subject: Subject = field(default_factory=Subject)
    #: what was taken out of the feedback as this attempt's own content (kept on the record)
    instance: list[str] = field(default_factory=list)
    #: what the judged attempt answered and what was expected of it (`attempt_answers`)
    answers: list[str] = field(default_factory=list)
    #: what the lesson is about, as its trigger lists it: its names and the files it was learnt on, else its
    #: units (recall asks the request to name one of these)
    terms: list[str] = field(default_factory=list)
    #: a lesson that names nothing: its own content words (recall asks the request to use two of them)
    words: list[str] = field(default_factory=list)

    def embed_text(self) -> str:
        """What the experience's vector encodes: title, trigger and procedure."""
        return "\n".join(part for part in (self.title, self.trigger, self.procedure) if part)

    @property
    def skill_eligible(self) -> bool:
        return self.experience_type in SKILL_ELIGIBLE_TYPES

    def lesson_record(self) -> dict[str, Any]:
        """The `lesson_json` column: the lesson lines, their roles, the subject and what was left out as this
        attempt's own content."""
        return {
            "lines": list(self.lesson),
            "roles": list(self.roles),
            "subject": subject_json(self.subject),
            "terms": list(self.terms),
            "words": list(self.words),
            "instance": list(self.instance[:MAX_LINES]),
            "answers": list(self.answers[:MAX_LINES]),
        }


def subject_json(subject: Subject) -> dict[str, Any]:
    return {
        "identifiers": list(subject.identifiers),
        "units": [u.surface or u.canonical for u in subject.units],
        "numbers": list(subject.numbers),
    }


def subject_from_json(data: Any, fallback_text: str = "") -> Subject:
    """The stored subject of an experience (`lesson_json.subject`), or one read from its text (older rows)."""
    if isinstance(data, Mapping) and isinstance(data.get("identifiers"), list):
        return Subject(
            identifiers=tuple(str(i) for i in data["identifiers"]),
            units=tuple(units(" ".join(str(u) for u in data.get("units") or []))),
            numbers=tuple(str(n) for n in data.get("numbers") or []),
        )
    return subject_of(fallback_text)


def titled(body: str) -> str:
    """The title: the lesson's first line as written (a stored type prefix such as "Avoid:" dropped)."""
    return clip(_TITLE_PREFIX.sub("", squash(body)).rstrip(" ;；"), TITLE_CHARS)


def input_files(episode: EpisodeFacts, verifier: VerifierView | None) -> list[str]:
    """The files the task worked from: those its request names, minus its output (the files the agent wrote, the
    verifier's answer file, a file the request asks to write): every task of a kind writes the same answer file,
    which says nothing about what a lesson is about."""
    output = {name.casefold() for name in episode.written}
    if verifier is not None and verifier.file:
        output.add(verifier.file.casefold())
    files: list[str] = []
    requested = requested_outputs(episode.task)
    for match in FILE_NAME.finditer(episode.task):
        name = match.group(0)
        if name.casefold() in output or name.casefold() in requested:
            continue
        files.append(name)
    return files


def subject_terms(subject: Subject, episode: EpisodeFacts, verifier: VerifierView | None) -> list[str]:
    """What a lesson is about, for its trigger: the lesson's identifiers and units, then the files the task worked
    from (the lesson came from work on them)."""
    written = {name.casefold() for name in episode.written}
    names = [name for name in subject.identifiers if name.casefold() not in written]
    terms = [*names, *input_files(episode, verifier), *(u.surface or u.canonical for u in subject.units)]
    out: list[str] = []
    for term in terms:
        if term and term.casefold() not in {t.casefold() for t in out}:
            out.append(term)
    return out[:SUBJECT_TERMS]


def recall_terms(subject: Subject, episode: EpisodeFacts, verifier: VerifierView | None) -> list[str]:
    """The terms a request must name for the lesson to be recalled without a close match in meaning: its names and
    the files it was learnt on; a unit alone only when the lesson names nothing else ("cents" or "kg" are words of
    every company's exports, so they do not say which subject a lesson is about); and the company the task named
    ("Ossory Linen"): a house convention holds for every file of that house."""
    written = {name.casefold() for name in episode.written}
    names = [name for name in subject.identifiers if name.casefold() not in written]
    terms = [*names, *input_files(episode, verifier)] or [u.surface or u.canonical for u in subject.units]
    return list(dict.fromkeys([*terms[: SUBJECT_TERMS - 1], *owner_names(episode.task)[:1], *terms]))[:SUBJECT_TERMS]


#: Content words a lesson without names keeps for recall.
LESSON_WORDS: Final = 6


def lesson_words(lines: Sequence[str]) -> list[str]:
    """The distinctive words of a lesson that names nothing (no identifier, file or unit): its content words
    other than cue words, longest first ("force", "push", "main" of "Never force-push to main.")."""
    words = [w for w in specific_tokens(" ".join(lines)) if w.isascii() and w.isalpha() and len(w) >= 3]
    words += [w for part in specific_tokens(" ".join(lines)) if "-" in part for w in part.split("-") if len(w) >= 3]
    return list(dict.fromkeys(words))[:LESSON_WORDS]


def _trigger(terms: Sequence[str], episode: EpisodeFacts, tags: Sequence[str]) -> str:
    task = clip(first_sentence(episode.task) or episode.task, TRIGGER_TASK_CHARS) or "a similar request"
    about = f"Tasks involving {', '.join(terms)}" if terms else "Tasks like this one"
    domain = f" (domain: {', '.join(tags)})" if tags else ""
    return clip(f"{about}{domain}; learnt on “{task}”", 400)


def _verification(observed: Sequence[str]) -> str:
    """What the verifier observed, when it adds to the lesson's words; "" otherwise (a check that only repeats
    the lesson is noise in the recalled text)."""
    return clip(" ".join(observed), 400) if observed else ""


def _boundary(
    kind: ExperienceType, feedback: FeedbackFacts, episode: EpisodeFacts, verifier: VerifierView | None
) -> str:
    source = "verifier" if verifier is not None else "user"
    note = {
        "success_pattern": "Confirmed by one successful run; re-verify when the requested output differs.",
        "repair_instruction": "Not yet confirmed by a successful run.",
        "failure_avoidance": "Says what to avoid, not a proven procedure.",
        "preference": "A stated preference of this user.",
        "repair_validated": "",
    }[kind]
    task = clip(first_sentence(episode.task), 80)
    return clip(f"From {source} feedback {feedback.id} on “{task}” (episode {episode.episode_id}). {note}", 400)


def _unfinished(verifier: VerifierView | None, reading: Reading, episode: EpisodeFacts) -> str:
    """The lesson of a failure whose feedback only praised something: what looked done was not."""
    judged = f"the verifier gave {verifier.summary()}" if verifier is not None else "the user rejected it"
    praise = next((line.source for line in reading.lines if line.role == "praise"), "")
    claim = (praise or first_sentence(episode.reply)).rstrip(" .。")
    return clip(f"Do not treat this result as final ({judged}) even when “{claim}”.", LINE_CHARS)


def draft_experiences(
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    assessment: Assessment,
    domains: Mapping[str, str] | None = None,
) -> list[ExperienceDraft]:
    """One draft per lesson the feedback teaches (needs a significant assessment); `domains` is the tag table."""
    if not assessment.significant:
        raise ValueError("draft_experiences needs a significant assessment")
    groups: list[LessonGroup | None] = list(assessment.lessons) or [None]
    drafts = [_draft(feedback, episode, assessment, group, domains) for group in groups]
    return [d for d in drafts if d is not None]


def _draft(
    feedback: FeedbackFacts,
    episode: EpisodeFacts,
    assessment: Assessment,
    group: LessonGroup | None,
    domains: Mapping[str, str] | None,
) -> ExperienceDraft | None:
    verifier = feedback.verifier
    kind = assessment.kind_of(group)
    lesson = group.texts if group is not None else []
    roles = group.roles if group is not None else []
    subject = group.subject if group is not None else Subject()
    observed = assessment.observed_for(group)
    if not lesson and observed and kind != "success_pattern":
        lesson, roles = observed[:MAX_LINES], ["observation"] * len(observed[:MAX_LINES])
        subject = subject_of(" ".join(lesson))
    if not lesson and kind == "failure_avoidance":
        lesson, roles = [_unfinished(verifier, assessment.reading, episode)], ["diagnosis"]
    lesson = lesson[:MAX_LINES]
    terms = subject_terms(subject, episode, verifier)
    tags = domain_tags([episode.task, *lesson, *episode.tools, verifier.task if verifier else "", *terms], domains)
    if kind == "success_pattern":
        steps = list(episode.steps[:MAX_STEPS])
        if not steps and episode.reply:
            steps = [clip(first_sentence(episode.reply), STEP_CHARS)]
        if not lesson:  # what the approval said was right, when it said something
            lesson = [line.text for line in assessment.reading.praise][:2]
            roles = ["praise"] * len(lesson)
        procedure_lines = _unique([*lesson, *steps])
        if not procedure_lines:
            return None
        title = titled(lesson[0] if lesson else episode.task)
    else:
        procedure_lines = lesson
        title = titled(lesson[0])
    sources = ["verifier_feedback"] if verifier is not None else []
    if feedback.text.strip():
        sources.append("user_feedback" if verifier is None else "feedback_text")
    return ExperienceDraft(
        experience_type=kind,
        polarity=assessment.polarity,
        title=title,
        trigger=_trigger(terms, episode, tags),
        procedure=numbered(procedure_lines),
        verification=_verification(observed if lesson != observed else []),
        boundary=_boundary(kind, feedback, episode, verifier),
        tags=tags,
        confidence=assessment.confidence,
        salience=assessment.salience,
        verifier_meta=verifier.meta(record_lines(verifier)) if verifier is not None else None,
        sources=sources,
        lesson=list(lesson),
        roles=list(roles),
        subject=subject,
        instance=assessment.reading.instance,
        answers=attempt_answers(verifier, episode),
        terms=(terms_for_recall := recall_terms(subject, episode, verifier)),
        words=[] if terms_for_recall else lesson_words(lesson),
    )


def attempt_answers(verifier: VerifierView | None, episode: EpisodeFacts) -> list[str]:
    """What the judged attempt answered and what was expected of it, as text: the verifier's expected and actual
    values and the agent's reply. Kept with the lesson as its attempt's content, so a block that recalls the
    lesson for another task knows these values are that task's (`rules.block_filter`)."""
    out: list[str] = []
    if verifier is not None:
        for value in (verifier.expected, verifier.actual):
            if value not in (None, "", {}, []):
                out.append(clip(json.dumps(value, ensure_ascii=False, default=str), 300))
    if episode.reply:
        out.append(clip(episode.reply, 300))
    return out


def _unique(lines: Iterable[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        if line and not any(same_line(line, kept) for kept in out):
            out.append(line)
    return out


def same_line(a: str, b: str) -> bool:
    """Two lesson lines say the same thing: equal up to case and spacing, or ≥ 0.9 token overlap."""
    if squash(a).casefold().rstrip(" .。") == squash(b).casefold().rstrip(" .。"):
        return True
    return token_similarity(a, b) >= 0.9


# ---------------------------------------------------------------------------------------------------------
# The LLM's wording


#: A value in a removed phrase: a number of two or more digits, or a name with a digit, a dash or an underscore.
_VALUE_TOKEN: Final = re.compile(r"\d[\d.,]*\d|[A-Za-z][\w-]*[\d_-][\w-]*")


def _instance_values(draft: ExperienceDraft) -> set[str]:
    """The values the instance filter took out of the feedback (`draft.instance`) that the lesson itself does not
    name: a rewording that puts one back ("use zk_3172", "it should be 58.61407") restates this attempt's answer,
    whichever side of the verdict it came from."""
    lesson = " ".join(draft.lesson).casefold()
    found = {m.group(0).casefold() for phrase in draft.instance for m in _VALUE_TOKEN.finditer(phrase)}
    return {value for value in found if value not in lesson and len(value) >= 3}


def apply_refinement(
    draft: ExperienceDraft,
    output: FeedbackRefineOutput,
    evidence: str,
    instance: InstanceContext | None = None,
) -> ExperienceDraft | None:
    """The LLM's wording of a rule draft; None when it is unusable: an empty field, a procedure sharing no
    specific word with the evidence (an invented lesson), one that drops a key term of the lesson — a name, a
    unit or a convention number the feedback gave (a rewording that loses "0.4536" or `weight` teaches less than
    the feedback's own words) — or one that states this attempt's values (`instance`: a model copies "expected
    1234, not 1234000" into its wording as readily as a verifier prints it, and puts back the corrected value the
    instance filter took out of a user's words). Its other lines that do are dropped.

    The type, polarity, confidence, salience, tags, subject and verifier data stay the rule draft's: the
    objective outcome decides them, not the wording. The feedback's own lines stay in `lesson` (what compact
    recall renders), and the rule draft's guidance lines are kept after the model's.
    """
    title, trigger, procedure = squash(output.title), squash(output.trigger), output.procedure.strip()
    if not title or not trigger or not procedure:
        return None
    if not set(specific_tokens(procedure)) & set(content_tokens(evidence)):
        return None
    parameters = [n for n in numbers(" ".join(draft.lesson)) if number_key(n.value) in draft.subject.numbers]
    wanted = key_terms(draft.lesson, parameters)
    if not keeps_terms(procedure + "\n" + title, wanted):
        return None
    context = instance or InstanceContext()
    taken_out = _instance_values(draft)

    def own(line: str) -> bool:  # no value of this attempt, nor one the instance filter took out
        return (
            bool(line.strip())
            and not instance_specific(line)
            and not states_instance(line, context)
            and not any(value in line.casefold() for value in taken_out)
        )

    if not own(procedure) or not own(title):
        return None
    avoid = [squash(line) for line in output.avoid if own(line)]
    prefer = [squash(line) for line in output.prefer if own(line)]
    verification = squash(output.verification) if own(output.verification) else ""
    said = [unnumbered(line) for line in procedure.splitlines() if line.strip()]
    return replace(
        draft,
        title=titled(title),
        trigger=clip(f"{trigger} ({draft.trigger})", 400) if draft.subject.identifiers else clip(trigger, 400),
        procedure=procedure,
        verification=verification or draft.verification,
        boundary=squash(output.boundary) or draft.boundary,
        anti_pattern=merge_lines([], [*avoid, *draft.anti_pattern], exclude=said, cap=MAX_LINES),
        preference=merge_lines([], [*prefer, *draft.preference], exclude=said, cap=MAX_LINES),
        drafted_by="llm",
    )


def keeps_terms(text: str, wanted: Iterable[str]) -> bool:
    """Whether `text` still carries every key term (names, canonical units, numbers) of a lesson."""
    have = key_terms([text], numbers(text))
    blob = text.casefold()
    return all(term in have or term.casefold() in blob for term in wanted)


# ---------------------------------------------------------------------------------------------------------
# Lines by type, and merging


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


def may_merge(existing_type: str, new_type: str) -> bool:
    """Whether evidence of `new_type` may join an experience of `existing_type` (the result keeps a coherent
    type: a failure lesson never absorbs a success, which becomes its own anchor)."""
    return merged_type(existing_type, new_type) is not None


def merged_type(existing_type: str, new_type: str) -> str | None:
    """The type after merging evidence of `new_type` into an experience of `existing_type` (None: no merge).

    Successes keep their type when failures are added (polarity goes mixed); an avoidance absorbing a fix becomes
    a repair instruction; a repair instruction only becomes validated through a later success that followed it.
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

    Newest first: recall shows only the first few guidance lines of an experience, and the latest lesson is the
    one the agent has not applied yet; when over `cap`, the oldest lines go."""
    kept = [str(line) for line in existing if isinstance(line, str) and line.strip()]
    taken = [*kept, *exclude]
    fresh: list[str] = []
    for line in new:
        if line.strip() and not any(same_line(line, old) for old in taken):
            fresh.append(line)
            taken.append(line)
    return [*fresh, *kept][:cap]


#: Share of a new wording's content words the kept lines lack for it to be kept too.
NOVEL_WORDS: Final = 0.5


def merged_lesson(existing: Sequence[str], new: Sequence[str]) -> list[str]:
    """The lesson lines of an experience after the same convention was taught again: the first wording stays
    first; a new wording is added when it says something the kept lines do not — another language, another name
    or number, or mostly other words (a paraphrase that only restates is counted in the support, not shown
    again) — at most `MAX_LESSON_LINES`."""
    out = [line for line in existing if line.strip()]
    for line in new:
        if any(same_line(line, old) for old in out):
            continue
        known = key_terms(out, numbers(" ".join(out)))
        fresh = key_terms([line], numbers(line)) - known
        other_script = _script(line) not in {_script(old) for old in out}
        words = set(specific_tokens(line))
        novel = len(words - set(specific_tokens(" ".join(out)))) / len(words) if words else 0.0
        if (fresh or other_script or novel >= NOVEL_WORDS) and len(out) < MAX_LESSON_LINES:
            out.append(line)
    return out


def _script(text: str) -> str:
    return "cjk" if re.search(r"[\u3400-\u9fff]", text) else "latin"


_THOUSANDS_SEPARATOR: Final = re.compile(r"(?<=\d),(?=\d{3})")
_SUFFIX: Final = re.compile(r"(?:ing|ed|es|s|ly)$")


def _stems(text: str) -> set[str]:
    """Content words reduced to a crude stem ("divided", "divide" → "divid"; "1,000" → "1000"), so a repair and the
    episode that followed it match across inflections."""
    stems: set[str] = set()
    for token in content_tokens(_THOUSANDS_SEPARATOR.sub("", text)):
        if token.isascii() and token.isalpha() and len(token) > 4:
            token = _SUFFIX.sub("", token).rstrip("e")
        stems.add(token)
    return stems


def repair_adherence(repair_text: str, trigger: str, episode_text: str) -> float:
    """Share of a repair's distinctive words (its lesson, minus the task words its trigger already has) that a
    later episode's text uses: whether that episode followed the same repair."""
    distinctive = _stems(" ".join(specific_tokens(repair_text))) - _stems(trigger)
    if not distinctive:
        return 0.0
    return len(distinctive & _stems(episode_text)) / len(distinctive)


def lesson_of(lesson: Any, procedure: str) -> list[str]:
    """The stored lesson lines of an experience (`lesson_json.lines`), else its procedure's steps (rows stored
    before lessons were kept apart)."""
    if isinstance(lesson, Mapping) and isinstance(lesson.get("lines"), list):
        return [str(line) for line in lesson["lines"] if str(line).strip()]
    return numbered_steps(procedure)


_TRIGGER_HEAD: Final = re.compile(r"^Tasks (?:involving [^;(]*|like this one)")


def retrigger(trigger: str, terms: Sequence[str]) -> str:
    """A trigger naming `terms` (after a merge taught the convention with more names) in place of its old ones."""
    if not terms:
        return trigger
    head = f"Tasks involving {', '.join(terms[:SUBJECT_TERMS])}"
    return clip(
        _TRIGGER_HEAD.sub(head, trigger, count=1) if _TRIGGER_HEAD.match(trigger) else f"{head}; {trigger}", 400
    )
