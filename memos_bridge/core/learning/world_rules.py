"""The deterministic L3 abstraction: a world model (environment / inference / constraints) from a cluster.

The reference skips L3 without an LLM (§7: `llm_disabled`), so an offline install never learns what its
environment is like. Here a rule abstraction reads the cluster's experiences and states, declaratively:

* **environment** (ℰ) — facts the guidance states ("values are in thousands"), the structures several
  experiences name (`answers.json`, `infoTable`: the shared objects of the task family), the tasks seen,
  and the unit scale a verifier mismatch reveals (expected 1234, answer 1234000: a factor of 1000);
* **inference** (ℐ) — cause → effect: each avoided action of a failure ("do not multiply value by
  1000" → "Multiplying value by 1000 led to failed results (task: 1/5 checks passed)"), each step of a
  verified success ("Parsing every infoTable record was part of runs that passed the verifier");
* **constraints** (C) — requirements the guidance states ("must", "exactly", "each"), expected/actual
  mismatches, the fields each task's verifier expects, and — across tasks — that those fields differ
  from task to task (the seed's "each task has a distinct output schema").

Every entry cites the experiences it rests on (`evidenceIds`). Entries that say the same thing (same
label, or descriptions with token similarity ≥ 0.6) are merged and their evidence unioned; sections are
capped, best-supported first. Failures are environment facts too, so mixed polarity is welcome.

Confidence is a noisy-OR over independent evidence: the best confidence per source episode, each
counting half (`1 − Π(1 − 0.5·cᵢ)`), capped at 0.95, then damped for a loose cluster (0.6 + 0.4·cohesion,
reference §6.6). The LLM path (`draft_from_llm`) validates the model's entries the same way: evidence ids
must be cluster members (else the entry is grounded by word overlap, else dropped), imperative wording is
rewritten declaratively, and empty sections are filled from the rule draft.

Everything here is pure.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from memos_bridge.config import WorldSettings
from memos_bridge.core.learning.world_evidence import (
    Domain,
    ExperienceView,
    Mismatch,
    VerifierFacts,
    fields_by_task,
)
from memos_bridge.core.learning.world_text import (
    DESCRIPTION_CHARS,
    LABEL_CHARS,
    VERBS,
    Clause,
    clauses,
    declarative,
    gerund_phrase,
    identifiers,
    join_names,
    label_of,
    normalised,
    present_tense,
    sentence,
)
from memos_bridge.llm.prompts import WorldAbstractionOutput
from memos_bridge.rules.groups import Groups
from memos_bridge.rules.subjects import FILE, same_inputs, same_kind_files
from memos_bridge.rules.text import clip
from memos_bridge.rules.tokens import content_tokens, token_similarity
from memos_bridge.rules.work import SAME_WORK_SIMILARITY, closeness

SectionName = Literal["environment", "inference", "constraints"]
SECTIONS: Final[tuple[SectionName, ...]] = ("environment", "inference", "constraints")
InducedBy = Literal["llm", "rules"]

#: Descriptions at least this similar (token Jaccard) are one entry.
SAME_ENTRY_SIMILARITY: Final = 0.6
#: Share of an LLM entry's words one experience must contain to ground it.
GROUNDING_SHARE: Final = 0.5
#: Noisy-OR weight of one piece of evidence, and the cap of a rule draft's confidence.
EVIDENCE_WEIGHT: Final = 0.5
RULES_CONFIDENCE_CAP: Final = 0.95
#: Steps of one success turned into inference entries.
SUCCESS_STEPS: Final = 2
MAX_DOMAIN_TAGS: Final = 4
PER_TASK_SCHEMA: Final = "Per-task output schema"
_TAG: Final = re.compile(r"[^a-z0-9-]+")
_TITLE_PREFIX: Final = re.compile(r"^\s*[^:：]{1,30}[:：]\s+")


@dataclass
class Entry:
    """One entry of a section: a short label, a declarative description, the experiences it rests on."""

    label: str
    description: str
    evidence_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "description": self.description, "evidenceIds": list(self.evidence_ids)}

    @classmethod
    def from_json(cls, data: Any) -> Entry | None:
        if not isinstance(data, Mapping) or not str(data.get("description") or data.get("label") or "").strip():
            return None
        ids = data.get("evidenceIds", data.get("evidence_ids", []))
        return cls(
            label=str(data.get("label") or ""),
            description=str(data.get("description") or ""),
            evidence_ids=[str(i) for i in ids] if isinstance(ids, list) else [],
        )


Structure = dict[SectionName, list[Entry]]


def empty_structure() -> Structure:
    return {name: [] for name in SECTIONS}


def structure_to_json(structure: Structure) -> dict[str, list[dict[str, Any]]]:
    return {name: [entry.to_json() for entry in structure.get(name, [])] for name in SECTIONS}


def structure_from_json(data: Any) -> Structure:
    out = empty_structure()
    if isinstance(data, Mapping):
        for name in SECTIONS:
            items = data.get(name)
            out[name] = [e for item in items if (e := Entry.from_json(item))] if isinstance(items, list) else []
    return out


@dataclass(frozen=True)
class Cluster:
    """The experiences of one domain that a world model is abstracted from."""

    domain: Domain
    members: list[ExperienceView]
    loose: bool = False
    cohesion: float | None = None
    centroid: NDArray[np.float32] | None = field(default=None, repr=False)

    @property
    def ids(self) -> list[str]:
        return [m.id for m in self.members]

    @property
    def terms(self) -> set[str]:
        """The inputs its members were learnt on (empty when none recorded any)."""
        return {t for m in self.members for t in m.terms}

    @property
    def damping(self) -> float:
        """Confidence factor of a loose cluster (reference: 0.6 + 0.4·cohesion); 1 for a strict one."""
        if not self.loose:
            return 1.0
        return 0.6 + 0.4 * max(0.0, min(1.0, self.cohesion if self.cohesion is not None else 0.0))


@dataclass
class WorldDraft:
    title: str
    body: str
    structure: Structure
    confidence: float
    domain_tags: list[str]
    induced_by: InducedBy = "rules"

    @property
    def has_facts(self) -> bool:
        """A world model needs at least one stable environment fact or constraint (seed 000)."""
        return bool(self.structure["environment"] or self.structure["constraints"])


# ---------------------------------------------------------------- clustering


def build_cluster(domain: Domain, members: Sequence[ExperienceView], settings: WorldSettings) -> Cluster | None:
    """The strict cluster (cosine to the centroid ≥ `cluster_min_similarity`; members without a vector
    pass) when it has `min_policies` members, else the whole domain as a loose cluster, else None."""
    ranked = sorted(members, key=lambda m: (-m.confidence, -m.updated_at, m.id))[: settings.max_policies]
    if len(ranked) < settings.min_policies:
        return None
    vectors = [m.vec for m in ranked if m.vec is not None]
    if not vectors:
        return Cluster(domain, ranked)
    mean = np.mean(np.stack(vectors), axis=0)
    norm = float(np.linalg.norm(mean))
    if norm == 0:
        return Cluster(domain, ranked)
    centroid = (mean / norm).astype(np.float32)
    cosines = {m.id: float(np.dot(m.vec, centroid)) for m in ranked if m.vec is not None}
    cohesion = float(np.mean(list(cosines.values())))
    strict = [m for m in ranked if m.id not in cosines or cosines[m.id] >= settings.cluster_min_similarity]
    if len(strict) >= settings.min_policies:
        return Cluster(domain, strict, loose=False, cohesion=cohesion, centroid=centroid)
    return Cluster(domain, ranked, loose=True, cohesion=cohesion, centroid=centroid)


def rules_confidence(cluster: Cluster) -> float:
    """Noisy-OR of the best confidence per source episode, capped, damped for a loose cluster."""
    best: dict[str, float] = {}
    for member in cluster.members:
        key = member.source_episodes[0] if member.source_episodes else member.id
        best[key] = max(best.get(key, 0.0), max(0.0, min(1.0, member.confidence)))
    miss = 1.0
    for confidence in best.values():
        miss *= 1.0 - EVIDENCE_WEIGHT * confidence
    return round(min(RULES_CONFIDENCE_CAP, 1.0 - miss) * cluster.damping, 4)


# ---------------------------------------------------------------- entries


def _entry(label: str, description: str, evidence: Iterable[str]) -> Entry:
    text = clip(description, DESCRIPTION_CHARS)
    return Entry(clip(label, LABEL_CHARS) or label_of(text), text, list(dict.fromkeys(evidence)))


def _same(a: Entry, b: Entry) -> bool:
    if normalised(a.label) and normalised(a.label) == normalised(b.label):
        return True
    return token_similarity(a.description, b.description) >= SAME_ENTRY_SIMILARITY


def merge_entries(entries: Iterable[Entry], cap: int) -> list[Entry]:
    """One entry per statement (first wording kept, evidence unioned), best-supported first, at most `cap`."""
    merged: list[Entry] = []
    for entry in entries:
        twin = next((m for m in merged if _same(m, entry)), None)
        if twin is None:
            merged.append(Entry(entry.label, entry.description, list(dict.fromkeys(entry.evidence_ids))))
        else:
            twin.evidence_ids = list(dict.fromkeys([*twin.evidence_ids, *entry.evidence_ids]))
    order = {id(entry): index for index, entry in enumerate(merged)}
    merged.sort(key=lambda e: (-len(e.evidence_ids), order[id(e)]))
    return merged[:cap]


def union_structure(newer: Structure, older: Structure, cap: int) -> Structure:
    """A merge of two versions: the newer wording first, older entries kept unless the same, evidence unioned."""
    return {name: merge_entries([*newer.get(name, []), *older.get(name, [])], cap) for name in SECTIONS}


def _effect(view: ExperienceView) -> str:
    """What an avoided action did, without the judged task's id or score (true of that attempt only)."""
    if view.experience_type == "preference":
        return "goes against the user's stated preference"
    if view.failed:
        return "led to failed results"
    return "failed in earlier attempts"


def _clause_entry(clause: Clause, view: ExperienceView, steps_taken: int) -> tuple[SectionName, Entry] | None:
    """Where one clause of an experience goes, as what statement (None: not environment knowledge)."""
    if clause.kind == "avoid":
        phrase = gerund_phrase(clause.text, after_negation=True) or clause.text
        return "inference", _entry(label_of(phrase), sentence(f"{phrase} {_effect(view)}"), [view.id])
    if clause.kind == "do":
        phrase = gerund_phrase(clause.text)
        if view.experience_type == "preference":
            return "constraints", _entry(
                label_of(phrase), sentence(f"{phrase} is the user's stated preference"), [view.id]
            )
        if view.experience_type == "repair_instruction":
            if not (identifiers(clause.text) or any(c.isdigit() for c in clause.text)):
                return None  # "check the output before finishing": true anywhere, says nothing of this world
            effect = "is the correction the feedback pointed to (not yet confirmed by a success)"
        elif view.succeeded and steps_taken < SUCCESS_STEPS:
            effect = "was part of runs that passed the verifier" if view.verifier else "was part of runs that succeeded"
        else:
            return None
        return "inference", _entry(label_of(phrase), sentence(f"{phrase} {effect}"), [view.id])
    if clause.kind == "phrase":
        return None
    if clause.kind == "mismatch":
        text = clause.text
        if text.lower().startswith("expected"):
            text = "The verifier " + text[0].lower() + text[1:]
        return "constraints", _entry(label_of(text), sentence(text), [view.id])
    section: SectionName = "constraints" if clause.kind == "requirement" else "environment"
    return section, _entry(label_of(clause.text), sentence(clause.text), [view.id])


def _statements(view: ExperienceView) -> list[tuple[str, bool, bool]]:
    """(text, is an anti-pattern list, is feedback prose) of an experience, in the order they matter. A
    failure experience's procedure is what to avoid (the renderer shows it under Avoid too). The boundary is
    left out: it says where the lesson came from, not what the environment is. So are the raw feedback and the
    verifier's messages of an experience whose procedure already holds the feedback's lesson in its own words:
    what else they say is the judged attempt's values and ids, which no recalled text may carry."""
    failure_procedure = view.experience_type == "failure_avoidance"
    return [
        (view.procedure, failure_procedure, False),
        *((line, True, False) for line in view.anti_pattern),
        *((line, False, False) for line in view.preference),
        (view.verification, False, False),
        *((note, False, True) for note in view.feedback_notes if not view.lesson_builder),
    ]


def _title_clauses(title: str) -> list[Clause]:
    """A title usually restates the experience's guidance; only a title that states a fact or a requirement
    ("13F values are in thousands of USD") adds something. A short "SEC 13F:" prefix is a label."""
    text = _TITLE_PREFIX.sub("", title or "")
    return [c for c in clauses(text) if c.kind in ("fact", "requirement")]


def _clause_entries(view: ExperienceView) -> list[tuple[SectionName, Entry]]:
    out: list[tuple[SectionName, Entry]] = []
    for clause in _title_clauses(view.title):
        placed = _clause_entry(clause, view, SUCCESS_STEPS)
        if placed is not None:
            out.append(placed)
    steps = 0
    for text, anti, prose in _statements(view):
        for clause in clauses(text or "", anti_pattern=anti):
            if prose and clause.kind in ("fact", "requirement") and not present_tense(clause.text):
                continue  # "the parser handled all holdings": what happened once, not how things are
            placed = _clause_entry(clause, view, steps)
            if placed is None:
                continue
            if clause.kind == "do" and view.succeeded:
                steps += 1
            out.append(placed)
    return out


def _factor(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 else f"1/{1 / value:,.0f}"


def _mismatch_entries(view: ExperienceView, facts: VerifierFacts) -> list[tuple[SectionName, Entry]]:
    """What the verifier's values show that holds beyond the judged attempt: a factor an answer was off by, said
    as observed (never the values themselves, never a guess at the unit)."""
    out: list[tuple[SectionName, Entry]] = []
    for mismatch in facts.mismatches:
        if mismatch.factor is not None:
            out.append(("environment", _scale_entry(mismatch, view.id)))
    return out


def _scale_entry(mismatch: Mismatch, evidence_id: str) -> Entry:
    assert mismatch.factor is not None
    return _entry(
        f"Answers off by {_factor(mismatch.factor)}",
        sentence(f"An answer was {_factor(mismatch.factor)} times the value the verifier expected"),
        [evidence_id],
    )


def _verifier_entries(view: ExperienceView, schemas_listed: bool) -> list[tuple[SectionName, Entry]]:
    """Entries from one verifier payload; a task's fields alone are left out when the cross-task schema
    entry lists them already (`schemas_listed`)."""
    facts = view.verifier
    if facts is None:
        return []
    out = _mismatch_entries(view, facts)
    for name, how in facts.orderings:
        what = f"the entries of {name}" if name else "the entries"
        description = f"The verifier expects {what} in order ({how or 'as given'})"
        out.append(("constraints", _entry(f"Ordering of {name or 'entries'}", sentence(description), [view.id])))
    return out


def _shared_structures(members: Sequence[ExperienceView]) -> Entry | None:
    """The objects (files, fields, structures) that at least two experiences name."""
    seen: Counter[str] = Counter()
    spelling: dict[str, Counter[str]] = {}
    # `write_file`, `run_tests`: a snake_case name that starts with a verb is a tool or a function, not a
    # structure of the environment (files keep their extension and stay: `parse_13f.py`).
    evidence: dict[str, list[str]] = {}
    tasks = {facts.task.lower() for m in members if (facts := m.verifier) is not None and facts.task}
    for member in members:
        named = {
            name.lower(): name
            for text in member.texts()
            for name in identifiers(text or "")
            if name.lower() not in tasks  # task names are listed under "Tasks seen"
            and not ("_" in name and "." not in name and name.split("_", 1)[0].lower() in VERBS)
        }
        for key, name in named.items():
            seen[key] += 1
            spelling.setdefault(key, Counter())[name] += 1
            evidence.setdefault(key, []).append(member.id)
    shared = [key for key, count in seen.most_common() if count >= 2]
    if not shared:
        return None
    names = [spelling[key].most_common(1)[0][0] for key in shared]
    ids = [i for key in shared for i in evidence[key]]
    top = seen[shared[0]]
    description = (
        f"Tasks of this family work with {join_names(names)} (named in up to {top} of {len(members)} experiences)"
    )
    return _entry("Shared structures", sentence(description), ids)


def _task_entries(members: Sequence[ExperienceView]) -> list[tuple[SectionName, Entry]]:
    """What the tasks of a family show together: their output fields differ from task to task (said without the
    tasks' ids or fields, which are true of those tasks only)."""
    out: list[tuple[SectionName, Entry]] = []
    schemas = fields_by_task(members)
    distinct = {fields for fields, _ in schemas.values()}
    if len(schemas) >= 2 and len(distinct) >= 2:
        ids = [i for _, group in schemas.values() for i in group]
        description = (
            "Output fields differ between tasks of this family: a schema from one task does not carry over to another"
        )
        out.append(("constraints", _entry(PER_TASK_SCHEMA, sentence(description), ids)))
    return out


# ---------------------------------------------------------------- the draft


def abstract_by_rules(cluster: Cluster, settings: WorldSettings) -> WorldDraft:
    """The deterministic world model of a cluster (see the module docstring)."""
    placed: list[tuple[SectionName, Entry]] = []
    shared = _shared_structures(cluster.members)
    if shared is not None:
        placed.append(("environment", shared))
    tasks = _task_entries(cluster.members)
    placed.extend(tasks)
    schemas_listed = any(entry.label == PER_TASK_SCHEMA for _, entry in tasks)
    for member in cluster.members:
        placed.extend(_verifier_entries(member, schemas_listed))
        placed.extend(_clause_entries(member))
    structure = empty_structure()
    for name in SECTIONS:
        structure[name] = merge_entries((e for section, e in placed if section == name), settings.max_entries)
    names = shared_names(shared)
    title = f"{cluster.domain.label} environment" + (f" ({join_names(names[:3])})" if names else "")
    return WorldDraft(
        title=clip(title, 120),
        body=render_body(cluster, structure, settings.body_max_chars),
        structure=structure,
        confidence=rules_confidence(cluster),
        domain_tags=[cluster.domain.key],
        induced_by="rules",
    )


def shared_names(shared: Entry | None) -> list[str]:
    """The object names of a "Shared structures" entry, in its order."""
    if shared is None:
        return []
    return [name for name in identifiers(shared.description)]


def _line(entry: Entry) -> str:
    label, description = normalised(entry.label), normalised(entry.description)
    if not label or description.startswith(label):
        return f"- {entry.description}"
    return f"- {entry.label}: {entry.description}"


def render_body(cluster: Cluster | None, structure: Structure, max_chars: int, summary: str = "") -> str:
    """Markdown: a one-line summary, then Environment, Constraints and Inference (the order that matters
    most when the block is clipped), within `max_chars`."""
    if not summary and cluster is not None:
        tasks = {m.source_episodes[0] for m in cluster.members if m.source_episodes}
        succeeded = sum(1 for m in cluster.members if m.succeeded)
        failed = sum(1 for m in cluster.members if m.failed)
        summary = (
            f"{cluster.domain.label}: abstracted from {len(cluster.members)} experiences of "
            f"{max(len(tasks), 1)} tasks ({succeeded} successful, {failed} failed)."
        )
    lines = [summary] if summary else []
    headings: tuple[tuple[SectionName, str], ...] = (
        ("environment", "Environment"),
        ("constraints", "Constraints"),
        ("inference", "Inference (cause → effect)"),
    )
    for name, heading in headings:
        entries = structure.get(name, [])
        if entries:
            lines += ["", f"**{heading}**", *(_line(e) for e in entries)]
    out: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars:
            break
        out.append(line)
        used += len(line) + 1
    while out and (not out[-1] or out[-1].startswith("**")):
        out.pop()  # no dangling heading
    return "\n".join(out)


# ---------------------------------------------------------------- the LLM's draft


def experience_block(view: ExperienceView, char_cap: int) -> str:
    """One experience as the abstraction prompt shows it (id in brackets, typed, capped)."""
    facts = view.verifier
    lines = [
        f"[{view.id}] type={view.experience_type} polarity={view.polarity} confidence={view.confidence:.2f}",
        f"title: {view.title}",
    ]
    for name, value in (
        ("trigger", view.trigger),
        ("procedure", view.procedure),
        ("avoid", "; ".join(view.anti_pattern)),
        ("prefer", "; ".join(view.preference)),
        ("verification", view.verification),
        ("boundary", view.boundary),
    ):
        if value and value.strip():
            lines.append(f"{name}: {value.strip()}")
    if facts is not None:
        parts = [f"task={facts.task}" if facts.task else "", facts.verdict]
        if facts.expected_fields:
            parts.append("expected fields=" + ", ".join(facts.expected_fields))
        parts += [f"{m.field or 'value'}: expected {m.expected}, actual {m.actual}" for m in facts.mismatches]
        if facts.failing_fields:
            parts.append("failing=" + ", ".join(facts.failing_fields))
        lines.append("verifier: " + "; ".join(p for p in parts if p))
    return clip_block("\n".join(lines), char_cap)


def clip_block(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def ground(text: str, members: Sequence[ExperienceView]) -> list[str]:
    """Ids of the experiences that contain at least half of `text`'s content words, best first (≤ 3)."""
    words = set(content_tokens(text))
    if not words:
        return []
    scored = []
    for member in members:
        have = set(content_tokens(" ".join(t for t in member.texts() if t)))
        share = len(words & have) / len(words)
        if share >= GROUNDING_SHARE:
            scored.append((share, member.id))
    return [member_id for _, member_id in sorted(scored, key=lambda item: -item[0])[:3]]


def _tags(domain: str, extra: Iterable[str]) -> list[str]:
    tags = [domain]
    for tag in extra:
        clean = _TAG.sub("-", tag.lower()).strip("-")
        if clean and clean not in tags:
            tags.append(clean)
    return tags[:MAX_DOMAIN_TAGS]


def draft_from_llm(
    output: WorldAbstractionOutput, rules: WorldDraft, cluster: Cluster, settings: WorldSettings
) -> WorldDraft | None:
    """The model's world model, validated; None when nothing grounded remains of its environment and
    constraints (the caller then keeps the rule draft)."""
    valid = set(cluster.ids)
    structure = empty_structure()
    for name in SECTIONS:
        entries: list[Entry] = []
        for item in getattr(output, name):
            description = declarative(item.description or item.label)
            if not description:
                continue
            ids = [i for i in item.evidence_ids if i in valid] or ground(
                f"{item.label} {item.description}", cluster.members
            )
            if ids:
                entries.append(_entry(item.label or label_of(description), description, ids))
        structure[name] = merge_entries(entries, settings.max_entries)
    if not (structure["environment"] or structure["constraints"]):
        return None
    for name in SECTIONS:
        if not structure[name]:
            structure[name] = list(rules.structure[name])
    body = output.body.strip()
    return WorldDraft(
        title=output.name.strip() or rules.title,
        body=clip_block(body, settings.body_max_chars)
        if body
        else render_body(cluster, structure, settings.body_max_chars),
        structure=structure,
        confidence=round(max(0.0, min(1.0, output.confidence)) * cluster.damping, 4),
        domain_tags=_tags(cluster.domain.key, output.domain_tags),
        induced_by="llm",
    )


def _same_work(a: ExperienceView, b: ExperienceView) -> bool:
    """Two experiences learnt for requests of one piece of work (`rules.work`), on files of one kind when both
    name files (`rules.subjects.same_kind_files`: two filings by different filers): one environment, although
    their names and files differ. Files of no common kind are other work however alike the requests read (one
    harness's wording for every task)."""
    files_a = [t for t in a.terms if FILE.fullmatch(t)]
    files_b = [t for t in b.terms if FILE.fullmatch(t)]
    if files_a and files_b and not same_kind_files(files_a, files_b):
        return False
    return any(
        (close := closeness(vec, b.contexts)) is not None and close >= SAME_WORK_SIMILARITY for vec in a.contexts
    )


def same_input_groups(views: Sequence[ExperienceView]) -> list[list[ExperienceView]]:
    """The experiences of one domain split by the data they were learnt on: experiences that share an input
    (a name, a file, sibling exports of one company, `rules.subjects.same_inputs`), or that were learnt on files
    of one kind for requests of one piece of work (`_same_work`), are one group, linked transitively. An
    experience that recorded no inputs belongs to every group, as there is nothing to tell it apart. One group
    when nothing recorded inputs."""
    keyed = [v for v in views if v.terms]
    loose = [v for v in views if not v.terms]
    linked = Groups(len(keyed))
    for i, a in enumerate(keyed):
        for j in range(i + 1, len(keyed)):
            if same_inputs(a.terms, keyed[j].terms) or _same_work(a, keyed[j]):
                linked.join(j, i)
    groups: dict[int, list[ExperienceView]] = {}
    for view, label in zip(keyed, linked.labels(), strict=True):
        groups.setdefault(label, []).append(view)
    if not groups:
        return [list(views)]
    return [[*members, *loose] for members in groups.values()]
