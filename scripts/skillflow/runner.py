"""The SkillFlow runner's command line and orchestration (`scripts/skillflow_runner.py` is its entry point).

    python scripts/skillflow_runner.py --out skillflow-report.json
    python scripts/skillflow_runner.py --family sec13f --mode with
    python scripts/skillflow_runner.py --agent-cmd "my-agent --input {input_file}" --family sales_csv

Every family runs twice by default — through a freshly spawned memos-bridge service (own data home) and
without any memory — with the built-in simulated agent unless `--agent-cmd` names an external one. The
table per family goes to stdout, the full record to `--out`, the cumulative success curves to a PNG next to
it when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skillflow.agents import Agent, CommandAgent, SimulatedAgent
from skillflow.family import FamilyError, load_family, shipped_families
from skillflow.llm_agent import LLMAgent, LLMSettings
from skillflow.protocol import ProtocolError, run_with_memory, run_without_memory
from skillflow.report import build_report, family_report, format_table, plot
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
        choices=("simulated", "llm"),
        default="simulated",
        help="built-in agent when no --agent-cmd: the simulated one, or an LLM behind --llm-url",
    )
    parser.add_argument("--llm-url", help="OpenAI-compatible base URL for --agent llm, e.g. http://127.0.0.1:8123/v1")
    parser.add_argument("--llm-model", default="local", help="model name sent to the endpoint (--agent llm)")
    parser.add_argument("--llm-max-tokens", type=int, default=900, help="completion bound per task (--agent llm)")
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
    return parser.parse_args(argv)


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
    if args.agent == "llm":
        if not args.llm_url:
            raise SystemExit("--agent llm needs --llm-url (an OpenAI-compatible base URL ending in /v1)")
        return LLMAgent(
            LLMSettings(
                base_url=args.llm_url,
                model=args.llm_model,
                max_tokens=args.llm_max_tokens,
                seed=args.llm_seed,
                timeout_s=args.llm_timeout,
                max_prompt_chars=args.llm_max_prompt_chars,
            )
        )
    return SimulatedAgent()


def run(
    families: Sequence[str],
    agent: Agent,
    work_dir: Path,
    options: RunOptions,
    *,
    mode: str = "both",
    echo: bool = True,
) -> dict[str, Any]:
    """Run each family in the requested modes and return the report (printing each family's table)."""
    reports = []
    for ref in families:
        family = load_family(ref)
        folder = work_dir / family.name
        with_memory = run_with_memory(family, agent, folder, options) if mode in ("both", "with") else None
        without_memory = run_without_memory(family, agent, folder, options) if mode in ("both", "without") else None
        report = family_report(family, with_memory, without_memory)
        reports.append(report)
        if echo:
            print(format_table(report) + "\n", flush=True)
    meta = {
        "runId": options.run_id,
        "createdAt": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "agent": {"kind": agent.name, "command": getattr(agent, "command", None)},
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
    options = RunOptions(
        run_id=f"{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}",
        agent_name=args.agent_name,
        new_task_phrase=args.new_task_phrase,
        llm=args.llm,
        service_env=_env_pairs(args.service_env),
    )
    agent = make_agent(args)
    try:
        report = run(args.family or shipped_families(), agent, work_dir, options, mode=args.mode, echo=not args.quiet)
    except (FamilyError, ProtocolError) as exc:
        print(f"skillflow: {exc}", file=sys.stderr)
        return 2
    finally:
        if isinstance(agent, LLMAgent):
            agent.close()
    print(f"work dir: {work_dir}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"report: {args.out}")
    plot_path = args.plot or (args.out.with_suffix(".png") if args.out else None)
    if plot_path is not None:
        print(plot(report, plot_path))
    return 0
