"""Typed experiences from explicit feedback: the pure rules, and the stage in-process (no LLM and scripted LLM).

The 13F-style examples follow the seed's test plan (a verifier that reports values off by a factor of 1,000, an
answers.json schema reused from the previous task, a verified success); the sentence classifier and the instance
filter underneath have their own tests in `tests/rules/test_lessons.py`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from memos_bridge.config import DomainSpec, WorldSettings
from memos_bridge.contract import dto
from memos_bridge.core.facade import MemoryCore
from memos_bridge.core.learning.experiences import ExperienceReport, experience_stage, rules
from memos_bridge.core.learning.experiences.verifier import diff_values, observations, parse_verifier, record_lines
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import FeedbackRefineOutput
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


# ---------------------------------------------------------------- pure rules: feedback text


def test_feedback_text_takes_raw_text_fields_once() -> None:
    text = rules.feedback_text("values must be in thousands", {"text": "values must be in thousands", "userText": "x"})
    assert text.splitlines() == ["values must be in thousands", "x"]
    assert rules.feedback_text(None, {"verifier": {"message": "CUSIP order differs"}}) == "CUSIP order differs"


def test_a_map_keyed_by_data_is_one_wrong_value_not_missing_fields() -> None:
    """A month-to-revenue map with the wrong months is a wrong value, not a schema lesson about field names such
    as "revenue.2024-01" (a small agent copied such a key into the next task's answer)."""
    months = diff_values(
        {"monthly_revenue_usd": {"2024-01": 40.0}, "total": 40.0},
        {"monthly_revenue_usd": {"2024-05": 20.0, "2024-09": 60.0}, "total": 80.0},
    )
    assert [(m.kind, m.field) for m in months] == [("value", "monthly_revenue_usd"), ("scale", "total")]
    renamed = diff_values({"summary": {"total": 1}}, {"summary": {"sum": 1}})
    assert [(m.kind, m.field) for m in renamed] == [("missing", "summary.total"), ("unexpected", "summary.sum")]
    same = diff_values({"by_region": {"North": 27.0, "South": 40.0}}, {"by_region": {"North": 27.0, "South": 90.0}})
    assert [(m.kind, m.field) for m in same] == [("scale", "by_region.South")]


def test_configured_world_domains_extend_the_experience_tags() -> None:
    tls = DomainSpec(label="TLS", patterns=[r"\bTLS\b", r"certificates?"])
    filings = DomainSpec(label="SEC filings", patterns=[r"\bN-?PORT\b", r"\b13F\b"])
    added = rules.tag_patterns(WorldSettings(extra_domains={"tls": tls, "filings": filings}))
    assert rules.domain_tags(["Rotate the TLS certificates of the proxy"], extra=added) == ["tls"]
    assert rules.domain_tags(["Parse the N-PORT filing"], extra=added) == ["filings"]
    assert "filings" in rules.domain_tags([TASK], extra=added)
    defaults = rules.tag_patterns(WorldSettings())
    assert defaults == dict(rules.DOMAIN_PATTERNS)  # the built-in world table is not merged
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
        ("Rotate the TLS certificates of the api proxy", "The proxy only accepts certificates with the full chain."),
        ("Renew the TLS certificate of the web proxy", "Intermediate certificates here expire after 90 days."),
    ]
    for i, (task, lesson) in enumerate(tasks):
        episode, _, _ = await run_task(core, f"se_tls{i}", 1_000_000 * (i + 1), task, tools=[])
        await submit(core, episode, "negative", 1.0, rationale=lesson)
    found = await experiences(core)
    assert len(found) == 2 and all("tls" in e.tags for e in found)
    worlds = await core.list_world_models(dto.ListWorldModelsParams())
    assert any("tls" in w.domain_tags for w in worlds.world_models)


def test_domain_tags_cover_engineering_domains_and_name_no_task_family() -> None:
    assert rules.domain_tags([TASK, "bash", "parse_13f.py"]) == ["python", "xml", "json"]
    assert rules.domain_tags(["Fix the failing pytest in tests/test_api.py", "git commit"]) == [
        "python",
        "git",
        "testing",
    ]
    assert rules.domain_tags(["rotate the tls certs"]) == []
    assert rules.domain_tags(["rotate the tls certs"], extra={"tls": r"\btls\b"}) == ["tls"]


# ---------------------------------------------------------------- pure rules: verifier data, said as observed


def test_a_value_off_by_a_factor_is_observed_never_interpreted() -> None:
    view = parse_verifier(verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000}))
    assert view is not None and view.outcome == "fail" and view.credit == pytest.approx(0.4)
    assert [(m.kind, m.field) for m in view.mismatches] == [("scale", "total_value")]
    assert observations(view) == ["The answer was 1,000× the expected value."]
    # no reading of what the factor means: that is the feedback's to say
    for factor, said in ((100.0, "100×"), (0.01, "1/100 of"), (2.20462, "2.205×"), (0.4536, "1/2.205 of")):
        seen = parse_verifier({"expected": {"x": 10.0}, "actual": {"x": 10.0 * factor}})
        assert seen is not None and observations(seen) == [f"The answer was {said} the expected value."]
    text = " ".join(observations(view)).lower()
    assert not any(word in text for word in ("thousand", "percent", "fraction", "million", "unscaled"))
    # the record keeps the values (memory.get shows them); the observation does not
    assert record_lines(view) == ["`total_value`: expected 1234, got 1234000."]
    assert view.knows_fix and view.severity == pytest.approx(0.7)


def test_types_and_orders_are_observed_fields_and_counts_stay_on_the_record() -> None:
    expected = {"labels": ["A"], "rows": [{"cusip": "037833100", "v": 1}, {"cusip": "594918104", "v": 2}]}
    actual = {"stock_holding": 3, "rows": [{"cusip": "594918104", "v": 2}, {"cusip": "037833100", "v": 1}]}
    view = parse_verifier(verifier(passed=4, total=5, expected=expected, actual=actual))
    assert view is not None
    assert {(m.kind, m.field, m.detail) for m in view.mismatches} == {
        ("missing", "labels", ""),
        ("order", "rows", "by cusip ascending"),
        ("unexpected", "stock_holding", ""),
    }
    assert observations(view) == ["The expected entries were ordered by cusip ascending."]
    assert view.severity == pytest.approx(0.9)  # 4/5 passed, but a schema error is severe
    typed = parse_verifier({"verifier": {"mismatches": [{"field": "shares", "expected": 100, "actual": "100 sh"}]}})
    assert typed is not None and observations(typed) == [
        "The expected answer held numbers where this attempt wrote text."
    ]
    counted = parse_verifier({"expected": [1, 2, 3], "actual": [1, 2]})
    assert counted is not None and [m.kind for m in counted.mismatches] == ["count"] and observations(counted) == []


def test_verifier_credit_partial_is_a_failure_and_a_verdict_counts() -> None:
    partial = parse_verifier(verifier(score=0.8))
    assert partial is not None and partial.outcome == "fail" and partial.severity == pytest.approx(0.2)
    full = parse_verifier(verifier(passed=5, total=5))
    assert full is not None and full.outcome == "pass" and full.severity == 0
    assert parse_verifier({"verifier": {"passed": True}}).outcome == "pass"  # type: ignore[union-attr]
    assert parse_verifier({"verifier": {"status": "failed"}}).outcome == "fail"  # type: ignore[union-attr]
    assert parse_verifier({"text": "looks fine"}) is None


# ---------------------------------------------------------------- pure rules: assessment, drafts, merging


def _facts(text: str, polarity: str = "negative", magnitude: float = 1.0, raw: Any = None) -> rules.FeedbackFacts:
    return rules.FeedbackFacts("fb_1", 1, polarity, magnitude, True, text, parse_verifier(raw))


EPISODE = rules.EpisodeFacts(
    "ep_1", TASK, tools=("bash",), steps=("bash(cmd=python parse_13f.py) → ok",), written=("answers.json",)
)
UNITS = "Do not multiply the value column by 1000: infoTable values are already in thousands of USD."


def test_significance_needs_one_strong_signal() -> None:
    weak = _facts("You reported the total market value per issuer wrong", "neutral", 0.3)
    assert rules.assess(weak, EPISODE).reason == "below_significance"  # a diagnosis: confidence 0.45
    assert rules.assess(
        _facts("You reported the total market value per issuer wrong", "neutral", 0.6), EPISODE
    ).significant
    scored = rules.EpisodeFacts("ep_1", TASK, r_task=-0.7, outcome="failure")
    assert rules.assess(weak, scored).significant  # |rTask| ≥ 0.5
    worded = _facts("Next time parse every infoTable row.", "neutral", 0.1)
    assert rules.assess(worded, EPISODE).significant  # an instruction: confidence 0.7
    observed = _facts("", "negative", 0.1, verifier(passed=1, total=4, expected={"v": 1}, actual={"v": 1000}))
    found = rules.assess(observed, EPISODE)
    assert found.significant and found.observed == ("The answer was 1,000× the expected value.",)
    assert rules.assess(_facts("wrong"), EPISODE).reason == "not_actionable"
    implicit = rules.FeedbackFacts("fb_2", 1, "negative", 1.0, False, AVOID_SCHEMA)
    assert rules.assess(implicit, EPISODE).reason == "not_explicit"


def test_values_alone_teach_nothing() -> None:
    """ "Expected 4 but got 3" restates one attempt: it stays on the feedback record, no lesson is made of it."""
    found = rules.assess(
        _facts("Expected 4 but got 3.", raw=verifier(passed=0, total=1, expected={"n": 4}, actual={"n": 3})), EPISODE
    )
    assert found.reason == "not_actionable" and found.lessons == ()


def test_types_follow_the_objective_outcome_and_what_the_lesson_says() -> None:
    assert rules.assess(_facts(AVOID_SCHEMA, magnitude=0.6), EPISODE).experience_type == "failure_avoidance"
    assert rules.assess(_facts(UNITS), EPISODE).experience_type == "repair_instruction"  # it says what holds
    # praise only, and the verifier gave partial credit: a failure, with nothing specific to learn
    praised = _facts("Good: the per-issuer totals looked right.", "positive", raw=verifier(score=0.5))
    partial = rules.assess(praised, EPISODE)
    assert partial.outcome == "fail" and partial.reason == "not_actionable"
    passed = rules.assess(_facts("", "positive", raw=verifier(passed=3, total=3)), EPISODE)
    assert passed.significant and passed.experience_type == "success_pattern" and passed.polarity == "positive"
    llm_scored = rules.EpisodeFacts("e", TASK, r_task=0.8, outcome="success", outcome_source="llm")
    assert rules.assess(_facts(AVOID_SCHEMA), llm_scored).experience_type == "failure_avoidance"
    verified = replace(llm_scored, outcome_source="verifier")
    assert rules.assess(_facts(AVOID_SCHEMA), verified).experience_type == "success_pattern"
    taste = rules.assess(_facts("I prefer the totals as a markdown table.", "neutral"), EPISODE)
    assert taste.experience_type == "preference"


def test_confidence_is_trust_not_salience_so_a_vague_diagnosis_starts_as_a_candidate() -> None:
    vague = rules.assess(_facts("You reported the total market value per issuer wrong", magnitude=1.0), EPISODE)
    assert vague.significant and vague.salience == pytest.approx(1.0)  # it matters …
    assert vague.confidence < rules.ACTIVE_CONFIDENCE  # … but says little: a candidate
    assert rules.assess(_facts(AVOID_SCHEMA, magnitude=0.6), EPISODE).confidence == pytest.approx(0.8)
    graded = rules.assess(_facts(UNITS, raw=verifier(score=0.2)), EPISODE)
    assert graded.confidence == pytest.approx(rules.VERIFIER_CONFIDENCE)  # objective data: trusted


def test_a_draft_is_the_feedbacks_lesson_with_its_subject_and_no_instance_content() -> None:
    feedback = _facts(
        f"FAIL sec13f_issuer_values: total_value expected 1234, got 1234000. {UNITS} Well done on the parsing!",
        raw=verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000}),
    )
    (draft,) = rules.draft_experiences(feedback, EPISODE, rules.assess(feedback, EPISODE))
    assert draft.lesson == [UNITS] and draft.procedure == f"1. {UNITS}"
    assert draft.title == UNITS
    assert "1234" not in draft.title + draft.procedure + draft.trigger and "sec13f_issuer_values" not in draft.procedure
    assert draft.verification == "The answer was 1,000× the expected value."  # what the verifier observed
    assert draft.subject.numbers == ("1000",) and {u.canonical for u in draft.subject.units} == {"thousand", "usd"}
    assert "holdings.xml" in draft.terms and "answers.json" not in draft.terms  # the input, not the output
    record = draft.lesson_record()
    assert record["lines"] == [UNITS] and any("1234" in part for part in record["instance"])


def test_feedback_teaching_two_conventions_gives_two_drafts() -> None:
    feedback = _facts(f"{UNITS} Also, the `cusip` column has leading zeros that must be kept.")
    drafts = rules.draft_experiences(feedback, EPISODE, rules.assess(feedback, EPISODE))
    assert [d.lesson for d in drafts] == [[UNITS], ["The `cusip` column has leading zeros that must be kept."]]


def test_merge_rules_keep_types_coherent_and_a_lesson_gains_only_new_wordings() -> None:
    assert rules.may_merge("failure_avoidance", "failure_avoidance")
    assert rules.may_merge("failure_avoidance", "repair_instruction")
    assert not rules.may_merge("failure_avoidance", "success_pattern")  # a success anchors alone
    assert rules.merged_type("success_pattern", "failure_avoidance") == "success_pattern"
    assert rules.merged_type("repair_instruction", "success_pattern") is None  # only a later success validates
    assert rules.merged_polarity("positive", "negative") == "mixed"
    english = ["The `weight` field is in pounds: multiply by 0.4536."]
    same = ["the `weight` field is in pounds: multiply by 0.4536"]
    chinese = ["`weight` 字段的单位是磅，要乘以 0.4536。"]
    assert rules.merged_lesson(english, same) == english  # the same words: nothing new
    assert rules.merged_lesson(english, chinese) == [*english, *chinese]  # another language is kept
    assert rules.merge_lines([f"old {i}" for i in range(8)], ["new one"], cap=8)[-1] == "old 6"  # oldest goes


def test_repair_adherence_reads_the_lesson_not_the_task() -> None:
    trigger = f"Tasks involving holdings.xml; learnt on “{TASK}”"
    repair = "Divide the raw values by 1,000: they are reported in thousands."
    assert rules.repair_adherence(repair, trigger, "Divided every value by 1000 so the totals are in thousands.") > 0.3
    assert rules.repair_adherence(repair, trigger, TASK) < 0.3


def test_an_llm_rewording_must_be_grounded_and_keep_the_lessons_key_terms() -> None:
    feedback = _facts("The `weight` field is in pounds: multiply by 0.4536 to get kilograms.")
    (draft,) = rules.draft_experiences(feedback, EPISODE, rules.assess(feedback, EPISODE))
    invented = FeedbackRefineOutput(title="Bake", trigger="Kitchen tasks", procedure="1. Preheat the oven to 200C")
    assert rules.apply_refinement(draft, invented, feedback.text) is None
    dropped = FeedbackRefineOutput(
        title="Convert weights", trigger="Weight reports", procedure="1. Convert the weight field to kilograms."
    )
    assert rules.apply_refinement(draft, dropped, feedback.text) is None  # lost 0.4536 and pounds
    kept = FeedbackRefineOutput(
        title="Weights are in pounds",
        trigger="Reports over the weight field",
        procedure="1. Multiply each `weight` (pounds) by 0.4536 before summing kilograms.",
    )
    refined = rules.apply_refinement(draft, kept, feedback.text)
    assert refined is not None and refined.drafted_by == "llm" and refined.experience_type == draft.experience_type
    assert refined.lesson == draft.lesson  # the feedback's own words stay what compact recall shows


def test_an_llm_rewording_may_not_put_back_a_value_the_instance_filter_took_out() -> None:
    feedback = _facts("Coordinates are [longitude, latitude]. The nearest depot is rd_8844, at 13.29025 km.")
    (draft,) = rules.draft_experiences(feedback, EPISODE, rules.assess(feedback, EPISODE))
    assert "rd_8844" not in " ".join(draft.lesson) and any("rd_8844" in phrase for phrase in draft.instance)
    copied = FeedbackRefineOutput(
        title="Coordinates are longitude first",
        trigger="Depot lookups",
        procedure="1. Read coordinates as [longitude, latitude]; the nearest depot is rd_8844.",
    )
    assert rules.apply_refinement(draft, copied, feedback.text) is None
    faithful = copied.model_copy(update={"procedure": "1. Read coordinates as [longitude, latitude]."})
    assert rules.apply_refinement(draft, faithful, feedback.text) is not None


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
    assert exp.verifier_meta["failingFields"] == ["top_class_labels", "top_class_counts"]  # on the record …
    assert "top_class_labels" not in exp.procedure + exp.title  # … not in the lesson
    assert {"xml", "json"} <= set(exp.tags)
    assert exp.title == AVOID_SCHEMA and exp.procedure == f"1. {AVOID_SCHEMA}"  # the feedback's own words
    assert exp.lesson is not None and exp.lesson.lines == [AVOID_SCHEMA] and exp.lesson.roles == ["prohibition"]
    assert "holdings.xml" in exp.trigger and "holdings.xml" in exp.lesson.terms
    assert "verifier" in exp.boundary.lower() and stored.id in exp.boundary
    assert core.vectors.vectors_of("policy", "vec", [exp.id])  # in the index: recallable at once
    assert stage_report(core, episode).created == [exp.id]


async def test_expected_actual_mismatch_keeps_the_words_and_observes_the_factor(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_b", 1_000_000)
    raw = verifier(passed=2, total=5, expected={"total_value": 1234}, actual={"total_value": 1234000})
    await submit(core, episode, "negative", 1.0, rationale="values must be in thousands", raw=raw)
    [exp] = await experiences(core)
    assert exp.experience_type == "repair_instruction" and not exp.skill_eligible
    assert exp.procedure == "1. values must be in thousands"
    assert exp.verification == "The answer was 1,000× the expected value."
    assert "1234" not in exp.procedure + exp.verification + exp.title + " ".join(exp.anti_pattern)
    assert exp.verifier_meta["mismatches"][0]["kind"] == "scale" and exp.verifier_meta["expected"] == {
        "total_value": 1234
    }
    assert "Not yet confirmed" in exp.boundary


async def test_values_alone_make_no_experience_and_stay_on_the_feedback_record(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_b2", 1_000_000)
    raw = verifier(
        passed=0, total=1, expected={"count": 4}, actual={"count": 3}, message="FAIL for t4: expected 4, got 3"
    )
    await submit(core, episode, "negative", 1.0, raw=raw)
    assert await experiences(core) == []
    assert list(stage_report(core, episode).skipped.values()) == ["not_actionable"]


async def test_a_passed_verifier_becomes_a_success_pattern(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_c", 1_000_000)
    text = "This is correct; the 13F parser handled all holdings and matched verifier output."
    await submit(core, episode, "positive", 1.0, rationale=text, raw=verifier(passed=5, total=5))
    [exp] = await experiences(core)
    assert exp.experience_type == "success_pattern" and exp.evidence_polarity == "positive"
    assert exp.skill_eligible and exp.status == "active"
    assert "parse_13f.py" in exp.procedure


async def test_partial_credit_is_never_a_success(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    episode, _, _ = await run_task(core, "se_d", 1_000_000)
    raw = verifier(score=0.8, failing_fields=["top_class_counts"])
    await submit(core, episode, "positive", 0.8, rationale="Nearly there: count each class once per filing.", raw=raw)
    [exp] = await experiences(core)
    assert exp.experience_type == "repair_instruction" and exp.evidence_polarity == "negative"
    # the lesson in the user's words, without the "Nearly there:" they put before it
    assert not exp.skill_eligible and exp.procedure == "1. Count each class once per filing."


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
    await submit(core, weak, "neutral", 0.3, rationale="You summed the issuer values from the wrong column")
    assert list(stage_report(core, weak).skipped.values()) == ["below_significance"]
    assert await experiences(core) == []


async def test_a_high_salience_avoidance_is_recalled_under_avoid_for_a_similar_task(core_factory: Any) -> None:
    core = with_stage(await core_factory(retrieval={"render_mode": "full"}))  # reads the full block's type labels
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


async def test_the_same_convention_taught_again_merges_and_another_one_stays_apart(core_factory: Any) -> None:
    core = with_stage(await core_factory())
    first, _, _ = await run_task(core, "se_i", 1_000_000)
    fb1 = await submit(core, first, "negative", 1.0, rationale=AVOID_SCHEMA, raw=verifier(passed=0, total=4))
    second, _, _ = await run_task(core, "se_j", 2_000_000, SIMILAR_TASK)
    text = "Do not reuse the answers.json schema of the previous task. Never copy its stock_holding field."
    fb2 = await submit(core, second, "negative", 1.0, rationale=text, raw=verifier(passed=1, total=4))
    [exp] = await experiences(core)
    assert exp.support == 2 and exp.source_feedback_ids == [fb1.id, fb2.id]
    assert exp.source_episode_ids == [first, second] and exp.evidence_polarity == "negative"
    assert exp.lesson is not None and exp.lesson.lines[0] == AVOID_SCHEMA  # the first wording stays first
    assert any("stock_holding" in line for line in exp.lesson.lines)  # the new name came with the new wording
    assert stage_report(core, second).merged == [exp.id]
    # a different convention on the same files is a lesson of its own
    third, _, _ = await run_task(core, "se_j2", 3_000_000, SIMILAR_TASK)
    await submit(core, third, "negative", 1.0, rationale="The cusip field keeps its leading zeros.")
    assert len(await experiences(core)) == 2


async def test_low_confidence_feedback_starts_as_a_candidate_until_a_second_verdict_confirms_it(
    core_factory: Any,
) -> None:
    core = await core_factory()
    first, _, _ = await run_task(core, "se_lc1", 1_000_000)
    diagnosis = "You summed the market value per issuer in answers.json from the wrong column"
    await submit(core, first, "negative", 1.0, rationale=diagnosis)
    [exp] = await experiences(core)
    assert exp.status == "candidate" and exp.confidence < 0.5 and exp.salience == pytest.approx(1.0)
    # a candidate is recalled next to similar tasks, but no skill or world model builds on it
    _, _, again = await run_task(core, "se_lc2", 2_000_000, SIMILAR_TASK)
    assert exp.id in {hit.ref_id for hit in again.hits}
    second = again.query.episode_id
    assert second is not None
    await submit(
        core,
        second,
        "negative",
        1.0,
        rationale="You took the value per issuer in answers.json from the wrong column again",
    )
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
    await submit(core, other, "positive", 1.0, rationale="Lovely, the haiku keeps the 5-7-5 syllable count.")
    assert (await core.get_policy(dto.GetByIdParams(id=repair.id))).experience_type == "repair_instruction"  # type: ignore[union-attr]
    # the same family, later, with the repair recalled and followed: validated
    second, _, started = await run_task(
        core, "se_m", 3_000_000, SIMILAR_TASK, reply="Kept every value in thousands and wrote answers.json."
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
    # only the haiku's own success is a success pattern: the 13F success went into the validated repair
    assert [e.experience_type for e in await experiences(core, experienceType="success_pattern")] == ["success_pattern"]


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
    assert exp.title == "Keep each 13F task's own answers.json schema"
    assert exp.trigger.startswith(REFINED["trigger"]) and exp.procedure == REFINED["procedure"]
    assert exp.lesson is not None and exp.lesson.lines == [AVOID_SCHEMA]  # the feedback's words stay the lesson
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
    assert exp.title == AVOID_SCHEMA
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
    assert exp.title == AVOID_SCHEMA
    assert AVOID_SCHEMA in exp.procedure and exp.experience_type == "failure_avoidance"


NAMELESS = [  # one piece of work, asked for without naming a file or a company
    "How many scans did the lift gates let through on Saturday morning? Give the count.",
    "What was the busiest hour at the lift gates on Sunday? Give the hour.",
    "How many scans did the gates record after lunch on Saturday? Give the count.",
    "Which lift gate was busiest on Saturday afternoon? Give its name.",
]


async def test_one_convention_taught_in_three_wordings_is_one_experience_and_another_stays_apart(
    core_factory: Any,
) -> None:
    """The same clock rule, told in full, tersely and in Chinese on three tasks of one piece of work that name no
    file: one experience with support 3. A rule of another kind on that work is an experience of its own, and the
    same words on other work do not merge into it."""
    core = with_stage(await core_factory())
    tools = [{"name": "read_file", "input": {"path": "gate_scans.csv"}, "output": "(read)"}]
    wordings = [
        "The gate log is written in UTC; the resort keeps local time, UTC+9, so add 9 hours before bucketing by day.",
        "scan times are UTC (+9h local)",
        "扫描时间是世界时（UTC），本地时间要加 9 小时。",
    ]
    for index, text in enumerate(wordings):
        episode, _, _ = await run_task(core, f"se_w{index}", 1_000_000 * (index + 1), NAMELESS[index], tools=tools)
        await submit(core, episode, "negative", 1.0, rationale=text)
    [clock] = await experiences(core)
    assert clock.support == 3, [e.title for e in await experiences(core)]
    episode, _, _ = await run_task(core, "se_w3", 5_000_000, NAMELESS[3], tools=tools)
    await submit(core, episode, "negative", 1.0, rationale="Refused scans (any code but 00) are not rides; skip them.")
    assert len(await experiences(core)) == 2
    # other work, the same kind of rule: a lesson of its own
    other = "What is the average dwell time of the trucks at the quarry weighbridge on Monday?"
    episode, _, _ = await run_task(core, "se_w4", 6_000_000, other, tools=[])
    await submit(core, episode, "negative", 1.0, rationale="The weighbridge clock is UTC; add 2 hours.")
    assert len(await experiences(core)) == 3, [(e.title, e.support) for e in await experiences(core)]
