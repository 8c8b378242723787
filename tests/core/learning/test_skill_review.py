"""A person's review of a skill (`skill.review`) and status control (`memory.set_status` on a skill), in core:
approval activates and survives a rebuild; a rejection is kept off every automatic path — the skill stage does
not crystallise the family again even when its anchor is gone and a new success anchor arrives — until a
person approves or restores the skill.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from memos_bridge.config import SkillSettings
from memos_bridge.contract import dto
from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.contract.events import EventType
from memos_bridge.core.learning import skill_lifecycle
from memos_bridge.core.learning.skills import run_skills
from memos_bridge.storage.models import AuditEventRow
from tests.core.learning.test_skills import (
    PARSE,
    REPAIR_SCHEMA,
    SUCCESS,
    SUM,
    WRITE,
    World,
    thirteen_f,
    world,
)

pytestmark = pytest.mark.anyio
__all__ = ["world"]  # the fixture, imported for pytest

SUCCESS_AGAIN = {
    **SUCCESS,
    "title": "SEC 13F: per-issuer value totals written to answers.json",
    "procedure": "1. Read the infoTable rows of the 13F filing\n2. Group value by issuer and sum\n"
    "3. Write the totals to answers.json",
}


async def _review(world: World, skill_id: str, decision: str, reason: str | None = None) -> dto.SkillDTO:
    params = dto.SkillReviewParams(id=skill_id, decision=decision, reason=reason)  # type: ignore[arg-type]
    return (await skill_lifecycle.review_skill(world.ctx, params)).skill


async def _history(world: World, skill_id: str) -> list[tuple[str, dict[str, Any]]]:
    rows = await world.core.db.read(
        lambda db: list(db.scalars(select(AuditEventRow).where(AuditEventRow.target == f"skill:{skill_id}")))
    )
    return [(row.kind, dict(row.detail_json or {})) for row in rows]


async def test_a_rejected_family_is_not_crystallised_again_even_when_its_anchor_is_gone(world: World) -> None:
    seed = await thirteen_f(world)
    repair = await world.experience(REPAIR_SCHEMA, episodes=[seed["failed"]])
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    assert repair in skill.source_policies_json
    rejected = await _review(world, skill.id, "reject", "wrong grouping")
    assert rejected.status == "archived" and rejected.review is not None and rejected.review.status == "rejected"
    (event,) = world.of_type(EventType.SKILL_STATUS_CHANGED)
    assert event.payload["to"] == "archived" and event.payload["reason"] == "skill.review"
    assert event.payload["note"] == "wrong grouping"

    # The anchor leaves (archived by its lifecycle); a new passed task brings a new success anchor of the same
    # family. Only the avoidance and the repair link it to the rejected skill: no skill is anchored on it, so
    # without the rejection rule a new candidate would be crystallised from the rejected skill's sources.
    await world.touch_policy(seed["success"], status="archived", archived_at=world.clock())
    world.clock.advance(60_000)
    again, traces = await world.episode("13F totals per issuer again", [PARSE, SUM, WRITE], "Done.", session="se_2")
    anchor = await world.experience(SUCCESS_AGAIN, episodes=[again], traces=traces, gain=0.8)
    report = await run_skills(world.ctx, again, "success")
    assert report.crystallized == [] and report.skipped[anchor] == "skill_rejected"
    assert [(s.id, s.status) for s in await world.skills()] == [(skill.id, "archived")]
    assert (await world.policy(anchor)).meta_json["skill"]["skillId"] == skill.id

    # a person lifts the rejection: the family may learn again
    await _review(world, skill.id, "approve")
    report = await run_skills(world.ctx, again, "success")
    assert report.crystallized and report.skipped.get(anchor) != "skill_rejected"


async def test_approval_activates_vouches_and_survives_a_rebuild(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    assert skill.status == "candidate"
    await world.core.db.write(lambda db: setattr(db.merge(skill), "eta", 0.01))  # under retrieval's floor
    approved = await _review(world, skill.id, "approve", "checked by hand")
    settings = SkillSettings()
    assert approved.status == "active" and approved.eta == pytest.approx(
        settings.min_eta_for_retrieval + settings.eta_delta
    )
    assert approved.review == dto.SkillReviewDTO(status="approved", reason="checked by hand", at=world.clock())
    assert await _review(world, skill.id, "approve", "checked by hand") == approved  # a retry changes nothing
    assert [kind for kind, _ in await _history(world, skill.id)] == ["reviewed"]

    world.clock.advance(60_000)
    await world.touch_policy(seed["success"], procedure="1. Parse the filing\n2. Sum value per issuer")
    report = await run_skills(world.ctx, seed["passed"], "success")
    assert report.rebuilt == [skill.id]
    rebuilt = await world.skill(skill.id)
    assert rebuilt.status == "active" and rebuilt.version == 2 and rebuilt.review_status == "approved"


async def test_only_a_person_lifts_a_rejection(world: World) -> None:
    seed = await thirteen_f(world)
    await run_skills(world.ctx, seed["passed"], "success")
    (skill,) = await world.skills()
    await _review(world, skill.id, "reject", "not how we do it")
    with pytest.raises(MemosError) as refused:
        await skill_lifecycle.set_skill_status(world.ctx, skill.id, "active", None, None)
    assert refused.value.code is ErrorCode.CONFLICT
    with pytest.raises(MemosError) as missing:
        await _review(world, "sk_missing", "approve")
    assert missing.value.code is ErrorCode.SKILL_NOT_FOUND

    await skill_lifecycle.restore_skill(world.ctx, dto.SkillIdParams(id=skill.id))
    restored = await world.skill(skill.id)
    assert restored.status != "archived" and restored.review_status is None and restored.reviewed_at is None
    history = await _history(world, skill.id)
    assert [kind for kind, _ in history] == ["reviewed", "restored"]
    assert history[1][1]["liftedReview"] == "rejected"

    # a status set by a person: archived, then active again, each in the history
    await skill_lifecycle.set_skill_status(world.ctx, skill.id, "archived", "paused", None)
    assert (await world.skill(skill.id)).status == "archived"
    await skill_lifecycle.set_skill_status(world.ctx, skill.id, "active", "resumed", None)
    assert (await world.skill(skill.id)).status == "active"
    assert [kind for kind, _ in await _history(world, skill.id)][-2:] == ["archived", "activated"]
