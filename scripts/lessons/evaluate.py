"""Every family of a split through the real JSON-RPC service, with scripted naive answers, and what came back.

One run = one split, one feedback style (or `mixed`: the styles in turn, task by task), one freshly spawned service
(its own data home, feedback window 0, no LLM unless asked). All families of the split share the service's one
namespace, as a user's projects would, so a lesson that leaks into another family's task is seen. For each task in
order:

1. `turn.start` with the task's prompt (a session of its own per task) — the injected text is what is measured;
2. `turn.end` with the naive answer written to the task's output file and stated in the reply;
3. `feedback.submit` with the task's feedback in the run's style (`verifier_payload` also sends `raw.verifier`
   with `passed`/`total`, the expected and the naive answer and the task id), then `memory.flush`.

Measured at every `turn.start`, against what earlier tasks taught (`Measures`):

* **recall** — for each convention the task needs that an earlier task of its family taught: does the injected
  text carry the convention's key terms;
* **unrelated** — does the injected text carry a lesson of another family (any of its conventions' key terms);
  within the family, lessons the task does not need are counted apart (`extra`). Key terms are matched
  without the service's headings, labels and ids (`lesson_words`);
* **leaked values** — answer values of earlier tasks (their expected and naive answers: numbers of three or more
  digits or with decimals, strings of six or more characters) that appear in the injected text but in neither the
  task's own prompt nor any feedback's lesson sentence of the convention;
* **invented lines** — injected lines carrying a reading of a scale or unit (thousands, percent, fraction…) that
  no feedback text or prompt of the run ever used;
* **characters** injected per task.

Two baselines run on the same tasks and feedback without the service: `paste` (every earlier feedback text of
the family, verbatim, as a user would paste them) and `bm25` (the two earlier feedback texts of any family that
rank best for the task's prompt under Okapi BM25).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lessons.corpus import STYLES, Convention, Family, Task
from memos_bridge.client import ServiceClient
from memos_bridge.ids import CROCKFORD, PREFIXES

#: The service environment of every run: learn at once, no LLM unless the caller adds one.
SERVICE_ENV = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0", "MEMOS_BRIDGE_LLM__PROVIDER": "none"}
RUN_STYLES: tuple[str, ...] = (*STYLES, "mixed")
#: Words that read a scale or a unit into a number; a line carrying one that no source text used is invented.
READINGS = re.compile(
    r"\b(?:thousands?|millions?|billions?|percent(?:age)?s?|per\s+cent|fractions?|basis\s+points?|"
    r"in\s+cents|minor\s+units?|kilo(?:gram)?s?|pounds?|seconds|per\s+second|milliseconds?|hours?|minutes?)\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w])")
#: The service's ids (`fb_3SJWG10TWD9B`: a kind prefix and 12 Crockford base32 characters, `memos_bridge.ids`)
#: quoted in provenance lines. Their characters are random, and a key term such as "a digit then a letter at a
#: word's end" would find a lesson in an id: out of 300 runs with the ids re-drawn, 27 counted 2–4 tasks as
#: carrying another family's lesson when none did.
SERVICE_ID = re.compile(rf"\b(?:{'|'.join(map(re.escape, PREFIXES.values()))})[{CROCKFORD}]{{12}}\b")
#: The service's own words in an injected block — headings, labels, notices, tool hints, the time stamp it puts on
#: a past step — are not lessons: a key
#: term must not be credited (or blamed) because a label such as "Avoid:" contains it.
_BOILERPLATE = re.compile(
    r"</?relevant-memories>|^\s*#.*$|^UNTRUSTED DATA.*$|^Notes recalled.*$|^Follow-up tools:.*$|"
    r"\[(?:failure to avoid|what worked|correction \(not yet confirmed by a success\)|user preference|"
    r"repair confirmed by a later success|procedure|update to a recalled skill|verifier feedback)\]|"
    r"^\s*(?:Trigger|Fix|Avoid|Do|Check|Scope|Prefer|Instead|Timeline):|\b(?:Avoid|Prefer|Fix):\s|\(id=\w+\)|"
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d UTC\]",
    re.MULTILINE,
)


def lesson_words(injected: str) -> str:
    """The injected text without the renderer's own labels, headings and ids (what key terms are matched
    against)."""
    return SERVICE_ID.sub(" ", _BOILERPLATE.sub(" ", injected))


BM25_TOP = 2


def style_of(run_style: str, index: int) -> str:
    """The feedback style of the `index`-th task of a run (`mixed` takes the styles in turn)."""
    return STYLES[index % len(STYLES)] if run_style == "mixed" else run_style


def number_key(text: str) -> str:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return text
    return f"{value:.6f}".rstrip("0").rstrip(".")


def instance_values(task: Task) -> set[str]:
    """The answer values of a task that would be a leak elsewhere: numbers with 3+ digits or decimals, and
    strings of 6+ characters, from its expected and naive answers."""
    out: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, bool) or value is None:
            return
        elif isinstance(value, int | float):
            text = f"{value}"
            if sum(c.isdigit() for c in text.rstrip("0").rstrip(".")) >= 3 or (isinstance(value, float) and value % 1):
                out.add(number_key(text))
        elif isinstance(value, str) and len(value.strip()) >= 6:
            out.add(value.strip().casefold())

    walk(task.expected)
    walk(task.naive)
    return out


def values_in(text: str) -> set[str]:
    return {number_key(m.group(0)) for m in _NUMBER.finditer(text)}


def feedback_params(task: Task, style: str, episode_id: str, trace_ids: list[str]) -> dict[str, Any]:
    """`feedback.submit` params of a task's feedback in `style`."""
    params: dict[str, Any] = {
        "episodeId": episode_id,
        "traceId": trace_ids[-1] if trace_ids else None,
        "channel": "explicit",
        "polarity": "negative",
        "magnitude": 1.0,
        "raw": {"traceIds": trace_ids},
    }
    value = task.feedback[style]
    if task.passes:  # praise of a right answer: a verified success
        params["polarity"] = "positive"
    if style == "verifier_payload":
        block = dict(value) if isinstance(value, dict) else {"message": str(value)}
        total = block.get("total", 1)
        verdict: dict[str, Any] = {"task": task.id, "passed": total if task.passes else block.get("passed", 0)}
        verdict["total"] = total
        if task.passes:
            params["rationale"] = str(block.get("message", "")) or "Correct."
        else:
            verdict.update(expected=task.expected, actual=task.naive, message=block.get("message", ""))
        params["raw"]["verifier"] = verdict
    else:
        params["rationale"] = str(value)
    return {k: v for k, v in params.items() if v is not None}


# ---------------------------------------------------------------------------------------------------------
# measures


@dataclass
class TaskRecord:
    family: str
    task: str
    style: str
    injected: str
    needed: list[str]  # conventions needed and taught earlier in the family
    recalled: list[str]
    extra: list[str]  # the family's other taught conventions that came back
    unrelated: list[str]  # "<family>/<convention>" of other families that came back
    leaked: list[str]
    invented: list[str]
    hits: list[dict[str, Any]] = field(default_factory=list)
    turn_ms: float = 0.0
    #: where each needed convention that did not come back was lost (`lost_at`), with `--explain`
    lost: list[str] = field(default_factory=list)


@dataclass
class Measures:
    """Totals over task records, with the per-family and per-style breakdowns built by `summarise`."""

    needed: int = 0
    recalled: int = 0
    tasks: int = 0
    unrelated_tasks: int = 0
    extra: int = 0
    leaked: int = 0
    invented: int = 0
    chars: int = 0
    max_chars: int = 0
    lost: dict[str, int] = field(default_factory=dict)

    def add(self, record: TaskRecord) -> None:
        for stage in record.lost:
            self.lost[stage] = self.lost.get(stage, 0) + 1
        self.tasks += 1
        self.needed += len(record.needed)
        self.recalled += len(record.recalled)
        self.unrelated_tasks += bool(record.unrelated)
        self.extra += len(record.extra)
        self.leaked += len(record.leaked)
        self.invented += len(record.invented)
        self.chars += len(record.injected)
        self.max_chars = max(self.max_chars, len(record.injected))

    @property
    def recall(self) -> float:
        return self.recalled / self.needed if self.needed else 1.0

    @property
    def unrelated_rate(self) -> float:
        return self.unrelated_tasks / self.tasks if self.tasks else 0.0

    @property
    def mean_chars(self) -> float:
        return self.chars / self.tasks if self.tasks else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "needed": self.needed,
            "recalled": self.recalled,
            "recall": round(self.recall, 4),
            "tasks": self.tasks,
            "unrelatedTasks": self.unrelated_tasks,
            "unrelatedRate": round(self.unrelated_rate, 4),
            "extra": self.extra,
            "leakedValues": self.leaked,
            "inventedLines": self.invented,
            "meanChars": round(self.mean_chars, 1),
            "maxChars": self.max_chars,
            **({"lostAt": dict(sorted(self.lost.items()))} if self.lost else {}),
        }


#: Where a needed lesson that did not reach the block was lost, in the order a turn goes (`retrieval.explain`):
#: no channel found a lesson carrying it; a gate dropped every one that did (another work's, a rule that cannot
#: bear on the task, another subject); ranking passed them over; or the block's budget or its line choice left
#: the words out of a lesson it picked.
LOST_STAGES = ("not found", "work gate", "scope", "subject gate", "ranking", "block")


def lost_at(convention: Convention, entry: dict[str, Any]) -> str:
    """Where `convention`, needed and missing from the block, was lost in one turn's explain line."""
    carriers = [c for c in entry.get("candidates") or [] if convention.carried_by(lesson_words(str(c["text"])))]
    if not carriers:
        return "not found"
    verdicts = {c["verdict"] for c in carriers}
    if any(c["picked"] for c in carriers):
        return "block"
    if "kept" in verdicts:
        return "ranking"
    if "scope" in verdicts:
        return "scope"
    if "work" in verdicts:
        return "work gate"
    return "subject gate"


def read_explain(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The explain lines written since `offset` (bytes), and the new offset."""
    if not path.exists():
        return [], offset
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    lines = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return lines, offset + len(data)


def summarise(records: Iterable[TaskRecord], key: Callable[[TaskRecord], str]) -> dict[str, Measures]:
    out: dict[str, Measures] = {}
    for record in records:
        out.setdefault(key(record), Measures()).add(record)
    return out


def measure(
    family: Family,
    task: Task,
    style: str,
    injected: str,
    taught: dict[str, set[str]],
    earlier: Sequence[tuple[Family, Task]],
    sources: str,
    lesson_texts: str,
    attempts: dict[tuple[str, str], Sequence[str]] | None = None,
) -> TaskRecord:
    """What one injected text carried (module docstring). `taught` maps family name → conventions taught so far;
    `earlier` lists the tasks already run; `sources` is every feedback text and prompt of the run so far;
    `lesson_texts` the feedback texts themselves (a value a feedback states as part of a rule is no leak);
    `attempts` the values each earlier attempt copied from its input ((family, task id) → values). A retry's
    original task is the retry's own: its values are no leak there."""
    attempts = attempts or {}
    raw = injected
    injected = lesson_words(raw)
    mine = taught.get(family.name, set())
    needed = [c for c in task.needs if c in mine]
    recalled = [c for c in needed if family.conventions[c].carried_by(injected)]
    extra = [c for c in sorted(mine - set(task.needs)) if family.conventions[c].carried_by(injected)]
    unrelated: list[str] = []
    # Judged item by item (a line, or a numbered entry with its body): an item that carries a lesson of this
    # family is this family's, even when another family's key terms happen to match it too (two families with
    # a "cents" convention); an item that carries none of this family's lessons and all of another family's key
    # terms is unrelated. (Not the items together: two lines of one own lesson, "add two hours" and "the clock
    # is UTC", would carry a look-alike convention of another family between them.)
    foreign_items = [
        item for item in block_items(injected) if not any(c.carried_by(item) for c in family.conventions.values())
    ]
    for name, conventions in taught.items():
        if name == family.name:
            continue
        other = next(f for f, _ in earlier if f.name == name)
        unrelated += [
            f"{name}/{c}" for c in sorted(conventions) if any(other.conventions[c].carried_by(i) for i in foreign_items)
        ]
    same_task = {task.id, task.retry_of} - {None}
    own = values_in(task.prompt) | {v.casefold() for v in instance_values(task)} | input_values(family, task)
    for other_family, other_task in earlier:
        if other_family.name == family.name and other_task.id in same_task:
            own |= {v.casefold() for v in instance_values(other_task)}
            own |= set(attempts.get((other_family.name, other_task.id), ()))
    # a value that is a convention's own term (a control row's code, a flag) is the lesson, not a leak
    own |= {
        value
        for _, other_task in earlier
        for value in instance_values(other_task)
        if any(
            c.key_terms and any(re.fullmatch(t, value, re.IGNORECASE) for t in c.key_terms)
            for c in family.conventions.values()
        )
    }
    present = values_in(injected)
    lowered = injected.casefold()
    leaked: set[str] = set()
    # numbers of a rule: after an operator in any feedback ("÷ 100"), or in the family's own oracle lessons
    rule_numbers = values_in(_rule_numbers(lesson_texts))
    rule_numbers |= values_in(" ".join(c.oracle for c in family.conventions.values()))
    for other_family, other_task in earlier:
        theirs = instance_values(other_task) | set(attempts.get((other_family.name, other_task.id), ()))
        for value in theirs - own:
            hit = value in present if re.fullmatch(r"-?[\d.]+", value) else value in lowered
            if hit and value not in rule_numbers:
                leaked.add(value)
    invented = [
        line.strip()
        for line in injected.splitlines()
        if any(m.group(0).casefold() not in sources for m in READINGS.finditer(line))
    ]
    return TaskRecord(family.name, task.id, style, raw, needed, recalled, extra, unrelated, sorted(leaked), invented)


def input_values(family: Family, task: Task) -> set[str]:
    """Every number in the task's own input files: what its block may show without leaking."""
    out: set[str] = set()
    for name in task.files:
        path = family.data_dir / name
        if path.is_file():
            out |= values_in(path.read_text(encoding="utf-8", errors="replace"))
    return out


_ITEM_START = re.compile(r"\n(?=\s*(?:\d+\.\s|[-*•]\s|#))")


def block_items(text: str) -> list[str]:
    """The items of an injected text: its numbered entries (each with its indented body) and bullet lines; a
    text without such structure (a pasted feedback) is one item per line."""
    items = [item.strip() for item in _ITEM_START.split(text) if item.strip()]
    if len(items) <= 1:
        items = [line.strip() for line in text.splitlines() if line.strip()]
    return items


def _rule_numbers(text: str) -> str:
    """The numbers feedback gives as parameters of a rule ("by 0.4536", "÷100", "+10 hours", "in 0.1 °C units")."""
    operated = re.finditer(r"(?:by|[×x*/÷]|乘以|除以|加|减|UTC|GMT)\s*[-+]?\s*(\d[\d,]*(?:\.\d+)?)", text)
    unit_sizes = re.finditer(
        r"(\d[\d,]*(?:\.\d+)?)\s*(?:°\s*[CF]|[A-Za-z%]{1,4})?\s+units?\b", text
    )  # "in 0.1 °C units"
    return " ".join(m.group(1) for m in (*operated, *unit_sizes))


# ---------------------------------------------------------------------------------------------------------
# the service run


@dataclass
class RunResult:
    split: str
    style: str
    arm: str  # service | paste | bm25
    records: list[TaskRecord]
    wall_s: float
    experiences: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ExperienceCount:
    """How the typed experiences of a run line up with the conventions its feedback taught."""

    experiences: int = 0
    conventions: int = 0  # conventions taught (needed by a task that drew feedback)
    covered: int = 0  # taught conventions some experience carries
    mixed: int = 0  # experiences carrying the key terms of two or more conventions
    unattributed: int = 0  # experiences carrying no convention's key terms

    def as_json(self) -> dict[str, Any]:
        return {
            "experiences": self.experiences,
            "conventionsTaught": self.conventions,
            "conventionsCovered": self.covered,
            "experiencesPerConvention": round(self.experiences / self.conventions, 2) if self.conventions else 0.0,
            "mixedExperiences": self.mixed,
            "unattributedExperiences": self.unattributed,
        }


def count_experiences(families: Sequence[Family], experiences: Iterable[dict[str, Any]]) -> ExperienceCount:
    """Each experience's text (title, procedure) against every taught convention's key terms."""
    taught = [(f, c) for f in families for c in f.conventions.values() if any(c.id in t.needs for t in f.tasks)]
    out = ExperienceCount(conventions=len(taught))
    seen: set[tuple[str, str]] = set()
    for exp in experiences:
        out.experiences += 1
        text = SERVICE_ID.sub(" ", f"{exp.get('title') or ''}\n{exp.get('procedure') or ''}")
        carried = [(f.name, c.id) for f, c in taught if c.carried_by(text)]
        seen.update(carried)
        out.mixed += len(carried) > 1
        out.unattributed += not carried
    out.covered = len(seen)
    return out


#: How a host opens sessions: `task` — one session per task, tasks hours apart; `family` — one session for all of a
#: family's tasks, minutes apart (what a host that stays open all day does).
SESSIONS: tuple[str, ...] = ("task", "family")


#: The agent kind the scripted agent runs as.
EVAL_AGENT = "lessons-eval"
#: Where the families' memories live (`run_service`'s `namespaces`).
NAMESPACES: tuple[str, ...] = ("shared", "family")


def session_id(family: Family, task: Task, sessions: str) -> str:
    """The session a task runs in: its family's, its own, or (a retry) that of the task it retries."""
    if sessions == "family":
        return family.name
    return f"{family.name}-{task.retry_of or task.id}"


#: How the scripted agent works: `files` reads the input and writes the answer file itself; `script` writes a
#: Python script that reads the inputs and writes the answer, then runs it (what a coding agent does: the input
#: files are named inside the script it wrote, and the answer file only in the run's output).
SHAPES: tuple[str, ...] = ("files", "script")


def attempt_values(family: Family, task: Task) -> list[str]:
    """Numbers a coding agent copies from the task's input into its script (a small model often types the rows
    it saw instead of reading the file): the first numbers of three or more digits or with decimals of the
    task's first input file. Seen in another task's block, they are a leak."""
    if not task.files:
        return []
    path = family.data_dir / task.files[0]
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    found: list[str] = []
    for match in _NUMBER.finditer(text):
        value = number_key(match.group(0))
        digits = sum(c.isdigit() for c in value)
        if (digits >= 3 or "." in value) and value not in found:
            found.append(value)
        if len(found) >= 6:
            break
    return found


def _reply(
    task: Task, answer_value: Any, shape: str = "files", copied: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], str]:
    """The scripted agent's steps and reply: it writes `answer_value` and says what it found. In the script
    shape the script also holds `copied`, values typed in from the input (`attempt_values`)."""
    answer = json.dumps(answer_value, ensure_ascii=False)
    if shape == "script":
        reads = "\n".join(f"rows_{i} = list(csv.DictReader(open({name!r})))" for i, name in enumerate(task.files))
        seen = f"\nseen = [{', '.join(copied)}]" if copied else ""
        script = f"import csv, json\n{reads}{seen}\nresult = {{}}\njson.dump(result, open({task.output!r}, 'w'))\n"
        calls = [
            {"name": "write_file", "input": {"path": "solve.py", "content": script}, "output": "ok"},
            {"name": "run_python", "input": {"script": "solve.py"}, "output": f"wrote {task.output}"},
        ]
        return calls, f"Done: wrote {task.output} with {answer}."
    calls = [
        {"name": "read_file", "input": {"path": task.files[0] if task.files else "input"}, "output": "(read)"},
        {"name": "write_file", "input": {"path": task.output, "content": answer}, "output": "ok"},
    ]
    return calls, f"Done: wrote {task.output} with {answer}."


def naive_reply(task: Task, shape: str = "files", copied: Sequence[str] = ()) -> tuple[list[dict[str, Any]], str]:
    """The naive agent: it writes the naive answer."""
    return _reply(task, task.naive, shape, copied)


def expected_reply(task: Task, shape: str = "files", copied: Sequence[str] = ()) -> tuple[list[dict[str, Any]], str]:
    """A learning agent that applied the recalled lessons: it writes the expected answer."""
    return _reply(task, task.expected, shape, copied)


def success_params(task: Task, episode_id: str, trace_ids: list[str]) -> dict[str, Any]:
    """`feedback.submit` params of a verified success."""
    return {
        "episodeId": episode_id,
        "channel": "explicit",
        "polarity": "positive",
        "magnitude": 1.0,
        "rationale": "Correct.",
        "raw": {"traceIds": trace_ids, "verifier": {"task": task.id, "passed": 1, "total": 1}},
    }


def run_service(
    families: Sequence[Family],
    run_style: str,
    *,
    learner: bool = False,
    shape: str = "files",
    env: dict[str, str] | None = None,
    home: Path | None = None,
    progress: Callable[[str], None] | None = None,
    rpc_timeout_s: float = 180.0,
    keep_log: Path | None = None,
    sessions: str = "task",
    after_task: Callable[[ServiceClient, Family, Task, TaskRecord], None] | None = None,
    explain: bool = False,
    namespaces: str = "shared",
) -> RunResult:
    """Every family of `families` in order through one spawned service (module docstring).

    With `learner`, the scripted agent passes a task whose needed conventions were all taught earlier and
    all came back in its injection (it writes the expected answer and gets a verified "Correct."), as an
    agent that uses its memory would. Successes crystallise skills, so this measures whether lessons still
    come back once a family has skills. `shape` is how the scripted agent works (`SHAPES`). `sessions` is how a
    host opens sessions (`SESSIONS`): one per task, hours apart, or one per family with its tasks minutes apart
    (a host that keeps one session open while a user asks one thing after another). A retry (`Task.retry_of`)
    runs in the session of the task it retries, minutes after it. A passing task (`Task.passes`) gets its
    answer right and its praise as positive feedback. With `explain`, the service writes each turn's recall
    decisions (`retrieval.explain_log`) and every needed convention that did not come back is placed
    (`lost_at`, in `TaskRecord.lost`). `namespaces` (`NAMESPACES`): every family in the service's one namespace
    (`shared`, a host that keeps one memory for all its work), or each family in a workspace of its own
    (`family`, as the MCP server and the Claude Code hooks keep one per project folder).
    """
    started = time.perf_counter()
    records: list[TaskRecord] = []
    taught: dict[str, set[str]] = {}
    earlier: list[tuple[Family, Task]] = []
    sources: list[str] = []
    feedback_texts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="memos-lessons-") as scratch:
        data_home = home or Path(scratch) / "home"
        log = (Path(scratch) / "service.log").open("wb")
        explain_path = Path(scratch) / "explain.jsonl"
        explained = {"MEMOS_BRIDGE_RETRIEVAL__EXPLAIN_LOG": str(explain_path)} if explain else {}
        explain_offset = 0
        client = ServiceClient.spawn(data_home, env={**SERVICE_ENV, **(env or {}), **explained}, stderr=log)
        try:
            client.call("core.health", {}, timeout=rpc_timeout_s)
            ts = 1_700_000_000_000
            attempts: dict[tuple[str, str], Sequence[str]] = {}
            opened: set[str] = set()
            for family in families:
                ts += 3 * 3_600_000  # families hours apart
                for index, task in enumerate(family.tasks):
                    style = style_of(run_style, index)
                    if sessions == "family" or task.retry_of:
                        ts += 5 * 60_000  # minutes apart, in one session
                    else:
                        ts += 3 * 3_600_000  # hours apart: every task is a new episode
                    session = session_id(family, task, sessions)
                    if namespaces == "family" and session not in opened:
                        space = {"agentKind": EVAL_AGENT, "profileId": "default", "workspaceId": family.name}
                        client.call(
                            "session.open",
                            {"agent": EVAL_AGENT, "sessionId": session, "namespace": space},
                            timeout=rpc_timeout_s,
                        )
                        opened.add(session)
                    sources.append(task.prompt)
                    t0 = time.perf_counter()
                    # A deadline as long as the call's own timeout: this run measures what is recalled, and a
                    # busy machine (CI) must not change that by cutting retrieval or routing short.
                    deadline = int(time.time() * 1000 + rpc_timeout_s * 1000)
                    result = client.call(
                        "turn.start",
                        {
                            "agent": EVAL_AGENT,
                            "sessionId": session,
                            "userText": task.prompt,
                            "ts": ts,
                            "deadlineAt": deadline,
                        },
                        timeout=rpc_timeout_s,
                    )
                    turn_ms = (time.perf_counter() - t0) * 1000
                    injected = str(result.get("injectedContext") or "")
                    record = measure(
                        family,
                        task,
                        style,
                        injected,
                        taught,
                        earlier,
                        "\n".join(sources).casefold(),
                        "\n".join(feedback_texts),
                        attempts,
                    )
                    record.hits = [
                        {k: h.get(k) for k in ("refKind", "refId", "score", "channels")}
                        for h in result.get("hits") or []
                    ]
                    record.turn_ms = round(turn_ms, 1)
                    if explain:
                        entries, explain_offset = read_explain(explain_path, explain_offset)
                        turn = next((e for e in reversed(entries) if e.get("reason") != "tool_driven"), None)
                        missed = [c for c in record.needed if c not in record.recalled]
                        record.lost = [lost_at(family.conventions[c], turn) if turn else "not found" for c in missed]
                    records.append(record)
                    episode = result["query"]["episodeId"]
                    passes = task.passes or (
                        learner
                        and set(task.needs) <= taught.get(family.name, set())
                        and (record.recalled == record.needed)
                    )
                    copied = attempt_values(family, task) if shape == "script" else []
                    attempts[(family.name, task.id)] = copied
                    calls, reply = expected_reply(task, shape, copied) if passes else naive_reply(task, shape, copied)
                    ended = client.call(
                        "turn.end",
                        {
                            "agent": EVAL_AGENT,
                            "sessionId": session,
                            "episodeId": episode,
                            "agentText": reply,
                            "toolCalls": calls,
                            "ts": ts + 60_000,
                        },
                        timeout=rpc_timeout_s,
                    )
                    trace_ids = list(ended.get("traceIds") or [])
                    if task.passes:
                        params = feedback_params(task, style, episode, trace_ids)
                    elif passes:
                        params = success_params(task, episode, trace_ids)
                    else:
                        params = feedback_params(task, style, episode, trace_ids)
                    params["ts"] = ts + 120_000
                    client.call("feedback.submit", params, timeout=rpc_timeout_s)
                    client.call("memory.flush", {}, timeout=rpc_timeout_s)
                    if not passes or task.passes:
                        text = task.feedback_text(style)
                        sources.append(text)
                        feedback_texts.append(text)
                    taught.setdefault(family.name, set()).update(task.needs)
                    earlier.append((family, task))
                    if after_task is not None:  # a debugging view (eval_lessons.py --trace): what this task taught
                        after_task(client, family, task, record)
                    if progress:
                        progress(
                            f"{family.name}/{task.id} {style}: {len(record.recalled)}/{len(record.needed)} recalled"
                            + (" (passed)" if passes else "")
                        )
            if namespaces == "family":  # each family's lessons in its own workspace, read through its sessions
                one_per_family = {session_id(f, f.tasks[0], sessions): f for f in families}
                policies = [
                    p
                    for session in one_per_family
                    for p in client.call(
                        "memory.list_policies", {"limit": 500, "sessionId": session}, timeout=rpc_timeout_s
                    )["policies"]
                ]
            else:
                policies = client.call("memory.list_policies", {"limit": 500}, timeout=rpc_timeout_s)["policies"]
        finally:
            client.close()
            log.close()
            if keep_log is not None:  # the service's stderr, for reading what its stages logged
                keep_log.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(scratch) / "service.log", keep_log)
    experiences = [
        {k: p.get(k) for k in ("id", "experienceType", "status", "title", "support", "procedure", "trigger")}
        for p in policies
        if p.get("inducedBy") == "feedback.experience"
    ]
    split = families[0].split if families else ""
    return RunResult(split, run_style, "service", records, round(time.perf_counter() - started, 1), experiences)


# ---------------------------------------------------------------------------------------------------------
# baselines


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+|[\u4e00-\u9fff]", text.lower())


class Bm25:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over a growing list of documents."""

    def __init__(self) -> None:
        self.docs: list[list[str]] = []
        self.texts: list[str] = []

    def add(self, text: str) -> None:
        self.docs.append(_words(text))
        self.texts.append(text)

    def top(self, query: str, k: int) -> list[str]:
        if not self.docs:
            return []
        n = len(self.docs)
        average = sum(map(len, self.docs)) / n
        frequency = Counter(word for doc in self.docs for word in set(doc))
        scored: list[tuple[float, int]] = []
        for index, doc in enumerate(self.docs):
            counts = Counter(doc)
            score = 0.0
            for word in set(_words(query)):
                if word not in counts:
                    continue
                idf = math.log(1 + (n - frequency[word] + 0.5) / (frequency[word] + 0.5))
                tf = counts[word]
                score += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * len(doc) / average))
            scored.append((score, index))
        return [self.texts[i] for score, i in sorted(scored, reverse=True)[:k] if score > 0]


def run_baseline(families: Sequence[Family], run_style: str, arm: str) -> RunResult:
    """The `paste` or `bm25` baseline on the same tasks and feedback (module docstring)."""
    started = time.perf_counter()
    records: list[TaskRecord] = []
    taught: dict[str, set[str]] = {}
    earlier: list[tuple[Family, Task]] = []
    sources: list[str] = []
    feedback_texts: list[str] = []
    index_all = Bm25()
    for family in families:
        pasted: list[str] = []
        for index, task in enumerate(family.tasks):
            style = style_of(run_style, index)
            sources.append(task.prompt)
            chosen = pasted if arm == "paste" else index_all.top(task.prompt, BM25_TOP)
            injected = "\n".join(chosen)
            records.append(
                measure(
                    family,
                    task,
                    style,
                    injected,
                    taught,
                    earlier,
                    "\n".join(sources).casefold(),
                    "\n".join(feedback_texts),
                )
            )
            text = _baseline_text(task, style)
            pasted.append(text)
            index_all.add(text)
            sources.append(task.feedback_text(style))
            feedback_texts.append(task.feedback_text(style))
            taught.setdefault(family.name, set()).update(task.needs)
            earlier.append((family, task))
    split = families[0].split if families else ""
    return RunResult(split, run_style, arm, records, round(time.perf_counter() - started, 2))


def _baseline_text(task: Task, style: str) -> str:
    """The feedback as a person would paste it: the words, and for a verifier payload its values too."""
    text = task.feedback_text(style)
    if style == "verifier_payload":
        expected = json.dumps(task.expected, ensure_ascii=False)
        actual = json.dumps(task.naive, ensure_ascii=False)
        text = f"{text} (expected {expected}, actual {actual})"
    return text
