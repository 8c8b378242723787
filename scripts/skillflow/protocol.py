"""One family, one trial per task: with memory (through a spawned memos-bridge) and without (no service at all).

With memory, for each task in order (seed 000 "SkillFlow 集成要求", reference §11):

1. `turn.start` in the family's one session with the task's text (the first task plainly, later ones after an
   explicit new-task phrase so the service opens a new episode) — its `injectedContext` is what the agent
   gets, and its hits are recorded as what this task recalled;
2. the agent works in a fresh workspace; `turn.end` records its steps as tool calls and its final reply;
3. the verifier grades the output, and `feedback.submit` sends the verdict bound to the task's episode, its
   last step (`traceId`) and all its steps (`raw.traceIds`, which the service's experiences cite as their
   source steps) — `channel: explicit`, polarity and magnitude from the score, the verifier's message as the
   rationale, the structured result in `raw.verifier`, a per-run `evidenceId`; the rationale is refused if it
   reads as a task switch, which would move the feedback into another episode;
4. `memory.flush`, then a snapshot of what the service has learnt (typed experiences, L2 policies, skills,
   world models, LLM calls) so the report can show when each appeared.

Without memory the agent gets the same text and an empty memory block, and nothing is sent anywhere: the
baseline the with-memory curve is compared with. Each run gets its own data home, so runs never share
memories.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memos_bridge.client import ServiceClient
from memos_bridge.core.relation import is_explicit_new_task
from skillflow.agents import Agent, AgentInput, AgentResult
from skillflow.family import Family, Task
from skillflow.service import RunOptions, family_config, memory_state, recall_record, spawned_service
from skillflow.verify import CheckResult

#: Phrases that would make the service read feedback as a new task (checked per sentence, besides the
#: service's own classifier).
_SWITCH = re.compile(r"\b(?:new|next|another)\s+task\b|换个任务|新任务|下一个任务", re.IGNORECASE)


class ProtocolError(RuntimeError):
    """The run cannot follow the protocol (a family's feedback text announces a task switch, …)."""


@dataclass
class Trial:
    """One task's attempt, verdict and (with memory) what the service recalled and learnt."""

    task: str
    title: str
    user_text: str
    check: CheckResult
    agent: AgentResult
    episode_id: str | None = None
    trace_ids: list[str] = field(default_factory=list)
    feedback_id: str | None = None
    evidence_id: str | None = None
    new_episode: bool | None = None
    recall: dict[str, Any] | None = None
    memory_after: dict[str, Any] | None = None
    wall_ms: int | None = None  # turn.start (with memory) through verification and feedback


@dataclass
class FamilyRun:
    """A family's trials in one mode."""

    family: str
    memory: bool
    trials: list[Trial] = field(default_factory=list)
    session_id: str | None = None
    data_home: str | None = None
    final_memory: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def successes(self) -> list[bool]:
        return [t.check.passed for t in self.trials]


class Clock:
    """Epoch milliseconds that never repeat or go back (turn ts must increase within a session)."""

    def __init__(self) -> None:
        self.last = 0

    def now(self) -> int:
        self.last = max(self.last + 1, int(time.time() * 1000))
        return self.last


def user_text(task: Task, index: int, options: RunOptions) -> str:
    """The first task plainly; later ones open with the new-task phrase so the service starts a new episode."""
    return task.prompt if index == 0 or not options.new_task_phrase else f"{options.new_task_phrase}{task.prompt}"


def feedback_verdict(check: CheckResult) -> tuple[str, float]:
    """(polarity, magnitude): a full pass is a strong positive; any failure a clear negative — at least 0.5,
    since the trial is not done — growing with the credit lost."""
    if check.passed:
        return "positive", 1.0
    return "negative", round(max(0.5, 1.0 - check.score), 4)


def assert_no_switch(text: str, where: str) -> None:
    """Refuse feedback text that announces a task switch: it would land in a new episode, not this one."""
    for sentence in [text, *re.split(r"(?<=[.!?。！？;；:：])\s+|\n+", text)]:
        if sentence.strip() and (is_explicit_new_task(sentence) or _SWITCH.search(sentence)):
            raise ProtocolError(f"{where}: feedback text reads as a task switch: {sentence.strip()[:120]!r}")


def _attempt(family: Family, task: Task, text: str, injected: str, agent: Agent, workspace: Path) -> AgentResult:
    family.prepare_workspace(task, workspace)
    return agent.attempt(AgentInput(family, task, text, injected, workspace))


def _verify(family: Family, task: Task, workspace: Path) -> CheckResult:
    result = family.check(task)(task, workspace)
    if not isinstance(result, CheckResult):
        raise ProtocolError(f"family {family.name}: check of {task.id} returned {type(result).__name__}")
    return result


def run_without_memory(family: Family, agent: Agent, work_dir: Path, options: RunOptions) -> FamilyRun:
    """The baseline: the same tasks and texts, an empty memory block, no service."""
    run = FamilyRun(family.name, memory=False)
    for index, task in enumerate(family.tasks):
        text = user_text(task, index, options)
        workspace = work_dir / "without-memory" / f"{index + 1:02d}-{task.id}"
        began = time.monotonic()
        result = _attempt(family, task, text, "", agent, workspace)
        trial = Trial(task.id, task.title, text, _verify(family, task, workspace), result)
        trial.wall_ms = int((time.monotonic() - began) * 1000)
        run.trials.append(trial)
    return run


class _Session:
    """The with-memory side of one family run: one client, one session, one clock."""

    def __init__(self, client: ServiceClient, family: Family, options: RunOptions) -> None:
        self.client, self.family, self.options = client, family, options
        self.clock = Clock()
        self.timeout = options.rpc_timeout_s
        self.session_id: str = client.call(
            "session.open",
            {"agent": options.agent_name, "meta": {"skillflow": {"family": family.name, "run": options.run_id}}},
            timeout=self.timeout,
        )["sessionId"]

    def start(self, text: str) -> dict[str, Any]:
        now = self.clock.now()
        params = {
            "agent": self.options.agent_name,
            "sessionId": self.session_id,
            "userText": text,
            "ts": now,
            "deadlineAt": now + int(self.options.recall_deadline_s * 1000),
        }
        result: dict[str, Any] = self.client.call("turn.start", params, timeout=self.timeout)
        return result

    def end(self, episode_id: str, result: AgentResult) -> list[str]:
        params = {
            "agent": self.options.agent_name,
            "sessionId": self.session_id,
            "episodeId": episode_id,
            "agentText": result.reply,
            "toolCalls": result.steps,
            "ts": self.clock.now(),
        }
        ended = self.client.call("turn.end", params, timeout=self.timeout)
        return list(ended.get("traceIds") or [ended["traceId"]])

    def feedback(self, trial: Trial, task: Task) -> None:
        check = trial.check
        assert_no_switch(check.message, f"{self.family.name}/{task.id}")
        polarity, magnitude = feedback_verdict(check)
        trial.evidence_id = f"skillflow:{self.options.run_id}:{self.family.name}:{task.id}"
        params: dict[str, Any] = {
            "episodeId": trial.episode_id,
            "channel": "explicit",
            "polarity": polarity,
            "magnitude": magnitude,
            "rationale": check.message,
            "raw": {
                "source": "skillflow.verifier",
                "family": self.family.name,
                "verifier": check.verifier_payload(),
            },
            "evidenceId": trial.evidence_id,
            "ts": self.clock.now(),
        }
        if trial.trace_ids:
            # every step of the task (the verifier judged the whole output), the last one as the judged step
            params["traceId"] = trial.trace_ids[-1]
            params["raw"]["traceIds"] = list(trial.trace_ids)
        trial.feedback_id = self.client.call("feedback.submit", params, timeout=self.timeout)["id"]
        self.client.call("memory.flush", {}, timeout=self.timeout)

    def close(self) -> None:
        self.client.call("session.close", {"sessionId": self.session_id}, timeout=self.timeout)
        self.client.call("memory.flush", {}, timeout=self.timeout)


def run_with_memory(family: Family, agent: Agent, work_dir: Path, options: RunOptions) -> FamilyRun:
    """The family through a spawned service on a fresh data home (see the module docstring)."""
    home = work_dir / "home"
    if home.exists():
        raise ProtocolError(f"{home} already exists: every run needs a fresh data home")
    home.mkdir(parents=True)
    config = family_config(family)
    if config:
        (home / "config.toml").write_text(config, encoding="utf-8")
    run = FamilyRun(family.name, memory=True, data_home=str(home))
    with (work_dir / "service-stderr.log").open("wb") as log, spawned_service(home, options, log) as client:
        session = _Session(client, family, options)
        run.session_id = session.session_id
        previous: str | None = None
        for index, task in enumerate(family.tasks):
            text = user_text(task, index, options)
            began = time.monotonic()
            started = session.start(text)
            episode_id = str(started["query"]["episodeId"])
            recall = recall_record(started, family)
            workspace = work_dir / "with-memory" / f"{index + 1:02d}-{task.id}"
            result = _attempt(family, task, text, recall["injected"], agent, workspace)
            trace_ids = session.end(episode_id, result)
            trial = Trial(
                task.id,
                task.title,
                text,
                _verify(family, task, workspace),
                result,
                episode_id=episode_id,
                trace_ids=trace_ids,
                new_episode=episode_id != previous,
                recall=recall,
            )
            if not trial.new_episode:
                run.warnings.append(f"{task.id}: routed into the previous task's episode {episode_id}")
            session.feedback(trial, task)
            trial.wall_ms = int((time.monotonic() - began) * 1000)
            trial.memory_after = memory_state(client, session.timeout)
            run.trials.append(trial)
            previous = episode_id
        session.close()
        run.final_memory = memory_state(client, session.timeout, full=True)
    return run
