"""The service side of a run: its environment and data-home config, spawning it, and reading back what it knows.

Kept apart from the per-task loop (`protocol`) because these are observations, not protocol: the snapshot of
typed experiences, L2 policies, skills and world models after each task, and the record of what a
`turn.start` recalled (hits, injected text, which lessons it carried), are what the report and the end-to-end
criteria are judged on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from memos_bridge.client import ServiceClient
from skillflow.family import Family
from skillflow.lessons import find_lessons, service_wording

#: The service environment of every run: learn at once (no feedback window), no LLM unless asked for.
SERVICE_ENV = {"MEMOS_BRIDGE_LEARNING__REWARD__FEEDBACK_WINDOW_S": "0"}
NO_LLM_ENV = {"MEMOS_BRIDGE_LLM__PROVIDER": "none"}
TYPED_EXPERIENCE = "feedback.experience"


@dataclass
class RunOptions:
    """How a run talks to the service."""

    run_id: str
    agent_name: str = "skillflow"
    new_task_phrase: str = "New task: "
    llm: str = "none"  # none: MEMOS_BRIDGE_LLM__PROVIDER=none; inherit: the data home / environment decides
    service_env: dict[str, str] = field(default_factory=dict)
    rpc_timeout_s: float = 120.0
    recall_deadline_s: float = 30.0


def family_config(family: Family) -> str:
    """config.toml for the data home: the family's world-model domain, when it declares one."""
    domain = family.world_domain
    if domain is None:
        return ""

    def toml_list(items: tuple[str, ...]) -> str:
        return "[" + ", ".join(_toml_string(i) for i in items) + "]"

    return (
        f"[learning.world.extra_domains.{domain.key}]\n"
        f"label = {_toml_string(domain.label)}\n"
        f"aliases = {toml_list(domain.aliases)}\n"
        f"patterns = {toml_list(domain.patterns)}\n"
    )


def _toml_string(text: str) -> str:
    """A TOML literal string (no escapes needed for regexes); falls back to a basic string with quotes."""
    if "'" not in text and "\n" not in text:
        return f"'{text}'"
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def service_env(options: RunOptions) -> dict[str, str]:
    env = dict(SERVICE_ENV)
    if options.llm == "none":
        env.update(NO_LLM_ENV)
    env.update(options.service_env)
    return env


@contextlib.contextmanager
def spawned_service(home: Path, options: RunOptions, log: IO[bytes]) -> Iterator[ServiceClient]:
    """A memos-bridge child process on its own data home, closed (EOF → graceful exit) afterwards."""
    client = ServiceClient.spawn(home, env=service_env(options), stderr=log)
    try:
        yield client
    finally:
        client.close()


def _llm_usage(client: ServiceClient, timeout: float) -> dict[str, int]:
    """The service's own LLM work so far (`core.health` → `llmUsage`), summed over its operations."""
    usage = client.call("core.health", {}, timeout=timeout).get("llmUsage") or {}
    ops = (usage.get("ops") or {}).values()
    return {
        "llmCalls": sum(int(stats.get("calls", 0)) for stats in ops),
        "llmTokensIn": sum(int(stats.get("tokens_in", 0)) for stats in ops),
        "llmTokensOut": sum(int(stats.get("tokens_out", 0)) for stats in ops),
        "llmMalformed": sum(int(stats.get("malformed", 0)) for stats in ops),
    }


def guide_section(guide: str, title: str) -> list[str]:
    """The bullet lines under `## <title>` of a skill's invocation guide."""
    lines: list[str] = []
    inside = False
    for line in guide.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == title
        elif inside and line.startswith("- "):
            lines.append(line[2:].strip())
    return lines


def _lesson_lines(policy: dict[str, Any]) -> list[dict[str, str]]:
    """An experience's lesson as the feedback worded it, line by line with each line's role."""
    lesson = policy.get("lesson") or {}
    return [
        {"text": str(text), "role": str(role)}
        for text, role in zip(lesson.get("lines") or [], lesson.get("roles") or [], strict=False)
    ]


def memory_state(client: ServiceClient, timeout: float, *, full: bool = False) -> dict[str, Any]:
    """What the service has learnt so far: typed experiences, L2 policies, skills (with the Avoid lines of their
    guide), world models, LLM calls."""
    policies = client.call("memory.list_policies", {"limit": 500}, timeout=timeout)["policies"]
    listed = client.call("skill.list", {"limit": 200}, timeout=timeout)["skills"]
    # skill.get (a pure read without recordTrial) is what a host shows the model: its guide and guidance
    fetched = [client.call("skill.get", {"id": s["id"]}, timeout=timeout) for s in listed]
    skills = [s for s in fetched if s is not None]
    worlds = client.call("memory.list_world_models", {"limit": 200}, timeout=timeout)["worldModels"]
    experiences = [p for p in policies if p.get("inducedBy") == TYPED_EXPERIENCE]
    state: dict[str, Any] = {
        "experiences": [
            {
                k: p.get(k)
                for k in ("id", "experienceType", "status", "title", "support", "skillEligible", "antiPattern")
            }
            | {"sourceEpisodeIds": p.get("sourceEpisodeIds", []), "sourceTraceIds": p.get("sourceTraceIds", [])}
            | {"lesson": _lesson_lines(p)}
            for p in experiences
        ],
        "policies": [
            {k: p.get(k) for k in ("id", "status", "title", "inducedBy")}
            for p in policies
            if p.get("inducedBy") != TYPED_EXPERIENCE
        ],
        "skills": [
            {
                k: s.get(k)
                for k in ("id", "name", "status", "eta", "sourcePolicyIds", "evidenceAnchors", "decisionGuidance")
            }
            | {"guideAvoid": guide_section(str(s.get("invocationGuide") or ""), "Avoid")}
            for s in skills
        ],
        "worldModels": [
            {k: w.get(k) for k in ("id", "title", "status", "policyIds", "domainTags", "version")} for w in worlds
        ],
        **_llm_usage(client, timeout),
    }
    if full:
        state["policiesFull"] = policies
        state["skillsFull"] = skills
        state["worldModelsFull"] = worlds
    return state


def recall_record(result: dict[str, Any], family: Family) -> dict[str, Any]:
    injected = str(result.get("injectedContext") or "")
    stats = result.get("stats") or {}
    return {
        "hits": [
            {k: h.get(k) for k in ("tier", "refKind", "refId", "score", "channels")} for h in result.get("hits") or []
        ],
        "injectedChars": len(injected),
        "injected": injected,
        "lessonsPresent": sorted({e.pitfall for e in find_lessons(injected, family.pitfalls)}),
        # the same, with the verifier's own sentences taken out: what the service said in its own words
        "lessonsInServiceWords": sorted(service_wording(injected, family.pitfalls)),
        "skippedReason": stats.get("skippedReason"),
        "degraded": stats.get("degraded") or [],
        "totalMs": stats.get("totalMs"),
    }
