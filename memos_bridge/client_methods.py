"""Typed convenience wrappers for every JSON-RPC method of the contract, shared by both clients.

One class, `RpcMethods`, holds one thin method per RPC (`"memory.get_trace"` → `memory_get_trace`) so the sync
client (`memos_bridge.client.ServiceClient`, results are dicts) and the async client
(`memos_bridge.aclient.AsyncServiceClient`, results are awaitables of dicts) cannot drift apart: they differ
only in `_invoke`. The wrappers take snake_case keyword arguments, send camelCase params (the wire
convention), leave out arguments that are `None` so the service applies its documented defaults, and pass any
`**extra` keyword straight through (camelCased): a field added to the contract later is usable before its
wrapper learns about it, and an unknown one is still rejected by the service with `-32602`.

The wrappers stay hand-written rather than generated because the contract is being extended concurrently;
`tests/test_client_methods.py` derives the method list from `memos_bridge.contract.methods.METHODS` and fails
only when a contract method has no wrapper (or a wrapper cannot name a required field).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

R = TypeVar("R")
"""What a call returns: `dict[str, Any]` for the sync client, an awaitable of it for the async one."""
RN = TypeVar("RN")
"""What a call that may answer `null` returns (`memory.get_trace`, `skill.get`, …)."""


def wrapper_name(method: str) -> str:
    """The wrapper attribute for a wire method name: `memory.get_trace` → `memory_get_trace`."""
    return method.replace(".", "_")


def camel(name: str) -> str:
    """snake_case → camelCase (`session_id` → `sessionId`); names without `_` are returned unchanged."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def build_params(fields: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Wire params from snake_case keyword values: camelCase keys, `None` values dropped."""
    params = {camel(key): value for key, value in fields.items() if value is not None}
    if extra:
        params.update({camel(key): value for key, value in extra.items() if value is not None})
    return params


def now_ms() -> int:
    """Epoch milliseconds: the wire's time unit, the default for `ts` fields."""
    return int(time.time() * 1000)


class RpcMethods(ABC, Generic[R, RN]):
    """One typed method per RPC. Subclasses implement `_invoke` / `_invoke_nullable` (send and wait)."""

    @abstractmethod
    def _invoke(self, method: str, params: dict[str, Any], timeout: float | None) -> R: ...

    @abstractmethod
    def _invoke_nullable(self, method: str, params: dict[str, Any], timeout: float | None) -> RN: ...

    # ------------------------------------------------------------------ transport / core

    def auth(self, token: str, *, timeout: float | None = None) -> R:
        """Authenticate a TCP connection (the clients do it by themselves when given a token)."""
        return self._invoke("auth", {"token": token}, timeout)

    def core_ping(self, *, timeout: float | None = None) -> R:
        """Cheapest liveness probe: `{ok, ts}`."""
        return self._invoke("core.ping", {}, timeout)

    def core_health(self, *, timeout: float | None = None) -> R:
        """Service status: version, uptime, schema, paths, embedder, LLM, learning queue."""
        return self._invoke("core.health", {}, timeout)

    def core_config(self, *, timeout: float | None = None) -> R:
        """The effective settings, secrets masked as `"••••"` → `{settings, sources{configFile, env}}`."""
        return self._invoke("core.config", {}, timeout)

    # ------------------------------------------------------------------ sessions and episodes

    def session_open(
        self,
        agent: str,
        *,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Open (or re-open: an existing id is reused) a session → `{sessionId}`."""
        fields = {"agent": agent, "session_id": session_id, "namespace": namespace, "meta": meta}
        return self._invoke("session.open", build_params(fields, extra), timeout)

    def session_close(self, session_id: str, *, timeout: float | None = None, **extra: Any) -> R:
        """Close a session; its open episode is finalised → `{ok}`."""
        return self._invoke("session.close", build_params({"session_id": session_id}, extra), timeout)

    def episode_open(
        self,
        session_id: str,
        *,
        episode_id: str | None = None,
        user_message: str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Start a new episode (task) in a session → `{episodeId}`."""
        fields = {"session_id": session_id, "episode_id": episode_id, "user_message": user_message}
        return self._invoke("episode.open", build_params(fields, extra), timeout)

    def episode_close(self, episode_id: str, *, timeout: float | None = None, **extra: Any) -> R:
        """Finalise an episode → `{ok}`."""
        return self._invoke("episode.close", build_params({"episode_id": episode_id}, extra), timeout)

    # ------------------------------------------------------------------ turns

    def turn_start(
        self,
        agent: str,
        session_id: str,
        user_text: str,
        *,
        ts: int | None = None,
        turn_key: str | None = None,
        episode_id: str | None = None,
        deadline_at: int | None = None,
        context_hints: Mapping[str, Any] | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Route the user turn and get the memories to inject (`RetrievalResult`; `ts` defaults to now)."""
        fields = {
            "agent": agent,
            "session_id": session_id,
            "user_text": user_text,
            "ts": now_ms() if ts is None else ts,
            "turn_key": turn_key,
            "episode_id": episode_id,
            "deadline_at": deadline_at,
            "context_hints": context_hints,
            "namespace": namespace,
        }
        return self._invoke("turn.start", build_params(fields, extra), timeout)

    def turn_end(
        self,
        agent: str,
        session_id: str,
        episode_id: str,
        *,
        agent_text: str = "",
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        agent_thinking: str | None = None,
        reflection: str | None = None,
        user_text: str | None = None,
        context_hints: Mapping[str, Any] | None = None,
        ts: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Capture the agent's work → `{traceId, traceIds, episodeId}` (tool calls use wire field names)."""
        fields = {
            "agent": agent,
            "session_id": session_id,
            "episode_id": episode_id,
            "agent_text": agent_text,
            "tool_calls": list(tool_calls) if tool_calls is not None else None,
            "agent_thinking": agent_thinking,
            "reflection": reflection,
            "user_text": user_text,
            "context_hints": context_hints,
            "ts": now_ms() if ts is None else ts,
            "namespace": namespace,
        }
        return self._invoke("turn.end", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ learning

    def feedback_submit(
        self,
        polarity: str,
        *,
        episode_id: str | None = None,
        trace_id: str | None = None,
        channel: str | None = None,
        magnitude: float | None = None,
        rationale: str | None = None,
        raw: Any = None,
        evidence_id: str | None = None,
        ts: int | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """A verdict on an episode or one of its steps; re-scores and re-learns before replying → `Feedback`."""
        fields = {
            "polarity": polarity,
            "episode_id": episode_id,
            "trace_id": trace_id,
            "channel": channel,
            "magnitude": magnitude,
            "rationale": rationale,
            "raw": raw,
            "evidence_id": evidence_id,
            "ts": ts,
        }
        return self._invoke("feedback.submit", build_params(fields, extra), timeout)

    def memory_flush(self, *, timeout: float | None = None) -> R:
        """Run every waiting learning chain now → `{ok, chainsRun, pending}`."""
        return self._invoke("memory.flush", {}, timeout)

    def tool_outcome(
        self,
        session_id: str,
        tool: str,
        success: bool,
        *,
        episode_id: str | None = None,
        error: str | None = None,
        ts: int | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Report one tool call's outcome as it happens → `{ok, repair?}`."""
        fields = {
            "session_id": session_id,
            "tool": tool,
            "success": success,
            "episode_id": episode_id,
            "error": error,
            "ts": now_ms() if ts is None else ts,
        }
        return self._invoke("tool.outcome", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ memory reads

    def memory_search(
        self,
        query: str,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        top_k: Mapping[str, int] | None = None,
        filters: Mapping[str, Any] | None = None,
        deadline_at: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Search memories on demand (`topK` per tier: `{"tier1": n, "tier2": n, "tier3": n}`)."""
        fields = {
            "query": query,
            "agent": agent,
            "session_id": session_id,
            "episode_id": episode_id,
            "top_k": top_k,
            "filters": filters,
            "deadline_at": deadline_at,
            "namespace": namespace,
        }
        return self._invoke("memory.search", build_params(fields, extra), timeout)

    def memory_get_trace(
        self, id: str, *, namespace: Mapping[str, Any] | None = None, timeout: float | None = None, **extra: Any
    ) -> RN:
        """One trace, or `None` when it does not exist or is not visible."""
        return self._invoke_nullable(
            "memory.get_trace", build_params({"id": id, "namespace": namespace}, extra), timeout
        )

    def memory_get_policy(
        self, id: str, *, namespace: Mapping[str, Any] | None = None, timeout: float | None = None, **extra: Any
    ) -> RN:
        """One policy (typed experience), or `None`."""
        params = build_params({"id": id, "namespace": namespace}, extra)
        return self._invoke_nullable("memory.get_policy", params, timeout)

    def memory_get_world(
        self, id: str, *, namespace: Mapping[str, Any] | None = None, timeout: float | None = None, **extra: Any
    ) -> RN:
        """One world model, or `None`."""
        return self._invoke_nullable(
            "memory.get_world", build_params({"id": id, "namespace": namespace}, extra), timeout
        )

    def memory_timeline(
        self,
        episode_id: str,
        *,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """The traces of an episode in episode order → `{traces}`."""
        fields = {"episode_id": episode_id, "limit": limit, "offset": offset, "namespace": namespace}
        return self._invoke("memory.timeline", build_params(fields, extra), timeout)

    def memory_list_traces(
        self,
        *,
        session_id: str | None = None,
        episode_id: str | None = None,
        q: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Traces, newest first → `{traces}`."""
        fields = {
            "session_id": session_id,
            "episode_id": episode_id,
            "q": q,
            "limit": limit,
            "offset": offset,
            "namespace": namespace,
        }
        return self._invoke("memory.list_traces", build_params(fields, extra), timeout)

    def memory_list_episodes(
        self,
        *,
        session_id: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Episodes, newest first → `{episodeIds, episodes}`."""
        fields = {"session_id": session_id, "status": status, "limit": limit, "offset": offset, "namespace": namespace}
        return self._invoke("memory.list_episodes", build_params(fields, extra), timeout)

    def memory_list_feedback(
        self,
        *,
        episode_id: str | None = None,
        session_id: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Feedback, newest first, optionally on one episode → `{feedback}`."""
        fields = {
            "episode_id": episode_id,
            "session_id": session_id,
            "limit": limit,
            "offset": offset,
            "namespace": namespace,
        }
        return self._invoke("memory.list_feedback", build_params(fields, extra), timeout)

    def memory_list_policies(
        self,
        *,
        status: str | None = None,
        experience_type: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Policies (typed experiences) → `{policies}`."""
        fields = {
            "status": status,
            "experience_type": experience_type,
            "limit": limit,
            "offset": offset,
            "namespace": namespace,
        }
        return self._invoke("memory.list_policies", build_params(fields, extra), timeout)

    def memory_list_world_models(
        self,
        *,
        status: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """World models (environment knowledge) → `{worldModels}`."""
        fields = {"status": status, "limit": limit, "offset": offset, "namespace": namespace}
        return self._invoke("memory.list_world_models", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ strength

    def memory_reinforce(
        self,
        id: str,
        kind: str,
        evidence: str,
        evidence_id: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Evidence about a memory (`test_passed`, `failure`, …) → `{id, strength, applied}`."""
        fields = {"id": id, "kind": kind, "evidence": evidence, "evidence_id": evidence_id, "namespace": namespace}
        return self._invoke("memory.reinforce", build_params(fields, extra), timeout)

    def memory_decay(self, *, now: int | None = None, timeout: float | None = None, **extra: Any) -> R:
        """Run the forgetting job now → `{decayed, archived}`."""
        return self._invoke("memory.decay", build_params({"now": now}, extra), timeout)

    def memory_pin(
        self,
        id: str,
        kind: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Pin a memory (exempt from decay, protected) → `{ok}`."""
        return self._invoke(
            "memory.pin", build_params({"id": id, "kind": kind, "namespace": namespace}, extra), timeout
        )

    def memory_unpin(
        self,
        id: str,
        kind: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Unpin a memory → `{ok}`."""
        params = build_params({"id": id, "kind": kind, "namespace": namespace}, extra)
        return self._invoke("memory.unpin", params, timeout)

    def memory_restore(
        self,
        id: str,
        kind: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Bring an archived memory back into recall → `{ok}`."""
        params = build_params({"id": id, "kind": kind, "namespace": namespace}, extra)
        return self._invoke("memory.restore", params, timeout)

    def memory_link(
        self,
        from_id: str,
        to_id: str,
        relation: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Associate two memories (`cause`, `solution`, `supersedes`, `related`) → `{ok}`."""
        fields = {"from_id": from_id, "to_id": to_id, "relation": relation, "namespace": namespace}
        return self._invoke("memory.link", build_params(fields, extra), timeout)

    def memory_set_status(
        self,
        id: str,
        kind: str,
        status: str,
        *,
        reason: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Set a `policy`, `world_model` or `skill` `active` or `archived` → `{ok, id, kind, status}`."""
        fields = {"id": id, "kind": kind, "status": status, "reason": reason, "namespace": namespace}
        return self._invoke("memory.set_status", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ memories written on purpose, edits

    def memory_remember(
        self,
        content: str,
        *,
        type: str | None = None,
        importance: float | None = None,
        expires_at: int | None = None,
        ttl_ms: int | None = None,
        tags: Sequence[str] | None = None,
        source: str | None = None,
        pinned: bool | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Store a memory on purpose (type: fact, preference, rule, error, pattern, insight) → `{id, kind, merged}`."""
        fields = {
            "content": content,
            "type": type,
            "importance": importance,
            "expires_at": expires_at,
            "ttl_ms": ttl_ms,
            "tags": None if tags is None else list(tags),
            "source": source,
            "pinned": pinned,
            "session_id": session_id,
            "namespace": namespace,
        }
        return self._invoke("memory.remember", build_params(fields, extra), timeout)

    def memory_get_memory(
        self, id: str, *, namespace: Mapping[str, Any] | None = None, timeout: float | None = None, **extra: Any
    ) -> RN:
        """One remembered memory by id, or None."""
        return self._invoke_nullable(
            "memory.get_memory", build_params({"id": id, "namespace": namespace}, extra), timeout
        )

    def memory_list_memories(
        self,
        *,
        type: str | None = None,
        status: str | None = None,
        include_forgotten: bool | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Remembered memories, newest first → `{memories}`."""
        fields = {
            "type": type,
            "status": status,
            "include_forgotten": include_forgotten,
            "limit": limit,
            "offset": offset,
            "namespace": namespace,
        }
        return self._invoke("memory.list_memories", build_params(fields, extra), timeout)

    def memory_update(
        self,
        id: str,
        kind: str,
        *,
        content: str | None = None,
        title: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        expires_at: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Correct a memory of any kind in place → `{id, kind, changed, memory}`."""
        fields = {
            "id": id,
            "kind": kind,
            "content": content,
            "title": title,
            "tags": None if tags is None else list(tags),
            "importance": importance,
            "expires_at": expires_at,
            "namespace": namespace,
        }
        return self._invoke("memory.update", build_params(fields, extra), timeout)

    def memory_forget(
        self,
        id: str,
        kind: str,
        *,
        reason: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Take a memory out of every recall, search and list (restorable) → `{ok, flagged}`."""
        fields = {"id": id, "kind": kind, "reason": reason, "namespace": namespace}
        return self._invoke("memory.forget", build_params(fields, extra), timeout)

    def memory_history(
        self,
        id: str,
        kind: str,
        *,
        limit: int | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Every event on one memory, oldest first → `{id, kind, events}`."""
        fields = {"id": id, "kind": kind, "limit": limit, "namespace": namespace}
        return self._invoke("memory.history", build_params(fields, extra), timeout)

    def memory_purge(
        self,
        *,
        confirm: bool,
        ids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        before: int | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Hard delete (no restore; `confirm=True` required) → `{purged, auditId}`."""
        fields = {
            "confirm": confirm,
            "ids": None if ids is None else list(ids),
            "kinds": None if kinds is None else list(kinds),
            "before": before,
            "session_id": session_id,
            "namespace": namespace,
        }
        return self._invoke("memory.purge", build_params(fields, extra), timeout)

    def memory_export(
        self,
        *,
        format: str | None = None,
        path: str | None = None,
        kinds: Sequence[str] | None = None,
        overwrite: bool | None = None,
        include_vectors: bool | None = None,
        include_forgotten: bool | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Write a namespace's memories to a file (`jsonl` or `markdown`) → `{path, format, counts, bytes}`."""
        fields = {
            "format": format,
            "path": path,
            "kinds": None if kinds is None else list(kinds),
            "overwrite": overwrite,
            "include_vectors": include_vectors,
            "include_forgotten": include_forgotten,
            "session_id": session_id,
            "namespace": namespace,
        }
        return self._invoke("memory.export", build_params(fields, extra), timeout)

    def memory_import(
        self,
        path: str,
        *,
        mode: str | None = None,
        format: str | None = None,
        confirm: bool | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Read an export or a Hermes MEMORY.md / USER.md back in → `{imported, skipped, purged}`."""
        fields = {"path": path, "mode": mode, "format": format, "confirm": confirm, "namespace": namespace}
        return self._invoke("memory.import", build_params(fields, extra), timeout)

    def memory_reflect(
        self,
        *,
        episodes: int | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Consolidate now → `{episodes, chainsRun, merged, expired, changes}`."""
        fields = {"episodes": episodes, "session_id": session_id, "namespace": namespace}
        return self._invoke("memory.reflect", build_params(fields, extra), timeout)

    def memory_stats(
        self,
        *,
        recent_turns: int | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Counts, histograms and the recall hit rate → `MemoryStatsResult`."""
        fields = {"recent_turns": recent_turns, "session_id": session_id, "namespace": namespace}
        return self._invoke("memory.stats", build_params(fields, extra), timeout)

    def memory_retrieval_log(
        self,
        *,
        limit: int | None = None,
        offset: int | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Recent turn.start results, newest first → `{entries}` (`RetrievalLogEntry`: query, hitIds, stats…)."""
        fields = {"limit": limit, "offset": offset, "session_id": session_id, "namespace": namespace}
        return self._invoke("memory.retrieval_log", build_params(fields, extra), timeout)

    def memory_analytics(
        self,
        *,
        days: int | None = None,
        now: int | None = None,
        session_id: str | None = None,
        namespace: Mapping[str, Any] | str | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Per-day series (written, turns, hit rate, verified tasks), LLM usage, latency → `AnalyticsResult`."""
        fields = {"days": days, "now": now, "session_id": session_id, "namespace": namespace}
        return self._invoke("memory.analytics", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ skills

    def skill_list(
        self,
        *,
        status: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """Skills → `{skills}`."""
        fields = {"status": status, "limit": limit, "offset": offset, "namespace": namespace}
        return self._invoke("skill.list", build_params(fields, extra), timeout)

    def skill_get(
        self,
        id: str,
        *,
        record_trial: bool | None = None,
        session_id: str | None = None,
        episode_id: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> RN:
        """One skill (optionally recording a trial of it in the episode), or `None`."""
        fields = {
            "id": id,
            "record_trial": record_trial,
            "session_id": session_id,
            "episode_id": episode_id,
            "namespace": namespace,
        }
        return self._invoke_nullable("skill.get", build_params(fields, extra), timeout)

    def skill_archive(self, id: str, *, timeout: float | None = None, **extra: Any) -> R:
        """Archive a skill (out of recall, restorable) → `{ok}`."""
        return self._invoke("skill.archive", build_params({"id": id}, extra), timeout)

    def skill_restore(self, id: str, *, timeout: float | None = None, **extra: Any) -> R:
        """Bring a skill archived by reliability back → `{ok}`."""
        return self._invoke("skill.restore", build_params({"id": id}, extra), timeout)

    def skill_review(
        self,
        id: str,
        decision: str,
        *,
        reason: str | None = None,
        namespace: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        **extra: Any,
    ) -> R:
        """A person's `approve` (active) or `reject` (archived for good) of a skill → `{ok, skill}`."""
        fields = {"id": id, "decision": decision, "reason": reason, "namespace": namespace}
        return self._invoke("skill.review", build_params(fields, extra), timeout)

    # ------------------------------------------------------------------ events

    def events_subscribe(self, namespace: Mapping[str, Any] | str, *, timeout: float | None = None, **extra: Any) -> R:
        """Also receive `events.notify` of `namespace` (`{"profileId": …}`, or `"*"` for every one) → `{ok}`."""
        return self._invoke("events.subscribe", build_params({"namespace": namespace}, extra), timeout)

    # ------------------------------------------------------------------ LLM

    def llm_test(
        self, *, prompt: str | None = None, timeout_ms: int | None = None, timeout: float | None = None, **extra: Any
    ) -> R:
        """Ask the configured LLM for a short completion → `{ok, provider, text?, …}`."""
        return self._invoke("llm.test", build_params({"prompt": prompt, "timeout_ms": timeout_ms}, extra), timeout)

    def core_namespaces(self, *, timeout: float | None = None) -> R:
        """Every namespace that holds sessions (operator only) → `{namespaces}`."""
        return self._invoke("core.namespaces", {}, timeout)

    def viewer_start(
        self, *, host: str | None = None, port: int | None = None, timeout: float | None = None, **extra: Any
    ) -> R:
        """Serve the web viewer from the data home's owner → `{url, started}`."""
        return self._invoke("viewer.start", build_params({"host": host, "port": port}, extra), timeout)
