"""Verifier / user feedback detection in a user turn: is this message a verdict on the previous answer?

When a host (or a benchmark runner such as SkillFlow) sends "Verifier feedback: task failed, r = -1 …" or a
user types "不对，应该用 UTF-8", the service learns the most from it when it arrives as a structured
`feedback.submit` bound to the episode and the steps it judges, not as just another user turn. This module
decides *whether* a message is such a verdict, its polarity and its magnitude; the host adapters (the Hermes
provider, the Claude Code hooks) do the binding.

The reference adapter's markers fired on ordinary sentences (any "不是", any "wrong"), turning questions and
statements into strong negative rewards. The rules here trade a little recall for precision:

* **strong markers** anywhere: "verifier feedback", "本任务评为反例/正例", "验证反馈", an `r = x` reward with
  |x| ≤ 1 outside code (`r = requests.get(...)`, `r = 5` or "set r = 1" are not rewards);
* **labelled feedback**: the message *starts* with "Feedback:" / "反馈：" (not "please give me feedback");
* **conversational corrections / confirmations** only in the message's first sentence and anchored at its
  start ("不对，…", "That's wrong, …", "It works now"), never bare "不是" / "wrong" / "对了" (which means
  "by the way");
* on **every** path, the sentence that carries the evidence must not be a question: "What's wrong with
  this?", "错了吗？", "验证结果怎么看", "通过率 r = 0.6 的任务怎么优化" ask about verdicts, they are none;
* a marker or label without any outcome (no polarity word, no `r = x`, no count, no advice) is not a
  verdict either: "Verdict: explain how courts work" uses the word, it judges nothing;
* a "N/M passed" count becomes an objective verifier result (`raw.verifier = {passed, total}`), the evidence
  the service's reward prefers.

Magnitude: |r| when an `r = x` value is present (next to a word such as feedback / reward / passed / failed —
not "task", which every instruction mentions); else 1.0 for a verifier or labelled verdict with a clear
polarity, 0.8 for a conversational correction or confirmation (less certain), 0.6 for labelled advice without
an outcome ("反馈：下次不要…", negative).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Literal

Polarity = Literal["positive", "negative", "neutral"]
Source = Literal["verifier", "reward", "labelled", "correction", "confirmation"]

_CODE_FENCE = re.compile(r"```.*?(```|$)", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SPACE = re.compile(r"\s+")

_STRONG_MARKERS = re.compile(
    r"本任务评为(反例|正例)|评为(反例|正例)|验证反馈|验证结果|评测反馈|评测结果|校验反馈"
    r"|verifier (feedback|result|verdict|says|output)|verification (feedback|result|verdict)"
    r"|grader (feedback|result|verdict)|task (is )?rated as"
    r"|rated as an? (counterexample|positive example|negative example)"
)
_REWARD = re.compile(
    r"(?<![\w.\[\]()])(?:r|reward)\s*(==|=|:|≤|≥|<=|>=|<|>)\s*([+\-−]?\s*\d+(?:\.\d+)?)(?![\w.]*\()(?!\.\d)"
)
_LABELLED = re.compile(
    r"^[\[(（【]?\s*(?:(?:user |task |verifier |human |test )?feedback|verifier|grader|judge|verdict)"
    r"\s*[\])）】]?\s*[:：\-—]"
    r"|^[\[(（【]?\s*(?:用户反馈|反馈|评测|验证|判定)\s*[\])）】]?\s*[:：]"
)
# An `r = x` value alone is a reward only next to a word that says so ("the variance r = 0.3" is not one).
# "task" / "任务" are not such words: instructions name the task all the time ("The task: set r = 1 …").
_REWARD_CUE = re.compile(
    r"feedback|反馈|verifier|verdict|grader|reward|score|评分|评为|正例|反例|成功|失败|通过"
    r"|\b(?:pass|passed|fail|failed|failure|success|succeeded)\b"
)
# "set r = 1", "let reward = 0.5": an assignment the user asks for, not a reward given.
_ASSIGNMENT = re.compile(r"\b(?:set|let|assign|make|initiali[sz]e|define|change|update)\s+(?:r|reward)\s*=")
_ADVICE_WORDS = re.compile(
    r"不要|别再|避免|下次|应该|应当|改用"
    r"|\b(?:should|avoid|next time|instead|don'?t|do not|must)\b"
)
_FRACTION = re.compile(
    r"(?:passed|通过)\s*[:：]?\s*(\d+)\s*/\s*(\d+)"
    r"|(\d+)\s*/\s*(\d+)\s*(?:(?:tests?|checks?|cases?|assertions?|fields?)\s*)?(?:passed|pass|通过)"
    r"|(\d+)\s+(?:of|out of)\s+(\d+)\s+(?:tests?|checks?|cases?|assertions?|fields?)\s+passed"
)

# Conversational markers: matched at the start of the first sentence only.
_NEGATIVE_START = re.compile(
    r"^(?:嗯|呃|额|唉)?[，, ]*(?:不对|错了|你错了|这不对|这是错的|这样不对|不正确|不是这样|不是我要的|不是我想要的"
    r"|你(?:写|做|理解|搞|算)错了|(?:写|做|理解|搞|算)错了|答案不对|结果不对|输出不对)"
    r"|^(?:no|nope)?[,.!]?\s*(?:that'?s|that is|this is|it'?s|it is|you'?re|you are|your answer is|the answer is)\s+"
    r"(?:wrong|incorrect|not right|not correct|not what i (?:asked|wanted|meant))"
    r"|^(?:wrong|incorrect|nope)(?=[\s,.!:;]|$)|^you got (?:it|that) wrong"
)
_NEGATIVE_ANYWHERE = re.compile(r"你(?:写|做|理解|搞|算)错了|(?:答案|结果|输出)(?:不对|错了|不正确)")
_POSITIVE_START = re.compile(
    r"^(?:可以了|好了[，, ]*可以了|成功了|搞定了|没问题了|完全正确|做得好|太好了|回答正确)"
    r"|^(?:great|perfect|thanks|thank you)?[,.!]?\s*(?:that|it|this) "
    r"(?:worked|works(?: now)?|fixed it|is correct|is right)\b"
    r"|^(?:that'?s|this is) (?:correct|right|exactly right|perfect)\b|^(?:works now|it works now|well done|good job)\b"
)
_QUESTION_START = re.compile(
    r"^(?:what|why|how|is|are|was|were|do|does|did|can|could|should|would|where|which|who)\b|^(?:为什么|为何|怎么|哪里|是不是)"
)
# Chinese puts the interrogative inside the sentence ("验证结果怎么看", "这个任务如何优化").
_QUESTION_WORDS_ZH = re.compile(r"怎么|怎样|如何|为什么|为何|哪里|哪儿|哪个|哪些|是否|能否|可否|是不是|有没有")
# A sentence ends at ! ? 。 ！ ？ ; ； a line break, or a "." before a space — not the "." of 0.6 or answers.json.
_SENTENCE_END = re.compile(r"[!?。！？;；\n]|\.(?=\s|$)")

_NEGATIVE_WORDS = re.compile(
    r"反例|失败|未通过|不通过|没通过|没有通过|错误|不正确"
    r"|\b(?:fail|failed|fails|failure|failing|incorrect|wrong|rejected|negative|counterexample)\b"
    r"|did ?n[o']t pass|not passed|\bnot pass"
)
_POSITIVE_WORDS = re.compile(
    r"正例|成功|通过|正确"
    r"|\b(?:pass|passed|passes|success|successful|succeeded|correct|accepted|positive|solved)\b"
)


@dataclass(frozen=True)
class FeedbackVerdict:
    """A detected verdict: what `feedback.submit` will carry."""

    polarity: Polarity
    magnitude: float
    source: Source
    reward: float | None = None
    verifier: dict[str, int] | None = field(default=None)

    def raw(self, user_text: str, assistant_text: str | None = None, *, host: str = "hermes") -> dict[str, Any]:
        """The structured `raw` payload (a `{passed, total}` count goes under `verifier`); `host` names the
        adapter that detected it."""
        payload: dict[str, Any] = {
            "source": f"{host}.feedback_detector",
            "detector": self.source,
            "userText": user_text,
            "polarity": self.polarity,
        }
        if assistant_text is not None:
            payload["assistantText"] = assistant_text[:2000]
        if self.reward is not None:
            payload["r"] = self.reward
        if self.verifier is not None:
            payload["verifier"] = dict(self.verifier)
        return payload


def normalise(text: str) -> str:
    """NFKC (full-width → ASCII), code removed, whitespace collapsed, lower-cased."""
    text = unicodedata.normalize("NFKC", text)
    text = _CODE_FENCE.sub(" ", text)
    text = _INLINE_CODE.sub(" ", text)
    return _SPACE.sub(" ", text).strip().lower().replace("−", "-")


def _first_sentence(text: str) -> str:
    return _sentence_at(text, 0)


def _sentence_at(text: str, position: int) -> str:
    """The sentence of `text` that contains `position`, with its closing punctuation (a "?" stays visible)."""
    start = 0
    for end in _SENTENCE_END.finditer(text):
        if end.end() > position:
            return text[start : end.end()].strip()
        start = end.end()
    return text[start:].strip()


def _is_question(sentence: str) -> bool:
    stripped = sentence.rstrip(" .。")
    return (
        stripped.endswith(("?", "？", "吗", "么", "呢"))
        or bool(_QUESTION_START.match(stripped))
        or bool(_QUESTION_WORDS_ZH.search(stripped))
    )


def _reward(text: str) -> tuple[float, int] | None:
    """The first `r = x` with |x| ≤ 1 that is not an assignment, and where it is."""
    for match in _REWARD.finditer(text):
        value = float(match.group(2).replace(" ", ""))
        if -1.0 <= value <= 1.0 and not _ASSIGNMENT.search(text, max(0, match.start() - 20), match.end()):
            return value, match.start()
    return None


def _fraction(text: str) -> dict[str, int] | None:
    match = _FRACTION.search(text)
    if match is None:
        return None
    numbers = [int(group) for group in match.groups() if group is not None]
    passed, total = numbers[0], numbers[1]
    if total <= 0 or passed > total:
        return None
    return {"passed": passed, "total": total}


def _word_polarity(text: str) -> Polarity:
    if _NEGATIVE_WORDS.search(text):
        return "negative"  # checked first: "未通过", "3 passed, 2 failed" and "not passed" are failures
    if _POSITIVE_WORDS.search(text):
        return "positive"
    return "neutral"


def detect_feedback(text: str) -> FeedbackVerdict | None:
    """The verdict a user turn carries about the previous answer, or `None` for an ordinary message."""
    if not text or not text.strip():
        return None
    norm = normalise(text)
    if not norm:
        return None
    found = _reward(norm)
    if found is not None and not (_REWARD_CUE.search(norm) or re.search(r"\breward\s*[=:<>≤≥]", norm)):
        found = None
    strong = _STRONG_MARKERS.search(norm)
    labelled = bool(_LABELLED.match(norm))
    if strong or labelled or found is not None:
        # The evidence must sit in a statement: the label opens the first sentence, a marker or an r value
        # lies in its own sentence, and a question there asks about a verdict instead of giving one.
        where = 0 if labelled else (strong.start() if strong else found[1] if found else 0)
        if _is_question(_sentence_at(norm, where)):
            return None
        return _marked_verdict(norm, "verifier" if strong else ("labelled" if labelled else "reward"), found)
    first = _first_sentence(norm)
    if not first or _is_question(first):
        return None
    if _NEGATIVE_START.match(first) or _NEGATIVE_ANYWHERE.search(first):
        return FeedbackVerdict("negative", 0.8, "correction")
    if _POSITIVE_START.match(first):
        return FeedbackVerdict("positive", 0.8, "confirmation")
    return None


def _marked_verdict(norm: str, source: Source, found: tuple[float, int] | None) -> FeedbackVerdict | None:
    """The verdict of a message with a strong marker, a label or a reward: polarity and magnitude from the
    r value, else the test count, else the words; `None` when it states no outcome and no advice."""
    verifier = _fraction(norm)
    if found is not None:
        reward = found[0]
        if reward >= 0.5:
            polarity: Polarity = "positive"
        elif reward <= -0.5:
            polarity = "negative"
        else:
            polarity = "neutral"
        return FeedbackVerdict(polarity, round(min(abs(reward), 1.0), 3), source, reward, verifier)
    if verifier is not None:
        polarity = "positive" if verifier["passed"] == verifier["total"] else "negative"
        return FeedbackVerdict(polarity, 1.0, source, None, verifier)
    polarity = _word_polarity(norm)
    if polarity != "neutral":
        return FeedbackVerdict(polarity, 1.0, source)
    if _ADVICE_WORDS.search(norm):
        # Corrective advice without an outcome: a lesson from something that went wrong.
        return FeedbackVerdict("negative", 0.6, source)
    return None  # "Verdict: explain how courts work": the word, and nothing judged
