"""Decision repair, the pure half: failure windows, the evidence split, the value guard and template wording.

Everything here is deterministic and free of I/O so that the rules can be tested line by line; the service
that feeds it (storage, LLM, events) is `core/learning/repair.py`.

Why each rule exists (reference §6.9, with its defects fixed):

* **Failure window.** An agent stuck in a loop retries the same tool; three failures of one tool in its
  last five calls with no success in between is a loop worth breaking. The window is kept per
  (session, tool) so that a failing `bash` is never excused by a working `read_file`.
* **Evidence split.** A repair contrasts what worked (high value: V > 0 and no failure) with what did not
  (low value: V < 0, or failure-like — error signatures or failed tool results). A keyword pass keeps the
  traces about the same tool or error; when a side finds nothing, a relaxed pass takes that side from the
  session's own recent traces, because a nearby success of another tool still says "a different approach
  worked here".
* **Value guard** (unsolicited bursts only): the high side is a contrast worth pointing to ("what worked
  before") only when its mean value is at least `value_delta` away from the low side's. A weaker contrast — a
  transcript heuristic scores a finished task +0.1, so an ordinary earlier success is barely above an
  unscored failure — carries no lesson, so the high side is dropped. The burst itself is never dropped:
  the failures are observed, not scored, and an agent looping on a failing tool needs the repair whatever
  the history looks like (the reference skipped the repair instead, so without an LLM scoring the
  history almost every burst went unrepaired). Without a contrast the repair has an "Avoid" line from the
  failing call and a prefer line that is generic in shape but names the tool and its error. User
  corrections bypass the guard: the user *is* the evidence.
* **Templates** (no LLM, or the LLM failed): specific by construction — the tool name, the failing action
  and its error, the user's own instruction — since a vague "be careful" line teaches nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from memos_bridge.contract.dto import ToolCallDTO
from memos_bridge.core.capture import (
    extract_error_signatures,
    normalise_error_message,
    tool_call_failed,
    tool_signature,
)
from memos_bridge.rules.instance import InstanceContext, has_content, instance_specific, strip_instance
from memos_bridge.rules.lessons import sentences
from memos_bridge.rules.text import clip, first_line, first_sentence, squash

RepairSource = Literal["failure_burst", "user_correction"]
Severity = Literal["info", "warn"]
PassName = Literal["keyword", "relaxed", "none"]

#: Traces per side (high / low) given to the wording step (reference `evidenceLimit`).
EVIDENCE_LIMIT: Final = 4
#: Characters of one trace shown to the LLM (reference `traceCharCap`).
TRACE_CHAR_CAP: Final = 500
#: Lines kept in each list of a policy's decision guidance; the oldest go first.
GUIDANCE_CAP: Final = 8
#: Characters of an error or an action quoted in a template line.
ERROR_CHARS: Final = 120
ACTION_CHARS: Final = 160
#: Bound on the (session, tool) windows kept in memory; the least recently used go first.
MAX_WINDOWS: Final = 4096

#: Template confidences: a burst with a matching success to point to, a burst without one, a correction
#: (the reference rule classifier's confidence for a preference-shaped correction).
CONF_BURST_WITH_SUCCESS: Final = 0.6
CONF_BURST_GENERIC: Final = 0.45
CONF_CORRECTION: Final = 0.8


def context_hash(tool: str, context: str) -> str:
    """The reference's context key: sha1 of tool + context, 16 hex characters."""
    return hashlib.sha1(f"{tool}\n{context}".encode()).hexdigest()[:16]


def error_key(error: str | None) -> str:
    """A stable key for an error: its structural signature ("KeyError: <str>", "EXIT_127") or, failing that,
    its first line with the varying parts (paths, numbers, quoted values) replaced."""
    if not error or not error.strip():
        return ""
    signatures = extract_error_signatures([error], 1)
    if signatures:
        return signatures[0]
    return normalise_error_message(first_line(error))


def error_display(error: str | None) -> str:
    """The error as a template quotes it: its first line, whitespace squashed and clipped."""
    return clip(first_line(error or ""), ERROR_CHARS)


def same_text(a: str, b: str) -> bool:
    return squash(a).casefold() == squash(b).casefold()


# --------------------------------------------------------------------------------------------------------
# Failure windows
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolOutcome:
    """One reported tool outcome as the window keeps it."""

    tool: str
    success: bool
    error: str  # displayable first line, "" when none
    error_key: str  # grouping key, "" when none
    ts: int
    episode_id: str | None


@dataclass(frozen=True)
class Burst:
    """A failure burst: the failures that make it and the error most of them share."""

    tool: str
    failures: tuple[ToolOutcome, ...]
    error_key: str
    error: str  # the latest displayable message with that key
    episode_id: str | None

    @property
    def count(self) -> int:
        return len(self.failures)


class OutcomeWindows:
    """The last `size` outcomes of every (session, tool), in memory only.

    Nothing here is persisted: after a restart a loop in progress needs `failure_threshold` fresh failures
    to be noticed again, which delays at most one repair, while writing every tool outcome to the database
    would put a write on the host's tool loop. Tool names are compared case-insensitively. At most
    `max_windows` windows are kept (least recently used dropped), so long-running services stay bounded.
    """

    def __init__(self, size: int, max_windows: int = MAX_WINDOWS) -> None:
        self._size = max(size, 1)
        self._max = max(max_windows, 1)
        self._windows: OrderedDict[tuple[str, str], deque[ToolOutcome]] = OrderedDict()

    @staticmethod
    def _key(session_id: str, tool: str) -> tuple[str, str]:
        return (session_id, tool.strip().casefold())

    def record(self, session_id: str, outcome: ToolOutcome) -> tuple[ToolOutcome, ...]:
        """Add `outcome` and return the window it is now part of (oldest first)."""
        key = self._key(session_id, outcome.tool)
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = deque(maxlen=self._size)
        self._windows.move_to_end(key)
        window.append(outcome)
        while len(self._windows) > self._max:
            self._windows.popitem(last=False)
        return tuple(window)

    def clear(self, session_id: str, tool: str) -> None:
        """Forget a window once its burst was repaired: the next repair needs a fresh burst."""
        self._windows.pop(self._key(session_id, tool), None)

    def __len__(self) -> int:
        return len(self._windows)


def detect_burst(window: Sequence[ToolOutcome], threshold: int) -> Burst | None:
    """A burst when the window holds ≥ `threshold` failures and no success."""
    if not window or any(outcome.success for outcome in window):
        return None
    failures = tuple(window)
    if len(failures) < max(threshold, 1):
        return None
    counts: dict[str, int] = {}
    last_seen: dict[str, int] = {}
    for index, outcome in enumerate(failures):
        counts[outcome.error_key] = counts.get(outcome.error_key, 0) + 1
        last_seen[outcome.error_key] = index
    # The most frequent known error; ties go to the one seen last.
    key = max(counts, key=lambda k: (k != "", counts[k], last_seen[k]))
    error = next((o.error for o in reversed(failures) if o.error_key == key and o.error), "")
    last = failures[-1]
    return Burst(tool=last.tool, failures=failures, error_key=key, error=error, episode_id=last.episode_id)


# --------------------------------------------------------------------------------------------------------
# Evidence
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceEvidence:
    """What the repair stage needs from one trace (plain data, safe to use outside a DB session)."""

    id: str
    episode_id: str
    session_id: str
    ts: int
    value: float
    summary: str
    tools: tuple[str, ...]
    error_signatures: tuple[str, ...]
    failed: bool
    action: str  # what the agent did: tool signature(s) or the reply's first sentence
    local: bool  # from the session (or the episode) being repaired, not from the owner's history

    @property
    def high(self) -> bool:
        return self.value > 0 and not self.failed

    @property
    def low(self) -> bool:
        return self.value < 0 or self.failed

    def line(self) -> str:
        """One evidence line for the LLM prompt."""
        head = f"[{self.id}] V={self.value:+.2f}"
        return f"{head} {clip(self.action or self.summary, TRACE_CHAR_CAP)}"


def _call_failed(call: Mapping[str, Any]) -> bool:
    if call.get("success") is False or call.get("errorCode"):
        return True
    if call.get("success") is True:
        return False
    try:
        return tool_call_failed(ToolCallDTO.model_validate(call))
    except ValueError:
        return False


def trace_evidence(
    *,
    trace_id: str,
    episode_id: str,
    session_id: str,
    ts: int,
    value: float,
    summary: str,
    agent_text: str,
    tool_calls: Iterable[Any],
    error_signatures: Iterable[str],
    local: bool,
) -> TraceEvidence:
    """Build the evidence view of a stored trace (its columns, passed by keyword)."""
    calls = [call for call in tool_calls if isinstance(call, Mapping)]
    signatures = tuple(str(s) for s in error_signatures if s)
    failed = bool(signatures) or any(_call_failed(call) for call in calls)
    if calls:
        action = "; ".join(tool_signature(dict(call), ACTION_CHARS) for call in calls[:3])
    else:
        action = clip(first_sentence(agent_text), ACTION_CHARS) or clip(summary, ACTION_CHARS)
    return TraceEvidence(
        id=trace_id,
        episode_id=episode_id,
        session_id=session_id,
        ts=ts,
        value=float(value),
        summary=summary,
        tools=tuple(str(call.get("name", "")) for call in calls if call.get("name")),
        error_signatures=signatures,
        failed=failed,
        action=action,
        local=local,
    )


def _error_head(key: str) -> str:
    return key.split(":", 1)[0].strip().casefold()


def matches(trace: TraceEvidence, tool: str | None, key: str) -> bool:
    """The keyword test: the trace used the same tool, or hit the same error."""
    if tool and any(name.casefold() == tool.casefold() for name in trace.tools):
        return True
    if not key:
        return False
    head = _error_head(key)
    if any(_error_head(sig) == head for sig in trace.error_signatures):
        return True
    return len(head) >= 4 and head in trace.summary.casefold()


@dataclass(frozen=True)
class EvidenceSplit:
    """High- and low-value evidence, best first / worst first, and how each side was found."""

    high: tuple[TraceEvidence, ...]
    low: tuple[TraceEvidence, ...]
    high_pass: PassName
    low_pass: PassName

    @property
    def best(self) -> TraceEvidence | None:
        """The success to point to in a template: only one about the same tool or error qualifies."""
        return self.high[0] if self.high and self.high_pass == "keyword" else None

    def episode_ids(self) -> set[str]:
        return {t.episode_id for t in (*self.high, *self.low)}


def split_evidence(
    traces: Iterable[TraceEvidence], tool: str | None, key: str, limit: int = EVIDENCE_LIMIT
) -> EvidenceSplit:
    """Keyword pass (same tool or error) over every candidate, then a relaxed pass over the local ones for a
    side the keyword pass left empty. High: best value first, then newest; low: worst first, then newest."""
    pool = list({t.id: t for t in traces}.values())

    def side(wanted: Callable[[TraceEvidence], bool]) -> tuple[list[TraceEvidence], PassName]:
        keyword = [t for t in pool if wanted(t) and matches(t, tool, key)]
        if keyword:
            return keyword, "keyword"
        relaxed = [t for t in pool if wanted(t) and t.local]
        return relaxed, "relaxed" if relaxed else "none"

    high, high_pass = side(lambda t: t.high)
    low, low_pass = side(lambda t: t.low)
    high.sort(key=lambda t: (-t.value, -t.ts))
    low.sort(key=lambda t: (t.value, -t.ts))
    return EvidenceSplit(tuple(high[:limit]), tuple(low[:limit]), high_pass, low_pass)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def value_gap(split: EvidenceSplit) -> float:
    """|mean(high) − mean(low)|; an empty side counts as 0 (neutral)."""
    return abs(_mean([t.value for t in split.high]) - _mean([t.value for t in split.low]))


def apply_value_guard(split: EvidenceSplit, value_delta: float) -> EvidenceSplit:
    """The value guard for unsolicited bursts (see the module docstring): `split` unchanged when its high side
    is clearly better than its low side (or empty), else `split` without the high side, so neither the
    template nor the LLM presents weakly scored steps as what worked."""
    if not split.high or value_gap(split) >= value_delta:
        return split
    return EvidenceSplit((), split.low, "none", split.low_pass)


# --------------------------------------------------------------------------------------------------------
# Template wording
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wording:
    preference: str
    anti_pattern: str
    severity: Severity
    confidence: float
    by: Literal["template", "llm"] = "template"


def burst_template(burst: Burst, split: EvidenceSplit) -> Wording:
    """ "Avoid" from the failing call (with the tool, count and error); "Prefer" from the best matching
    success, else a prefer line that still names the tool and its error."""
    tool = burst.tool
    error = f" ({burst.error})" if burst.error else ""
    failing = next((t for t in split.low if tool.casefold() in (n.casefold() for n in t.tools)), None)
    what = f"repeating {failing.action}" if failing else f"calling {tool} again unchanged"
    anti = f"Avoid: {what} — {tool} failed {burst.count} times in a row{error}"
    best = split.best
    if best is not None:
        prefer = f"Prefer: what worked before instead of retrying {tool}: {best.action}"
        confidence = CONF_BURST_WITH_SUCCESS
    else:
        prefer = f"Prefer: checking {tool}'s error{error} before retrying; change the arguments or use another approach"
        confidence = CONF_BURST_GENERIC
    return Wording(clip(prefer, 400), clip(anti, 400), "warn", confidence)


_REJECTED: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\binstead\s+of\s+(.{1,80}?)\s*(?:[,;.!?。！？，；]|$)",
        r"\brather\s+than\s+(.{1,80}?)\s*(?:[,;.!?。！？，；]|$)",
        r"\b(?:prefer|use|pick|choose)\b.{1,80}?\s+over\s+(.{1,80}?)\s*(?:[,;.!?。！？，；]|$)",
        r"\bshould\b.{1,120}?[\s,]+not\s+(.{1,80}?)\s*(?:[,;.!?。！？，；]|$)",
        r"\b(?:don't|do\s+not|never)\s+(.{2,80}?)\s*[,;，；]",
        r"(?:而不是|而非)\s*(.{1,40}?)\s*(?:[,;.!?。！？，；]|$)",
        r"(?:代替|替代|取代|替换)\s*(.{1,40}?)\s*(?:[,;.!?。！？，；]|$)",
        r"(?:不要|别)\s*(.{1,40}?)\s*[,，;；]",
        r"不是\s*(.{1,40}?)\s*[,，]?\s*而?是",
    )
)


def rejected_part(instruction: str) -> str | None:
    """What the user said *not* to do ("instead of pandas" → "pandas", "用X代替Y" → "Y"), or None."""
    for pattern in _REJECTED:
        match = pattern.search(instruction)
        if match:
            part = match.group(1).strip(" \"'`“”‘’")
            if part:
                return clip(part, ACTION_CHARS)
    return None


def correction_template(
    instruction: str, user_text: str, rejected_action: str | None, *, failures_seen: bool
) -> Wording:
    """ "Prefer" is the user's own instruction; "Avoid" is what they rejected — named in their words when they
    said it ("instead of pandas"), else the agent's last action, else their rejection quoted."""
    prefer = f"Prefer: {instruction}"
    rejected = rejected_part(instruction)
    if rejected:
        anti = f"Avoid: {rejected} (the user corrected this)"
    elif rejected_action:
        anti = f"Avoid: repeating {rejected_action} — the user rejected it"
    else:
        anti = f'Avoid: repeating the answer the user rejected ("{clip(user_text, 80)}")'
    return Wording(clip(prefer, 400), clip(anti, 400), "warn" if failures_seen else "info", CONF_CORRECTION)


# --------------------------------------------------------------------------------------------------------
# Policy guidance
# --------------------------------------------------------------------------------------------------------


def general_line(line: str, context: InstanceContext) -> str:
    """`line` as another task may read it: without the judged attempt's values, ids and verdicts (the shared
    instance filter, sentence by sentence), "" when nothing general is left. A repair serves its own session
    with the values in ("the total should be 18734.00"); the policies it is attached to are recalled for other
    tasks, where those values are another task's answer."""
    label = _LABEL.match(line)
    head = label.group(0) if label else ""
    body = bare(line)
    if instance_specific(body):
        return ""
    kept: list[str] = []
    for sentence in sentences(body) or [body]:
        filtered = strip_instance(sentence, context)
        if filtered.text and has_content(filtered.text, context):
            kept.append(filtered.text)
    text = " ".join(kept).strip()
    return f"{head}{text}" if text else ""


def for_policies(wording: Wording, context: InstanceContext) -> Wording:
    """The wording whose lines are attached to policies: each line through `general_line`."""
    return Wording(
        general_line(wording.preference, context),
        general_line(wording.anti_pattern, context),
        wording.severity,
        wording.confidence,
        wording.by,
    )


_LABEL: Final = re.compile(r"^\s*(?:prefer|avoid|偏好|避免)\s*[:：]\s*", re.IGNORECASE)


def bare(line: str) -> str:
    """A repair line without its "Prefer:" / "Avoid:" label: a policy's guidance lists are already typed
    (`preference`, `antiPattern`) and whoever renders them adds the label (otherwise "Avoid: Avoid: …")."""
    return _LABEL.sub("", line, count=1).strip()


def _merged(lines: Iterable[Any], new: str, cap: int) -> list[str]:
    kept = [str(line) for line in lines if isinstance(line, str) and line.strip()]
    if new.strip() and not any(same_text(bare(line), new) for line in kept):
        kept.append(new)
    return kept[-cap:] if cap > 0 else []


def merge_guidance(
    guidance: Mapping[str, Any] | None,
    preference: str,
    anti_pattern: str,
    *,
    remove: tuple[str, str] | None = None,
    cap: int = GUIDANCE_CAP,
) -> dict[str, Any] | None:
    """`guidance` with the two lines added without their labels (deduplicated, each list capped at `cap`,
    oldest dropped first: a fresh repair is the more relevant one); `remove` first drops a pair being
    reworded (labelled or not). None when nothing changes, so the caller skips the write."""
    current = dict(guidance or {})

    def without(lines: Any, old: str | None) -> list[Any]:
        if old is None:
            return list(lines or [])
        return [line for line in lines or [] if not (isinstance(line, str) and bare(line) == bare(old))]

    prefs = without(current.get("preference"), remove[0] if remove else None)
    antis = without(current.get("antiPattern"), remove[1] if remove else None)
    new_prefs = _merged(prefs, bare(preference), cap)
    new_antis = _merged(antis, bare(anti_pattern), cap)
    if new_prefs == list(current.get("preference") or []) and new_antis == list(current.get("antiPattern") or []):
        return None
    return {**current, "preference": new_prefs, "antiPattern": new_antis}
