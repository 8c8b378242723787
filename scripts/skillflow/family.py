"""Task families as data: `families/<name>/family.json`, workspace input files and two Python hooks.

A family is a handful of tasks over the same kind of data that share pitfalls, so a lesson learnt on one task
can fix the next. Keeping it as data (prompt, input files, parameters, pitfalls) rather than code means a
new family needs no runner change; only its two hooks are code, each a `module:function` in the family folder:

* the **check** `(task, workspace) -> CheckResult` — the verifier: it recomputes the expected answer from the
  workspace inputs and compares it with what the agent wrote (family-wide, or a task's own `check`);
* the **solver** `(task, workspace, habits) -> Solution` — used by the simulated agent only: how an agent
  that still has the given habits (the family's typical first-attempt mistakes) would answer.

`pitfalls` name those mistakes once per family: the verifier's `feedback` sentence (what was wrong, what it
should be) and the `recognise` patterns (EN and ZH regexes) the simulated agent uses to notice the lesson in
recalled memory. An optional `worldDomain` declares the family's domain for the service's world models
(written into the data home's config.toml as `[learning.world.extra_domains.<key>]`).

A family may also declare named **variants** (`"variants": {"llm": {"workspace": "workspace-llm", "tasks":
[...]}}`): the same hooks and world domain over other tasks and input files, e.g. a few-row version for a
small real LLM that works the answer out by hand (`load_family("sec13f", variant="llm")`). A variant's own
`pitfalls` are added to the family's (same id: the variant's wording replaces the family's), e.g. the
`script` variant's `namespace` pitfall and its code-level lessons; its tasks carry `Task.variant`, so the
verifier grades them with the variant's pitfalls.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

FAMILIES_DIR = Path(__file__).resolve().parent / "families"
FAMILY_FILE = "family.json"
WORKSPACE_DIR = "workspace"


class FamilyError(ValueError):
    """A family folder or its family.json is unusable (the message says which field)."""


@dataclass(frozen=True)
class Pitfall:
    """A typical first-attempt mistake of the family and its lesson."""

    id: str
    title: str
    feedback: str  # the verifier's sentence when an answer shows this mistake
    recognise: tuple[str, ...]  # regexes (case-insensitive) that find the lesson in recalled text


@dataclass(frozen=True)
class WorldDomain:
    """The family's domain for world models (`[learning.world.extra_domains.<key>]`)."""

    key: str
    label: str
    aliases: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()


@dataclass(frozen=True)
class Task:
    """One task: what the user asks, the inputs copied into the workspace, what the verifier reads."""

    id: str
    title: str
    prompt: str
    files: tuple[str, ...]
    output: str
    params: Mapping[str, Any] = field(default_factory=dict)
    check_ref: str | None = None  # this task's own `module:function` verifier (default: the family's)
    variant: str | None = None  # the family variant the task belongs to (its verifier grades with its pitfalls)


@dataclass(frozen=True)
class Family:
    """A task family loaded from its folder."""

    name: str
    title: str
    description: str
    folder: Path
    tasks: tuple[Task, ...]
    pitfalls: Mapping[str, Pitfall]
    check_ref: str
    solver_ref: str
    world_domain: WorldDomain | None = None
    workspace_dir: str = WORKSPACE_DIR  # the folder (inside `folder`) holding the tasks' input files
    variant: str | None = None  # the variant these tasks come from (None: the family's own tasks)
    variants: tuple[str, ...] = ()  # the variants family.json declares

    def task(self, task_id: str) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(task_id)

    def check(self, task: Task | None = None) -> Callable[..., Any]:
        """The verifier hook `(task, workspace) -> CheckResult`: the task's own, else the family's."""
        ref = task.check_ref if task is not None and task.check_ref else self.check_ref
        return load_hook(self.folder, ref, self.name)

    def solver(self) -> Callable[..., Any]:
        """The simulated agent's hook `(task, workspace, habits) -> Solution`."""
        return load_hook(self.folder, self.solver_ref, self.name)

    def prepare_workspace(self, task: Task, workspace: Path) -> Path:
        """A fresh workspace holding only the task's input files (so one task cannot see another's output)."""
        if workspace.exists():
            shutil.rmtree(workspace)
        workspace.mkdir(parents=True)
        source = self.folder / self.workspace_dir
        for name in task.files:
            shutil.copy2(source / name, workspace / name)
        return workspace


def _str(data: Mapping[str, Any], key: str, where: str, *, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise FamilyError(f"{where}: '{key}' must be a non-empty string")
    return value


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise FamilyError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _pitfall(pid: str, data: Any, where: str) -> Pitfall:
    if not isinstance(data, dict):
        raise FamilyError(f"{where}: pitfall '{pid}' must be an object")
    recognise = _strings(data, "recognise", f"{where} pitfall '{pid}'")
    for pattern in recognise:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise FamilyError(f"{where}: pitfall '{pid}' pattern {pattern!r}: {exc}") from exc
    return Pitfall(pid, _str(data, "title", where), _str(data, "feedback", where), recognise)


def _task(data: Any, folder: Path, where: str, workspace_dir: str = WORKSPACE_DIR, variant: str | None = None) -> Task:
    if not isinstance(data, dict):
        raise FamilyError(f"{where}: every task must be an object")
    task_id = _str(data, "id", where)
    here = f"{where} task '{task_id}'"
    files = _strings(data, "files", here)
    for name in files:
        if not (folder / workspace_dir / name).is_file():
            raise FamilyError(f"{here}: input file {workspace_dir}/{name} is missing")
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise FamilyError(f"{here}: 'params' must be an object")
    return Task(
        id=task_id,
        title=_str(data, "title", here),
        prompt=_str(data, "prompt", here),
        files=files,
        output=_str(data, "output", here, default="answers.json"),
        params=params,
        check_ref=_str(data, "check", here) if "check" in data else None,
        variant=variant,
    )


def load_family(ref: str | Path, variant: str | None = None) -> Family:
    """A shipped family by name (`sec13f`) or any family folder by path; with `variant`, that variant's tasks."""
    folder = Path(ref)
    if not (folder / FAMILY_FILE).is_file():
        folder = FAMILIES_DIR / str(ref)
    path = folder / FAMILY_FILE
    if not path.is_file():
        raise FamilyError(f"no {FAMILY_FILE} for family {ref!r} (looked in {folder})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise FamilyError(f"{path}: {exc}") from exc
    where = str(path)
    pitfalls = data.get("pitfalls", {})
    tasks = data.get("tasks")
    if not isinstance(pitfalls, dict):
        raise FamilyError(f"{where}: 'pitfalls' must be an object")
    if not isinstance(tasks, list) or not tasks:
        raise FamilyError(f"{where}: 'tasks' must be a non-empty list")
    variants = data.get("variants", {})
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise FamilyError(f"{where}: 'variants' must be an object of objects")
    workspace_dir = WORKSPACE_DIR
    description = str(data.get("description", ""))
    if variant is not None:
        if variant not in variants:
            known = ", ".join(sorted(variants)) or "none"
            raise FamilyError(f"{where}: no variant {variant!r} (declared: {known})")
        chosen = variants[variant]
        where = f"{where} variant '{variant}'"
        tasks = chosen.get("tasks")
        workspace_dir = _str(chosen, "workspace", where, default=WORKSPACE_DIR)
        description = str(chosen.get("description", description))
        if not isinstance(tasks, list) or not tasks:
            raise FamilyError(f"{where}: 'tasks' must be a non-empty list")
        extra = chosen.get("pitfalls", {})
        if not isinstance(extra, dict):
            raise FamilyError(f"{where}: 'pitfalls' must be an object")
        # a variant may add pitfalls of its own and re-word the family's (a whole pitfall object replaces one)
        pitfalls = {**pitfalls, **extra}
    loaded = tuple(_task(t, folder, where, workspace_dir, variant) for t in tasks)
    if len({t.id for t in loaded}) != len(loaded):
        raise FamilyError(f"{where}: task ids must be unique")
    domain = data.get("worldDomain")
    world = None
    if domain is not None:
        if not isinstance(domain, dict):
            raise FamilyError(f"{where}: 'worldDomain' must be an object")
        world = WorldDomain(
            key=_str(domain, "key", where),
            label=_str(domain, "label", where),
            aliases=_strings(domain, "aliases", where),
            patterns=_strings(domain, "patterns", where),
        )
    return Family(
        name=_str(data, "name", where),
        title=_str(data, "title", where),
        description=description,
        folder=folder.resolve(),
        tasks=loaded,
        pitfalls={pid: _pitfall(pid, p, where) for pid, p in pitfalls.items()},
        check_ref=_str(data, "check", where, default="check:check"),
        solver_ref=_str(data, "solver", where, default="agent:solve"),
        world_domain=world,
        workspace_dir=workspace_dir,
        variant=variant,
        variants=tuple(sorted(variants)),
    )


def shipped_families() -> list[str]:
    """Names of the families under `scripts/skillflow/families/`, sorted."""
    return sorted(p.parent.name for p in FAMILIES_DIR.glob(f"*/{FAMILY_FILE}"))


_MODULES: dict[Path, ModuleType] = {}


def load_hook(folder: Path, ref: str, family: str) -> Callable[..., Any]:
    """`module:function` from the family folder, loaded by path (a family folder need not be a package)."""
    module_name, _, function = ref.partition(":")
    if not module_name or not function:
        raise FamilyError(f"family {family}: hook {ref!r} must look like module:function")
    path = (folder / f"{module_name}.py").resolve()
    module = _MODULES.get(path)
    if module is None:
        spec = importlib.util.spec_from_file_location(f"skillflow_family_{family}_{module_name}", path)
        if spec is None or spec.loader is None or not path.is_file():
            raise FamilyError(f"family {family}: cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses and typing resolve names through sys.modules
        spec.loader.exec_module(module)
        _MODULES[path] = module
    hook = getattr(module, function, None)
    if not callable(hook):
        raise FamilyError(f"family {family}: {path.name} has no function {function!r}")
    return cast(Callable[..., Any], hook)
