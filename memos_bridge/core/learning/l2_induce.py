"""Drafting an L2 policy from a pool bucket: the deterministic inducer, the LLM evidence pack, near-duplicates.

The reference skips induction entirely without an LLM (§7: `llm_disabled`), so an offline install never
learns a procedure from its own successes. Here a rule inducer builds a real policy from the evidence:

* **title / intent** — the content words the evidence episodes' requests have in common (document
  frequency across episodes, then frequency), in the order the best episode's request says them;
* **trigger** — that intent plus what the signature says about the situation (the failing tool and its
  error code, the leading tags), with the best request quoted as an example;
* **procedure** — the ordered tool steps common to the evidence: the successful tool steps of each
  episode (after the failure when the evidence is a failure the episode recovered from), aligned by a
  longest common subsequence of tool names; consecutive repeats collapse into one step; arguments that
  agree across episodes are kept literally, those that vary become `<placeholders>` with an example;
* **verification** — the success marker in the output of the last common step ("12 passed", "created",
  "OK"…), else "completes without an error" (and the error code no longer appears);
* **boundary** — what the evidence does not cover: how many episodes and which tools/errors it rests on,
  the episodes that took a different route, the values that varied;
* **caveats** — the failed attempts seen in the evidence episodes (tool, arguments, error), stored as
  `decision_guidance.antiPattern` lines so retrieval renders them as "Avoid: …" (the reference dropped
  the prompt's caveats, §13 item 6).

With an LLM the `l2.induction` prompt drafts the policy from a packed evidence text; empty fields of its
answer (verification and boundary are often left empty) are filled from the rule draft.

Near-duplicates are judged on token sets (Jaccard over content words, CJK bigrams), not embeddings: the
thresholds (title 0.9, trigger 0.8, procedure 0.7) then mean "nearly the same words", which is what a
merge needs, whereas sentence-embedding cosines of two different procedures of one domain routinely
exceed 0.7 and would merge them. It is also free and deterministic.

Everything here is pure.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from memos_bridge.core.capture import tool_signature
from memos_bridge.core.learning.l2_signature import MISSING, PatternSignature, call_failed, pattern_signature
from memos_bridge.llm.prompts import PolicyDraftOutput
from memos_bridge.rules.text import (
    CJK_RUN,
    clip,
    first_line,
    first_sentence,
    produced_numbers,
    restates,
    squash,
    to_text,
)
from memos_bridge.rules.tokens import content_tokens, normalised_key, token_similarity

InducedBy = Literal["llm", "rules"]

#: Policy field caps.
TITLE_CHARS: Final = 120
TRIGGER_CHARS: Final = 400
#: Evidence episodes the rule inducer aligns (the best ones first).
MAX_RULE_EPISODES: Final = 8
#: Steps a rule procedure lists; longer common sequences keep their head and their last step.
MAX_PROCEDURE_STEPS: Final = 8
#: Intent words in a title/trigger.
MAX_INTENT_WORDS: Final = 6
#: Argument keys shown per step, and characters per argument value.
MAX_ARG_KEYS: Final = 3
ARG_VALUE_CHARS: Final = 60
#: Distinct example values shown for an argument that varies.
ARG_EXAMPLES: Final = 2
#: A single episode's request up to this long is the title's head as it stands.
SHORT_REQUEST_CHARS: Final = 80
#: Caveat lines kept.
MAX_CAVEATS: Final = 4
#: LLM evidence pack (reference §6.5 step 4): per-field caps and tools per trace.
PACK_USER_CHARS: Final = 200
PACK_AGENT_CHARS: Final = 300
PACK_REFLECTION_CHARS: Final = 300
PACK_TOOLS: Final = 3
PACK_TOOL_CHARS: Final = 160
#: Near-duplicate thresholds (reference §6.14) on token-set similarity.
NEAR_DUP_TITLE: Final = 0.9
NEAR_DUP_TRIGGER: Final = 0.8
NEAR_DUP_PROCEDURE: Final = 0.7
#: When both sides have a verification, it must agree at least this much for a near-duplicate merge.
NEAR_DUP_VERIFICATION: Final = 0.45

_SUCCESS_MARKER: Final = re.compile(
    r"\b(?:\d+ passed|passed|pass|ok|success(?:ful(?:ly)?)?|succeeded|done|completed?|created|saved|installed|"
    r"updated|fixed|resolved|built|deployed|merged|no errors?|0 errors?|0 failed)\b|成功|通过|完成",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- the evidence as L2 sees it


@dataclass(frozen=True, eq=False)
class TraceView:
    """A detached snapshot of the trace fields L2 uses (built inside a read; safe to pass around)."""

    id: str
    episode_id: str
    ts: int
    step_index: int
    step_kind: str
    user_text: str
    agent_text: str
    summary: str
    reflection: str | None
    tool_calls: tuple[Mapping[str, Any], ...]
    value: float
    alpha: float
    tags: tuple[str, ...]
    error_signatures: tuple[str, ...]
    vec: NDArray[np.float32] | None = field(default=None, repr=False)

    @property
    def failed(self) -> bool:
        """Capture tags a failed step `error`; the calls' own outcome is checked too."""
        return "error" in self.tags or any(call_failed(call) for call in self.tool_calls)

    @property
    def signature(self) -> PatternSignature:
        return pattern_signature(self.tags, self.tool_calls, self.error_signatures, self.reflection)


@dataclass
class PolicyDraft:
    """The text of a policy before it is stored (or merged into a near-duplicate)."""

    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    caveats: list[str] = field(default_factory=list)
    confidence: float = 0.5
    induced_by: InducedBy = "rules"


# ---------------------------------------------------------------- tokens, intent, similarity


def _is_cjk(token: str) -> bool:
    return bool(CJK_RUN.fullmatch(token))


def _phrase(tokens: Sequence[str]) -> str:
    """Join intent tokens; overlapping CJK bigrams (`部署`, `署服`) are stitched back (`部署服`)."""
    out: list[str] = []
    for token in tokens:
        if out and _is_cjk(token) and _is_cjk(out[-1]) and out[-1][-1] == token[0]:
            out[-1] += token[1:]
        elif out and _is_cjk(token) and _is_cjk(out[-1]):
            out[-1] += token
        else:
            out.append(token)
    return " ".join(out)


def common_intent(texts_per_episode: Sequence[Sequence[str]], reference_text: str) -> list[str]:
    """The words most of the evidence episodes' requests share, in the order `reference_text` uses them.

    Ranked by document frequency across episodes (a word every episode uses is the intent; one episode's
    detail is not), then by total frequency; with several episodes a word must occur in at least two of
    them and in at least half.
    """
    df: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for texts in texts_per_episode:
        words = [token for text in texts for token in content_tokens(text)]
        total.update(words)
        df.update(set(words))
    if not df:
        return []
    episodes = len(texts_per_episode)
    need = max(2, math.ceil(episodes / 2)) if episodes > 1 else 1
    order = {token: i for i, token in reversed(list(enumerate(content_tokens(reference_text))))}
    far = len(order) + 1
    # Nothing shared by enough episodes: fall back to the best-supported words rather than no intent.
    candidates = [w for w in df if df[w] >= need] or list(df)
    ranked = sorted(candidates, key=lambda w: (-df[w], -total[w], order.get(w, far), w))[:MAX_INTENT_WORDS]
    return sorted(ranked, key=lambda w: (order.get(w, far), ranked.index(w)))


# ---------------------------------------------------------------- tool steps and their alignment


@dataclass(frozen=True)
class _Step:
    name: str
    input: Any
    output: str
    error: str
    trace_id: str


def _error_of(trace: TraceView) -> str:
    code = trace.signature.error
    if code != MISSING:
        return code
    return trace.error_signatures[0] if trace.error_signatures else "an error"


def _episode_steps(traces: Sequence[TraceView], min_value: float, after_ts: tuple[int, int] | None) -> list[_Step]:
    """Successful tool steps worth repeating, in order (only those after `after_ts` when given)."""
    steps: list[_Step] = []
    for trace in traces:
        if after_ts is not None and (trace.ts, trace.step_index) <= after_ts:
            continue
        if trace.failed or trace.value < min_value:
            continue
        steps.extend(_calls(trace))
    return steps


def _calls(trace: TraceView) -> list[_Step]:
    out: list[_Step] = []
    for call in trace.tool_calls:
        name = str(call.get("name") or "").strip()
        if name:
            out.append(_Step(name, call.get("input"), to_text(call.get("output")), "", trace.id))
    return out


def _caveat(failed: _Step, error: str, later: Sequence[TraceView]) -> str:
    """What a failed call teaches, judged by what came after it in its episode."""
    args, _ = _render_args([failed.input])
    head = f"`{failed.name}({args})` failed with {error}"
    for index, trace in enumerate(later):
        if trace.failed:
            continue
        fixed = next((step for step in _calls(trace) if step.name == failed.name), None)
        if fixed is None:
            continue
        if to_text(fixed.input) != to_text(failed.input):
            good, _ = _render_args([fixed.input])
            return f"{head}; `{failed.name}({good})` worked instead"
        between = list(dict.fromkeys(s.name for t in later[:index] if not t.failed for s in _calls(t)))
        if between:
            return f"{head} until {' and '.join(f'`{n}`' for n in between)} fixed the cause: fix first, then re-run"
        return f"{head} at first and passed on a plain retry: the failure may be transient"
    return f"{head} and was not recovered in the evidence: do not repeat it as is"


def _caveats(contexts: Mapping[str, Sequence[TraceView]], episode_ids: Sequence[str]) -> list[str]:
    """One line per distinct (tool, error) failure of the evidence episodes, most instructive first."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for episode_id in episode_ids:
        traces = contexts[episode_id]
        for index, trace in enumerate(traces):
            if not trace.failed:
                continue
            error = _error_of(trace)
            for step in _calls(trace):
                if (step.name, error) in seen or len(out) >= MAX_CAVEATS:
                    continue
                seen.add((step.name, error))
                out.append(_caveat(step, error, traces[index + 1 :]))
    return out


def lcs_pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of one longest common subsequence of `a` and `b` (earliest match on ties)."""
    n, m = len(a), len(b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = table[i + 1][j + 1] + 1 if a[i] == b[j] else max(table[i + 1][j], table[i][j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < n and j < m:
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def align_steps(sequences: Sequence[Sequence[_Step]]) -> tuple[list[list[_Step]], int]:
    """Progressive LCS alignment: columns of the first sequence's steps matched in every other one.

    A sequence sharing no tool with the current alignment is left out (it took another route) rather
    than emptying the procedure; returns (columns, how many sequences were left out).
    """
    if not sequences:
        return [], 0
    columns: list[list[_Step]] = [[step] for step in sequences[0]]
    diverged = 0
    for other in sequences[1:]:
        pairs = lcs_pairs([col[0].name for col in columns], [step.name for step in other])
        if not pairs:
            diverged += 1
            continue
        columns = [[*columns[i], other[j]] for i, j in pairs]
    return columns, diverged


def _collapse(columns: list[list[_Step]]) -> list[tuple[list[_Step], int]]:
    """Consecutive columns of the same tool become one step (all their calls) with a repeat count."""
    out: list[tuple[list[_Step], int]] = []
    for column in columns:
        if out and out[-1][0][0].name == column[0].name:
            out[-1] = ([*out[-1][0], *column], out[-1][1] + 1)
        else:
            out.append((list(column), 1))
    return out


def _render_args(inputs: Sequence[Any], results: frozenset[str] = frozenset()) -> tuple[str, list[str]]:
    """`key=value` for values that agree across episodes, `key=<key>` for those that vary (+ examples).

    A value that restates what the attempt produced — it holds a number of `results`, the numbers the agent
    reported that its request did not give — is shown as `key=<key>` with no example: it is that task's
    answer (the content of the file it wrote), and recalled for another task it is a wrong value a small
    model copies."""
    first = inputs[0]
    if first is None or first == "" or first == {}:
        return "", []

    def variants(values: Iterable[Any]) -> str:
        kept = (v for v in values if v not in (None, "") and not restates(v, results))
        seen = list(dict.fromkeys(clip(to_text(v), ARG_VALUE_CHARS) for v in kept))
        return " | ".join(seen[:ARG_EXAMPLES])

    if not isinstance(first, dict):
        if any(restates(item, results) for item in inputs):
            return "<input>", []
        if all(to_text(item) == to_text(first) for item in inputs):
            return clip(to_text(first), ARG_VALUE_CHARS), []
        return "<input>", [f"input={variants(inputs)}"]
    parts: list[str] = []
    examples: list[str] = []
    for key in list(first)[:MAX_ARG_KEYS]:
        values = [item.get(key) if isinstance(item, dict) else None for item in inputs]
        same = all(isinstance(item, dict) and to_text(item.get(key)) == to_text(first[key]) for item in inputs)
        if any(restates(value, results) for value in values):
            parts.append(f"{key}=<{key}>")
        elif same:
            parts.append(f"{key}={clip(to_text(first[key]), ARG_VALUE_CHARS)}")
        else:
            parts.append(f"{key}=<{key}>")
            shown = variants(values)
            if shown:
                examples.append(f"{key}={shown}")
    if len(first) > MAX_ARG_KEYS:
        parts.append("…")
    return ", ".join(parts), examples


# ---------------------------------------------------------------- the rule inducer


def _success_line(output: str) -> str:
    for line in output.splitlines():
        if _SUCCESS_MARKER.search(line):
            return clip(line, 100)
    return ""


def _request_texts(traces: Sequence[TraceView], evidence: Sequence[TraceView]) -> list[str]:
    texts: list[str] = []
    for trace in traces:
        text = squash(trace.user_text)
        if text and text not in texts:
            texts.append(text)
    return texts[:4] or [t.summary for t in evidence if t.summary]


def induce_by_rules(
    signature: PatternSignature,
    evidence: Sequence[TraceView],
    episodes: Mapping[str, Sequence[TraceView]],
    min_value: float,
) -> PolicyDraft:
    """A specific, actionable policy from the evidence alone (see the module docstring)."""
    if not evidence:
        raise ValueError("induce_by_rules needs at least one evidence trace")
    best_by_episode: dict[str, TraceView] = {}
    for trace in sorted(evidence, key=lambda t: (-t.value, t.ts, t.id)):
        best_by_episode.setdefault(trace.episode_id, trace)
    episode_ids = list(best_by_episode)[:MAX_RULE_EPISODES]
    contexts = {ep: list(episodes.get(ep) or [t for t in evidence if t.episode_id == ep]) for ep in episode_ids}
    rep = best_by_episode[episode_ids[0]]

    # What was asked.
    requests = [_request_texts(contexts[ep], [t for t in evidence if t.episode_id == ep]) for ep in episode_ids]
    reference_text = requests[0][0] if requests[0] else rep.summary
    intent = _phrase(common_intent(requests, reference_text))

    # What was done: the successful tool steps of each episode, after the failure the evidence recorded.
    sequences: list[list[_Step]] = []
    for ep in episode_ids:
        anchor = best_by_episode[ep]
        after = (anchor.ts, anchor.step_index) if anchor.failed else None
        steps = _episode_steps(contexts[ep], min_value, after)
        if not steps and after is not None:
            steps = _episode_steps(contexts[ep], min_value, None)
        sequences.append(steps)
    usable = [seq for seq in sequences if seq]
    columns, diverged = align_steps(usable)
    diverged += len(sequences) - len(usable) if usable else 0
    collapsed = _collapse(columns)

    lines: list[str] = []
    varied: list[str] = []
    shown = collapsed
    omitted = 0
    if len(collapsed) > MAX_PROCEDURE_STEPS:
        shown = [*collapsed[: MAX_PROCEDURE_STEPS - 1], collapsed[-1]]
        omitted = len(collapsed) - MAX_PROCEDURE_STEPS
    # What the attempts produced: numbers their replies report that their requests did not give.
    traces = [t for ep in episode_ids for t in contexts[ep]]
    results = produced_numbers((t.agent_text for t in traces), (t.user_text for t in traces))
    for number, (column, repeats) in enumerate(shown, start=1):
        args, examples = _render_args([step.input for step in column], results)
        line = f"{number}. Call `{column[0].name}({args})`"
        if repeats > 1:
            line += f", repeated for each item as needed (×{repeats} in the evidence)"
        if examples:
            line += f" — e.g. {', '.join(examples)}"
            varied.extend(key.split("=", 1)[0] for key in examples)
        lines.append(line)
        if omitted and number == MAX_PROCEDURE_STEPS - 1:
            lines.append(f"   … {omitted} further step(s) of the evidence omitted here …")
    chain_names = [column[0].name for column, _ in collapsed]

    if not lines:  # no tool work in common: the answer itself is the procedure
        answer = first_sentence(rep.agent_text) or first_line(rep.summary) or clip(rep.user_text, 200)
        lines.append(f"1. Answer directly, as in the evidence: “{clip(answer, 200)}”")

    # How success looked.
    error = signature.error if signature.error != MISSING else ""
    failing_tool = signature.tool if signature.tool != MISSING else ""
    if columns:
        last = columns[-1][0]
        marker = _success_line(last.output)
        verification = (
            f"`{last.name}` reports success, as in the evidence: “{marker}”"
            if marker
            else f"`{last.name}` completes without an error"
        )
    else:
        reply = first_sentence(rep.agent_text)
        verification = (
            f"The reply resolves the request, as the evidence did: “{clip(reply, 120)}”"
            if reply
            else "The user confirms the request is resolved"
        )
    if error:
        verification += f", and {error} no longer appears"
    verification += "."

    # When it applies.
    tags = [t for t in (signature.primary, signature.secondary) if t != MISSING and t not in chain_names]
    conditions: list[str] = []
    if error and rep.failed:
        conditions.append(f"`{failing_tool}` fails with {error}" if failing_tool else f"the error {error} appears")
    keywords = ", ".join(intent.split(" "))
    if intent:
        conditions.append(f"the request mentions {keywords}")
    elif chain_names:
        conditions.append(f"the task needs {' → '.join(chain_names[:3])}")
    if tags:
        conditions.append(f"the task involves {', '.join(tags)}")
    if not conditions:
        conditions.append("a request like the example below comes in")
    example = clip(reference_text, 100)
    trigger = "When " + " and ".join(conditions) + (f" (e.g. “{example}”)" if example else "") + "."

    chain = " → ".join(chain_names[:4]) + (" → …" if len(chain_names) > 4 else "")
    if error and rep.failed:
        head = f"Recover from {error}" + (f" in {failing_tool}" if failing_tool else "")
        title = f"{head}: {chain}" if chain else head
    elif intent:
        # One episode: its request, when short, says the intent better than a bag of its words.
        request = first_line(reference_text).rstrip(" .!?。！？")
        head = request if len(episode_ids) == 1 and 0 < len(request) <= SHORT_REQUEST_CHARS else intent
        head = head[:1].upper() + head[1:]
        title = f"{head}: {chain}" if chain else head
    else:
        title = f"{chain[:1].upper() + chain[1:]}" if chain else f"Handle {clip(reference_text, 80)}"

    # What the evidence does not cover.
    tools_seen = sorted({step.name for seq in sequences for step in seq} | ({failing_tool} - {""}))
    other_errors = f" or with errors other than {error}" if error else ""
    boundary_parts = [
        f"Induced from steps of pattern {signature}.",
        f"Untested with other tools than {', '.join(tools_seen)}{other_errors}."
        if tools_seen
        else f"The evidence used no tools; untested where tools are needed{other_errors}.",
    ]
    if diverged:
        boundary_parts.append(f"{diverged} episode(s) took another route that these steps do not cover.")
    if varied:
        boundary_parts.append(f"Fill in {', '.join(f'<{k}>' for k in dict.fromkeys(varied))} for the task at hand.")
    if intent:
        boundary_parts.append(f"Not for requests unrelated to {keywords}.")

    caveats = _caveats(contexts, episode_ids)

    return PolicyDraft(
        title=clip(title, TITLE_CHARS),
        trigger=clip(trigger, TRIGGER_CHARS),
        procedure="\n".join(lines),
        verification=verification,
        boundary=" ".join(boundary_parts),
        caveats=caveats,
        confidence=round(min(0.3 + 0.1 * len(episode_ids), 0.8) * (0.8 if diverged else 1.0), 3),
        induced_by="rules",
    )


# ---------------------------------------------------------------- the LLM path


def pack_evidence(evidence: Sequence[TraceView], char_cap: int) -> tuple[str, list[str]]:
    """The highest-value trace of each episode, best first, as text within `char_cap` characters."""
    best: dict[str, TraceView] = {}
    for trace in sorted(evidence, key=lambda t: (-t.value, t.ts, t.id)):
        best.setdefault(trace.episode_id, trace)
    blocks: list[str] = []
    used: list[str] = []
    size = 0
    for trace in best.values():
        lines = [
            f"[{trace.id}] episode {trace.episode_id} · tags {', '.join(trace.tags) or '-'} · "
            f"V={trace.value:.2f} α={trace.alpha:.2f}"
        ]
        if trace.user_text:
            lines.append(f"user: {clip(trace.user_text, PACK_USER_CHARS)}")
        if trace.agent_text:
            lines.append(f"agent: {clip(trace.agent_text, PACK_AGENT_CHARS)}")
        for call in trace.tool_calls[:PACK_TOOLS]:
            lines.append(f"tool: {tool_signature(dict(call), PACK_TOOL_CHARS)}")
        if trace.reflection:
            lines.append(f"reflection: {clip(trace.reflection, PACK_REFLECTION_CHARS)}")
        block = "\n".join(lines)
        if blocks and size + len(block) + 2 > char_cap:
            break
        block = block[: max(char_cap - size, 0)] if not blocks else block
        blocks.append(block)
        used.append(trace.id)
        size += len(block) + 2
    return "\n\n".join(blocks), used


def draft_from_llm(output: PolicyDraftOutput, rules: PolicyDraft) -> PolicyDraft | None:
    """The model's draft, its empty fields filled from the rule draft; None when it is unusable."""
    title, trigger, procedure = squash(output.title), squash(output.trigger), output.procedure.strip()
    if not title or not trigger or not procedure:
        return None
    caveats = [squash(c) for c in output.caveats if c.strip()]
    return PolicyDraft(
        title=clip(title, TITLE_CHARS),
        trigger=clip(trigger, TRIGGER_CHARS),
        procedure=procedure,
        verification=output.verification.strip() or rules.verification,
        boundary=output.boundary.strip() or rules.boundary,
        caveats=caveats or rules.caveats,
        confidence=output.confidence,
        induced_by="llm",
    )


# ---------------------------------------------------------------- near-duplicates


@dataclass(frozen=True)
class PolicyText:
    """The fields of a stored policy the near-duplicate test reads."""

    id: str
    title: str
    trigger: str
    procedure: str
    verification: str


def is_near_duplicate(draft: PolicyDraft, other: PolicyText) -> bool:
    """Reference §6.5 step 4: the same normalised title+trigger+procedure, or a title ≥ 0.9 / trigger ≥ 0.8 /
    procedure ≥ 0.7 match whose verifications (when both have one) agree ≥ 0.45."""
    same_key = all(
        normalised_key(a) == normalised_key(b)
        for a, b in ((draft.title, other.title), (draft.trigger, other.trigger), (draft.procedure, other.procedure))
    )
    if same_key:
        return True
    close = (
        token_similarity(draft.title, other.title) >= NEAR_DUP_TITLE
        or token_similarity(draft.trigger, other.trigger) >= NEAR_DUP_TRIGGER
        or token_similarity(draft.procedure, other.procedure) >= NEAR_DUP_PROCEDURE
    )
    if not close:
        return False
    if draft.verification.strip() and other.verification.strip():
        return token_similarity(draft.verification, other.verification) >= NEAR_DUP_VERIFICATION
    return True


def find_near_duplicate(draft: PolicyDraft, existing: Iterable[PolicyText]) -> str | None:
    """The id of the first stored policy `draft` nearly duplicates, or None."""
    return next((other.id for other in existing if is_near_duplicate(draft, other)), None)
