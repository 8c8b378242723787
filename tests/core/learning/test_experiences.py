"""Typed experiences from explicit feedback: the pure rules, and the stage in-process (no LLM and scripted LLM).

The SEC 13F examples are the seed's (000): a verifier that says values must be in thousands (expected 1234,
got 1234000), an answers.json schema reused from the previous task, CUSIP ordering, a verified success.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from memos_bridge.core.learning.experience_verifier import parse_verifier, verifier_lines

from memos_bridge.config import DomainSpec, WorldSettings
from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning import experience_rules as rules
from memos_bridge.core.learning.experiences import ExperienceReport, experience_stage
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import FeedbackRefineOutput
from memos_bridge.rules.text import instance_specific
from tests.llm.fakes import ScriptedProvider

pytestmark = pytest.mark.anyio

TASK = "SEC 13F filing: parse every infoTable row of holdings.xml and write the value per issuer to answers.json"
SIMILAR_TASK = "SEC 13F filing: parse infoTable rows of holdings_q3.xml and write the value per issuer to answers.json"
TOOLS = [
    {"name": "bash", "input": {"cmd": "python parse_13f.py holdings.xml"}, "output": "parsed 312 infoTable rows"},
    {"name": "write_file", "input": {"path": "answers.json"}, "output": "ok"},
]
AVOID_SCHEMA = "Do not reuse the previous task's answers.json schema."


# ---------------------------------------------------------------- helpers


def with_stage(core: MemoryCore) -> MemoryCore:
    """The core as the service wires it: the experience stage first after reward (and the correction repair),
    before L2. Checked, never patched in, so these tests fail if the wiring breaks."""
    assert [name for name, _ in core.learning.stages][:2] == ["experiences", "l2"]
    assert core.learning.stages[0][1] is experience_stage
    return core


async def run_task(
    core: MemoryCore, session: str, ts: int, task: str = TASK, *, reply: str = "Wrote answers.json.", tools: Any = None
) -> tuple[str, list[str], dto.RetrievalResultDTO]:
    started = await core.turn_start(
        dto.TurnInputDTO.model_validate({"agent": "t", "sessionId": session, "userText": task, "ts": ts})
    )
    episode = started.query.episode_id
    assert episode is not None
    end = await core.turn_end(
        dto.TurnResultDTO.model_validate(
            {
                "agent": "t",
                "sessionId": session,
                "episodeId": episode,
                "toolCalls": TOOLS if tools is None else tools,
                "agentText": reply,
                "ts": ts + 5_000,
            }
        )
    )
    return episode, end.trace_ids, started


async def submit(core: MemoryCore, episode: str, polarity: str, magnitude: float = 1.0, **extra: Any) -> Any:
    params = {"episodeId": episode, "polarity": polarity, "magnitude": magnitude, **extra}
    return await core.submit_feedback(dto.FeedbackSubmitParams.model_validate(params))


async def experiences(core: MemoryCore, **filters: Any) -> list[dto.PolicyDTO]:
    listed = await core.list_policies(dto.ListPoliciesParams.model_validate(filters))
    return [p for p in listed.policies if p.induced_by == rules.INDUCED_BY]


def stage_report(core: MemoryCore, episode: str) -> ExperienceReport:
    chain = core.learning.last_reports[episode]
    found = [r for r in chain.stages.values() if isinstance(r, ExperienceReport)]
    assert found, chain.stages
    return found[0]


def verifier(**fields: Any) -> dict[str, Any]:
    return {"verifier": {"task": "sec13f_issuer_values", **fields}}


# ---------------------------------------------------------------- pure rules: text


@pytest.mark.parametrize("text", ["wrong", "不对", "try again", "Wrong, try again", "不对，再试试", "This is correct."])
def test_bare_verdicts_are_not_actionable(text: str) -> None:
    assert not rules.classify(text).actionable


@pytest.mark.parametrize(
    ("text", "shape", "field"),
    [
        (AVOID_SCHEMA, "avoidance", "avoid"),
        (
            "Expected top_class_labels/top_class_counts, but the answer used the previous task's stock_holding schema.",
            "correction",
            "fix",
        ),
        ("Next time, parse every infoTable record before aggregating stock holdings.", "instruction", "fix"),
        ("This is correct; the 13F parser handled all holdings and matched verifier output.", "success", "success"),
        ("不要沿用上一题的answers.json结构", "avoidance", "avoid"),
        ("下次先确认answers.json的字段再汇总", "instruction", "fix"),
        ("I prefer the totals as a markdown table.", "preference", "prefer"),
        ("The total market value per issuer is wrong", "complaint", "wrong"),
    ],
)
def test_actionable_feedback_is_classified_by_what_it_says(text: str, shape: str, field: str) -> None:
    classified = rules.classify(text)
    assert classified.actionable and classified.shape == shape
    assert getattr(classified, field), classified


def test_an_expected_but_got_sentence_is_a_text_mismatch() -> None:
    assert rules.classify("Expected 12 rows but got 9.").text_mismatch
    assert rules.classify("期望是12行，实际是9行").text_mismatch
    assert not rules.classify(AVOID_SCHEMA).text_mismatch


def test_feedback_text_takes_raw_text_fields_once() -> None:
    text = rules.feedback_text("values must be in thousands", {"text": "values must be in thousands", "userText": "x"})
    assert text.splitlines() == ["values must be in thousands", "x"]
    assert rules.feedback_text(None, {"verifier": {"message": "CUSIP order differs"}}) == "CUSIP order differs"


def test_the_do_instead_half_of_an_avoid_sentence_is_a_fix_line() -> None:
    tie = (
        "Do not break ranking ties by issuer name: when two rows rank equal, break the tie by CUSIP ascending "
        "(sort by the ranked value descending, then by cusip ascending)."
    )
    classified = rules.classify(tie)
    assert classified.avoid == (tie,)
    assert classified.fix == (
        "When two rows rank equal, break the tie by CUSIP ascending (sort by the ranked value descending, then by "
        "cusip ascending).",
    )
    # a second half that means nothing alone ("leave them out") or is itself a prohibition stays with the first
    assert not rules.classify("Do not count cancelled orders: leave them out of every total.").fix
    assert not rules.classify("Never round the totals: do not drop the cents.").fix
    assert not rules.classify(AVOID_SCHEMA).fix
    # a colon inside a URL or a time ends no clause
    assert not rules.classify("Never fetch http://example.com/rates.csv without a timeout.").fix
    assert rules.classify("Do not fetch http://example.com/rates.csv: read the local fx_rates.csv copy.").fix == (
        "Read the local fx_rates.csv copy.",
    )
    assert rules.classify("不要按月份优先读日期：导出文件的日期是日在前").fix == ("导出文件的日期是日在前",)


def test_a_repair_leads_with_what_carries_over_not_with_this_attempts_values() -> None:
    text = (
        "1/3 checks passed.\n`top_total_value` should be 13970, got 14070.\n"
        "Do not break ranking ties by issuer name: when two rows rank equal, break the tie by CUSIP ascending."
    )
    assert instance_specific("`top_total_value` should be 13970, got 14070.")
    assert instance_specific("`holdings.cusip` in answers.json must be 11133T103 (this attempt: 98956P102).")
    assert not instance_specific("Report `v` in thousands: divide by 1,000 (expected 1, got 1000).")
    assert not instance_specific("The total should be in USD.")
    assert not instance_specific("Amounts must be rounded to 2 decimals.")
    assert instance_specific('`monthly_revenue_usd` should be {"2024-01": 42.0}, got {"2024-01": 100.0}.')
    assert instance_specific("Expected 12 rows but got 9.")
    feedback = rules.FeedbackFacts(id="fb_1", ts=0, polarity="negative", magnitude=1.0, explicit=True, text=text)
    episode = rules.EpisodeFacts(episode_id="ep_1", task=TASK, reply="Wrote answers.json.")
    assessment = rules.assess(feedback, episode)
    assert assessment.experience_type == "repair_instruction"
    draft = rules.draft_experience(feedback, episode, assessment)
    assert draft.title == "Repair (sec13f): When two rows rank equal, break the tie by CUSIP ascending"
    steps = draft.procedure.splitlines()
    assert steps[0].startswith("1. When two rows rank equal") and "should be 13970" in steps[1]


def test_lines_that_name_one_tasks_output_fields_are_instance_specific() -> None:
    assert instance_specific("`revenue_by_region_usd` is missing from answers.json.")
    assert instance_specific("Use the fields the task asks for in answers.json: revenue_by_region_usd.")
    assert instance_specific("Remove the fields the task did not ask for: best_selling_quantity.")
    assert instance_specific("Do not write fields the task did not ask for (monthly_revenue_usd.2024-03).")
    assert instance_specific("Produce 2 entries for `top_securities` in answers.json (this attempt had 0): process")
    # the lesson about field names in general carries over
    assert not instance_specific("Use exactly the field names the task specifies (issuer, shares, ...).")
    assert not instance_specific("Do not copy XML element names such as nameOfIssuer into answers.json.")


def test_a_map_keyed_by_data_is_one_wrong_value_not_missing_fields() -> None:
    """A month-to-revenue map with the wrong months is a wrong value: "use the fields monthly_revenue_usd.2024-01"
    was a schema lesson a 1.5B agent then copied as a key into the next task's answer."""
    from memos_bridge.core.learning.experience_verifier import diff_values

    months = diff_values(
        {"monthly_revenue_usd": {"2024-01": 40.0}, "total": 40.0},
        {"monthly_revenue_usd": {"2024-05": 20.0, "2024-09": 60.0}, "total": 80.0},
    )
    assert [(m.kind, m.field) for m in months] == [("value", "monthly_revenue_usd"), ("value", "total")]
    nested = diff_values({"units": {"2024-03": {"Widget": 4}}}, {"units": {"Widget": {"2024-03": 4}}})
    assert [(m.kind, m.field) for m in nested] == [("value", "units")]
    # misnamed fields of an object or of list rows stay a schema fault
    renamed = diff_values({"summary": {"total": 1}}, {"summary": {"sum": 1}})
    assert [(m.kind, m.field) for m in renamed] == [("missing", "summary.total"), ("unexpected", "summary.sum")]
    rows = diff_values({"rows": [{"issuer": "A"}]}, {"rows": [{"nameOfIssuer": "A"}]})
    assert {m.kind for m in rows} == {"missing", "unexpected"}
    # same keys: compared key by key as before
    same = diff_values({"by_region": {"North": 27.0, "South": 40.0}}, {"by_region": {"North": 27.0, "South": 90.0}})
    assert [(m.kind, m.field) for m in same] == [("value", "by_region.South")]


def test_configured_world_domains_extend_the_experience_tags() -> None:
    tls = DomainSpec(label="TLS", patterns=[r"\bTLS\b", r"certificates?"])
    nport = DomainSpec(label="SEC filings", patterns=[r"\bN-?PORT\b"])
    added = rules.tag_patterns(WorldSettings(extra_domains={"tls": tls, "sec13f": nport}))
    assert rules.domain_tags(["Rotate the TLS certificates of the proxy"], extra=added) == ["tls"]
    assert rules.domain_tags(["Parse the N-PORT filing"], extra=added) == ["sec13f"]  # extends an existing tag
    assert rules.domain_tags([TASK], extra=added)[0] == "sec13f"  # its built-in patterns still apply
    # the built-in world table is not merged (its broad domains would tag every shell task) …
    defaults = rules.tag_patterns(WorldSettings())
    assert defaults == dict(rules.DOMAIN_PATTERNS)
    # … a replaced one is, for the domains no tag covers (database ~ sql is covered by its alias)
    replaced = WorldSettings(
        domains={"tls": tls, "database": DomainSpec(label="DB", aliases=["sql"], patterns=[r"\bdb\b"])}
    )
    assert set(rules.tag_patterns(replaced)) == {*rules.DOMAIN_PATTERNS, "tls"}


async def test_an_experience_of_a_configured_domain_carries_its_tag_and_makes_its_world_model(
    core_factory: Any,
) -> None:
    tls = {"label": "TLS certificates", "patterns": [r"\btls\b", r"\bcertificates?\b"]}
    core = with_stage(await core_factory(learning={"world": {"extra_domains": {"tls": tls}}}))
    tasks = [
        ("Rotate the TLS certificates of the api proxy", "Do not reuse the expired intermediate certificate."),
        ("Renew the TLS certificate of the web proxy", "Never skip the chain check after installing a certificate."),
    ]
    for i, (task, lesson) in enumerate(tasks):
        episode, _, _ = await run_task(core, f"se_tls{i}", 1_000_000 * (i + 1), task, tools=[])
        await submit(core, episode, "negative", 1.0, rationale=lesson)
    found = await experiences(core)
    assert len(found) == 2 and all("tls" in e.tags for e in found)
    worlds = await core.list_world_models(dto.ListWorldModelsParams())
    assert any("tls" in w.domain_tags for w in worlds.world_models)


def test_domain_tags_cover_sec13f_and_engineering_domains_and_can_be_extended() -> None:
    assert rules.domain_tags([TASK, "bash", "parse_13f.py"]) == ["sec13f", "python", "xml", "json"]
    found = rules.domain_tags(["Fix the failing pytest in tests/test_api.py", "git commit"])
    assert found == ["python", "git", "testing"]
    assert rules.domain_tags(["Sort the CUSIP list in holdings.csv"]) == ["sec13f", "csv"]
    assert rules.domain_tags(["rotate the tls certs"]) == []
    assert rules.domain_tags(["rotate the tls certs"], extra={"tls": r"\btls\b"}) == ["tls"]


# ---------------------------------------------------------------- pure rules: verifier data


def test_a_thousandfold_value_says_report_in_thousands() -> None:
    view = parse_verifier(verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000}))
    assert view is not None and view.outcome == "fail" and view.credit == pytest.approx(0.4)
    assert [(m.kind, m.field, m.detail) for m in view.mismatches] == [("scale", "total_value", "thousands")]
    fixes, avoid = verifier_lines(view, "answers.json")
    assert fixes[0] == (
        "Report `total_value` in answers.json in thousands: divide the raw values by 1,000 "
        "(expected 1234, got 1234000)."
    )
    assert "unscaled" in avoid[0] and view.knows_fix and view.severity == pytest.approx(0.7)


def test_schema_and_cusip_order_mismatches_are_named() -> None:
    expected = {"top_class_labels": ["A"], "rows": [{"cusip": "037833100", "v": 1}, {"cusip": "594918104", "v": 2}]}
    actual = {"stock_holding": 3, "rows": [{"cusip": "594918104", "v": 2}, {"cusip": "037833100", "v": 1}]}
    view = parse_verifier(verifier(passed=4, total=5, expected=expected, actual=actual))
    assert view is not None
    kinds = {(m.kind, m.field, m.detail) for m in view.mismatches}
    assert kinds == {
        ("missing", "top_class_labels", ""),
        ("order", "rows", "by cusip ascending"),
        ("unexpected", "stock_holding", ""),
    }
    fixes, avoid = verifier_lines(view, "answers.json")
    assert fixes[0] == "Use the fields the task asks for in answers.json: top_class_labels."
    assert "by cusip ascending" in fixes[1]
    assert avoid[0] == "Do not write fields the task did not ask for (stock_holding)."
    assert view.severity == pytest.approx(0.9)  # 4/5 passed, but a schema error is severe


def test_rows_are_aligned_by_their_identifier_before_values_are_compared() -> None:
    expected = {"rows": [{"cusip": "037833100", "value": 1234}, {"cusip": "594918104", "value": 55}]}
    actual = {"rows": [{"cusip": "594918104", "value": 55000}, {"cusip": "037833100", "value": 1234000}]}
    view = parse_verifier({"passed": 1, "total": 3, "expected": expected, "actual": actual})
    assert view is not None
    assert [(m.kind, m.field, m.detail) for m in view.mismatches] == [
        ("order", "rows", "by cusip ascending"),
        ("scale", "rows.value", "thousands"),
    ]
    fixes, _ = verifier_lines(view)
    assert fixes[0].startswith("Report `rows.value` in thousands") and "by cusip ascending" in fixes[1]


def test_counts_types_and_reported_mismatch_lists() -> None:
    view = parse_verifier({"expected": [1, 2, 3], "actual": [1, 2]})
    assert view is not None and [m.kind for m in view.mismatches] == ["count"]
    typed = parse_verifier({"verifier": {"mismatches": [{"field": "shares", "expected": 100, "actual": "100 sh"}]}})
    assert typed is not None and [(m.kind, m.field) for m in typed.mismatches] == [("type", "shares")]
    assert typed.outcome == "fail"


def test_verifier_credit_partial_is_a_failure_and_a_verdict_counts() -> None:
    partial = parse_verifier(verifier(score=0.8))
    assert partial is not None and partial.outcome == "fail" and partial.severity == pytest.approx(0.2)
    full = parse_verifier(verifier(passed=5, total=5))
    assert full is not None and full.outcome == "pass" and full.severity == 0
    assert parse_verifier({"verifier": {"passed": True}}).outcome == "pass"  # type: ignore[union-attr]
    assert parse_verifier({"verifier": {"status": "failed"}}).outcome == "fail"  # type: ignore[union-attr]
    assert parse_verifier({"text": "looks fine"}) is None
    assert not full.names_problem and parse_verifier(verifier(passed=0, total=4)).names_problem is False  # type: ignore[union-attr]


# ---------------------------------------------------------------- pure rules: assessment, types, merging


def _facts(text: str, polarity: str = "negative", magnitude: float = 1.0, raw: Any = None) -> rules.FeedbackFacts:
    return rules.FeedbackFacts("fb_1", 1, polarity, magnitude, True, text, parse_verifier(raw))


EPISODE = rules.EpisodeFacts("ep_1", TASK, tools=("bash",), steps=("bash(cmd=python parse_13f.py) → ok",))


def test_significance_needs_one_strong_signal() -> None:
    weak = _facts("The total market value per issuer is wrong", "neutral", 0.3)
    assert rules.assess(weak, EPISODE).reason == "below_significance"  # complaint confidence 0.45, no reward
    assert rules.assess(_facts("The total market value per issuer is wrong", "neutral", 0.6), EPISODE).significant
    scored = rules.EpisodeFacts("ep_1", TASK, r_task=-0.7, outcome="failure")
    assert rules.assess(weak, scored).significant  # |rTask| ≥ 0.5
    worded = _facts("Next time parse every infoTable row.", "neutral", 0.1)
    assert rules.assess(worded, EPISODE).significant  # classifier confidence 0.7
    structured = _facts("", "negative", 0.1, verifier(passed=1, total=4, failing_fields=["value"]))
    found = rules.assess(structured, EPISODE)
    assert found.significant and found.severity == pytest.approx(0.75)
    assert rules.assess(_facts("wrong"), EPISODE).reason == "not_actionable"
    implicit = rules.FeedbackFacts("fb_2", 1, "negative", 1.0, False, AVOID_SCHEMA)
    assert rules.assess(implicit, EPISODE).reason == "not_explicit"


def test_salience_is_the_largest_signal_and_types_follow_the_objective_outcome() -> None:
    found = rules.assess(_facts(AVOID_SCHEMA, magnitude=0.6), rules.EpisodeFacts("e", TASK, r_task=-0.9))
    assert found.salience == pytest.approx(0.9) and found.experience_type == "failure_avoidance"
    # positive words, but the verifier gave partial credit: a failure
    praised = _facts("Good: the per-issuer totals looked right.", "positive", raw=verifier(score=0.5))
    partial = rules.assess(praised, EPISODE)
    assert partial.outcome == "fail" and partial.experience_type == "failure_avoidance"
    assert partial.polarity == "negative"
    lesson = rules.draft_experience(praised, EPISODE, partial).procedure
    assert lesson == (
        "Do not treat this result as final (the verifier gave sec13f_issuer_values: score 0.5) even when "
        "“Good: the per-issuer totals looked right”."
    )
    fixable = _facts("values must be in thousands", raw=verifier(score=0.2))
    assert rules.assess(fixable, EPISODE).experience_type == "repair_instruction"
    passed = rules.assess(_facts("", "positive", raw=verifier(passed=3, total=3)), EPISODE)
    assert passed.significant and passed.experience_type == "success_pattern" and passed.polarity == "positive"
    # an explicit negative verdict outranks a non-objective success score of the episode, not a verifier's
    llm_scored = rules.EpisodeFacts("e", TASK, r_task=0.8, outcome="success", outcome_source="llm")
    assert rules.assess(_facts(AVOID_SCHEMA), llm_scored).experience_type == "failure_avoidance"
    verified = replace(llm_scored, outcome_source="verifier")
    assert rules.assess(_facts(AVOID_SCHEMA), verified).experience_type == "success_pattern"
    taste = rules.assess(_facts("I prefer the totals as a markdown table.", "neutral"), EPISODE)
    assert taste.experience_type == "preference"


def test_confidence_is_trust_not_salience_so_a_vague_complaint_starts_as_a_candidate() -> None:
    vague = rules.assess(_facts("The total market value per issuer is wrong", magnitude=1.0), EPISODE)
    assert vague.significant and vague.salience == pytest.approx(1.0)  # it matters …
    assert vague.confidence == pytest.approx(0.45)  # … but says little: below ACTIVE_CONFIDENCE, a candidate
    assert vague.confidence < rules.ACTIVE_CONFIDENCE
    clear = rules.assess(_facts(AVOID_SCHEMA, magnitude=0.6), EPISODE)
    assert clear.confidence == pytest.approx(0.8)
    graded = rules.assess(_facts("The total market value per issuer is wrong", raw=verifier(score=0.2)), EPISODE)
    assert graded.confidence == pytest.approx(rules.VERIFIER_CONFIDENCE)  # objective data: trusted


def test_merge_rules_keep_types_coherent() -> None:
    assert rules.may_merge("failure_avoidance", "failure_avoidance", 0.75, 0.72, 0.82)
    assert not rules.may_merge("failure_avoidance", "repair_instruction", 0.75, 0.72, 0.82)
    assert rules.may_merge("failure_avoidance", "repair_instruction", 0.85, 0.72, 0.82)
    assert not rules.may_merge("failure_avoidance", "success_pattern", 0.99, 0.72, 0.82)  # a success anchors alone
    assert rules.merged_type("success_pattern", "failure_avoidance") == "success_pattern"
    assert rules.merged_type("repair_instruction", "success_pattern") is None  # only a later success validates
    assert rules.merged_polarity("positive", "negative") == "mixed"
    assert rules.merged_polarity("negative", "negative") == "negative"
    assert rules.merge_lines(["Do not reuse the schema."], ["do not reuse the schema", "Sort by CUSIP."]) == [
        "Sort by CUSIP.",  # the newest lesson first: recall shows the first lines of an experience
        "Do not reuse the schema.",
    ]
    assert rules.merge_lines([f"old {i}" for i in range(8)], ["new one"], cap=8)[-1] == "old 6"  # oldest goes
    assert rules.classify("Convert every order line to USD with fx_rates.csv before summing.").fix


def test_repair_adherence_reads_the_fix_not_the_task() -> None:
    repair = "1. Report `total_value` in thousands: divide the raw values by 1,000.\n2. " + (
        "Check the output against the verifier's fields before finishing."
    )
    trigger = f"Tasks like “{TASK}”"
    assert rules.repair_adherence(repair, trigger, "Divided every value by 1000 so the totals are in thousands.") > 0.3
    assert rules.repair_adherence(repair, trigger, TASK) < 0.3


def test_an_ungrounded_llm_rewording_is_rejected() -> None:
    feedback = _facts("values must be in thousands", raw=verifier(score=0.2))
    draft = rules.draft_experience(feedback, EPISODE, rules.assess(feedback, EPISODE))
    invented = FeedbackRefineOutput(title="Bake", trigger="Kitchen tasks", procedure="1. Preheat the oven to 200C")
    assert rules.apply_refinement(draft, invented, "values must be in thousands") is None
    grounded = FeedbackRefineOutput(
        title="Values in thousands", trigger="13F value reports", procedure="1. Divide values by 1000 (thousands)"
    )
    refined = rules.apply_refinement(draft, grounded, "values must be in thousands " + draft.procedure)
    assert refined is not None and refined.title == "Repair (sec13f): Values in thousands"
    assert refined.experience_type == "repair_instruction" and refined.drafted_by == "llm"


def test_lesson_lines_fold_types_into_do_avoid_check() -> None:
    assert rules.lesson_lines("failure_avoidance", "Do not reuse X\nDo not skip Y", ["Use Z"], []) == (
        ["Use Z"],
        ["Do not reuse X", "Do not skip Y"],
        [],
    )
    assert rules.lesson_lines("repair_instruction", "1. Divide by 1000", [], ["Raw values"]) == (
        [],
        ["Raw values"],
        ["Divide by 1000"],
    )
    assert rules.lesson_lines("success_pattern", "1. Parse\n2. Write", [], [])[0] == ["Parse", "Write"]


# ---------------------------------------------------------------- the stage, no LLM


async def test_failed_verifier_feedback_becomes_a_failure_avoidance(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, trace_ids, _ = await run_task(core, "se_a", 1_000_000)
    raw = verifier(passed=0, total=4, failing_fields=["top_class_labels", "top_class_counts"])
    stored = await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=raw)
    [exp] = await experiences(core)
    assert exp.experience_type == "failure_avoidance" and exp.evidence_polarity == "negative"
    assert not exp.skill_eligible and exp.status == "active"
    assert exp.salience == pytest.approx(1.0) and exp.confidence >= 0.9
    assert exp.source_feedback_ids == [stored.id] and exp.source_episode_ids == [episode]
    assert exp.source_trace_ids and set(exp.source_trace_ids) <= set(trace_ids)
    assert exp.verifier_meta["task"] == "sec13f_issuer_values"
    assert exp.verifier_meta["failingFields"] == ["top_class_labels", "top_class_counts"]
    assert {"sec13f", "json"} <= set(exp.tags)
    assert exp.title.startswith("Avoid (sec13f): reuse the previous task's answers.json schema")
    assert AVOID_SCHEMA in exp.procedure and "top_class_labels" in exp.procedure
    assert "verifier" in exp.boundary.lower() and stored.id in exp.boundary
    assert core.vectors.vectors_of("policy", "vec", [exp.id])  # in the index: recallable at once
    assert stage_report(core, episode).created == [exp.id]


async def test_expected_actual_mismatch_becomes_a_repair_instruction(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_b", 1_000_000)
    raw = verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000})
    await submit(core, episode, "negative", 1.0, rationale="values must be in thousands", raw=raw)
    [exp] = await experiences(core)
    assert exp.experience_type == "repair_instruction" and not exp.skill_eligible
    assert "divide the raw values by 1,000 (expected 1234, got 1234000)" in exp.procedure
    assert "values must be in thousands" in exp.procedure
    assert any("unscaled" in line for line in exp.anti_pattern)
    assert "sec13f_issuer_values" in exp.verification and "total_value" in exp.verification
    assert exp.verifier_meta["mismatches"][0]["kind"] == "scale"
    assert "Not yet confirmed" in exp.boundary


async def test_a_passed_verifier_becomes_a_success_pattern(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_c", 1_000_000)
    text = "This is correct; the 13F parser handled all holdings and matched verifier output."
    await submit(core, episode, "positive", 1.0, rationale=text, raw=verifier(passed=5, total=5))
    [exp] = await experiences(core)
    assert exp.experience_type == "success_pattern" and exp.evidence_polarity == "positive"
    assert exp.skill_eligible and exp.status == "active"
    assert "The 13F parser handled all holdings" in exp.procedure and "parse_13f.py" in exp.procedure
    assert exp.title.startswith("Success (sec13f):")


async def test_partial_credit_is_never_a_success(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_d", 1_000_000)
    raw = verifier(score=0.8, failing_fields=["top_class_counts"])
    await submit(core, episode, "positive", 0.8, rationale="Nearly there.", raw=raw)
    [exp] = await experiences(core)
    assert exp.experience_type == "failure_avoidance" and exp.evidence_polarity == "negative"
    assert not exp.skill_eligible and "top_class_counts" in exp.procedure


async def test_noise_creates_no_experience(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    failing = [{"name": "bash", "input": {"cmd": "python parse_13f.py"}, "errorCode": "KeyError: 'value'"}]
    episode, _, _ = await run_task(core, "se_e", 1_000_000, tools=failing, reply="It failed.")
    await core.close_episode(dto.EpisodeCloseParams(episode_id=episode))
    await core.flush()  # a plain negative trace, nobody commented: nothing
    assert await experiences(core) == []
    for text in ("wrong", "不对", "try again"):
        await submit(core, episode, "negative", 1.0, rationale=text)
    await submit(core, episode, "negative", 1.0, raw=verifier(passed=0, total=5))  # no detail: nothing to learn
    assert list(stage_report(core, episode).skipped.values()) == ["not_actionable"] * 4
    # actionable but weak: neutral, magnitude 0.3, no verifier, a near-zero reward
    weak, _, _ = await run_task(core, "se_e2", 2_000_000)
    await submit(core, weak, "neutral", 0.3, rationale="The total market value per issuer is wrong")
    assert list(stage_report(core, weak).skipped.values()) == ["below_significance"]
    assert await experiences(core) == []


async def test_a_high_salience_avoidance_is_recalled_under_avoid_for_a_similar_task(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_f", 1_000_000)
    raw = verifier(passed=0, total=4, failing_fields=["top_class_labels"])
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=raw)
    [exp] = await experiences(core)
    assert exp.salience >= 0.9 and not exp.skill_eligible
    _, _, started = await run_task(core, "se_g", 2_000_000, SIMILAR_TASK)
    assert exp.id in {h.ref_id for h in started.hits if h.ref_kind == "experience"}
    block = started.injected_context
    assert "[failure to avoid]" in block and f"Avoid: {AVOID_SCHEMA}" in block


async def test_reruns_and_repeated_evidence_create_nothing_new(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_h", 1_000_000)
    params = {"rationale": AVOID_SCHEMA, "raw": verifier(passed=0, total=4), "evidenceId": "skillflow-run-1"}
    await submit(core, episode, "negative", 1.0, **params)
    again = await submit(core, episode, "negative", 1.0, **params)
    report = await experience_stage(core.learning.ctx, episode, core.learning.last_reports[episode].reward)  # type: ignore[arg-type]
    assert report.skipped_reason == "no_new_feedback" and not report.created
    await core.flush()
    [exp] = await experiences(core)
    assert exp.support == 1 and exp.source_feedback_ids == [again.id]


async def test_two_similar_failures_merge_into_one_experience(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    first, _, _ = await run_task(core, "se_i", 1_000_000)
    fb1 = await submit(core, first, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    second, _, _ = await run_task(core, "se_j", 2_000_000, SIMILAR_TASK)
    text = "Do not reuse the answers.json schema of the previous task. Never copy its stock_holding field."
    fb2 = await submit(core, second, "negative", 1.0, rationale=text, raw=verifier(passed=1, total=4))
    [exp] = await experiences(core)
    assert exp.support == 2 and exp.source_feedback_ids == [fb1.id, fb2.id]
    assert exp.source_episode_ids == [first, second] and exp.evidence_polarity == "negative"
    assert any("stock_holding" in line for line in exp.anti_pattern)  # the new guidance line
    assert stage_report(core, second).merged == [exp.id]


async def test_low_confidence_feedback_starts_as_a_candidate_until_a_second_verdict_confirms_it(
    core_factory: Any,
) -> None:
    core = await core_factory()
    first, _, _ = await run_task(core, "se_lc1", 1_000_000)
    complaint = "The total market value per issuer in answers.json is wrong"
    await submit(core, first, "negative", 1.0, rationale=complaint)
    [exp] = await experiences(core)
    assert exp.status == "candidate" and exp.confidence < 0.5 and exp.salience == pytest.approx(1.0)
    # a candidate is recalled next to similar tasks (with its caveat), but no skill or world model builds on it
    _, _, again = await run_task(core, "se_lc2", 2_000_000, SIMILAR_TASK)
    assert exp.id in {hit.ref_id for hit in again.hits}
    second = again.query.episode_id
    assert second is not None
    await submit(core, second, "negative", 1.0, rationale="The value per issuer in answers.json is wrong again")
    [confirmed] = await experiences(core)
    assert confirmed.id == exp.id and confirmed.support == 2 and confirmed.status == "active"


async def test_a_repair_instruction_is_validated_by_a_later_success(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    first, _, _ = await run_task(core, "se_k", 1_000_000)
    raw = verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000})
    fb1 = await submit(core, first, "negative", 1.0, rationale="values must be in thousands", raw=raw)
    [repair] = await experiences(core)
    assert repair.experience_type == "repair_instruction"
    # an unrelated success does not validate it
    other, _, _ = await run_task(
        core, "se_l", 2_000_000, "Write a haiku about autumn leaves to poem.txt", reply="Wrote the haiku.", tools=[]
    )
    await submit(core, other, "positive", 1.0, rationale="Lovely, the haiku has the right 5-7-5 syllable count.")
    assert (await core.get_policy(dto.GetByIdParams(id=repair.id))).experience_type == "repair_instruction"  # type: ignore[union-attr]
    # the same family, later, with the repair recalled and followed: validated
    second, _, started = await run_task(
        core, "se_m", 3_000_000, SIMILAR_TASK, reply="Divided every value by 1000 and wrote answers.json."
    )
    assert repair.id in {h.ref_id for h in started.hits}
    await core.flush()  # the turn's cached result (what was recalled) is written behind
    fb2 = await submit(core, second, "positive", 1.0, raw=verifier(passed=5, total=5))
    validated = await core.get_policy(dto.GetByIdParams(id=repair.id))
    assert validated is not None and validated.experience_type == "repair_validated"
    assert validated.evidence_polarity == "mixed" and validated.skill_eligible
    assert validated.source_feedback_ids == [fb1.id, fb2.id] and second in validated.source_episode_ids
    assert "Confirmed by a later successful run" in validated.boundary
    assert stage_report(core, second).validated == [repair.id]
    assert [e.experience_type for e in await experiences(core, experienceType="success_pattern")] == [
        "success_pattern"
    ]  # only the haiku's own success: the 13F success went into the validated repair


async def test_get_and_list_policies_respect_filters_and_namespaces(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_n", 1_000_000)
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    [exp] = await experiences(core)
    assert await core.get_policy(dto.GetByIdParams(id="po_missing")) is None
    other = {"id": exp.id, "namespace": {"agentKind": "someone_else"}}
    assert await core.get_policy(dto.GetByIdParams.model_validate(other)) is None
    mine = {"id": exp.id, "namespace": {"agentKind": "t"}}
    assert (await core.get_policy(dto.GetByIdParams.model_validate(mine))) == exp
    assert await experiences(core, experienceType="success_pattern") == []
    assert await experiences(core, status="archived") == []
    assert [p.id for p in await experiences(core, status="active", experienceType="failure_avoidance")] == [exp.id]
    wire = exp.to_wire()
    for key in ("experienceType", "evidencePolarity", "salience", "sourceFeedbackIds", "verifierMeta", "skillEligible"):
        assert key in wire


# ---------------------------------------------------------------- the stage with a scripted LLM


REFINED = {
    "title": "Keep each 13F task's own answers.json schema",
    "trigger": "SEC 13F tasks that write answers.json",
    "procedure": "Do not reuse the previous task's answers.json schema; read the fields this task asks for.",
    "verification": "answers.json has exactly the fields top_class_labels and top_class_counts",
    "boundary": "Only for tasks that state their own output schema.",
    "avoid": ["Copying stock_holding from the previous task"],
    "prefer": ["Read the task's field list before writing answers.json"],
    "confidence": 0.8,
}


def scripted(refine: Any) -> ScriptedProvider:
    def answer(messages: list[Any]) -> str:
        system = messages[0].content
        if "Turn that feedback into ONE experience" in system:
            if isinstance(refine, BaseException):
                raise refine
            return json.dumps(refine)
        if "goal_achievement" in system:
            return json.dumps({"goal_achievement": -1, "process_quality": 0, "user_satisfaction": -1})
        if '"scores"' in system:
            return json.dumps({"scores": [{"idx": 1, "alpha": 0.5, "usable": True}]})
        if "Summarise one finished task" in system:
            return json.dumps({"title": "13F values", "summary": "Wrote answers.json.", "outcome": "failure"})
        return json.dumps({"relation": "follow_up", "confidence": 0.5})

    return ScriptedProvider(answer)


async def test_a_scripted_llm_rewords_the_draft_but_not_its_type(core_factory: Any) -> None:
    provider = scripted(REFINED)
    core = with_stage(await core_factory(llm=LLMFacade([provider])))
    episode, _, _ = await run_task(core, "se_o", 1_000_000)
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    [exp] = await experiences(core)
    assert exp.title == "Avoid (sec13f): Keep each 13F task's own answers.json schema"
    assert exp.trigger == REFINED["trigger"] and exp.procedure == REFINED["procedure"]
    assert exp.experience_type == "failure_avoidance" and not exp.skill_eligible  # the outcome decided, not the LLM
    assert exp.anti_pattern == REFINED["avoid"] and exp.preference == REFINED["prefer"]
    assert core.llm.stats()["ops"]["feedback.refine"]["calls"] == 1
    assert stage_report(core, episode).llm_calls == 1


@pytest.mark.parametrize(("configured", "limit"), [(None, 20_000), (90_000, 90_000)], ids=["default", "raised"])
async def test_the_refinement_deadline_is_configurable(core_factory: Any, configured: int | None, limit: int) -> None:
    """A slow local model needs longer than the default 20 s; the configured deadline reaches the provider."""
    provider = scripted(REFINED)
    overrides: dict[str, Any] = {"learning": {"refine_timeout_ms": configured}} if configured else {}
    core = with_stage(await core_factory(llm=LLMFacade([provider], default_timeout_ms=120_000), **overrides))
    episode, _, _ = await run_task(core, "se_t", 1_000_000)
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    refine_calls = [
        kwargs
        for messages, kwargs in zip(provider.calls, provider.kwargs, strict=True)
        if "Turn that feedback into ONE experience" in messages[0].content
    ]
    assert len(refine_calls) == 1
    assert limit - 1_000 < refine_calls[0]["timeout_ms"] <= limit


async def test_refinement_switched_off_keeps_the_rule_draft_and_asks_nothing(core_factory: Any) -> None:
    """`learning.refine_use_llm = false`: the LLM still serves the other stages, this one uses its rules."""
    provider = scripted(REFINED)
    core = with_stage(await core_factory(llm=LLMFacade([provider]), learning={"refine_use_llm": False}))
    episode, _, _ = await run_task(core, "se_q", 1_000_000)
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    [exp] = await experiences(core)
    assert exp.title.startswith("Avoid (sec13f): reuse the previous task's answers.json schema")
    assert not any("Turn that feedback into ONE experience" in messages[0].content for messages in provider.calls)
    assert "feedback.refine" not in core.llm.stats()["ops"]


@pytest.mark.parametrize(
    "refine",
    [{**REFINED, "procedure": "Preheat the oven to 200C and bake for an hour."}, RuntimeError("provider down")],
    ids=["ungrounded", "failing"],
)
async def test_an_unusable_or_failing_llm_falls_back_to_the_rule_draft(core_factory: Any, refine: Any) -> None:
    core = with_stage(await core_factory(llm=LLMFacade([scripted(refine)])))
    episode, _, _ = await run_task(core, "se_p", 1_000_000)
    await submit(core, episode, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    [exp] = await experiences(core)
    assert exp.title.startswith("Avoid (sec13f): reuse the previous task's answers.json schema")
    assert AVOID_SCHEMA in exp.procedure and exp.experience_type == "failure_avoidance"
