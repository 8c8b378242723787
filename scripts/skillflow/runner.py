"""The SkillFlow runner's command line and orchestration (`scripts/skillflow_runner.py` is its entry point).

    python scripts/skillflow_runner.py --out skillflow-report.json
    python scripts/skillflow_runner.py --family sec13f --mode with
    python scripts/skillflow_runner.py --agent-cmd "my-agent --input {input_file}" --family sales_csv
    python scripts/skillflow_runner.py --agent llm --variant llm --llm-serve qwen2.5-coder-1.5b \
        --service-llm-url agent --out docs/skillflow-qwen1.5b.json     # a real local model, agent and service
    python scripts/skillflow_runner.py --agent script --variant script --llm-serve qwen2.5-coder-1.5b \
        --service-llm-url agent --out docs/skillflow-qwen1.5b-script.json   # the model writes a script we run

Every family runs twice by default — through a freshly spawned memos-bridge service (own data home) and
without any memory — with the built-in simulated agent unless `--agent-cmd` names an external one. The
table per family goes to stdout, the full record to `--out`, the cumulative success curves to a PNG next to
it when matplotlib is installed.

With `--llm-serve MODEL` the runner starts `memos-bridge llm serve --model MODEL` itself (a child process on
127.0.0.1, stopped when the run ends) and uses its base URL for `--agent llm` / `--agent script`;
`--service-llm-url URL` (or `agent`: the agent's endpoint) points the service's own LLM work
(`openai_compatible`) at an endpoint too, and `--service-llm-stages light` keeps the longest prompts off it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from skillflow.agents import Agent, CommandAgent, SimulatedAgent
from skillflow.family import FamilyError, load_family, shipped_families
from skillflow.llm_agent import LLMAgent, LLMSettings
from skillflow.protocol import ProtocolError, run_with_memory, run_without_memory
from skillflow.report import build_report, family_report, format_markdown, format_table, plot
from skillflow.script_agent import ScriptAgent, ScriptSettings
from skillflow.service import RunOptions, service_env


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="skillflow_runner.py",
        description="Run SkillFlow task families through memos-bridge, with and without memory, and report.",
    )
    parser.add_argument(
        "--family",
        action="append",
        help=f"family name or folder (repeatable; default: all shipped: {', '.join(shipped_families())})",
    )
    parser.add_argument(
        "--mode", choices=("both", "with", "without"), default="both", help="with memory, without, or both"
    )
    parser.add_argument(
        "--agent-cmd",
        help="external agent command, run once per task in its workspace; placeholders {input_file} (memory + "
        "prompt), {prompt_file}, {memory_file}, {workspace}, {steps_file}, {task}, {family}, {output}; the "
        "same values in SKILLFLOW_* environment variables (default: the built-in simulated agent)",
    )
    parser.add_argument("--agent-timeout", type=float, default=600.0, help="seconds per task for --agent-cmd")
    parser.add_argument(
        "--agent",
        choices=("simulated", "llm", "script"),
        default="simulated",
        help="built-in agent when no --agent-cmd: the simulated one, an LLM behind --llm-url that works the "
        "answer out by hand (llm), or one that answers with a Python script the runner runs (script)",
    )
    parser.add_argument(
        "--script-retries",
        type=int,
        default=1,
        help="corrected scripts asked for after a failed run, each sampled at --script-retry-temperature "
        "(--agent script)",
    )
    parser.add_argument("--script-retry-temperature", type=float, default=0.7, help="(--agent script)")
    parser.add_argument("--script-timeout", type=float, default=30.0, help="seconds per script run (--agent script)")
    parser.add_argument(
        "--variant", help="run each family's named variant (e.g. llm: few-row inputs for a small real model)"
    )
    parser.add_argument("--llm-url", help="OpenAI-compatible base URL for --agent llm, e.g. http://127.0.0.1:8123/v1")
    parser.add_argument(
        "--llm-serve",
        metavar="MODEL",
        help="start `memos-bridge llm serve --model MODEL` for the run (e.g. qwen2.5-coder-1.5b) and use its URL as "
        "--llm-url; stopped when the run ends",
    )
    parser.add_argument("--llm-serve-home", type=Path, help="data home of --llm-serve (its verified model cache)")
    parser.add_argument("--llm-serve-threads", type=int, default=2, help="CPU threads of --llm-serve")
    parser.add_argument(
        "--service-llm-url",
        help="point the service's own LLM work at this OpenAI-compatible base URL (provider openai_compatible, "
        "no host fallback); `agent` = the agent's --llm-url / --llm-serve endpoint",
    )
    parser.add_argument(
        "--service-llm-timeout", type=float, default=180.0, help="seconds per service LLM call (--service-llm-url)"
    )
    parser.add_argument(
        "--service-llm-stages",
        choices=sorted(SERVICE_LLM_STAGES),
        default="all",
        help="which service stages ask the LLM (--service-llm-url): all, or light = policy induction, decision "
        "repairs and turn routing only; episode summaries, reflection/R_human scoring, experience rewording, skill "
        "drafting and world-model abstraction use their deterministic algorithms (their long prompts and outputs "
        "take 1-3 minutes each on a small CPU-bound model)",
    )
    parser.add_argument("--llm-model", default="local", help="model name sent to the endpoint (--agent llm)")
    parser.add_argument(
        "--llm-max-tokens",
        type=int,
        help="completion bound per model call (default: 900 for --agent llm, 500 for --agent script)",
    )
    parser.add_argument(
        "--llm-answer-tokens",
        type=int,
        default=400,
        help="bound of the one continuation call that asks only for the ```json block (0 = none; --agent llm)",
    )
    parser.add_argument(
        "--llm-prefill",
        help="start of the assistant's reply the model continues ('' = none; default: the agent's own; --agent llm)",
    )
    parser.add_argument("--llm-seed", type=int, default=7, help="sampling seed; decoding is greedy (--agent llm)")
    parser.add_argument("--llm-timeout", type=float, default=300.0, help="seconds per model call (--agent llm)")
    parser.add_argument(
        "--llm-max-prompt-chars", type=int, default=12_000, help="prompt size bound in characters (--agent llm)"
    )
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--plot", type=Path, help="PNG of the cumulative success curves (default: next to --out)")
    parser.add_argument("--work-dir", type=Path, help="workspaces and data homes (default: a new temp folder)")
    parser.add_argument(
        "--llm",
        choices=("none", "inherit"),
        default="none",
        help="none: the service runs without an LLM (MEMOS_BRIDGE_LLM__PROVIDER=none); inherit: its config decides",
    )
    parser.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the service, e.g. MEMOS_BRIDGE_RETRIEVAL__SKILL_INJECTION_MODE=full",
    )
    parser.add_argument("--new-task-phrase", default="New task: ", help="prefix of every task after the first")
    parser.add_argument("--agent-name", default="skillflow", help="the `agent` the service records")
    parser.add_argument("--quiet", action="store_true", help="no table on stdout")
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    args.command_line = "python scripts/skillflow_runner.py " + shlex.join(given)  # what the Markdown report cites
    return args


def _env_pairs(items: Sequence[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--service-env expects KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs


def make_agent(args: argparse.Namespace) -> Agent:
    """The agent the arguments ask for: an external command, the LLM agent or the simulated one."""
    if args.agent_cmd:
        return CommandAgent(args.agent_cmd, timeout_s=args.agent_timeout)
    if args.agent in ("llm", "script") and not args.llm_url:
        raise SystemExit(
            f"--agent {args.agent} needs --llm-url (an OpenAI-compatible base URL ending in /v1) or --llm-serve"
        )
    # where the model is and how it decodes: the same flags for both LLM agents (each has its own token bound)
    endpoint: dict[str, Any] = {
        "base_url": args.llm_url,
        "model": args.llm_model,
        "seed": args.llm_seed,
        "timeout_s": args.llm_timeout,
    }
    if args.llm_prefill is not None:
        endpoint["prefill"] = args.llm_prefill.replace("\\n", "\n")
    if args.agent == "script":
        return ScriptAgent(
            ScriptSettings(
                **endpoint,
                max_tokens=args.llm_max_tokens or 500,
                retries=args.script_retries,
                retry_temperature=args.script_retry_temperature,
                run_timeout_s=args.script_timeout,
            )
        )
    if args.agent == "llm":
        return LLMAgent(
            LLMSettings(
                **endpoint,
                max_tokens=args.llm_max_tokens or 900,
                max_prompt_chars=args.llm_max_prompt_chars,
                answer_tokens=args.llm_answer_tokens,
            )
        )
    return SimulatedAgent()


#: The service settings each `--service-llm-stages` choice sets (on top of pointing the service at the endpoint).
SERVICE_LLM_STAGES: dict[str, dict[str, str]] = {
    "all": {},
    "light": {
        "MEMOS_BRIDGE_LEARNING__REWARD__LLM_SCORING": "false",
        "MEMOS_BRIDGE_LEARNING__REFINE_USE_LLM": "false",
        "MEMOS_BRIDGE_LEARNING__WORLD__USE_LLM": "false",
        "MEMOS_BRIDGE_LEARNING__SKILL__USE_LLM": "false",
    },
}


def service_llm_env(base_url: str, timeout_s: float) -> dict[str, str]:
    """The service environment that sends its own LLM work to `base_url` (and nowhere else)."""
    return {
        "MEMOS_BRIDGE_LLM__PROVIDER": "openai_compatible",
        "MEMOS_BRIDGE_LLM__BASE_URL": base_url,
        "MEMOS_BRIDGE_LLM__FALLBACK_TO_HOST": "false",
        "MEMOS_BRIDGE_LLM__TIMEOUT_MS": str(int(timeout_s * 1000)),
    }


_SERVING = re.compile(r"serving \S+ at (http://\S+/v1)")


@contextlib.contextmanager
def served_model(model: str, home: Path | None, threads: int, log: IO[str]) -> Iterator[str]:
    """`memos-bridge llm serve --model MODEL` as a child process; yields its base URL, stops it afterwards.

    Its stdout (the URL line) and stderr (llama.cpp's log) go to `log`.
    """
    command = [sys.executable, "-m", "memos_bridge", "llm", "serve", "--model", model, "--threads", str(threads)]
    if home is not None:
        command += ["--home", str(home)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ})
    assert child.stdout is not None
    url: str | None = None
    try:
        for line in child.stdout:
            log.write(line)
            log.flush()
            match = _SERVING.search(line)
            if match:
                url = match.group(1)
                break
        if url is None:
            code = child.wait()
            raise SystemExit(f"memos-bridge llm serve --model {model} exited ({code}) without a URL; see {log.name}")
        stdout = child.stdout
        threading.Thread(target=lambda: [log.write(x) for x in stdout], daemon=True).start()
        yield url
    finally:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def run(
    families: Sequence[str],
    agent: Agent,
    work_dir: Path,
    options: RunOptions,
    *,
    mode: str = "both",
    echo: bool = True,
    variant: str | None = None,
) -> dict[str, Any]:
    """Run each family in the requested modes and return the report (printing each family's table)."""
    reports = []
    started = time.monotonic()
    for ref in families:
        family = load_family(ref, variant)
        folder = work_dir / family.name
        with_memory = run_with_memory(family, agent, folder, options) if mode in ("both", "with") else None
        without_memory = run_without_memory(family, agent, folder, options) if mode in ("both", "without") else None
        report = family_report(family, with_memory, without_memory)
        reports.append(report)
        if echo:
            print(format_table(report) + "\n", flush=True)
    settings = getattr(agent, "settings", None)
    meta = {
        "runId": options.run_id,
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "agent": {"kind": agent.name, "command": getattr(agent, "command", None)}
        | ({"settings": asdict(settings)} if settings is not None else {}),
        "variant": variant,
        "wallMs": int((time.monotonic() - started) * 1000),
        "mode": mode,
        "workDir": str(work_dir),
        "service": {"env": service_env(options), "agentName": options.agent_name},
        "newTaskPhrase": options.new_task_phrase,
    }
    return build_report(reports, meta)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="skillflow-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        if args.llm_serve:
            log = stack.enter_context((work_dir / "llm-serve.log").open("w", encoding="utf-8"))
            url = stack.enter_context(served_model(args.llm_serve, args.llm_serve_home, args.llm_serve_threads, log))
            print(f"llm serve: {args.llm_serve} at {url} (log: {log.name})", flush=True)
            args.llm_url = args.llm_url or url
            if args.agent_cmd is None and args.agent == "simulated":
                args.agent = "llm"
        code = _run_main(args, work_dir)
    print(f"wall time: {time.monotonic() - began:.0f} s")
    return code


def service_settings(args: argparse.Namespace) -> tuple[dict[str, str], str]:
    """The service's extra environment and LLM mode: `--service-env` pairs win over what `--service-llm-url` and
    `--service-llm-stages` set."""
    pairs = _env_pairs(args.service_env)
    if not args.service_llm_url:
        return pairs, args.llm
    url = args.llm_url if args.service_llm_url == "agent" else args.service_llm_url
    if not url:
        raise SystemExit("--service-llm-url agent needs --llm-url or --llm-serve")
    stages = SERVICE_LLM_STAGES[args.service_llm_stages]
    return service_llm_env(url, args.service_llm_timeout) | stages | pairs, "inherit"


def _run_main(args: argparse.Namespace, work_dir: Path) -> int:
    service_env_pairs, llm_mode = service_settings(args)
    options = RunOptions(
        run_id=f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}",
        agent_name=args.agent_name,
        new_task_phrase=args.new_task_phrase,
        llm=llm_mode,
        service_env=service_env_pairs,
    )
    if args.service_llm_url:
        # one service LLM call can take minutes on a small CPU: let RPCs that wait for learning wait for it
        options.rpc_timeout_s = max(options.rpc_timeout_s, 20 * args.service_llm_timeout)
    agent = make_agent(args)
    try:
        report = run(
            args.family or shipped_families(),
            agent,
            work_dir,
            options,
            mode=args.mode,
            echo=not args.quiet,
            variant=args.variant,
        )
    except (FamilyError, ProtocolError) as exc:
        print(f"skillflow: {exc}", file=sys.stderr)
        return 2
    finally:
        if isinstance(agent, LLMAgent | ScriptAgent):
            agent.close()
    print(f"work dir: {work_dir}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        markdown = args.out.with_suffix(".md")
        markdown.write_text(format_markdown(report, args.command_line), encoding="utf-8")
        print(f"report: {args.out} (tables: {markdown})")
    plot_path = args.plot or (args.out.with_suffix(".png") if args.out else None)
    if plot_path is not None:
        print(plot(report, plot_path))
    return 0
