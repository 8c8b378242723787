"""An LLM agent that answers with a Python script, which the runner runs in the task's workspace.

A small model cannot add up a table by hand reliably (Qwen2.5-Coder-1.5B added 9150 + 4820 as 14070 and let
its per-row results drift with small prompt changes, docs/skillflow-qwen1.5b.md), but it writes short
standard-library scripts well. So this agent asks for a script: the model sees the task, the head of each
input file as it is on disk (the script must parse the real format) and the memory the service injected,
and replies with one ```python block that reads the files and writes the task's output file. The runner runs
it with the same interpreter (`-I`: no user site, no environment hooks) in the workspace, under a time limit.

The mistakes that remain are the ones a lesson can fix in a line of code: an XML default namespace the
lookups ignore, dates read month-first, cancelled orders counted, a tie broken the wrong way. When the script
fails (an exception, no output file, an output that is not a JSON object) the model gets the error back once
(`retries`) and replies with a corrected script; that call samples (`retry_temperature`), because a greedy
retry of a small model repeats the same script.

Steps reported to `turn.end`: each model call (`llm.chat`, the script as output), each run (`run_python`,
exit code and the tail of stderr, with an error code when it failed) and the written output (`write_file`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from skillflow.agents import MEMORY_HEADER, OUTPUT_CHARS, REPLY_CHARS, AgentInput, AgentResult, clip, tool_call
from skillflow.lessons import find_lessons
from skillflow.llm_agent import continue_chat, fenced_blocks

SYSTEM_PROMPT = (
    "You write Python 3 scripts that solve data tasks. The script runs in the folder that holds the task's "
    "input files, uses only the Python standard library, reads the input files itself and writes the output "
    "file the task names with json.dump. Notes from earlier tasks may follow the files: they record mistakes "
    "made before, so apply every note that fits the task. Values read from a file are strings: convert numbers "
    "with int() or float(). Keep the script short, with no comments. Reply with exactly one ```python block "
    "and nothing else."
)
#: Standard-library imports the reply starts with, by input file type: without them the 1.5B coder model
#: reaches for pandas, which the script may not use.
IMPORTS = {".csv": "import csv", ".xml": "import xml.etree.ElementTree as ET"}
SCRIPT_NAME = "agent_solution.py"
#: After the memory block: recalled traces hold other tasks' scripts, and a small model otherwise adapts the
#: nearest one (it computed revenue for a units task from a recalled revenue script).
MEMORY_USE = (
    "The memory comes from other tasks: apply the lessons in it that fit this task, but do not copy its code, "
    "numbers or output fields."
)
#: Lines of each input file shown to the model (the script reads the whole file itself).
HEAD_LINES = 14
ERROR_CHARS = 900


def default_prefill(files: tuple[str, ...] | list[str]) -> str:
    """```python, then `import json` and the standard-library import of each input file type."""
    suffixes = {Path(name).suffix.lower() for name in files}
    imports = ["import json", *sorted(IMPORTS[suffix] for suffix in suffixes if suffix in IMPORTS)]
    return "```python\n" + "\n".join(imports) + "\n"


def extract_script(reply: str) -> str | None:
    """The code of the reply's last ```python (or bare) fenced block; None when it has none."""
    blocks = [body for lang, body in fenced_blocks(reply) if lang in ("python", "py", "")]
    code = blocks[-1].strip() if blocks else ""
    return code + "\n" if code else None


def file_head(path: Path, lines: int = HEAD_LINES) -> str:
    """The first `lines` lines of a text file, with a note of how many more there are."""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    shown = "\n".join(text[:lines])
    rest = len(text) - lines
    return shown + (f"\n... ({rest} more lines)" if rest > 0 else "")


@dataclass(frozen=True)
class RunOutcome:
    """What running the script gave: the answer (a JSON object) or why there is none."""

    answer: dict[str, Any] | None
    exit_code: int | None
    stderr: str
    error: str | None  # None when the answer is usable

    def feedback(self) -> str:
        """The message that goes back to the model for a retry."""
        detail = self.stderr.strip()[-ERROR_CHARS:] or "(nothing on stderr)"
        return f"The script failed: {self.error}.\n{detail}"


def run_script(script: Path, workspace: Path, output: str, timeout_s: float) -> RunOutcome:
    """Run `script` in `workspace` and read the output file it should have written."""
    target = workspace / output
    target.unlink(missing_ok=True)  # an output left by an earlier attempt must not count for this one
    try:
        done = subprocess.run(
            [sys.executable, "-I", str(script)],
            cwd=workspace,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return RunOutcome(None, None, "", f"it did not finish within {timeout_s:g} s")
    if done.returncode != 0:
        return RunOutcome(None, done.returncode, done.stderr, f"it exited with code {done.returncode}")
    if not target.is_file():
        return RunOutcome(None, 0, done.stderr, f"it did not write {output}")
    try:
        value = json.loads(target.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return RunOutcome(None, 0, done.stderr, f"{output} is not valid JSON ({exc})")
    if not isinstance(value, dict):
        return RunOutcome(None, 0, done.stderr, f"{output} holds a JSON {type(value).__name__}, not an object")
    return RunOutcome(value, 0, done.stderr, None)


@dataclass(frozen=True)
class ScriptSettings:
    """Where the model is, how it is asked and how its script runs."""

    base_url: str
    model: str = "local"
    max_tokens: int = 500
    temperature: float = 0.0
    seed: int = 7
    timeout_s: float = 300.0
    #: Start of the reply the model continues; None = ```python plus the imports the input files need.
    prefill: str | None = None
    #: Corrected scripts asked for after a failed run (each one sampled at `retry_temperature`).
    retries: int = 1
    retry_temperature: float = 0.7
    run_timeout_s: float = 30.0
    max_memory_chars: int = 4000


class ScriptAgent:
    """Asks an OpenAI-compatible endpoint for a script, runs it in the workspace, retries once on failure."""

    name = "llm-script"

    def __init__(self, settings: ScriptSettings, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self.command = f"{settings.base_url} model={settings.model} (script)"
        self._client = httpx.Client(
            base_url=settings.base_url.rstrip("/") + "/", timeout=settings.timeout_s, transport=transport
        )

    def close(self) -> None:
        self._client.close()

    def user_message(self, job: AgentInput) -> str:
        """Task, the head of every input file, the memory block last (a small model follows what it read
        last), then what the script must do."""
        parts = [f"Task:\n{job.user_text.strip()}\n"]
        for name in job.task.files:
            path = job.workspace / name
            if path.is_file():
                parts.append(f"File {name} (first lines):\n```\n{file_head(path)}\n```\n")
        injected = job.injected.strip()
        if injected:
            memory = clip(injected, self.settings.max_memory_chars)
            parts.append(f"{MEMORY_HEADER}\n\n{memory}\n\n{MEMORY_USE}\n")
        parts.append(
            f"Write the Python script: it reads {', '.join(job.task.files)}, computes exactly what the task asks "
            f"and writes {job.task.output} with json.dump (one JSON object with exactly the fields the task names)."
        )
        return "\n".join(parts)

    def _chat(self, messages: list[dict[str, str]], prefill: str, temperature: float, notes: dict[str, Any]) -> str:
        """One completion continuing `prefill`; the reply with the prefill in front."""
        settings = self.settings
        content = continue_chat(
            self._client,
            messages,
            prefill,
            notes,
            model=settings.model,
            temperature=temperature,
            seed=settings.seed,
            max_tokens=settings.max_tokens,
        )
        if prefill and not content.startswith(prefill.strip()):
            content = prefill + content  # llama.cpp echoes the prefill; a server that does not gets it back
        return content

    def attempt(self, job: AgentInput) -> AgentResult:
        user = self.user_message(job)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
        notes: dict[str, Any] = {
            "model": self.settings.model,
            "mode": "script",
            "llmCalls": 0,
            "promptTokens": 0,
            "completionTokens": 0,
            "promptChars": len(SYSTEM_PROMPT) + len(user),
            "maxTokens": self.settings.max_tokens,
            "runs": [],
            "lessonsInMemory": sorted({e.pitfall for e in find_lessons(job.injected, job.family.pitfalls)}),
        }
        prefill = self.settings.prefill if self.settings.prefill is not None else default_prefill(job.task.files)
        steps: list[dict[str, Any]] = []
        started = time.monotonic()
        reply = ""
        outcome: RunOutcome | None = None
        for attempt in range(self.settings.retries + 1):
            temperature = self.settings.temperature if attempt == 0 else self.settings.retry_temperature
            try:
                reply = self._chat(messages, prefill, temperature, notes)
            except httpx.TimeoutException:
                notes["error"] = f"model call timed out after {self.settings.timeout_s:g}s"
                steps.append(tool_call("llm.chat", {"attempt": attempt + 1}, notes["error"], error="timeout"))
                break
            except (httpx.HTTPError, ValueError) as exc:
                notes["error"] = clip(f"{type(exc).__name__}: {exc}", OUTPUT_CHARS)
                steps.append(tool_call("llm.chat", {"attempt": attempt + 1}, notes["error"], error="LLM_ERROR"))
                break
            script = extract_script(reply)
            steps.append(
                tool_call(
                    "llm.chat",
                    {"attempt": attempt + 1, "temperature": temperature},
                    clip(script or reply, OUTPUT_CHARS),
                )
            )
            if script is None:
                outcome = RunOutcome(None, None, "", "the reply holds no ```python block")
            else:
                path = job.workspace / SCRIPT_NAME
                path.write_text(script, encoding="utf-8")
                outcome = run_script(path, job.workspace, job.task.output, self.settings.run_timeout_s)
                steps.append(
                    tool_call(
                        "run_python",
                        {"script": SCRIPT_NAME},
                        (outcome.stderr.strip()[-OUTPUT_CHARS:] or f"exit code {outcome.exit_code}")
                        if outcome.error
                        else f"wrote {job.task.output}",
                        error="SCRIPT_FAILED" if outcome.error else None,
                    )
                )
            notes["runs"].append({"attempt": attempt + 1, "error": outcome.error})
            if outcome.error is None:
                break
            messages = [
                *messages,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": outcome.feedback() + "\nReply with the whole corrected script."},
            ]
        notes["durationMs"] = int((time.monotonic() - started) * 1000)
        notes["answerValid"] = outcome is not None and outcome.error is None
        if outcome is not None and outcome.answer is not None:
            text = json.dumps(outcome.answer, indent=2, ensure_ascii=False)
            steps.append(tool_call("write_file", {"path": job.task.output, "content": text[:300]}, "written"))
        elif outcome is not None:
            notes["error"] = outcome.error
        shown = clip(reply.strip(), REPLY_CHARS) or f"(no answer: {notes.get('error', 'empty reply')})"
        return AgentResult(reply=shown, steps=steps, notes=notes)
