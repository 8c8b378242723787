"""Task families as data: conventions, tasks with checkable answers, and the feedback each task draws.

A family is a folder under `scripts/lessons/families/` holding `family.json`, the input files in `data/` and
`reference.py`, whose `solve(task_id, data_dir, naive=False)` computes a task's answer from the data — the
right one, or the one an agent that ignores the family's conventions gets (`naive=True`). The answers in
`family.json` must equal what `reference.py` computes (`validate` checks it), so every expected value is real.

Each task draws feedback after its naive answer in six styles (`STYLES`); every style must teach every
convention the task needs, which `validate` checks with the convention's `keyTerms` (regular expressions,
case-insensitive, that a faithful lesson carries in any language: identifiers, numbers, unit words with their
Chinese alternatives). The same regular expressions decide, in the evaluation, whether an injected text
carries a lesson.

    python scripts/lessons/corpus.py --check            # validate every family, print the problems
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

FAMILIES = Path(__file__).resolve().parent / "families"
Split = Literal["dev", "report", "fresh"]
SPLITS: tuple[Split, ...] = ("dev", "report", "fresh")
#: Feedback styles, in the order the evaluation reports them.
STYLES: tuple[str, ...] = ("verifier_payload", "verifier_text", "user_en", "user_zh", "terse", "long_mixed")
#: Absolute tolerance of a numeric answer unless a task sets its own.
DEFAULT_TOLERANCE = 0.01
MIN_TASKS, MAX_TASKS = 4, 7


@dataclass(frozen=True)
class Convention:
    """One house convention of a family: what a lesson must carry to count (`key_terms`)."""

    id: str
    title: str
    oracle: str  # the one right lesson, plainly worded (the oracle arm of the agent evaluation)
    key_terms: tuple[str, ...]

    def carried_by(self, text: str) -> bool:
        """Whether `text` carries this lesson: every key term matches somewhere in it."""
        return all(re.search(term, text, re.IGNORECASE) for term in self.key_terms)


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    files: tuple[str, ...]
    output: str
    needs: tuple[str, ...]
    expected: dict[str, Any]
    naive: dict[str, Any]
    tolerance: float
    feedback: Mapping[str, Any]  # style -> text (verifier_payload: {message, passed, total})
    #: The id of an earlier task of the family that this one asks again after its answer was rejected (the same
    #: request, perhaps reworded, the same files and answer); its values are this task's own, not a leak.
    retry_of: str | None = None
    #: The naive answer is right: the task needs no convention and its feedback (every style) is praise.
    passes: bool = False

    def feedback_text(self, style: str) -> str:
        """The words of the feedback in `style` (for verifier_payload, its message)."""
        value = self.feedback[style]
        return str(value.get("message", "")) if isinstance(value, Mapping) else str(value)


@dataclass(frozen=True)
class Family:
    name: str
    split: Split
    domain: str
    company: str
    description: str
    conventions: Mapping[str, Convention]
    tasks: tuple[Task, ...]
    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"


def load_family(root: Path) -> Family:
    raw = json.loads((root / "family.json").read_text(encoding="utf-8"))
    conventions = {
        key: Convention(key, str(c["title"]), str(c["oracle"]), tuple(str(t) for t in c["keyTerms"]))
        for key, c in raw["conventions"].items()
    }
    tasks = tuple(
        Task(
            id=str(t["id"]),
            prompt=str(t["prompt"]),
            files=tuple(str(f) for f in t.get("files", [])),
            output=str(t.get("output", "answer.json")),
            needs=tuple(str(n) for n in t.get("needs", [])),
            expected=dict(t["expected"]),
            naive=dict(t["naive"]),
            tolerance=float(t.get("tolerance", DEFAULT_TOLERANCE)),
            feedback=dict(t.get("feedback", {})),
            retry_of=str(t["retryOf"]) if t.get("retryOf") else None,
            passes=bool(t.get("passes", False)),
        )
        for t in raw["tasks"]
    )
    return Family(
        name=str(raw["name"]),
        split=raw["split"],
        domain=str(raw.get("domain", "")),
        company=str(raw.get("company", "")),
        description=str(raw.get("description", "")),
        conventions=conventions,
        tasks=tasks,
        root=root,
    )


def load_corpus(root: Path = FAMILIES, split: str | None = None, names: Sequence[str] = ()) -> list[Family]:
    """Every family under `root` (sorted by name), optionally of one split or with the given names."""
    families = [load_family(p.parent) for p in sorted(root.glob("*/family.json"))]
    if split is not None:
        families = [f for f in families if f.split == split]
    if names:
        wanted = set(names)
        families = [f for f in families if f.name in wanted]
    return families


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def answers_match(expected: Any, actual: Any, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """JSON equality with an absolute numeric tolerance; strings compare after stripping."""
    if _is_number(expected) and _is_number(actual):
        return math.isclose(float(expected), float(actual), rel_tol=0.0, abs_tol=tolerance)
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip() == actual.strip()
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        return expected.keys() == actual.keys() and all(
            answers_match(v, actual[k], tolerance) for k, v in expected.items()
        )
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(
            answers_match(e, a, tolerance) for e, a in zip(expected, actual, strict=True)
        )
    return bool(expected == actual)


def reference_module(family: Family) -> ModuleType:
    """The family's `reference.py`, imported under a name of its own."""
    path = family.root / "reference.py"
    spec = importlib.util.spec_from_file_location(f"lesson_family_{family.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def validate(family: Family) -> list[str]:
    """Everything wrong with a family, as sentences (empty when it is usable)."""
    problems: list[str] = []
    where = family.name
    if family.root.name != family.name:
        problems.append(f"{where}: folder name {family.root.name!r} differs from name")
    if family.split not in SPLITS:
        problems.append(f"{where}: split must be one of {SPLITS}")
    if len(family.conventions) < 2:
        problems.append(f"{where}: needs at least two conventions")
    if not MIN_TASKS <= len(family.tasks) <= MAX_TASKS:
        problems.append(f"{where}: needs {MIN_TASKS}-{MAX_TASKS} tasks, has {len(family.tasks)}")
    for convention in family.conventions.values():
        if not convention.key_terms:
            problems.append(f"{where}/{convention.id}: no keyTerms")
        if not convention.carried_by(convention.oracle):
            problems.append(f"{where}/{convention.id}: the oracle lesson does not carry its own keyTerms")
        prompts = "\n".join(t.prompt for t in family.tasks)
        if convention.key_terms and all(re.search(term, prompts, re.IGNORECASE) for term in convention.key_terms):
            problems.append(
                f"{where}/{convention.id}: every keyTerm occurs in a task prompt; one must be the lesson's own"
            )
        needing = [t.id for t in family.tasks if convention.id in t.needs and t.retry_of is None]
        if len(needing) < 2:
            problems.append(
                f"{where}/{convention.id}: needed by {len(needing)} task(s) that are not retries; at least two must"
            )
    try:
        reference = reference_module(family)
    except Exception as exc:  # a broken reference is reported, not raised
        problems.append(f"{where}: reference.py does not import ({exc})")
        reference = None
    ids = [t.id for t in family.tasks]
    if len(set(ids)) != len(ids):
        problems.append(f"{where}: task ids repeat")
    for task in family.tasks:
        at = f"{where}/{task.id}"
        unknown = set(task.needs) - set(family.conventions)
        if unknown:
            problems.append(f"{at}: needs unknown conventions {sorted(unknown)}")
        if task.passes:
            if task.needs:
                problems.append(f"{at}: a passing task needs no convention")
            if not answers_match(task.expected, task.naive, task.tolerance):
                problems.append(f"{at}: a passing task's naive answer must equal the expected one")
        elif not task.needs:
            problems.append(f"{at}: needs no convention")
        if task.retry_of is not None:
            original = next((t for t in family.tasks if t.id == task.retry_of), None)
            if original is None or family.tasks.index(original) >= family.tasks.index(task):
                problems.append(f"{at}: retryOf {task.retry_of!r} is not an earlier task of the family")
            elif (original.files, original.needs, original.passes) != (task.files, task.needs, task.passes):
                problems.append(f"{at}: a retry keeps the files and needs of {task.retry_of}")
            elif not answers_match(original.expected, task.expected, task.tolerance):
                problems.append(f"{at}: a retry keeps the expected answer of {task.retry_of}")
        for name in task.files:
            if not (family.data_dir / name).is_file():
                problems.append(f"{at}: input file data/{name} is missing")
        if not task.passes and answers_match(task.expected, task.naive, task.tolerance):
            problems.append(f"{at}: the naive answer equals the expected one")
        if reference is not None:
            for naive, wanted in ((False, task.expected), (True, task.naive)):
                try:
                    got = reference.solve(task.id, family.data_dir, naive=naive)
                except Exception as exc:
                    problems.append(f"{at}: reference.solve(naive={naive}) raised {exc!r}")
                    continue
                if not answers_match(wanted, got, task.tolerance):
                    label = "naive" if naive else "expected"
                    problems.append(f"{at}: {label} answer {wanted!r} differs from reference.py's {got!r}")
        for style in STYLES:
            if style not in task.feedback:
                problems.append(f"{at}: no {style} feedback")
                continue
            if style == "verifier_payload" and not isinstance(task.feedback[style], Mapping):
                problems.append(f"{at}: verifier_payload must be an object with message, passed, total")
            text = task.feedback_text(style)
            for need in task.needs:
                taught = family.conventions.get(need)
                if taught is not None and not taught.carried_by(text):
                    problems.append(f"{at}: {style} feedback does not carry the keyTerms of {need}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="validate every family (the default action)")
    parser.add_argument("--split", choices=SPLITS)
    parser.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    args = parser.parse_args(argv)
    families = load_corpus(split=args.split, names=args.family)
    problems = [p for family in families for p in validate(family)]
    for problem in problems:
        print(problem)
    counts = {split: sum(f.split == split for f in families) for split in SPLITS}
    split_counts = ", ".join(f"{counts[split]} {split}" for split in SPLITS)
    print(f"{len(families)} families ({split_counts}), {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
