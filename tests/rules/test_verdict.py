"""Feedback detection: verdicts in EN and ZH are found with their polarity and magnitude, and ordinary
sentences (questions, bare "不是", code with `r = …`, "对了" = by the way) are not mistaken for feedback."""

from __future__ import annotations

import pytest

from memos_bridge.rules.verdict import detect_feedback

NOT_FEEDBACK = [
    "不是所有的文件都需要修改",  # bare 不是: the reference adapter's false positive
    "这不是问题，继续下一步",
    "对了，帮我看看这个函数",  # 对了 = "by the way"
    "我写错了一个变量名，帮我改一下",  # the user's own mistake, not a verdict on the answer
    "错了吗？",
    "哪里错了？",
    "What's wrong with this code?",
    "Is this approach wrong?",
    "Why did the build fail?",
    "I think the build failed because of the cache, can you check?",
    "Please give me feedback on my essay, what should I improve?",
    "r = requests.get(url) returns 404",
    "set r = 5 in the loop",
    "the variance r = 0.3 of the data is small",
    "```python\nr = 0.5\nprint(r)\n```\nwhy is this slow",
    "Correct the typo in README.md",
    "Wrong-way driving detection: add a test for it",
    # an `r = x` next to "task" is an instruction, not a reward
    "The task: set r = 1 when the test passes",
    "Set r = 1 once the tests passed",
    # questions about verdicts, on the reward, strong-marker and labelled paths
    "通过率 r = 0.6 的任务怎么优化",
    "验证结果怎么看",
    "Verifier result: why is it 3/5?",
    "Feedback: what should I improve?",
    # a marker or a label that judges nothing
    "Verdict: explain how courts work",
    "Tell me how the verifier result works",
    "",
]


@pytest.mark.parametrize("text", NOT_FEEDBACK)
def test_ordinary_messages_are_not_feedback(text: str) -> None:
    assert detect_feedback(text) is None


@pytest.mark.parametrize(
    ("text", "polarity", "magnitude", "source"),
    [
        ("Verifier feedback: task failed, r = -1. answers.json lacked top_class_labels.", "negative", 1.0, "verifier"),
        ("本任务评为反例 r=-0.8", "negative", 0.8, "verifier"),
        ("本任务评为正例", "positive", 1.0, "verifier"),
        ("Task rated as counterexample.", "negative", 1.0, "verifier"),
        ("Feedback: the task succeeded", "positive", 1.0, "labelled"),
        ("反馈：下次不要用 latin-1 读文件", "negative", 0.6, "labelled"),
        ("Task feedback: r = 0.2", "neutral", 0.2, "labelled"),
        ("reward=1", "positive", 1.0, "reward"),
        ("任务失败 r ≤ -0.5", "negative", 0.5, "reward"),
        ("不对，应该用 UTF-8 编码", "negative", 0.8, "correction"),
        ("你理解错了，我要的是 CSV", "negative", 0.8, "correction"),
        ("That's wrong, use the v2 API instead.", "negative", 0.8, "correction"),
        ("No, that's not what I asked for", "negative", 0.8, "correction"),
        ("Wrong. It should be 42.", "negative", 0.8, "correction"),
        ("It works now, thanks!", "positive", 0.8, "confirmation"),
        ("Great, that worked!", "positive", 0.8, "confirmation"),
        ("搞定了，谢谢", "positive", 0.8, "confirmation"),
        # a verdict followed by a question is still the verdict
        ("Verifier feedback: task failed, r = -0.5. Why did you multiply by 1000?", "negative", 0.5, "verifier"),
        ("验证反馈：任务失败。为什么要乘以 1000？", "negative", 1.0, "verifier"),
    ],
)
def test_verdicts_have_polarity_and_magnitude(text: str, polarity: str, magnitude: float, source: str) -> None:
    verdict = detect_feedback(text)
    assert verdict is not None
    assert (verdict.polarity, verdict.magnitude, verdict.source) == (polarity, magnitude, source)


def test_full_width_and_the_r_value_are_normalised() -> None:
    verdict = detect_feedback("ＶＥＲＩＦＩＥＲ ＦＥＥＤＢＡＣＫ：ｒ＝－０．７５")
    assert verdict is not None and verdict.polarity == "negative" and verdict.magnitude == 0.75
    assert verdict.reward == -0.75


@pytest.mark.parametrize(
    ("text", "passed", "total", "polarity"),
    [
        ("verifier result: 5/5 tests passed", 5, 5, "positive"),
        ("验证反馈：3/4 通过", 3, 4, "negative"),
        ("Verifier: 3 of 5 tests passed", 3, 5, "negative"),
        ("Feedback: passed 4/4 checks", 4, 4, "positive"),
    ],
)
def test_a_test_count_becomes_a_verifier_result(text: str, passed: int, total: int, polarity: str) -> None:
    verdict = detect_feedback(text)
    assert verdict is not None and verdict.polarity == polarity
    assert verdict.verifier == {"passed": passed, "total": total}
    raw = verdict.raw(text, "the answer")
    assert raw["verifier"] == {"passed": passed, "total": total} and raw["assistantText"] == "the answer"
    # the service reads a top-level score/reward/passed as verifier evidence: raw must carry none of them
    assert not {"score", "reward", "passed", "total"} & set(raw)
