"""Topic relation classifier: bilingual cues, corrections, topic shift, hard rules, LLM merge, false positives."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import BaseModel

from memos_bridge.core.relation import (
    DEFAULT_MAX_USER_TURNS,
    DEFAULT_MERGE_MAX_GAP_MS,
    STRONG_HEURISTIC_CONFIDENCE,
    EpisodeContext,
    RelationDecision,
    classify_relation,
    content_tokens,
    extract_correction,
    is_explicit_new_task,
    lexical_coverage,
    merge_llm_decision,
    needs_llm,
    parse_llm_relation,
)

EN = EpisodeContext(
    first_user_text="Write a Python function that parses a CSV file of 13F holdings and totals the value per issuer",
    last_user_text="Write a Python function that parses a CSV file of 13F holdings and totals the value per issuer",
    last_assistant_text=(
        "Done: parse.py reads the file with csv.DictReader, sums the value column by nameOfIssuer and "
        "prints the totals sorted by issuer name."
    ),
    user_turns=1,
    ms_since_last_activity=60_000,
)
ZH = EpisodeContext(
    first_user_text="帮我写一个 Python 脚本读取 CSV 文件并按发行人汇总持仓金额",
    last_user_text="帮我写一个 Python 脚本读取 CSV 文件并按发行人汇总持仓金额",
    last_assistant_text="好的，这是 parse.py，用 csv 模块读取文件并按发行人汇总金额。",
    user_turns=1,
    ms_since_last_activity=60_000,
)
CONTEXTS = {"en": EN, "zh": ZH}

# (text, context, relation, reason, is_correction, expected correction_text or None)
Case = tuple[str, str, str, str, bool, str | None]

CASES: list[Case] = [
    # ---- append: continue / acknowledge / no signal
    ("continue", "en", "append", "continue_cue", False, None),
    ("ok, go ahead", "en", "append", "continue_cue", False, None),
    ("yes, please continue", "en", "append", "continue_cue", False, None),
    ("继续", "zh", "append", "continue_cue", False, None),
    ("好的，按你说的做", "zh", "append", "continue_cue", False, None),
    ("thanks!", "en", "append", "acknowledgement", False, None),
    ("no thanks", "en", "append", "acknowledgement", False, None),
    ("No, thanks, that's all", "en", "append", "acknowledgement", False, None),
    ("好的，谢谢", "zh", "append", "acknowledgement", False, None),
    ("make the parser handle quoted fields", "en", "append", "no_signal", False, None),
    # ---- revision: sentence-initial rejection, with and without an instruction
    ("不对", "zh", "revision", "negation_revision", True, None),
    ("错了，金额算少了", "zh", "revision", "negation_revision", True, None),
    ("不对，应该用 pandas 读取", "zh", "revision", "negation_revision", True, "应该用 pandas 读取"),
    ("这个不对", "zh", "revision", "negation_revision", True, None),
    ("还是报错", "zh", "revision", "negation_revision", True, None),
    ("你理解错了，我要的是按季度汇总", "zh", "revision", "negation_revision", True, "我要的是按季度汇总"),
    ("重做一遍", "zh", "revision", "negation_revision", True, None),
    ("wrong", "en", "revision", "negation_revision", True, None),
    ("that's not right", "en", "revision", "negation_revision", True, None),
    ("Hmm, that's wrong.", "en", "revision", "negation_revision", True, None),
    ("wrong, use polars instead", "en", "revision", "negation_revision", True, "use polars instead"),
    (
        "No, use DictReader instead of split(',').",
        "en",
        "revision",
        "negation_revision",
        True,
        "use DictReader instead of split(',')",
    ),
    ("no, it should skip the header row", "en", "revision", "negation_revision", True, "it should skip the header row"),
    ("the totals are wrong for Apple", "en", "revision", "negation_revision", True, None),
    ("it still fails with the same error", "en", "revision", "negation_revision", True, None),
    ("try again", "en", "revision", "negation_revision", True, None),
    ("好像不对", "zh", "revision", "negation_revision", True, None),
    ("不是说好用 Python 吗", "zh", "revision", "negation_revision", True, "用 Python"),
    # ---- revision: a strong correction without a rejection word
    ("use polars instead of pandas", "en", "revision", "correction_instruction", True, "use polars instead of pandas"),
    (
        "it should return a list, not a dict",
        "en",
        "revision",
        "correction_instruction",
        True,
        "it should return a list, not a dict",
    ),
    (
        "I meant the value column, not the shares column",
        "en",
        "revision",
        "negation_revision",
        True,
        "I meant the value column, not the shares column",
    ),
    ("用 polars 代替 pandas", "zh", "revision", "correction_instruction", True, "用 polars 代替 pandas"),
    ("不要用 pip，用 uv 安装", "zh", "revision", "correction_instruction", True, "不要用 pip，用 uv 安装"),
    ("不是 A 列，是 B 列", "zh", "revision", "correction_instruction", True, "不是 A 列，是 B 列"),
    # ---- follow-up: pronoun, ellipsis, continuation
    ("and the other one?", "en", "follow_up", "ellipsis_follow_up", False, None),
    ("what about Windows?", "en", "follow_up", "ellipsis_follow_up", False, None),
    ("How about the 2023 filing?", "en", "follow_up", "ellipsis_follow_up", False, None),
    ("that's neat, does it handle empty rows?", "en", "follow_up", "pronoun_follow_up", False, None),
    ("why did you sort by name?", "en", "follow_up", "pronoun_follow_up", False, None),
    ("also add unit tests", "en", "follow_up", "continuation_cue", False, None),
    ("now make it faster", "en", "follow_up", "continuation_cue", False, None),
    ("add a --json flag too", "en", "follow_up", "continuation_cue", False, None),
    ("can you explain that?", "en", "follow_up", "pronoun_reference", False, None),
    ("那它呢", "zh", "follow_up", "ellipsis_follow_up", False, None),
    ("Windows 上呢？", "zh", "follow_up", "ellipsis_follow_up", False, None),
    ("那个报错怎么解决", "zh", "follow_up", "pronoun_follow_up", False, None),
    ("还能再快一点吗", "zh", "follow_up", "pronoun_follow_up", False, None),
    ("再帮我加上单元测试", "zh", "follow_up", "continuation_cue", False, None),
    ("顺便把结果导出成 JSON", "zh", "follow_up", "continuation_cue", False, None),
    # ---- new task: explicit switches
    ("换个任务", "zh", "new_task", "explicit_new_task_cue", False, None),
    ("好的，换个话题吧", "zh", "new_task", "explicit_new_task_cue", False, None),
    ("新任务：帮我写一首关于春天的诗", "zh", "new_task", "explicit_new_task_cue", False, None),
    ("另外一个问题：Rust 的所有权是什么", "zh", "new_task", "explicit_new_task_cue", False, None),
    ("这是一个新的问题，和上面无关", "zh", "new_task", "explicit_new_task_cue", False, None),
    ("new task: summarise this PDF", "en", "new_task", "explicit_new_task_cue", False, None),
    ("OK, next task: set up CI for the repo", "en", "new_task", "explicit_new_task_cue", False, None),
    ("Unrelated question, how do I center a div?", "en", "new_task", "explicit_new_task_cue", False, None),
    ("let's move on to the deployment docs", "en", "new_task", "explicit_new_task_cue", False, None),
    ("Forget that. What's a good name for a cat?", "en", "new_task", "explicit_new_task_cue", False, None),
    ("不对，换个话题", "zh", "new_task", "explicit_new_task_cue", False, None),
    # ---- false-positive guards
    ("create a new file called util.py with the helpers", "en", "append", "no_signal", False, None),
    ("在脚本里创建一个新任务队列来处理 CSV 文件", "zh", "append", "no_signal", False, None),
    ("Let's move on to the next step", "en", "append", "no_signal", False, None),
    ("change the subject line of the email to Hello", "en", "append", "no_signal", False, None),
    ("No module named pandas when I run it", "en", "append", "no_signal", False, None),
    ("I'm not sure the header is needed", "en", "append", "no_signal", False, None),
    ("Don't worry, just run it once more", "en", "append", "no_signal", False, None),
    ("我不是程序员，是设计师", "zh", "append", "no_signal", False, None),
    ("我应该怎么安装 numpy？", "zh", "append", "no_signal", False, None),
    ("不是很清楚，是不是要重启", "zh", "append", "no_signal", False, None),
    ("Why did you use csv instead of pandas?", "en", "follow_up", "pronoun_follow_up", False, None),
    ("再见", "zh", "append", "no_signal", False, None),
    ("No. 5 is the best option, pick it", "en", "append", "no_signal", False, None),
    ("btw can you also check the date format", "en", "follow_up", "continuation_cue", False, None),
]


@pytest.mark.parametrize(("text", "ctx", "relation", "reason", "is_correction", "correction"), CASES)
def test_relation_cases(
    text: str, ctx: str, relation: str, reason: str, is_correction: bool, correction: str | None
) -> None:
    decision = classify_relation(text, CONTEXTS[ctx])
    assert (decision.relation, decision.reason) == (relation, reason), decision
    assert decision.is_correction is is_correction
    assert decision.correction_text == correction
    assert 0.0 <= decision.confidence <= 1.0
    assert decision.starts_new_episode is (relation == "new_task")


def test_table_is_large_and_bilingual() -> None:
    assert len(CASES) >= 40
    assert sum(1 for c in CASES if c[1] == "zh") >= 20
    assert {c[2] for c in CASES} == {"append", "revision", "follow_up", "new_task"}


# --------------------------------------------------------------------------------------------------------
# Hard rules
# --------------------------------------------------------------------------------------------------------


def test_gap_beyond_merge_window_starts_a_new_task_even_with_a_follow_up_cue() -> None:
    ctx = replace(EN, ms_since_last_activity=DEFAULT_MERGE_MAX_GAP_MS + 1)
    decision = classify_relation("and the other one?", ctx)
    assert (decision.relation, decision.reason, decision.source) == ("new_task", "gap_exceeded", "rule")
    # exactly at the window is still inside it
    at_edge = classify_relation("and the other one?", replace(EN, ms_since_last_activity=DEFAULT_MERGE_MAX_GAP_MS))
    assert at_edge.relation == "follow_up"


def test_turn_cap_counts_user_turns_and_can_be_disabled() -> None:
    capped = classify_relation("不对，应该用 pandas", replace(ZH, user_turns=DEFAULT_MAX_USER_TURNS))
    assert (capped.relation, capped.reason, capped.source) == ("new_task", "turn_cap", "rule")
    below = classify_relation("不对，应该用 pandas", replace(ZH, user_turns=DEFAULT_MAX_USER_TURNS - 1))
    assert below.relation == "revision"
    custom = classify_relation("continue", replace(EN, user_turns=5), max_user_turns=5)
    assert custom.reason == "turn_cap"
    off = classify_relation(
        "continue", replace(EN, user_turns=500, ms_since_last_activity=10**9), max_user_turns=0, merge_max_gap_ms=0
    )
    assert off.relation == "append"


def test_empty_episode_takes_the_turn_and_unknown_gap_has_no_gap_rule() -> None:
    decision = classify_relation("new task: anything", EpisodeContext())
    assert (decision.relation, decision.reason) == ("append", "empty_episode")
    no_gap = classify_relation("continue", replace(EN, ms_since_last_activity=None))
    assert no_gap.relation == "append"


def test_empty_message_appends() -> None:
    assert classify_relation("   ", EN).reason == "empty_message"


# --------------------------------------------------------------------------------------------------------
# Topic shift by similarity / lexical overlap
# --------------------------------------------------------------------------------------------------------


def test_low_embedding_similarity_without_cue_is_a_topic_shift() -> None:
    ctx = replace(EN, similarity=0.03)
    decision = classify_relation("Help me write a birthday poem for my mom", ctx)
    assert (decision.relation, decision.reason) == ("new_task", "topic_shift_low_similarity")
    assert decision.confidence < STRONG_HEURISTIC_CONFIDENCE  # weak: the LLM may still overrule it
    assert needs_llm(decision)


def test_low_similarity_does_not_beat_a_continuation_cue_or_a_short_request() -> None:
    ctx = replace(EN, similarity=0.02)
    assert classify_relation("also add unit tests", ctx).relation == "follow_up"
    assert classify_relation("add unit tests", ctx).relation == "append"  # too short to call a shift


def test_high_similarity_confirms_the_topic() -> None:
    decision = classify_relation("sort issuers by total value descending", replace(EN, similarity=0.62))
    assert (decision.relation, decision.reason) == ("append", "same_topic_similarity")


def test_soft_gap_raises_a_shift_confidence() -> None:
    base = classify_relation("Help me write a birthday poem for my mom", replace(EN, similarity=0.03))
    late = classify_relation(
        "Help me write a birthday poem for my mom", replace(EN, similarity=0.03, ms_since_last_activity=3_600_000)
    )
    assert late.confidence > base.confidence


def test_cjk_ignores_english_only_cosine_and_uses_lexical_overlap() -> None:
    # MiniLM gives unrelated Chinese pairs ~0.4; that must not confirm the topic …
    weather = "今天北京天气怎么样，会下雨吗，需要带伞吗"
    decision = classify_relation(weather, replace(ZH, similarity=0.45))
    assert (decision.relation, decision.reason) == ("new_task", "topic_shift_no_overlap")
    # … nor a low cosine split a related Chinese request.
    related = classify_relation("把汇总金额按发行人排序输出", replace(ZH, similarity=0.01))
    assert related.relation == "append"


def test_lexical_shift_needs_enough_content_on_both_sides() -> None:
    short_episode = EpisodeContext(first_user_text="hi", last_user_text="hi", last_assistant_text="hello", user_turns=1)
    assert classify_relation(
        "Explain how photosynthesis converts light into chemical energy", short_episode
    ).relation == ("append")
    long_new = classify_relation("Explain how photosynthesis converts light into chemical energy inside plants", EN)
    assert (long_new.relation, long_new.reason) == ("new_task", "topic_shift_no_overlap")


def test_quoting_the_previous_answer_is_a_follow_up() -> None:
    text = "you wrote 'reads the file with csv.DictReader, sums the value column by nameOfIssuer' - is that safe"
    decision = classify_relation(text, replace(EN, similarity=0.0))
    assert (decision.relation, decision.reason) == ("follow_up", "quotes_previous_answer")


def test_content_tokens_and_coverage() -> None:
    assert {"csv", "parser"} <= content_tokens("Write the CSV parser")
    assert "the" not in content_tokens("the parser")
    assert "一个" not in content_tokens("帮我写一个脚本")  # function-character bigrams are dropped
    assert "脚本" in content_tokens("帮我写一个脚本")
    assert lexical_coverage("csv parser", "a csv parser in python") == 1.0
    assert lexical_coverage("", "anything") == 0.0


# --------------------------------------------------------------------------------------------------------
# Corrections and explicit switches as standalone helpers
# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "after_rejection", "expected"),
    [
        ("use uv instead of pip", False, "use uv instead of pip"),
        ("Instead, call the API directly.", False, "Instead, call the API directly"),
        ("prefer pathlib over os.path", False, "prefer pathlib over os.path"),
        ("you should have used a set", False, "you should have used a set"),
        ("改用 polars 读取", False, "改用 polars 读取"),
        ("应该是 list 不是 dict", False, "应该是 list 不是 dict"),
        ("还是用 Python 吧", False, "还是用 Python 吧"),
        ("我的意思是说按月汇总", False, "我的意思是说按月汇总"),
        # weak forms need a rejection first
        ("应该用 pandas 读取", False, None),
        ("应该用 pandas 读取", True, "应该用 pandas 读取"),
        ("it should be sorted", False, None),
        ("it should be sorted", True, "it should be sorted"),
        ("改成红色", True, "改成红色"),
        # never
        ("not only fast but also small", False, None),
        ("", True, None),
    ],
)
def test_extract_correction(text: str, after_rejection: bool, expected: str | None) -> None:
    assert extract_correction(text, after_rejection=after_rejection) == expected


def test_extracted_instruction_is_bounded() -> None:
    long = "no, it should " + "do this and that " * 40
    extracted = classify_relation(long, EN).correction_text
    assert extracted is not None and len(extracted) <= 240


def test_is_explicit_new_task() -> None:
    assert is_explicit_new_task("换一个任务吧")
    assert is_explicit_new_task("Moving on: the docs")
    assert not is_explicit_new_task("moving on to the next step of the migration")
    assert not is_explicit_new_task("create a new task in Jira for this bug")


# --------------------------------------------------------------------------------------------------------
# LLM answers
# --------------------------------------------------------------------------------------------------------


class _Answer(BaseModel):
    relation: str
    confidence: float = 0.5
    reason: str = ""


def _weak() -> RelationDecision:
    decision = classify_relation("make the parser handle quoted fields", EN)
    assert decision.reason == "no_signal" and needs_llm(decision)
    return decision


def test_parse_llm_relation_is_tolerant() -> None:
    assert parse_llm_relation({"relation": "Follow-Up", "confidence": "85%", "reason": " same file "}) == (
        "follow_up",
        0.85,
        "same file",
    )
    assert parse_llm_relation({"relation": "new task", "confidence": 7}) == ("new_task", 1.0, "")
    assert parse_llm_relation({"relation": "unknown"}) is None
    assert parse_llm_relation({"confidence": 0.9}) is None
    assert parse_llm_relation(None) is None
    model = _Answer(relation="revision", confidence=0.9, reason="negates")  # a validated pydantic answer
    assert parse_llm_relation(model) == ("revision", 0.9, "negates")


def test_llm_decides_weak_cases() -> None:
    merged = merge_llm_decision(_weak(), {"relation": "follow_up", "confidence": 0.9, "reason": "same parser"})
    assert (merged.relation, merged.source, merged.reason, merged.detail) == ("follow_up", "llm", "llm", "same parser")
    split = merge_llm_decision(_weak(), {"relation": "new_task", "confidence": 0.92})
    assert split.relation == "new_task" and split.starts_new_episode


def test_strong_heuristic_and_hard_rules_override_the_llm() -> None:
    explicit = classify_relation("换个任务", ZH)
    assert not needs_llm(explicit)
    assert merge_llm_decision(explicit, {"relation": "follow_up", "confidence": 0.99}) is explicit
    negation = classify_relation("不对，应该用 pandas", ZH)
    kept = merge_llm_decision(negation, {"relation": "new_task", "confidence": 0.95})
    assert kept.relation == "revision" and kept.correction_text == "应该用 pandas"
    gap = classify_relation("continue", replace(EN, ms_since_last_activity=DEFAULT_MERGE_MAX_GAP_MS * 2))
    assert merge_llm_decision(gap, {"relation": "append", "confidence": 1.0}) is gap


def test_low_confidence_llm_new_task_does_not_split_alone() -> None:
    merged = merge_llm_decision(_weak(), {"relation": "new_task", "confidence": 0.6})
    assert (merged.relation, merged.reason) == ("follow_up", "llm_new_task_low_confidence")
    shift = classify_relation("Help me write a birthday poem for my mom", replace(EN, similarity=0.03))
    agreed = merge_llm_decision(shift, {"relation": "new_task", "confidence": 0.6})
    assert (agreed.relation, agreed.reason) == ("new_task", "llm_agrees_topic_shift")
    assert agreed.confidence == shift.confidence


def test_llm_revision_is_a_correction_with_extracted_instruction() -> None:
    text = "hmm, maybe use the shares column"
    heuristic = classify_relation(text, EN)
    assert heuristic.relation == "append"
    merged = merge_llm_decision(heuristic, {"relation": "revision", "confidence": 0.8}, text)
    assert merged.is_correction and merged.correction_text == "use the shares column"


def test_heuristic_correction_survives_an_llm_continuation_label() -> None:
    heuristic = classify_relation("use polars instead of pandas", EN)
    assert heuristic.reason == "correction_instruction" and needs_llm(heuristic)
    merged = merge_llm_decision(heuristic, {"relation": "follow_up", "confidence": 0.7})
    assert merged.relation == "follow_up"
    assert merged.is_correction and merged.correction_text == "use polars instead of pandas"


def test_unusable_llm_answer_keeps_the_heuristic() -> None:
    weak = _weak()
    assert merge_llm_decision(weak, {"relation": "maybe"}) is weak
    assert merge_llm_decision(weak, None) is weak


def test_classifier_never_raises_on_odd_input() -> None:
    for text in ["\x00\x01", "🙂" * 500, "a" * 100_000, "(((", "\\", "不对" * 3000]:
        decision = classify_relation(text, EN)
        assert decision.relation in {"append", "revision", "follow_up", "new_task"}


def test_a_judged_episode_ends_its_task_unless_the_turn_continues_or_corrects_it() -> None:
    judged = replace(EN, judged=True)
    # the next request of a long session, on the same kind of data: a new task once a verdict closed this one
    nxt = classify_relation("Now total the value per issuer for the March filing instead of February", judged)
    assert nxt.relation == "new_task" and nxt.reason == "judged_episode" and nxt.source == "rule"
    assert nxt.confidence >= STRONG_HEURISTIC_CONFIDENCE
    # unjudged, the same words continue the task
    assert (
        classify_relation("Now total the value per issuer for the March filing instead of February", EN).relation
        != "new_task"
    )
    # a correction or a retry after the verdict stays in the task
    assert classify_relation("不对，应该用 polars 读取", replace(ZH, judged=True)).relation == "revision"
    for text in ("Please redo the total per issuer", "try again", "再算一次"):
        assert classify_relation(text, judged).relation == "revision", text
