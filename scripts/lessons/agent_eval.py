"""A real local model as the agent, four memory arms on the same tasks with the same prompt.

The agent is a small coder model that answers each task with a standard-library Python script (it sees the task,
the head of each input file and the memory block, the same framing in every arm); the script runs in a fresh copy
of the family's data folder and its `answer.json` is graded against the family's expected answer. A failed task
draws the task's feedback in the run's style (styles in turn, task by task, as `mixed` in the rule evaluation); a
passed one draws "Correct." Arms:

* **none** — no memory;
* **naive** — every earlier feedback of the family pasted verbatim (a verifier payload with its values), the
  baseline a user has without any service;
* **service** — what the service's `turn.start` injects (`render` compact or full), the service having learnt
  from the feedback of this same arm's earlier tasks through `feedback.submit` and `memory.flush`;
* **oracle** — the right lesson of each convention the task needs (the family's `oracle` sentences).

Families run one after another through one service, so lessons of other families are there to be (wrongly)
recalled, as in a user's real namespace.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from skillflow.llm_agent import continue_chat
from skillflow.script_agent import default_prefill, extract_script, file_head, run_script

from lessons.corpus import Family, Task, answers_match
from lessons.evaluate import (
    SERVICE_ENV,
    feedback_params,
    input_values,
    instance_values,
    session_id,
    style_of,
    values_in,
)
from memos_bridge.client import ServiceClient

ARMS: tuple[str, ...] = ("none", "naive", "service", "oracle")
SYSTEM_PROMPT = (
    "You write Python 3 scripts that solve data tasks. The script runs in the folder that holds the task's input "
    "files, uses only the Python standard library, reads the input files itself and writes the output file the task "
    "names with json.dump. Notes from earlier tasks may follow the files: apply every note that fits the task. Values "
    "read from a file are strings: convert numbers with int() or float(), and compute with float (json.dump cannot "
    "write a Decimal). Keep the script short, with no comments. "
    "Reply with exactly one ```python block and nothing else."
)
MEMORY_HEADER = "Notes from earlier tasks (apply what fits this task):"
SCRIPT = "agent_solution.py"


@dataclass(frozen=True)
class AgentSettings:
    base_url: str
    model: str = "local"
    max_tokens: int = 600
    temperature: float = 0.0
    seed: int = 7
    timeout_s: float = 600.0
    retries: int = 1  # one corrected script after a failed run (an exception, no output)
    retry_temperature: float = 0.7
    run_timeout_s: float = 30.0
    max_memory_chars: int = 4000


@dataclass
class Attempt:
    family: str
    task: str
    arm: str
    style: str
    passed: bool
    answer: Any
    memory_chars: int
    memory: str
    error: str | None
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    script: str = ""
    #: values of other tasks of the run (their answers and the numbers their scripts typed in) in the memory text
    leaked: list[str] = field(default_factory=list)


def user_message(task: Task, data: Path, memory: str, settings: AgentSettings) -> str:
    """Task, the head of every input file, the memory block last (a small model follows what it read last)."""
    parts = [f"Task:\n{task.prompt.strip()}\n"]
    for name in task.files:
        path = data / name
        if path.is_file():
            parts.append(f"File {name} (first lines):\n```\n{file_head(path)}\n```\n")
    if memory.strip():
        parts.append(f"{MEMORY_HEADER}\n\n{memory.strip()[: settings.max_memory_chars]}\n")
    parts.append(
        f"Write the Python script: it reads {', '.join(task.files)}, computes exactly what the task asks and writes "
        f"{task.output} with json.dump (one JSON object with exactly the fields the task names)."
    )
    return "\n".join(parts)


def solve(client: httpx.Client, task: Task, workspace: Path, memory: str, settings: AgentSettings) -> dict[str, Any]:
    """One trial: the model's script (and one corrected script when it fails to run), run in `workspace`."""
    notes: dict[str, Any] = {"llmCalls": 0, "promptTokens": 0, "completionTokens": 0}
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_message(task, workspace, memory, settings)},
    ]
    prefill = default_prefill(task.files)
    answer: Any = None
    error: str | None = "no reply"
    script = ""
    for attempt in range(settings.retries + 1):
        temperature = settings.temperature if attempt == 0 else settings.retry_temperature
        try:
            reply = continue_chat(
                client,
                messages,
                prefill,
                notes,
                model=settings.model,
                temperature=temperature,
                seed=settings.seed,
                max_tokens=settings.max_tokens,
            )
        except httpx.HTTPError as exc:
            error = f"model call failed: {exc}"
            break
        if not reply.startswith(prefill.strip()):
            reply = prefill + reply
        script = extract_script(reply) or ""
        if not script:
            error = "the reply holds no python block"
        else:
            path = workspace / SCRIPT
            path.write_text(script, encoding="utf-8")
            outcome = run_script(path, workspace, task.output, settings.run_timeout_s)
            answer, error = outcome.answer, outcome.error
            if error is None:
                break
            messages = [
                *messages,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": outcome.feedback() + "\nReply with the whole corrected script."},
            ]
    return {"answer": answer, "error": error, "script": script, **notes}


def learnable(family: Family) -> set[str]:
    """The tasks whose every needed convention an earlier task of the family also needed: only there can a memory
    of earlier feedback help (the oracle arm is given every task's lesson, the first ones included, which no memory
    can match)."""
    taught: set[str] = set()
    out: set[str] = set()
    for task in family.tasks:
        if task.needs and set(task.needs) <= taught:
            out.add(task.id)
        taught.update(task.needs)
    return out


#: What a verifier says when an agent gets a task wrong that no house convention affects (a praised task failed
#: by a bug): the values, no lesson.
PLAIN_FAILURE = "The answer does not match the expected one."


def _pasted(task: Task, style: str, passed: bool) -> str:
    """What a user pastes for the naive arm: the feedback as given (a verifier payload with its values)."""
    if passed:
        return f"{task.id}: Correct."
    if task.passes:
        return f"{task.id}: {PLAIN_FAILURE} (expected {json.dumps(task.expected, ensure_ascii=False)})"
    text = task.feedback_text(style)
    if style == "verifier_payload":
        expected = json.dumps(task.expected, ensure_ascii=False)
        text = f"{text} (expected {expected})"
    return text


@dataclass
class ArmRun:
    arm: str
    attempts: list[Attempt] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def passed(self) -> int:
        return sum(a.passed for a in self.attempts)


def run_arm(
    arm: str,
    families: Sequence[Family],
    settings: AgentSettings,
    *,
    render: str = "compact",
    progress: Callable[[str], None] | None = None,
    service_env: dict[str, str] | None = None,
    sessions: str = "task",
    namespaces: str = "shared",
) -> ArmRun:
    """Every family's tasks in order with one memory arm (module docstring). `sessions` and `namespaces` as in the
    rule evaluation (`lessons.evaluate.SESSIONS`, `NAMESPACES`: `family` opens each family's sessions in a
    workspace of its own, as the MCP server and the hooks keep one per project folder); a retry runs in the
    session of the task it retries, minutes after it."""
    started = time.perf_counter()
    out = ArmRun(arm)
    http = httpx.Client(base_url=settings.base_url.rstrip("/") + "/", timeout=settings.timeout_s)
    service: ServiceClient | None = None
    scratch = Path(tempfile.mkdtemp(prefix=f"memos-agent-{arm}-"))
    try:
        if arm == "service":
            log = (scratch / "service.log").open("wb")
            service = ServiceClient.spawn(scratch / "home", env={**SERVICE_ENV, **(service_env or {})}, stderr=log)
        ts = 1_700_000_000_000
        seen: list[tuple[Family, Task, set[str]]] = []  # earlier tasks and the values their attempts produced
        opened: set[str] = set()
        for family in families:
            pasted: list[str] = []
            ts += 3 * 3_600_000
            for index, task in enumerate(family.tasks):
                style = style_of("mixed", index)
                ts += 5 * 60_000 if sessions == "family" or task.retry_of else 3 * 3_600_000
                workspace = scratch / family.name / task.id
                shutil.copytree(family.data_dir, workspace)
                memory = ""
                episode = ""
                session = session_id(family, task, sessions)
                if service is not None and namespaces == "family" and session not in opened:
                    space = {"agentKind": AGENT, "profileId": "default", "workspaceId": family.name}
                    service.call("session.open", {"agent": AGENT, "sessionId": session, "namespace": space})
                    opened.add(session)
                if arm == "naive":
                    memory = "\n".join(f"- {text}" for text in pasted)
                elif arm == "oracle":
                    memory = "\n".join(f"- {family.conventions[c].oracle}" for c in task.needs)
                elif service is not None:
                    result = service.call(
                        "turn.start",
                        {
                            "agent": AGENT,
                            "sessionId": session,
                            "userText": task.prompt,
                            "ts": ts,
                            "render": render,
                        },
                        timeout=120,
                    )
                    memory = str(result.get("injectedContext") or "")
                    episode = result["query"]["episodeId"]
                t0 = time.perf_counter()
                trial = solve(http, task, workspace, memory, settings)
                seconds = time.perf_counter() - t0
                passed = trial["error"] is None and answers_match(task.expected, trial["answer"], task.tolerance)
                leaked = _leaked(memory, family, task, seen)
                seen.append((family, task, _attempt_values(trial)))
                out.attempts.append(
                    Attempt(
                        family.name,
                        task.id,
                        arm,
                        style,
                        passed,
                        trial["answer"],
                        len(memory),
                        memory,
                        trial["error"],
                        trial["llmCalls"],
                        trial["promptTokens"],
                        trial["completionTokens"],
                        round(seconds, 1),
                        trial["script"],
                        leaked,
                    )
                )
                pasted.append(_pasted(task, style, passed))
                if service is not None:
                    _teach(service, task, style, episode, session, trial, passed, ts)
                if progress:
                    progress(f"{arm} {family.name}/{task.id}: {'PASS' if passed else 'FAIL'} ({seconds:.0f} s)")
    finally:
        http.close()
        if service is not None:
            service.close()
        shutil.rmtree(scratch, ignore_errors=True)
    out.wall_s = round(time.perf_counter() - started, 1)
    return out


#: The agent kind the service arm's turns are recorded under.
AGENT = "lessons-agent"


def _attempt_values(trial: dict[str, Any]) -> set[str]:
    """The values an attempt produced: its answer and the numbers its script typed in (three or more digits, or
    with decimals)."""
    text = f"{json.dumps(trial.get('answer'), default=str)}\n{trial.get('script') or ''}"
    return {v for v in values_in(text) if sum(c.isdigit() for c in v) >= 3 or "." in v}


def _leaked(memory: str, family: Family, task: Task, seen: Sequence[tuple[Family, Task, set[str]]]) -> list[str]:
    """Values of other tasks in a memory text: their expected and naive answers and what their attempts produced,
    unless this task's prompt or input names them (or the task this one retries produced them)."""
    if not memory:
        return []
    own = values_in(task.prompt) | input_values(family, task) | {v.casefold() for v in instance_values(task)}
    present = values_in(memory)
    lowered = memory.casefold()
    out: set[str] = set()
    for other_family, other, produced in seen:
        if other_family.name == family.name and other.id in {task.id, task.retry_of}:
            continue
        for value in (instance_values(other) | produced) - own:
            if value in present if value.replace(".", "").replace("-", "").isdigit() else value in lowered:
                out.add(value)
    return sorted(out)


def _teach(
    service: ServiceClient,
    task: Task,
    style: str,
    episode: str,
    session: str,
    trial: dict[str, Any],
    passed: bool,
    ts: int,
) -> None:
    """turn.end with the agent's script and answer, then the verdict through feedback.submit and a flush."""
    answer = json.dumps(trial["answer"], ensure_ascii=False) if trial["answer"] is not None else "(no answer)"
    calls = [
        {
            "name": "write_file",
            "input": {"path": "agent_solution.py", "content": trial["script"][:2000]},
            "output": "ok",
        },
        {
            "name": "run_python",
            "input": {"script": "agent_solution.py"},
            "output": trial["error"] or f"wrote {task.output}",
        },
    ]
    ended = service.call(
        "turn.end",
        {
            "agent": AGENT,
            "sessionId": session,
            "episodeId": episode,
            "agentText": f"Done: wrote {task.output} with {answer}.",
            "toolCalls": calls,
            "ts": ts + 60_000,
        },
        timeout=120,
    )
    trace_ids = list(ended.get("traceIds") or [])
    params: dict[str, Any]
    if task.passes and passed:  # the family's own praise of a right answer
        params = feedback_params(task, style, episode, trace_ids)
    elif task.passes:  # a task no convention affects, failed: the verifier's values, no lesson
        params = {
            "episodeId": episode,
            "channel": "explicit",
            "polarity": "negative",
            "magnitude": 1.0,
            "raw": {
                "traceIds": trace_ids,
                "verifier": {
                    "task": task.id,
                    "passed": 0,
                    "total": 1,
                    "expected": task.expected,
                    "actual": trial["answer"] if isinstance(trial["answer"], dict) else {},
                    "message": PLAIN_FAILURE,
                },
            },
        }
    elif passed:
        params = {
            "episodeId": episode,
            "channel": "explicit",
            "polarity": "positive",
            "magnitude": 1.0,
            "rationale": "Correct.",
            "raw": {"traceIds": trace_ids, "verifier": {"task": task.id, "passed": 1, "total": 1}},
        }
    else:
        params = feedback_params(task, style, episode, trace_ids)
        if "verifier" in params["raw"]:
            params["raw"]["verifier"]["actual"] = trial["answer"] if isinstance(trial["answer"], dict) else {}
    params["ts"] = ts + 120_000
    service.call("feedback.submit", params, timeout=300)
    service.call("memory.flush", {}, timeout=300)
