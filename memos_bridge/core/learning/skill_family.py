"""Which experiences a skill may rest on, and which travel with it (issue 5 "Skills", seed 000).

A skill is an executable capability, so it needs proof that its procedure works: a **success anchor**.
An experience is an anchor when

* its type is `success_pattern` or `repair_validated` (seed 000's table: "可作为 skill 主证据: 是"), or
* the experience builder marked it `skill_eligible`, or
* it is objectively verified: its verifier meta shows full credit, or one of its source episodes ended
  with the outcome `success` (the reward stage's verdict; a partial pass is a failure) —

and in every case its evidence polarity is positive or mixed. `failure_avoidance`, `repair_instruction`
and `preference` experiences are never anchors, whatever else they say: they only show what not to do,
what might fix a failure, or what the user likes. (`skill_eligible` alone is not a veto, because the
column defaults to false on every row the experience builder did not write, L2 policies included.)

Non-anchor experiences still improve a skill of their **task family**: an experience belongs to the
family of an anchor when their vectors are close (cosine ≥ `family_similarity`), or when they share a
domain tag (`tags_json`, e.g. `sec13f`) or a source episode and are not unrelated (cosine ≥
`family_tag_similarity`). Within a family, failure avoidances become the skill's **Avoid** section,
repair instructions and verifier feedback its **Check** section, preferences its **Prefer** lines.

Everything here is pure: rows are read into detached `ExperienceView`s by `skill_store`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from memos_bridge.config import SkillSettings
from memos_bridge.rules.instance import instance_specific
from memos_bridge.rules.text import clip, squash
from memos_bridge.rules.tokens import normalised_key, token_similarity
from memos_bridge.storage.owner import OwnerFilter

#: Types that prove a procedure works (seed 000 table).
ANCHOR_TYPES: Final = frozenset({"success_pattern", "repair_validated"})
#: Types that never anchor a skill, whatever their polarity or flags.
NEVER_ANCHOR: Final = frozenset({"failure_avoidance", "repair_instruction", "preference"})
SUCCESS_POLARITIES: Final = frozenset({"positive", "mixed"})
#: Family roles of the non-anchor types.
AVOID_TYPES: Final = frozenset({"failure_avoidance"})
CHECK_TYPES: Final = frozenset({"repair_instruction", "verifier_feedback"})
PREFER_TYPES: Final = frozenset({"preference"})

#: Skip reasons recorded on an experience (`meta.skill.skipped`) and in `skill.skipped` events.
NOT_ACTIVE: Final = "not_active"
LOW_GAIN: Final = "low_gain"
LOW_SUPPORT: Final = "low_support"
NO_SUCCESS_ANCHOR: Final = "no_success_anchor"

#: Lines kept per guidance section, and characters per line.
MAX_AVOID: Final = 6
MAX_CHECK: Final = 6
MAX_PREFER: Final = 5
LINE_CHARS: Final = 240
#: Two guidance lines this similar (content-word Jaccard) say the same thing.
SAME_LINE: Final = 0.8

_LABEL = re.compile(
    r"^\s*(?:[-*•]\s*)?(?:\d+[.)]\s*)?(?:avoid|prefer|check|fix|repair|success|do|scope|偏好|避免|检查|修复)\s*[:：]\s*",
    re.IGNORECASE,
)
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")


@dataclass(frozen=True, eq=False)
class ExperienceView:
    """A detached snapshot of the policy/experience fields the skill stage reads."""

    id: str
    title: str
    trigger: str
    procedure: str
    verification: str
    boundary: str
    experience_type: str
    polarity: str
    status: str
    gain: float
    support: int
    confidence: float
    skill_eligible: bool
    owner: OwnerFilter
    updated_at: int
    tags: tuple[str, ...] = ()
    preference: tuple[str, ...] = ()
    anti_pattern: tuple[str, ...] = ()
    source_episodes: tuple[str, ...] = ()
    source_trace_ids: tuple[str, ...] = ()
    verifier_meta: Any = None
    #: Objective success behind it: verifier meta at full credit, or a source episode whose outcome is success.
    verified_success: bool = False
    vec: NDArray[np.float32] | None = field(default=None, repr=False)

    def text(self) -> str:
        """What the experience says, as evidence text (anchors) or as prompt material."""
        parts = [self.title, self.trigger, self.procedure, self.verification]
        return "\n".join(p for p in parts if p.strip())

    def fingerprint(self) -> str:
        """A digest of the content a skill copies from this experience; unchanged when only gain, support or
        `updated_at` moved (the L2 stage bumps those on every episode), so those do not force a rebuild."""
        payload = [
            self.title,
            self.trigger,
            self.procedure,
            self.verification,
            self.boundary,
            self.experience_type,
            self.polarity,
            list(self.preference),
            list(self.anti_pattern),
        ]
        return hashlib.sha1(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()[:16]


def anchor_reason(exp: ExperienceView) -> str | None:
    """Why `exp` proves that a procedure works (see the module docstring), or None when it does not."""
    if exp.experience_type in NEVER_ANCHOR or exp.polarity not in SUCCESS_POLARITIES:
        return None
    if exp.experience_type in ANCHOR_TYPES:
        return exp.experience_type
    if exp.skill_eligible:
        return "skill_eligible"
    if exp.verified_success:
        return "verified_success"
    return None


def gate(exp: ExperienceView, settings: SkillSettings) -> str | None:
    """The reference's eligibility gates before the anchor test: active, gain, support (skip reason or None)."""
    if exp.status != "active":
        return NOT_ACTIVE
    if exp.gain < settings.min_gain:
        return LOW_GAIN
    if exp.support < settings.min_support:
        return LOW_SUPPORT
    return None


def is_anchor(exp: ExperienceView, settings: SkillSettings) -> bool:
    """An anchor that passes the gates: it may be the main evidence of a skill now."""
    return gate(exp, settings) is None and anchor_reason(exp) is not None


def cosine(a: NDArray[np.float32] | None, b: NDArray[np.float32] | None) -> float | None:
    """Cosine of two vectors; None when either is missing or zero."""
    if a is None or b is None:
        return None
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b)) / norm if norm > 0 else None


def related(a: ExperienceView, b: ExperienceView, settings: SkillSettings) -> bool:
    """Whether two experiences are of one task family (symmetric)."""
    cos = cosine(a.vec, b.vec)
    if cos is not None and cos >= settings.family_similarity:
        return True
    shared = bool(set(a.tags) & set(b.tags)) or bool(set(a.source_episodes) & set(b.source_episodes))
    return shared and (cos is None or cos >= settings.family_tag_similarity)


@dataclass
class Family:
    """A skill's material: its primary anchor, further anchors and the family's pitfalls, checks and likes."""

    primary: ExperienceView
    anchors: list[ExperienceView]
    avoid: list[ExperienceView] = field(default_factory=list)
    check: list[ExperienceView] = field(default_factory=list)
    prefer: list[ExperienceView] = field(default_factory=list)

    @property
    def members(self) -> list[ExperienceView]:
        return [*self.anchors, *self.avoid, *self.check, *self.prefer]

    def source_ids(self) -> list[str]:
        """Every experience the skill is built from (what retrieval's provenance de-duplication reads)."""
        return list(dict.fromkeys(m.id for m in self.members))

    def roles(self) -> dict[str, list[str]]:
        return {
            "anchors": [m.id for m in self.anchors],
            "avoid": [m.id for m in self.avoid],
            "check": [m.id for m in self.check],
            "prefer": [m.id for m in self.prefer],
        }

    def digest(self) -> str:
        """Changes when a member joins, leaves or changes its content (→ rebuild)."""
        items = sorted((m.id, m.fingerprint()) for m in self.members)
        return hashlib.sha1(json.dumps(items).encode()).hexdigest()[:16]


def role_of(exp: ExperienceView, settings: SkillSettings) -> str | None:
    """The part a (non-primary) family member plays: anchor, avoid, check, prefer, or None (left out).

    Only active members join: a candidate experience is low-confidence feedback, fine to recall next to a
    skill but not to be baked into one. An unverified procedure (neither anchor nor pitfall) is left out.
    """
    if exp.status != "active":
        return None
    if is_anchor(exp, settings):
        return "anchor"
    if exp.experience_type in AVOID_TYPES:
        return "avoid"
    if exp.experience_type in CHECK_TYPES:
        return "check"
    if exp.experience_type in PREFER_TYPES:
        return "prefer"
    if exp.polarity == "negative":
        return "avoid"
    return None


def build_family(primary: ExperienceView, candidates: Iterable[ExperienceView], settings: SkillSettings) -> Family:
    """The family of `primary` among `candidates` (the primary itself and duplicates are ignored).

    Anchors are ordered by strength (gain × confidence, then support), the others by recency.
    """
    family = Family(primary=primary, anchors=[primary])
    seen = {primary.id}
    for exp in candidates:
        if exp.id in seen or not related(primary, exp, settings):
            continue
        role = role_of(exp, settings)
        if role is None:
            continue
        seen.add(exp.id)
        {"anchor": family.anchors, "avoid": family.avoid, "check": family.check, "prefer": family.prefer}[role].append(
            exp
        )
    family.anchors[1:] = sorted(family.anchors[1:], key=lambda e: (-e.gain * e.confidence, -e.support, e.id))
    for group in (family.avoid, family.check, family.prefer):
        group.sort(key=lambda e: (-e.updated_at, e.id))
    return family


def best_anchor(candidates: Iterable[ExperienceView], settings: SkillSettings) -> ExperienceView | None:
    """The strongest qualifying anchor among `candidates`."""
    anchors = [e for e in candidates if is_anchor(e, settings)]
    return min(anchors, key=lambda e: (-e.gain * e.confidence, -e.support, -e.updated_at, e.id), default=None)


# ---------------------------------------------------------------- guidance lines


def split_lines(text: str) -> list[str]:
    """A multi-line field as its non-empty lines, list marks removed."""
    return [squash(_LIST_MARK.sub("", line)) for line in text.splitlines() if line.strip()]


def unlabel(line: str) -> str:
    """ "Avoid: x" → "x": each section adds its own label."""
    return squash(_LABEL.sub("", line))


def dedupe_lines(lines: Iterable[str], cap: int) -> list[str]:
    """Unlabelled, clipped lines without repeats (same words, or ≥ SAME_LINE content-word overlap)."""
    out: list[str] = []
    keys: set[str] = set()
    for raw in lines:
        line = clip(unlabel(raw), LINE_CHARS)
        key = normalised_key(line)
        if not key or key in keys or any(token_similarity(line, kept) >= SAME_LINE for kept in out):
            continue
        keys.add(key)
        out.append(line)
        if len(out) >= cap:
            break
    return out


#: A line that opens by saying what not to do.
_SAYS_AVOID: Final = re.compile(
    r"^\W*(?:do\s+not|don'?t|never|avoid|stop)\b|^\W*(?:不要|别|切勿|禁止|避免)", re.IGNORECASE
)


def avoid_lines(family: Family) -> list[str]:
    """The skill's Avoid section: the anchors' own anti-patterns and the lesson lines that say what not to do,
    then each failure avoidance of the family (its anti-pattern lines, else its procedure, else its title),
    then the anti-patterns of its repair instructions and the lines of their lesson that say what not to do
    ("Do not read dates month-first: they are day-first" teaches a fix and a pitfall) — a pitfall whichever
    type carried it."""
    lines: list[str] = [line for anchor in family.anchors for line in anchor.anti_pattern]
    for anchor in family.anchors:  # a repair a success validated still names the pitfall it repairs
        lines.extend(line for line in split_lines(anchor.procedure) if _SAYS_AVOID.match(line))
    for exp in family.avoid:
        own = [*exp.anti_pattern, *split_lines(exp.procedure)]
        lines.extend(own or [exp.title])
    for exp in family.check:
        lines.extend(exp.anti_pattern)
        lines.extend(line for line in split_lines(exp.procedure) if _SAYS_AVOID.match(line))
    # lines true of one task only (its output fields, its values) go last, so the cap drops them first
    return dedupe_lines(sorted(lines, key=instance_specific), MAX_AVOID)


def check_lines(family: Family) -> list[str]:
    """The skill's Check section: how the anchors were verified, then the family's repair instructions and
    verifier feedback (what to fix or confirm)."""
    lines: list[str] = [line for anchor in family.anchors for line in split_lines(anchor.verification)]
    for exp in family.check:
        own = [*split_lines(exp.procedure), *split_lines(exp.verification)]
        lines.extend(own or [exp.title])
    return dedupe_lines(lines, MAX_CHECK)


def prefer_lines(family: Family) -> list[str]:
    """Prefer lines: the anchors' preferences, the family's preference experiences, and the preference lines
    of its repairs."""
    lines: list[str] = [line for anchor in family.anchors for line in anchor.preference]
    for exp in family.prefer:
        lines.extend([*split_lines(exp.procedure), *exp.preference] or [exp.title])
    for exp in family.check:
        lines.extend(exp.preference)
    return dedupe_lines(lines, MAX_PREFER)


def union_tags(members: Sequence[ExperienceView]) -> list[str]:
    return list(dict.fromkeys(tag for m in members for tag in m.tags))
