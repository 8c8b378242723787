"""The agents a SkillFlow run can drive: the built-in simulated agent and any external command.

Both get the same thing a real host would give its model — the user's text and the memory block the service
injected for it (empty without memory) — plus a workspace holding the task's input files, and both must
leave their output in that workspace. What they did comes back as steps (tool calls with arguments and
outputs) and a final reply, which the runner records with `turn.end`.

* `SimulatedAgent` — deterministic, for offline evaluation: the family's solver with every habit (typical
  first-attempt mistake) still in force except those whose lesson the injected text teaches
  (`skillflow.lessons`). It reads nothing else: not the verifier, not the expected answers, not the
  runner's records.
* `CommandAgent` — an external program (a Hermes CLI call, a script around your own agent). The prompt,
  the memory and both together are written to files whose paths are substituted into the command
  (`{input_file}`, `{prompt_file}`, `{memory_file}`, `{workspace}`, `{steps_file}`, `{task}`, `{family}`,
  `{output}`) and passed as `SKILLFLOW_*` environment variables. If the program writes a JSON list of tool
  calls to `{steps_file}` those are its steps; otherwise the runner reports the command itself and every
  file it created or changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from skillflow.family import Family, Task
from skillflow.lessons import find_lessons

#: Characters of a tool output, a written file's head or the command's stdout kept in a step.
OUTPUT_CHARS = 600
REPLY_CHARS = 2000
MEMORY_HEADER = "Memory recalled for this task (background knowledge from earlier tasks):"


def tool_call(name: str, arguments: dict[str, Any], output: Any, *, error: str | None = None) -> dict[str, Any]:
    """One step in `turn.end`'s `toolCalls` shape."""
    step: dict[str, Any] = {"name": name, "input": arguments, "output": output}
    if error:
        step["errorCode"] = error
        step["success"] = False
    return step


@dataclass(frozen=True)
class Solution:
    """What a family solver produced: output files (name → JSON value), its steps and its reply."""

    outputs: dict[str, Any]
    steps: list[dict[str, Any]]
    reply: str


@dataclass(frozen=True)
class AgentInput:
    """Everything an agent gets for one trial."""

    family: Family
    task: Task
    user_text: str  # what the user typed (also sent to turn.start)
    injected: str  # the service's injectedContext; "" without memory
    workspace: Path


@dataclass
class AgentResult:
    """What the agent did: steps (turn.end toolCalls), final reply, agent-specific notes for the report."""

    reply: str
    steps: list[dict[str, Any]]
    notes: dict[str, Any] = field(default_factory=dict)


class Agent(Protocol):
    name: str

    def attempt(self, job: AgentInput) -> AgentResult: ...


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _write_json(path: Path, value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return text


class SimulatedAgent:
    """The family's solver, minus the habits whose lesson the injected memory teaches."""

    name = "simulated"

    def attempt(self, job: AgentInput) -> AgentResult:
        evidence = find_lessons(job.injected, job.family.pitfalls)
        recognised = {e.pitfall for e in evidence}
        habits = frozenset(p for p in job.family.pitfalls if p not in recognised)
        solution: Solution = job.family.solver()(job.task, job.workspace, habits)
        steps = list(solution.steps)
        for name, value in solution.outputs.items():
            text = _write_json(job.workspace / name, value)
            steps.append(
                tool_call("write_file", {"path": name, "content": clip(text, 300)}, f"wrote {len(text)} bytes")
            )
        return AgentResult(
            reply=solution.reply,
            steps=steps,
            notes={
                "habits": sorted(habits),
                "lessonsRecognised": [{"pitfall": e.pitfall, "excerpt": e.excerpt} for e in evidence],
            },
        )


def _snapshot(folder: Path) -> dict[str, str]:
    """Relative path → content digest of every file under `folder`."""
    return {
        str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _file_head(path: Path) -> str:
    try:
        return clip(path.read_text(encoding="utf-8"), 300)
    except UnicodeDecodeError:
        return f"<{path.stat().st_size} bytes of binary data>"


def _steps_from_file(path: Path) -> list[dict[str, Any]] | None:
    """The agent's own step list, when it wrote a valid one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(data, list) or not all(isinstance(s, dict) and isinstance(s.get("name"), str) for s in data):
        return None
    return [{k: v for k, v in s.items() if k in {"name", "input", "output", "errorCode", "success"}} for s in data]


class CommandAgent:
    """An external program run once per task in the task's workspace (see the module docstring)."""

    name = "command"

    def __init__(self, command: str, *, timeout_s: float = 600.0) -> None:
        self.command = command
        self.timeout_s = timeout_s

    def _files(self, job: AgentInput) -> dict[str, Path]:
        """The prompt, memory and combined input files, next to (not inside) the workspace."""
        folder = job.workspace.parent / f"{job.workspace.name}.agent"
        folder.mkdir(parents=True, exist_ok=True)
        memory = f"{MEMORY_HEADER}\n\n{job.injected}\n" if job.injected.strip() else ""
        paths = {
            "prompt_file": folder / "prompt.txt",
            "memory_file": folder / "memory.md",
            "input_file": folder / "input.md",
            "steps_file": folder / "steps.json",
        }
        paths["prompt_file"].write_text(job.user_text + "\n", encoding="utf-8")
        paths["memory_file"].write_text(memory, encoding="utf-8")
        paths["input_file"].write_text((memory + "\n" if memory else "") + job.user_text + "\n", encoding="utf-8")
        paths["steps_file"].unlink(missing_ok=True)
        return paths

    def attempt(self, job: AgentInput) -> AgentResult:
        paths = self._files(job)
        values = {
            **{k: str(v) for k, v in paths.items()},
            "workspace": str(job.workspace),
            "task": job.task.id,
            "family": job.family.name,
            "output": job.task.output,
        }
        quoted = {k: shlex.quote(v) for k, v in values.items()}
        # only the known placeholders: other braces (awk, JSON) in the command stay as they are
        command = re.sub(r"\{(\w+)\}", lambda m: quoted.get(m.group(1), m.group(0)), self.command)
        env = {**os.environ, **{f"SKILLFLOW_{k.upper()}": v for k, v in values.items()}}
        env["SKILLFLOW_PROMPT"] = job.user_text
        env["SKILLFLOW_MEMORY"] = job.injected
        before = _snapshot(job.workspace)
        started = time.monotonic()
        try:
            done = subprocess.run(
                command, shell=True, cwd=job.workspace, env=env, capture_output=True, text=True, timeout=self.timeout_s
            )
            code: int | None = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = f"timed out after {self.timeout_s:g}s"
        after = _snapshot(job.workspace)
        changed = [p for p, digest in after.items() if before.get(p) != digest]
        steps = _steps_from_file(paths["steps_file"])
        if steps is None:
            error = None if code == 0 else ("timeout" if code is None else f"EXIT_{code}")
            steps = [tool_call("run_command", {"command": command}, clip(stdout, OUTPUT_CHARS), error=error)]
            steps += [
                tool_call("write_file", {"path": p, "content": _file_head(job.workspace / p)}, "written")
                for p in changed
            ]
        return AgentResult(
            reply=clip(stdout.strip(), REPLY_CHARS) or "(the agent printed nothing)",
            steps=steps,
            notes={
                "command": command,
                "returncode": code,
                "durationMs": int((time.monotonic() - started) * 1000),
                "changedFiles": changed,
                "stderrTail": stderr[-OUTPUT_CHARS:],
                "lessonsInMemory": sorted({e.pitfall for e in find_lessons(job.injected, job.family.pitfalls)}),
            },
        )
