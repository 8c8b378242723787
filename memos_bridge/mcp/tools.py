"""What each MCP tool does, as plain functions over a service client: arguments in, text for the model out.

The MCP server (`mcp/server.py`) only registers these with their schemas; keeping the behaviour here means
it is tested by calling the functions with a real service, and the MCP layer stays a thin binding.

Every call names the project's namespace (`mcp/project.py`), so a search never shows another repository's
lessons. "The current task" is the newest episode of that namespace: the Claude Code hooks record each prompt
as a turn, so with hooks installed it is the task the agent is on; without them there may be none, and a
feedback is then kept as a remembered lesson instead of being lost.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from memos_bridge.client import ServiceClient
from memos_bridge.ids import PREFIXES
from memos_bridge.mcp.render import framed, hit_lines, memory_text
from memos_bridge.rules.text import clip

SearchKind = Literal["skill", "trace", "episode", "experience", "world-model", "memory"]
RememberedType = Literal["fact", "preference", "rule", "error", "pattern", "insight"]
#: Memory kinds by id prefix, the vocabulary of memory.get_* / memory.forget.
_KINDS = {
    prefix: kind for kind, prefix in PREFIXES.items() if kind in ("trace", "policy", "world_model", "skill", "memory")
}
CALL_TIMEOUT_S = 60.0


class ToolInputError(ValueError):
    """A tool argument the service would refuse; the message tells the model what to send instead."""


@dataclass
class ToolContext:
    """What every tool needs: the client, who calls (agent kind) and the namespace it works in.

    Writes carry the host's agent kind (`namespace`); reads name only the project (`reads`), so what Claude
    Code, Cursor or Codex learnt in the same project is found by each of them.
    """

    client: ServiceClient
    agent: str
    namespace: dict[str, Any]
    session_id: str | None = None
    timeout: float = CALL_TIMEOUT_S

    @property
    def reads(self) -> dict[str, Any]:
        return {key: value for key, value in self.namespace.items() if key != "agentKind"}


def kind_of(memory_id: str) -> str:
    """The memory kind an id names, from its prefix."""
    for prefix, kind in _KINDS.items():
        if memory_id.startswith(prefix):
            return kind
    known = ", ".join(f"{prefix}… ({kind})" for prefix, kind in _KINDS.items())
    raise ToolInputError(f"unknown memory id {memory_id!r}: ids look like {known}")


def memory_search(ctx: ToolContext, query: str, k: int = 8, kinds: list[SearchKind] | None = None) -> str:
    """Search this project's memory; hits with their ids, inside the untrusted-memory frame."""
    query = query.strip()
    if not query:
        raise ToolInputError("query is empty: give 2-5 key words or a short question")
    k = max(1, min(int(k), 30))
    result = ctx.client.memory_search(
        query,
        top_k={"tier1": k, "tier2": k, "tier3": k},
        namespace=ctx.reads,
        timeout=ctx.timeout,
    )
    hits = [hit for hit in result.get("hits") or [] if not kinds or hit.get("refKind") in kinds]
    hits.sort(key=lambda hit: -float(hit.get("score") or 0.0))
    if not hits:
        return f"No memory matched {query!r} in this project."
    return framed([f"{len(hits[:k])} memories for {query!r} (read one in full with memory_get):", *hit_lines(hits[:k])])


def memory_get(ctx: ToolContext, id: str) -> str:
    """One memory in full, by the id a search or a recalled block showed."""
    kind = kind_of(id.strip())
    client, ns, timeout = ctx.client, ctx.reads, ctx.timeout
    reads = {
        "trace": client.memory_get_trace,
        "policy": client.memory_get_policy,
        "world_model": client.memory_get_world,
        "memory": client.memory_get_memory,
        "skill": client.skill_get,
    }
    body = reads[kind](id.strip(), namespace=ns, timeout=timeout)
    if body is None:
        return f"No memory {id} in this project (it may belong to another project, or have been forgotten)."
    return framed(memory_text(kind, body))


def memory_remember(
    ctx: ToolContext,
    content: str,
    type: RememberedType = "fact",
    importance: float | None = None,
    ttl_hours: float | None = None,
    from_user: bool = False,
) -> str:
    """Keep something on purpose; recalled by later tasks about the same subject."""
    if not content.strip():
        raise ToolInputError("content is empty: say what to remember in plain words")
    result = ctx.client.memory_remember(
        content,
        type=type,
        source="user" if from_user else "agent",
        importance=None if importance is None else max(0.0, min(1.0, float(importance))),
        ttl_ms=None if ttl_hours is None else max(1, int(float(ttl_hours) * 3_600_000)),
        namespace=ctx.namespace,
        agent=ctx.agent,
        session_id=ctx.session_id,
        timeout=ctx.timeout,
    )
    merged = " (merged into an existing memory that says the same)" if result.get("merged") else ""
    return f"Remembered as {result.get('id')}{merged}."


def memory_forget(ctx: ToolContext, id: str, reason: str | None = None) -> str:
    """Take a memory out of recall (restorable by a person with `memos-bridge memories restore`)."""
    kind = kind_of(id.strip())
    result = ctx.client.memory_forget(id.strip(), kind, reason=reason, namespace=ctx.namespace, timeout=ctx.timeout)
    flagged = result.get("flagged") or []
    tail = f" Memories derived from it, flagged for review: {', '.join(map(str, flagged))}." if flagged else ""
    return f"Forgot {id} ({kind}); it is no longer recalled.{tail}"


def current_episode(ctx: ToolContext) -> dict[str, Any] | None:
    """The newest episode (task) of this namespace, or None when no turn was recorded here yet."""
    found = ctx.client.memory_list_episodes(limit=1, namespace=ctx.reads, timeout=ctx.timeout)
    episodes = found.get("episodes") or []
    return episodes[0] if episodes else None


def memory_feedback(
    ctx: ToolContext,
    polarity: Literal["positive", "negative"],
    text: str,
    passed: int | None = None,
    total: int | None = None,
) -> str:
    """A verdict on the current task: what went right or wrong, in words; optionally a test count."""
    if not text.strip():
        raise ToolInputError("text is empty: say what went right or wrong, and what to do next time")
    raw: dict[str, Any] = {"source": "mcp.memory_feedback"}
    if passed is not None and total is not None and total > 0:
        raw["verifier"] = {"passed": max(0, min(int(passed), int(total))), "total": int(total)}
    episode = current_episode(ctx)
    if episode is None:
        result = ctx.client.memory_remember(
            text,
            type="error" if polarity == "negative" else "insight",
            namespace=ctx.namespace,
            agent=ctx.agent,
            session_id=ctx.session_id,
            timeout=ctx.timeout,
        )
        return (
            "No task has been recorded in this project yet (the hooks record each prompt as a task), so this "
            f"lesson was kept as remembered memory {result.get('id')}; later tasks about the same subject recall it."
        )
    digest = hashlib.sha256(f"{polarity}|{text}|{passed}|{total}".encode()).hexdigest()[:16]
    stored = ctx.client.feedback_submit(
        polarity,
        episode_id=episode["id"],
        magnitude=1.0,
        rationale=text,
        raw=raw,
        evidence_id=f"mcp:{episode['id']}:{digest}",
        timeout=ctx.timeout,
    )
    preview = clip(" ".join(str(episode.get("preview") or "").split()), 120)
    return (
        f"Recorded {polarity} feedback {stored.get('id')} on task {episode['id']} ({preview!r}); its lesson is "
        "learnt before the next task starts."
    )


def memory_timeline(ctx: ToolContext, episode_id: str | None = None, limit: int = 20) -> str:
    """The steps of a task (default: the current one), oldest first."""
    if not episode_id:
        episode = current_episode(ctx)
        if episode is None:
            return "No task has been recorded in this project yet."
        episode_id = str(episode["id"])
    result = ctx.client.memory_timeline(
        episode_id, limit=max(1, min(int(limit), 100)), namespace=ctx.reads, timeout=ctx.timeout
    )
    traces = result.get("traces") or []
    if not traces:
        return f"Task {episode_id} has no recorded steps yet."
    lines = [f"Task {episode_id}: {len(traces)} steps"]
    for trace in traces:
        tools = ", ".join(str(call.get("name")) for call in trace.get("toolCalls") or [])
        summary = clip(" ".join(str(trace.get("summary") or "").split()), 300)
        lines.append(f"- [{trace.get('id')}] step {trace.get('stepIndex')}{f' ({tools})' if tools else ''}: {summary}")
    return framed(lines)


def skill_list(
    ctx: ToolContext, status: Literal["active", "candidate", "archived"] | None = None, limit: int = 10
) -> str:
    """Skills learnt in this project (active ones are proven by successful tasks)."""
    result = ctx.client.skill_list(
        status=status, limit=max(1, min(int(limit), 50)), namespace=ctx.reads, timeout=ctx.timeout
    )
    skills = result.get("skills") or []
    if not skills:
        return "No skills learnt in this project yet."
    lines = [f"{len(skills)} skills (read one with skill_get):"]
    for skill in skills:
        summary = clip(" ".join(str(skill.get("summary") or skill.get("invocationGuide") or "").split()), 200)
        lines.append(f"- [{skill.get('id')}] {skill.get('name')} ({skill.get('status')}): {summary}")
    return framed(lines)


def skill_get(ctx: ToolContext, id: str) -> str:
    """One skill in full: how to use it, what to prefer and avoid.

    Read during an open task, it is recorded as a trial of the skill in that task: the task's verdict then
    counts for or against the skill (a candidate becomes active after a passed trial).
    """
    if not id.strip().startswith(PREFIXES["skill"]):
        raise ToolInputError(f"skill ids start with {PREFIXES['skill']!r}; list them with skill_list")
    episode = current_episode(ctx)
    trial = episode is not None and episode.get("status") == "open"
    skill = ctx.client.skill_get(
        id.strip(),
        record_trial=True if trial else None,
        session_id=str(episode["sessionId"]) if trial and episode else None,
        episode_id=str(episode["id"]) if trial and episode else None,
        namespace=ctx.reads,
        timeout=ctx.timeout,
    )
    if skill is None:
        return f"No skill {id} in this project."
    return framed(memory_text("skill", skill))


def memory_environment(ctx: ToolContext, query: str | None = None, limit: int = 5) -> str:
    """What was learnt about the environment (tools, services, file layouts): by topic, or the newest."""
    limit = max(1, min(int(limit), 30))
    if query and query.strip():
        found = ctx.client.memory_search(
            query.strip(),
            top_k={"tier1": 0, "tier2": 0, "tier3": limit},
            namespace=ctx.reads,
            timeout=ctx.timeout,
        )
        hits = [hit for hit in found.get("hits") or [] if hit.get("tier") == 3]
        if not hits:
            return f"No environment knowledge about {query.strip()!r} in this project."
        return framed([f"Environment knowledge about {query.strip()!r}:", *hit_lines(hits)])
    result = ctx.client.memory_list_world_models(limit=limit, namespace=ctx.reads, timeout=ctx.timeout)
    models = result.get("worldModels") or []
    if not models:
        return "No environment knowledge learnt in this project yet."
    lines = ["Environment knowledge:"]
    for model in models:
        lines.append(
            f"- [{model.get('id')}] {model.get('title')}: {clip(' '.join(str(model.get('body') or '').split()), 400)}"
        )
    return framed(lines)
