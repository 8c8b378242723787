"""Lesson sentences: which sentences of a feedback are the lesson, in the feedback's own words.

Feedback says many things at once — a verdict ("FAIL for vx-3"), this attempt's values ("expected 412.77, got
910"), praise ("the JSON layout is perfect"), and the lesson ("our length column is in inches, so multiply by
2.54 to get centimetres"). The lesson is what carries over to the next task, so it is kept as written (clipped,
never paraphrased by a template: a template can only say what its author foresaw), and everything else stays on
the feedback record. The classifier works on sentence structure in English and Chinese, not on any task's words:

* **convention** — a present-tense statement about how things are, with specific content: "X is in / stored in /
  reported in Y", "X means Y", "X are day-first", "X uses Y", "…的单位是…", "…是…", "…表示…";
* **instruction** — what to do: an imperative ("divide…", "convert…", "use…", "skip…"), or a cue ("always", "make
  sure", "remember to", "next time", "you need to", "要", "应该", "记住", "务必", "先…再…");
* **prohibition** — what not to do: "do not", "never", "avoid", "stop", "别", "不要", "禁止";
* **correction** — "not X but Y", "X, not Y", "instead of", "should be", "不是…而是…", "而不是", "应该是";
* **preference** — a stated taste: "I prefer", "我喜欢", "希望";
* **diagnosis** — what this attempt did wrong, with specifics ("you summed pounds as kilograms"): kept only when
  nothing actionable was said;
* **note** — a terse fragment with names, units or numbers ("weight=lb, ×0.4536"): kept only when nothing
  actionable was said;
* **praise**, **complaint**, **instance** — verdicts and this attempt's own content: never a lesson.

Each sentence is first stripped of instance content (`rules.instance.strip_instance`), so "it should come to
412.77 — our length column is in inches" keeps only its second half. Then `group_lessons` splits the lesson
sentences by subject (`rules.subjects`): feedback that teaches two conventions gives two lessons, and a sentence
without a subject of its own ("Multiply by 0.4536.") continues the one before.

Pure.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from memos_bridge.rules.instance import InstanceContext, has_content, number_role, strip_instance
from memos_bridge.rules.kinds import kinds_differ, kinds_meet, rule_kinds
from memos_bridge.rules.subjects import Number, Subject, identifiers, number_key, numbers, subject_of, units
from memos_bridge.rules.text import CJK_CHARS, clip, squash
from memos_bridge.rules.tokens import STOPWORDS, content_tokens
from memos_bridge.rules.verbs import STATE_LEMMAS, VERBS, has_verb

Role = Literal[
    "convention",
    "instruction",
    "prohibition",
    "correction",
    "preference",
    "diagnosis",
    "note",
    "praise",
    "complaint",
    "instance",
    "other",
]
#: Roles whose sentences are a lesson on their own.
ACTIONABLE: Final[frozenset[str]] = frozenset({"convention", "instruction", "prohibition", "correction", "preference"})
#: Roles kept as the lesson only when a feedback has nothing actionable.
FALLBACK: Final[frozenset[str]] = frozenset({"diagnosis", "note"})
#: How far the reading of a role can be trusted (the experience's confidence starts there).
ROLE_CONFIDENCE: Final[dict[str, float]] = {
    "convention": 0.8,
    "correction": 0.8,
    "prohibition": 0.8,
    "preference": 0.75,
    "instruction": 0.7,
    "note": 0.55,
    "diagnosis": 0.45,
}
#: Characters of one lesson line.
LINE_CHARS: Final = 360

#: Words that may open an instruction before its verb ("please use…", "so divide…", "just skip…").
_LEAD_IN: Final = frozenset("please also so then just and but instead first simply now always kindly".split())

_PREFERENCE: Final = re.compile(
    r"\b(?:i|we)\s+(?:would\s+|'d\s+|really\s+|much\s+)?(?:prefer|like|want|expect)\b|\bmy\s+preference\b|"
    r"\bprefer(?:ably|red)?\b|偏好|喜欢|希望|我想要|我们想要|更倾向",
    re.IGNORECASE,
)
_PROHIBITION: Final = re.compile(
    r"\b(?:do\s+not|don'?t|never|avoid|stop|no\s+longer|must\s+not|mustn'?t|should\s+not|shouldn'?t|"
    r"(?:^|you\s+)(?:cannot|can'?t|may\s+not)|not\s+allowed|forbidden|not\s+permitted)\b|不要|不用|别再|(?<![区特分个级类识告性派])别(?![的人处])|不能|禁止|"
    r"避免|切勿|不可|不应|(?<![切])勿|不许|不得|千万别",
    re.IGNORECASE,
)
_CORRECTION: Final = re.compile(
    r"\bnot\s+[^,.;]{1,60}?\bbut\b|,\s*not\s+\S|\binstead\s+of\b|\brather\s+than\b|\bshould\s+(?:have\s+)?be(?:en)?\b|"
    r"\bis\s+wrong\b.{0,20}\bit'?s\b|\bexpected\b.{1,120}?\bgot\b|不是.{1,40}?而是|而不是|应该是|应为|应是|改成|改为|"
    r"换成|才对|才是",
    re.IGNORECASE,
)
_INSTRUCTION_CUE: Final = re.compile(
    r"\b(?:(?<!\bas\s)always|make\s+sure|ensure|remember\s+(?:to|that)|next\s+time|from\s+now\s+on|going\s+forward|"
    r"in\s+(?:the\s+)?future|be\s+sure|needs?\s+to|has\s+to|have\s+to|must|should|first\b.{1,80}\bthen)\b|"
    r"(?<![重主只需想概])要(?![求素点是])|应该|应当|必须|需要|记住|记得|务必|一定要|下次|以后|今后|统一|一律|始终|总是|"
    r"先.{1,30}再",
    re.IGNORECASE,
)
_IMPERATIVE_ZH: Final = re.compile(
    r"^(?:请|先|再|务必|记得|一定要|要|需要|必须|应该|然后)?(?:用|使用|把|将|按|按照|乘以|除以|换算|转换|折算|跳过|排除|去掉|去除|剔除|"
    r"忽略|保留|加上|加|减去|减|改用|改成|统一|只|仅|读|解析|计算|统计|转成|换成|带上|指定|设置|传|填|补|四舍五入)"
)
#: A present-tense copula or state verb: what a convention says ("are in", "is stored", "means").
_STATE: Final = re.compile(
    r"\b(?:is|are|means|uses|use|holds|hold|contains|contain|stores|store|stored|records|recorded|reports|"
    r"reported|written|given|expressed|encoded|measured|counted|denominated|formatted|listed|kept|starts|begins|"
    r"ends|counts|excludes|exclude|includes|include|refers|represents|represent|indicates|stands\s+for|comes|come|"
    r"arrive|arrives|follows|follow|lives|sits|runs|applies|apply|needs|require|requires|expects|"
    r"goes|go|belongs|belong|lists|shows|appears|appear|carries|carry|returns|return)\b|"
    r"的单位|单位[是为]|以.{1,8}为单位|表示|代表|指的是|就是|是|为|用的是|采用|存的是|记的是|写的是|都用|都按|按.{1,10}(?:记录|存储|计)",
    re.IGNORECASE,
)
_PAST: Final = re.compile(
    r"\b(?:was|were|had|did|didn'?t|wasn'?t|weren'?t|you\s+\w+ed|you\s+(?:took|read|put|left|forgot|gave|wrote|"
    r"made|got|ran|kept|sent|brought))\b|你(?:把|用|算|当|写|漏|忘|拿)|算成了|写成了|当成了|漏掉了",
    re.IGNORECASE,
)
_PRAISE: Final = re.compile(
    r"\b(?:thanks?|thank\s+you|perfect|great|good|nice|fine|clean|correct(?:ly)?|excellent|awesome|helpful|clear|"
    r"solid|neat|well\s+done|lovely|spot[\s-]on|fantastic|brilliant|appreciated?|love|cheers|right|works?|worked|"
    r"passe[sd]|ok(?:ay)?)\b|不错|很好|完美|正确|谢谢|辛苦|棒|好的|挺好|没问题|可以",
    re.IGNORECASE,
)
#: A verdict on the attempt itself ("That won't run", "tw rejects it", "Bad news: …"): not a lesson.
_ATTEMPT_VERDICT: Final = re.compile(
    # a checker's heading: "row-count check failed", "FAIL sums test", "total validation did not pass"
    r"^\W*(?:[\w./-]+[\s-]){0,4}?(?:check|test|validation|verification|assertion)s?\s+(?:failed|fails|did\s+not\s+"
    r"pass|didn'?t\s+pass)\b|^\W*FAIL(?:ED|URE)?\b|"
    r"\b(?:won'?t|doesn'?t|didn'?t|can'?t)\s+(?:run|work|compile|parse|load|match|pass|start)\b|"
    r"\b(?:rejects?|rejected|refuses?|refused|fails?|failed|breaks?|broke|crash(?:es|ed)?)\s+(?:it|this|that|them|"
    r"the\s+(?:command|call|request|answer|output|file|line|query))\b|^\W*(?:good|bad)\s+news\b",
    re.IGNORECASE,
)
_COMPLAINT: Final = re.compile(
    r"\b(?:won'?t|doesn'?t|didn'?t|can'?t)\s+(?:run|work|compile|parse|load|match|pass|start)\b|"
    r"\b(?:wrong|incorrect(?:ly)?|off|bad|broken|failed|fails?|mistakes?|bug(?:gy)?|missing|missed|not\s+right|"
    r"not\s+correct|sloppy|mismatch(?:ed)?)\b|不对|错了|错误|不正确|有误|失败|不行|缺少|漏了|不匹配",
    re.IGNORECASE,
)
#: After a copula, these make the statement an evaluation ("the layout is perfect", "the total is wrong").
_EVALUATIVE_PREDICATE: Final = re.compile(
    r"\b(?:is|are|was|were|looks?|looked|seems?|seemed|feels?|came\s+out)\s+(?:\w+\s+){0,2}?(?:perfect|great|good|"
    r"nice|fine|clean|correct|right|excellent|awesome|helpful|clear|solid|neat|wrong|incorrect|off|bad|broken|close|"
    r"ok|okay|spot[\s-]on|better|worse|much\s+better|plausible|reasonable|small|large|big|low|high|short|long|"
    r"too\s+\w+|way\s+\w+|a\s+bit\s+\w+|messy|tidy|neat|clean|helpful|useful|"
    r"what\s+i\s+(?:asked|wanted|expected|needed))\b|"
    # agreeing with the judge is a verdict too ("answers.json matches the verifier", "与预期一致")
    r"\b(?:match(?:es|ed)?|agrees?\s+with|(?:is|are)\s+identical\s+to)\s+(?:\w+\s+){0,2}?(?:the\s+)?(?:verifier|"
    r"expected|expectations?|reference|oracle|answer\s+key|checks?|tests?)\b|与预期一致|和预期一致|符合预期|与期望一致",
    re.IGNORECASE,
)


_QUESTION: Final = re.compile(r"[?？]\s*$")


def is_question(text: str) -> bool:
    """Whether a sentence asks ("Under a gram per parcel?"): a hint to look again, no rule of its own."""
    return bool(_QUESTION.search(text))


#: A checker's heading before what it found ("row-count check failed: …", "FAIL totals: …").
_VERDICT_HEADING: Final = re.compile(
    r"^\W*(?:(?:[\w./-]+[\s-]){0,4}?(?:check|test|validation|verification|assertion)s?\s+(?:failed|fails|did\s+not\s+"
    r"pass|didn'?t\s+pass)|(?:[\w-]+\s+){0,2}(?:FAIL(?:ED|URE)?|mismatch)\b[^:：]{0,60})\s*[:：—–,-]\s*|"
    r"^\s*\[[^\]\n]{1,40}\]\s*",  # a checker's tag: "[totals-check] …"
    re.IGNORECASE,
)
#: A checker's report of this task's values: "route=AB-3 count=12 -> PASS", "total: 41.5 => FAIL".
_CHECK_REPORT: Final = re.compile(
    r"(?:->|=>|→|\.{2,}|…)\s*(?:FAIL(?:ED)?|PASS(?:ED)?|OK|ERROR)\b|\b\w+=\S+\s+\w+=\S+", re.IGNORECASE
)
#: A checker's dot leader before its status ("totals ... FAILED."): one line of its report, not a sentence end.
_DOT_LEADER: Final = re.compile(r"(?:\.{2,}|…)\s*(?=(?:FAIL(?:ED)?|PASS(?:ED)?|OK|ERROR)\b)")
#: Nothing but the value the checker wanted ("Expected AB-12.", "should be 41.5", "应该是 41.5"): this task's answer.
#: One of this task's values as a checker writes it: a number, a token with a digit, an upper-case code.
_VALUE: Final = r"(?:\d[\d.,]*|[^\s,;.。]*\d[^\s,;。]*|[A-Z][A-Z0-9-]+)"
_VALUES: Final = rf"{_VALUE}(?:\s+(?:(?:at|in|on|for|of|and|/)\s+)?{_VALUE}){{0,3}}"
_EXPECTED_ONLY: Final = re.compile(
    r"^\W*(?:expected|wanted|want|should\s+(?:be|have\s+been|read)|the\s+(?:right|correct)\s+(?:answer|value)\s+is|"
    rf"应该是|应为|正确的?是)\s*[:：]?\s*{_VALUES}\s*[.。!！]?\s*$|"
    # a checker's comparison of this task's values ("order K-1 != K-7", "got AB-12, expected ZQ-9", "expected
    # AB-1, got AB-2; gate: expected G-1, got G-4")
    r"^\W*(?:[\w-]+\s+){0,2}[^\s,;]+\s*(?:!=|≠|<>)\s*[^\s,;]+(?:\s*[,;]\s*(?:[\w-]+\s+){0,2}[^\s,;]+\s*(?:!=|≠|<>)\s*"
    r"[^\s,;]+)*\s*[.。]?\s*$|"
    rf"^\W*(?:(?:[\w-]+\s*:\s*)?(?:expected\s+{_VALUES},\s*got|got\s+{_VALUES},\s*expected)\s+{_VALUES}\s*[,;]?\s*)+"
    r"[.。]?\s*$",
    re.IGNORECASE,
)
#: A verdict that agrees with something the reader can check ("That matches the warehouse's own count", "It adds up").
_AGREES: Final = re.compile(
    r"^\W*(?:that|this|it|which)\s+(?:now\s+)?(?:matches|tallies|agrees|lines\s+up|checks\s+out|adds\s+up)\b",
    re.IGNORECASE,
)
#: A statement whose subject points at this attempt's things ("Those crates…", "That figure…", "These rows…").
_DEMONSTRATIVE_HEAD: Final = re.compile(r"^\W*(?:that|this|these|those)\s+[a-z]+", re.IGNORECASE)
#: A closing clause that tells what this attempt's answer becomes ("… and a different depot comes top", "… and
#: you'll land on another row", "… and the rate falls to half"): this task's outcome, not the rule.
_CONSEQUENCE: Final = re.compile(
    r",?\s+and\s+(?:then\s+)?(?:you'?ll|you\s+will|it'?ll|it\s+will|you\s+get|(?:a|an)\s+(?:different|other)\s+"
    r"[\w-]+(?:\s+[\w-]+)?\s+(?:comes?|wins?|ends?\s+up|lands?)|the\s+[\w-]+(?:\s+[\w-]+)?\s+(?:drops?|rises?|falls?|"
    r"goes\s+(?:up|down)|comes?\s+(?:out|to)|changes?))\b[^.;!?]*(?=[.!?]?\s*$)",
    re.IGNORECASE,
)
#: A closing clause that states what a computation comes to, a value or a name and nothing after it ("Summing the
#: real rows gives 4,120.", "…, which puts Ashgrove Court first.", "…, so the last lorry left at 17:05."): the
#: expected answer of this task, not a rule.
#: (A code in capitals, "gives JST", is a zone, a currency or a unit a rule names, and stays.)
_RESULT_VALUE: Final = r"(?:-?\d[\d.,]*%?|[^\s,;.。]*\d[^\s,;。]*|(?:the\s+)?[A-Z][a-z][\w'-]*(?:\s+[A-Z][\w'-]*){0,3})"
_RESULT: Final = re.compile(
    r",?\s+(?:and\s+)?(?:(?:which|that|this)\s+)?(?:(?:gives?|yields?|comes?\s+(?:out\s+)?(?:to|as|at)|works?\s+out\s+"
    r"(?:to|as|at)|lands?\s+(?:on|at)|results?\s+in)\s+|(?<=and\s)(?:the\s+|its\s+|your\s+)?(?:[\w-]+\s+){0,2}?"
    r"(?:averages?|totals?|sums?\s+to|comes?\s+to|becomes?|is|are)\s+)(?:about\s+|roughly\s+|around\s+|exactly\s+|"
    rf"just\s+)?(?P<what>{_RESULT_VALUE})(?:,\s*(?:which|that)\b[^.!?。]*)?\s*[.!。]?\s*$|"
    rf",?\s+(?:(?:which|that|this)\s+)?puts?\s+(?P<first>{_RESULT_VALUE})\s+(?:first|on\s+top|ahead)\s*[.!。]?\s*$|"
    # "…, so the last lorry left at 17:05 local": what happened in this task's data, told in the past tense
    r",?\s+so\s+(?:the|a|an|your|its|their)\s+(?:[\w'-]+\s+){0,4}?(?:was|were|came(?:\s+in)?|went|left|finished|"
    r"arrived|ended|started|closed|opened|reached|hit|fell|rose|got|had)\s+(?:in\s+|at\s+|on\s+|to\s+|by\s+)?"
    rf"(?:about\s+|around\s+|roughly\s+|exactly\s+|just\s+)?(?P<past>{_RESULT_VALUE})(?:\s+[a-z]+)?\s*[.!。]?\s*$"
)
#: A sentence whose subject is the agent ("You summed…", "Your total…", "你把…"): about this attempt.
_ABOUT_ATTEMPT: Final = re.compile(
    r"^(?:\W*(?:but|and|so|also|still|however|though|yet|then)\W+)*(?:you|your|you've|you're|你|你的)(?![a-z])",
    re.IGNORECASE,
)
#: A sentence that opens by thanking or praising, with no "but/however" turning it into a correction.
_PRAISE_OPENING: Final = re.compile(
    r"^\W*(?:thanks?|thank\s+you|cheers|great|good|nice|perfect|excellent|awesome|well\s+done|lovely|fantastic|"
    r"brilliant|appreciated?|glad|happy|love|ok(?:ay)?|right|correct|yes|yep|sure|谢谢|多谢|辛苦|很好|不错|完美|好的|棒)\b",
    re.IGNORECASE,
)
_CONTRASTED_REST: Final = re.compile(
    r"\b(?:but|however|though|although|except|yet|still|unfortunately)\b|但是|但|不过|可是|然而|只是", re.IGNORECASE
)
#: A sentence that opens by pointing back ("It…", "So…", "This means…"): it continues the lesson before it.
_CONTINUES: Final = re.compile(
    r"^(?:it|its|it's|they|them|this|that|these|those|so|then|thus|therefore|hence|which|i\.e\.|that\s+is|"
    r"in\s+other\s+words|otherwise|else)\b|^(?:它|它们|这|这些|那|所以|因此|然后|也就是|否则)",
    re.IGNORECASE,
)
#: A sentence whose first words refer back to the one before ("Look them up…", "Convert it…", "Those are…").
_POINTS_BACK: Final = re.compile(
    r"^\W*(?:\S+\s+){0,2}?(?:them|those|these|it|they|this|that|such|its|their)\b|^\W*(?:它|它们|这些|这|那些|那)",
    re.IGNORECASE,
)
#: Words that carry a cue, a verdict or praise, not content: a lesson needs specific words beyond these.
CUE_WORDS: Final = frozenset(
    """next time future forward always never avoid stop instead should must need needs expected actual actually
    correct correctly wrong incorrect incorrectly right try again retry redo good great perfect works work worked
    passed pass passes success successful successfully succeeded fix fixed make sure ensure remember prefer
    preference like answer result output response thanks thank please job done well exactly matched matches
    handled broken failed fail fails mistake mistakes bug buggy missing missed nice awesome ok okay yes no task
    attempt rather don dont also note looks look fine clean""".split()
)
_ZH_CUES: Final = re.compile(
    "不正确|没通过|未通过|不成功|没成功|不要|别再|不能|禁止|避免|切勿|不可|不应|应该|应当|应为|应是|必须|需要|务必|"
    "改成|改为|换成|期望|实际|而不是|正确的|下次|以后|今后|记得|记住|一定要|偏好|喜欢|希望|我想要|正确|成功|通过|对了|"
    "很好|没错|不对|错了|错误|有误|失败|不行|缺少|漏了|再试试|再试|重试|重新|谢谢|辛苦|不错|完美|别"
)
#: Sentence ends: [.!?] before whitespace (not inside a number or a file name, not after an abbreviation), Chinese
#: full stops always, and line breaks.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*|\n+")
_ABBREVIATION: Final = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|cf|approx|no|nr|mr|mrs|ms|dr|fig|ca|incl|excl)\.|(?:^|(?<=[\s(.]))[A-Z]\.)$", re.I
)


def sentences(text: str) -> list[str]:
    """The sentences of `text`, squashed, empty ones dropped; "e.g." and "0.4536" do not end a sentence."""
    out: list[str] = []
    pending = ""
    for piece in _SENTENCE_END.split(_DOT_LEADER.sub("… ", text or "")):
        if not piece or not piece.strip():
            continue
        pending = f"{pending} {piece}" if pending else piece
        if _ABBREVIATION.search(pending.rstrip()):
            continue
        sentence = squash(pending)
        pending = ""
        if sentence.strip(" .;:!?。；：！？-—"):
            out.append(sentence)
    if pending and squash(pending).strip(" .;:!?。；：！？-—"):
        out.append(squash(pending))
    return out


#: What a person puts before a lesson that is not the lesson: an interjection or a verdict word ("Close, but",
#: "Almost there though:", "Hmm —"), a counted lead-in ("One problem though:", "Two things:", "有个问题："), a
#: reminder of earlier feedback ("Same issue as before —", "Again:", "再说一遍："), an ordinal ("Second,", "第二，").
_WRAPPER: Final = re.compile(
    r"^\W*(?:(?:close|almost|nearly|not\s+quite|so\s+close|good|great|nice|thanks|thank\s+you|ok(?:ay)?|hmm+|right|"
    r"yes|no|nope|sorry|well|oh|ah|alright|careful|whoa|wait|also|plus|and|but|however|though|still|btw|"
    r"by\s+the\s+way|note|hint|tip|fyi|ps|reminder|heads\s+up|reason|cause|why)(?:\s+there)?(?:\s+though)?(?:\s*,\s*but)?"
    r"\s*[,!.:：—–-]+\s*|(?:(?:one|a|another|two|three|several|a\s+couple\s+of|my\s+only|only\s+one|the\s+only)\s+)?"
    r"(?:(?:small|minor|tiny|little|last|other|more|big|real)\s+)?(?:problem|issue|thing|catch|note|nit|point|detail|"
    r"correction|fix|mistake|gotcha)s?(?:\s+(?:though|however|here|left|remains))?\s*[:：,—–-]+\s*|"
    r"same\s+(?:problem|thing|issue|mistake|story)\s+as\s+(?:before|last\s+time|earlier)\s*[,:：—–-]+\s*|"
    r"(?:as\s+i\s+said(?:\s+(?:before|earlier))?|like\s+i\s+said|once\s+more|again|to\s+repeat|"
    r"i(?:'ll|\s+will)\s+say\s+it\s+again)\s*[,:：—–-]+\s*|"
    r"(?:first(?:ly)?|second(?:ly)?|third(?:ly)?|finally|lastly|also|and\s+also)\s*[,:]\s+)+|"
    r"^(?:(?:不过|但是|但|另外|还有|而且|首先|其次|第[一二三四]|最后|注意|提醒一下|有(?:个|一个|两个|几个)问题|"
    r"[两几一]个问题|问题是|还是|又|对了|(?:我)?再说一(?:遍|次)|再强调一(?:遍|次)|再次提醒|(?:我)?(?:之前|上次)(?:也)?说过)"
    r"[，,：:、]?\s*)+",
    re.IGNORECASE,
)
#: A conjunction left at the head once the wrapper is gone ("…, but the export is in UTC").
_HEAD_CONJUNCTION: Final = re.compile(r"^(?:but|however|though|and|also|plus|so)\b,?\s+(?=\S)", re.IGNORECASE)


def wrapper_only(text: str) -> bool:
    """Whether a sentence is nothing but a wrapper ("One problem though.", "Two things:", "不过，")."""
    stripped = text.strip().rstrip(".!:：。！")
    return bool(stripped) and not _WRAPPER.sub("", stripped + ":", count=1).strip(" .:：")


def unwrap(text: str) -> str:
    """A lesson line without the words a person put before it (`_WRAPPER`): "Close, but the export is in UTC." is
    "The export is in UTC." A line that is nothing but a wrapper stays as it is."""
    stripped = _WRAPPER.sub("", text, count=1).strip()
    stripped = _HEAD_CONJUNCTION.sub("", stripped, count=1).strip()
    if not stripped or len(stripped) < 3 or stripped == text.strip():
        return text.strip()
    return stripped[:1].upper() + stripped[1:] if stripped[:1].islower() and text.strip()[:1].isupper() else stripped


def specific_tokens(text: str) -> list[str]:
    """Content words of `text` that are not cue words (CJK cue phrases removed before the bigrams)."""
    stripped = _ZH_CUES.sub(" ", text)
    return [t for t in content_tokens(stripped) if t not in CUE_WORDS and t not in STOPWORDS]


def _opens_with_imperative(clause: str) -> bool:
    """Whether a clause starts with an imperative verb (after lead-in words such as "please", "so", "just")."""
    text = clause.strip(" \t`'\"“”-—–•*")
    if _IMPERATIVE_ZH.match(text):
        return True
    words = [w.strip(".,;:()[]\"'`").lower() for w in text.split()[:6]]
    while words and words[0] in _LEAD_IN:
        words.pop(0)
    if not words:
        return False
    head = words[0].rsplit("-", 1)[-1]  # "zero-pad", "double-check", "re-run": the verb is the last part
    return head in VERBS and (len(words) == 1 or words[1] not in ("is", "are", "was", "were"))


_CLAUSE_START: Final = re.compile(r"(?:^|[;；,，:：—–(（]\s*|\s[-—–]\s|\b(?:and|then|so|but)\s+)")


def _has_imperative_clause(text: str) -> bool:
    return any(_opens_with_imperative(text[m.end() :]) for m in _CLAUSE_START.finditer(text))


def _present_verb(text: str) -> bool:
    """A third-person present verb of a known lemma after another word ("the API gives", "the log records")."""
    words = [w.strip(".,;:()[]\"'`").lower() for w in text.split()]
    for previous, word in itertools.pairwise(words):
        if previous in ("to", "you", "i", "we", "they") or len(word) < 4 or not word.endswith("s"):
            continue
        if word[:-1] in STATE_LEMMAS or word[:-2] in STATE_LEMMAS or word[:-1] in VERBS or word[:-2] in VERBS:
            return True
    return False


def _is_statement(text: str) -> bool:
    """A present-tense statement with specific content: the shape of a convention."""
    if not (_STATE.search(text) or _present_verb(text)) or _EVALUATIVE_PREDICATE.search(text):
        return False
    if re.search(f"[{CJK_CHARS}]", text):
        return len(specific_tokens(text)) >= 2
    if re.search(r"\b(?:was|were|had|did)\b", text, re.IGNORECASE) and not re.search(
        r"\b(?:is|are|means|uses)\b", text, re.IGNORECASE
    ):
        return False  # about what happened once, not how things are
    return len(specific_tokens(text)) >= 2 or bool(identifiers(text) or units(text))


_PART_SPLIT: Final = re.compile(r"\s*[;；]\s*|\s+[—–]\s+")
#: When a sentence's parts say different things, the most actionable part decides (first in this order).
_ROLE_ORDER: Final[tuple[str, ...]] = (
    "preference",
    "prohibition",
    "correction",
    "instruction",
    "convention",
    "diagnosis",
    "note",
    "complaint",
    "praise",
    "other",
    "instance",
)


def role_of(text: str, context: InstanceContext | None = None) -> Role:
    """The role of one sentence whose instance content is already removed (module docstring). A sentence in parts
    ("Parcels without the flag were counted as domestic; the feed leaves the flag out when the default route
    applies") takes the most actionable role among its parts: the lesson is in the second half."""
    parts = [part for part in _PART_SPLIT.split(text) if part.strip()]
    whole = _role_of(text, context)
    if len(parts) < 2:
        return whole
    roles = [whole, *(_role_of(part, context) for part in parts)]
    return min(roles, key=_ROLE_ORDER.index)


def _role_of(text: str, context: InstanceContext | None = None) -> Role:
    context = context or InstanceContext()
    if not text.strip() or not has_content(text, context):
        if _COMPLAINT.search(text):
            return "complaint"
        return "praise" if _PRAISE.search(text) else "instance"
    specific = len(specific_tokens(text))
    named = bool(identifiers(text) or units(text))
    if specific == 0 and not named:
        if _COMPLAINT.search(text):
            return "complaint"
        return "praise" if _PRAISE.search(text) else "other"
    if _ATTEMPT_VERDICT.search(text) and not (
        _INSTRUCTION_CUE.search(text) or _PROHIBITION.search(text) or _CORRECTION.search(text)
    ):
        return "complaint"
    if _PRAISE_OPENING.match(text) and not (
        _CONTRASTED_REST.search(text) or _INSTRUCTION_CUE.search(text) or _PROHIBITION.search(text)
    ):
        return "praise"  # "Great, the layout is just what I wanted", "Thanks for taking this on — …"
    if specific + sum(t.count("-") for t in specific_tokens(text)) < 2 and not named:
        return "other"  # "Leave them out.", "Skip it.": a verb and a pronoun say nothing on their own
    if _EXPECTED_ONLY.match(text) or (_CHECK_REPORT.search(text) and not rule_kinds(text)):
        return "instance"  # "Expected AB-12.": the answer this task wanted, nothing to carry over
    if is_question(text) and not (_INSTRUCTION_CUE.search(text) or _PROHIBITION.search(text)):
        return "note"  # "Under a gram per parcel?": a hint to look again, no rule of its own
    if _AGREES.match(text):
        return "praise"  # "That matches the warehouse's own count.": a verdict that agrees
    if _PREFERENCE.search(text):
        return "preference"
    if _PROHIBITION.search(text):
        return "prohibition"
    if _CORRECTION.search(text):
        return "correction"
    if _INSTRUCTION_CUE.search(text) or _has_imperative_clause(text):
        return "instruction"
    if _is_statement(text) and not _ABOUT_ATTEMPT.match(text):
        if text.rstrip().endswith(("!", "！")) and not _PROHIBITION.search(text):
            return "complaint"  # "Ninety thousand pallets is a lot for one depot!": a reaction, not a rule
        if _DEMONSTRATIVE_HEAD.match(text) and not named and not rule_kinds(text):
            return "note"  # "Those crates hold six or seven.": what this attempt's rows are, no rule
        return "convention"
    if _ABOUT_ATTEMPT.match(text) and (specific >= 2 or named) and not _EVALUATIVE_PREDICATE.search(text):
        return "diagnosis"
    if _PAST.search(text) and (specific >= 2 or named) and not _EVALUATIVE_PREDICATE.search(text):
        return "diagnosis"
    if _EVALUATIVE_PREDICATE.search(text) or (_PRAISE.search(text) and specific <= 2 and not named):
        return "complaint" if _COMPLAINT.search(text) else "praise"
    if _COMPLAINT.search(text) and specific < 2 and not named:
        return "complaint"
    if named or specific >= 2:
        return "note"
    return "other"


@dataclass(frozen=True)
class LessonLine:
    """One sentence of a feedback as read: its lesson text (instance content removed), its role and subject."""

    text: str
    role: Role
    source: str  # the sentence as written
    subject: Subject = field(default_factory=Subject)
    removed: tuple[str, ...] = ()
    #: the roles of its parts ("Do not force-push: open a PR instead" is a prohibition with an instruction)
    part_roles: frozenset[str] = frozenset()

    @property
    def actionable(self) -> bool:
        return self.role in ACTIONABLE

    @property
    def says_what_to_do(self) -> bool:
        """Whether it says what holds or what to do, not only what not to do."""
        return bool({self.role, *self.part_roles} & {"convention", "instruction", "correction"})


@dataclass(frozen=True)
class Reading:
    """Every sentence of one feedback, read."""

    lines: tuple[LessonLine, ...]

    @property
    def lessons(self) -> list[LessonLine]:
        """The lesson: the actionable sentences, in order, each with the sentence before it when it points back
        to it ("You skipped every OLD- code… Look them up in the map"); else the diagnoses and notes."""
        out: list[LessonLine] = []
        for index, line in enumerate(self.lines):
            if not line.actionable:
                continue
            before = self.lines[index - 1] if index else None
            if before is not None and before.role in FALLBACK and _POINTS_BACK.match(line.text) and before not in out:
                out.append(before)
            out.append(line)
        if out:
            return out
        return [line for line in self.lines if line.role in FALLBACK]

    @property
    def praise(self) -> list[LessonLine]:
        """Praise that says what was right ("the parser handled every holding"): what a success confirms."""
        return [line for line in self.lines if line.role == "praise" and len(specific_tokens(line.text)) >= 2]

    @property
    def instance(self) -> list[str]:
        """What was taken out as this attempt's content (verdicts and values), for the record."""
        out = [line.source for line in self.lines if line.role == "instance"]
        out += [phrase for line in self.lines if line.role != "instance" for phrase in line.removed]
        return list(dict.fromkeys(out))

    def has(self, *roles: str) -> bool:
        return any(line.role in roles for line in self.lines)

    @property
    def confidence(self) -> float:
        """How far the lesson can be trusted: its strongest role, a little more when several roles agree."""
        roles = {line.role for line in self.lessons}
        if not roles:
            return 0.2 if not self.has("praise", "complaint") else 0.4
        best = max(ROLE_CONFIDENCE.get(role, 0.2) for role in roles)
        return round(min(0.95, best + 0.05 * max(0, len(roles & ACTIONABLE) - 1)), 4)


def read_feedback(text: str, context: InstanceContext | None = None) -> Reading:
    """Read every sentence of `text` (module docstring); `context` is what is known of this attempt."""
    context = context or InstanceContext()
    lines: list[LessonLine] = []
    previous = ""
    for whole in sentences(text):
        for sentence in _with_cause(whole, context):
            lines.append(_with_referent(_read_sentence(sentence, context), previous, context))
            previous = sentence
    return Reading(tuple(lines))


#: A lesson that opens by pointing at a value ("That value is what the meter logs whenever…", "这个值…").
_VALUE_REFERENT: Final = re.compile(
    r"^\W*(?:that|this|the|such\s+an?)\s+(?:number|value|code|reading|figure|marker|sentinel)\b|^\W*(?:这个|那个)(?:数|值|代码|读数)",
    re.IGNORECASE,
)


def _with_referent(line: LessonLine, previous: str, context: InstanceContext) -> LessonLine:
    """A lesson that points at "that number" says which: the one value of the data the sentence before named
    ("… rows showing 8888.8. That number is what the meter writes when…" reads "That number (8888.8) is …"), so
    the rule keeps its value when the sentence before, about this attempt, is left out."""
    match = _VALUE_REFERENT.match(line.text) if line.text else None
    if match is None or numbers(line.text):
        return line
    data_values = [n for n in numbers(previous) if number_role(previous, n, context) == "protected"]
    if len({n.value for n in data_values}) != 1:
        return line
    value = data_values[0]
    text = f"{line.text[: match.end()]} ({value.text}){line.text[match.end() :]}"
    return replace(line, text=text, subject=subject_of(text, (*_kept_numbers(line), value)))


def _kept_numbers(line: LessonLine) -> tuple[Number, ...]:
    """The numbers a lesson line keeps as its rule's parameters (those its subject records)."""
    return tuple(n for n in numbers(line.text) if number_key(n.value) in line.subject.numbers)


#: "… didn't line up because the depot trims trailing spaces", "…不对，因为导出文件的重量是磅".
_CAUSE: Final = re.compile(r"\b(?:because|since|due\s+to\s+the\s+fact\s+that)\s+|(?:因为|由于)", re.IGNORECASE)


#: "You read the raw values, but the meter logs tenths", "你直接加了，但是重量是磅".
_CONTRAST: Final = re.compile(r",?\s+but\s+|[，,]\s*(?:但是|但|可是|不过)", re.IGNORECASE)


def _with_cause(sentence: str, context: InstanceContext) -> list[str]:
    """A verdict that gives its cause is two sentences: the verdict, and the cause, which may be the lesson
    ("A third of the rows didn't line up because the depot trims trailing spaces"); so is an account of the attempt
    turned by "but" ("You took the raw clock values, but the clock runs on UTC")."""
    match = _CAUSE.search(sentence)
    if match is None:
        match = _CONTRAST.search(sentence)
        if match is not None and _POINTS_BACK.match(sentence[match.end() :]):
            return [sentence]  # "…, but those lines are genuine orders": the rest needs the attempt it points back to
    if match is None or match.start() == 0:
        return [sentence]
    head, cause = sentence[: match.start()].rstrip(" ,，"), sentence[match.end() :].strip()
    if (
        role_of(head, context) not in ("complaint", "diagnosis")
        or not has_verb(cause)
        or len(specific_tokens(cause)) < 2
    ):
        return [sentence]
    ending = "。" if re.search(f"[{CJK_CHARS}]", cause[-1:]) else "."
    if not re.search(f"[{CJK_CHARS}]", cause) and re.match(r"[a-z]+\b(?![_.-]\w)", cause):
        cause = cause[:1].upper() + cause[1:]  # a sentence of its own; a field name (`weight_kg`, 中文 text) stays
    return [head + ending, cause if re.search(r"[.!?。！？]$", cause) else cause + ending]


def _read_sentence(sentence: str, context: InstanceContext) -> LessonLine:
    """One sentence's role and lesson text (module docstring)."""
    heading = _VERDICT_HEADING.match(sentence)
    body = sentence[heading.end() :].strip() if heading else ""
    if body and _EXPECTED_ONLY.match(body):
        return LessonLine(text="", role="instance", source=sentence, removed=(sentence,))  # a heading and values
    # "row-count check failed: X is Y" says "X is Y"
    body = body[:1].upper() + body[1:] if body else sentence
    # what the computation comes to ("… and the mean is 412.5") goes before the instance filter reads the rest
    result = _RESULT.search(body)
    outcome_said = (
        result is not None
        and result.start() > 0
        and not units(result.group("what") or result.group("first") or result.group("past"))
    )
    if result is not None and outcome_said:
        body = body[: result.start()].rstrip(" ,") + "."
    filtered = strip_instance(body, context)
    # when the instance filter cuts something, it reads what follows a person's lead-in ("One problem though:
    # <this attempt's row> did X because …"): a cut must not join the lead-in to the rest and hide it from `unwrap`
    lead = _WRAPPER.match(body)
    if lead and filtered.removed and lead.end() < len(body):
        rest = strip_instance(body[lead.end() :], context)
        filtered = replace(rest, text=rest.text[:1].upper() + rest.text[1:])
    if heading and body != sentence:
        filtered = replace(filtered, removed=(heading.group(0).strip(" :：—-"), *filtered.removed))
    if result is not None and outcome_said:  # what the computation came to was cut above
        filtered = replace(filtered, removed=(*filtered.removed, result.group(0).strip(" ,.")), cut=True)
    outcome = _CONSEQUENCE.search(filtered.text)
    if outcome is not None and outcome.start() > 0 and not (units(outcome.group(0)) or identifiers(outcome.group(0))):
        # ("… and you'll get kilograms" says the rule's unit: it stays)
        kept_text = filtered.text[: outcome.start()].rstrip(" ,") + filtered.text[outcome.end() :]
        filtered = replace(filtered, text=kept_text, removed=(*filtered.removed, outcome.group(0).strip(" ,")))
    role = role_of(filtered.text, context)
    named = bool(identifiers(filtered.text) or units(filtered.text))
    if role == "note" and not named and filtered.removed and _role_of(sentence, context) == "praise":
        role = "praise"  # "Thanks, fast and neat as usual.": the filter took the opening that made it praise
    if filtered.cut and (role not in ACTIONABLE or not (has_verb(filtered.text) or named)):
        # what is left of a clause that stated this attempt's content is a lesson only when it says what
        # holds or what to do on its own ("So the refused returns" is not)
        role = "instance"
    if wrapper_only(filtered.text):
        role = "other"  # "One problem though.": what follows is the lesson, this is only its announcement
    kept = role not in ("instance", "complaint", "other") and not (role == "praise" and filtered.cut)
    lesson = clip(unwrap(filtered.text), LINE_CHARS) if kept else ""
    parts = [p for p in _REMEDY_SPLIT.split(lesson) if p.strip()] if lesson else []
    return LessonLine(
        text=lesson,
        role=role,
        source=sentence,
        subject=subject_of(lesson, filtered.parameters) if lesson else Subject(),
        removed=filtered.removed,
        part_roles=frozenset(_role_of(p, context) for p in parts) if len(parts) > 1 else frozenset(),
    )


#: Where a sentence turns from what not to do to what to do ("Do not X: Y", "Do not X; Y instead", "别 X，要 Y").
_REMEDY_SPLIT: Final = re.compile(r"\s*[;；:：]\s+|\s*[;；：]|，(?=要|应|请|改|用)|,\s+(?=instead|use|read|do)", re.I)


# ---------------------------------------------------------------------------------------------------------
# one lesson per convention


@dataclass(frozen=True)
class LessonGroup:
    """The lines of one convention, in the feedback's order, and what they are about."""

    lines: tuple[LessonLine, ...]

    @property
    def subject(self) -> Subject:
        subject = Subject()
        for line in self.lines:
            subject = subject.union(line.subject)
        return subject

    @property
    def texts(self) -> list[str]:
        return [line.text for line in self.lines]

    @property
    def roles(self) -> list[str]:
        return [line.role for line in self.lines]


def _own_subject(line: LessonLine) -> bool:
    return bool(line.subject.identifiers or line.subject.units)


def _continues(line: LessonLine, group: list[LessonLine]) -> bool:
    """Whether `line` is part of the convention `group` states (it points back, shares a name, a unit's
    dimension or a number with it, or has no subject of its own)."""
    if _CONTINUES.match(line.text) or _POINTS_BACK.match(line.text):
        return True
    mine = line.subject
    theirs = Subject()
    for other in group:
        theirs = theirs.union(other.subject)
    if mine.names & theirs.names or set(mine.numbers) & set(theirs.numbers):
        return True
    two_targets = bool(mine.names and theirs.names)
    if mine.dimensions & theirs.dimensions and not two_targets:
        return True
    mine_kinds, theirs_kinds = rule_kinds(line.text), rule_kinds(" ".join(other.text for other in group))
    if kinds_meet(mine_kinds, theirs_kinds) and not two_targets and not parameters_conflict(mine, theirs):
        return True  # the same kind of rule, one side naming no field of its own: "X is UTC." "Add two hours."
    if kinds_differ(mine_kinds, theirs_kinds):
        return False  # another kind of rule ("… in cents." "Voided rows don't count."): another convention
    return not _own_subject(line)


#: Where one sentence may hold two conventions: "X is in grams, and test orders do not count", "X; Y".
_COORDINATION: Final = re.compile(
    r",\s+and\s+|;\s+|\s+and\s+also\s+|\s+[+&]\s+|；|，(?:而且|并且|另外|还有)|"
    r"，(?=\s*[A-Za-z_][\w.-]*\s*(?:是|为|用|要|按|的单位))|"
    r"\s+and\s+(?=(?:[\w=/.-]+\s+){1,4}(?:is|are|was|were|must|should|needs?|has|have|do|does|don'?t)\b)"
)


#: A pronoun at the head of a part ("it is in cents", "its unit", "convert them", "它的单位"): it points back.
_HEAD_PRONOUN: Final = re.compile(
    r"^\W*(?:\w+\s+)?(?:it|its|it's|them|they|their|those|these)\b|^\W*(?:它|它们|其|这些|那些)", re.IGNORECASE
)
#: A demonstrative before a noun ("the month of that date", "the same field", "该字段").
_DEMONSTRATIVE: Final = re.compile(r"\b(?:that|this|these|those|the\s+same)\s+([a-z]{3,})\b|(?:该|这个|那个)", re.I)


def _refers_back(part: str, earlier: Sequence[str]) -> bool:
    """Whether a part of a sentence leans on the parts before it, so it is no convention of its own: it opens on
    a pronoun, or names with a demonstrative a thing the earlier parts named ("… dates day-first, and each order
    belongs to the month of that date"). A pronoun after the part's own subject ("draft orders were abandoned,
    so they don't count") refers to that subject."""
    if _HEAD_PRONOUN.match(part):
        return True
    before = " ".join(earlier).casefold()
    for match in _DEMONSTRATIVE.finditer(part):
        noun = match.group(1)
        if noun is None or re.search(rf"\b{re.escape(noun.rstrip('s'))}", before):
            return True
    return False


#: Nouns that name a kind of thing any data has ("the X column", "the Y file"): sharing one ties nothing together.
_GENERIC_NOUNS: Final = frozenset(
    """column columns field fields file files value values row rows line lines entry entries record records data
    table tables number numbers export exports item items thing things part parts etc""".split()
)


def _topic_words(text: str) -> set[str]:
    """The content words two parts of one sentence must not share to be two conventions ("ZR-88 etc. are
    retired codes; convert with the retired list" is one)."""
    return {t.rstrip("s") for t in specific_tokens(text) if len(t) >= 4 and t not in _GENERIC_NOUNS and t.isalpha()}


_AND: Final = re.compile(r"\s+and\s+(?!then\b)", re.IGNORECASE)


def _imperative_parts(part: str) -> list[str]:
    """ "Convert weight from grams to kilograms and drop the test orders": two commands joined by "and", each
    opening on its own verb, are two parts ("… and then …" is one procedure in order)."""
    if not _opens_with_imperative(part):
        return [part]
    pieces = _AND.split(part)
    if len(pieces) < 2:
        return [part]

    def says_something(piece: str) -> bool:  # beyond its verb and generic nouns ("read the file" does not)
        verb = piece.split(None, 1)[0].casefold().rstrip("s") if piece.split() else ""
        return bool(_topic_words(piece) - {verb})

    if not says_something(pieces[0]):
        return [part]
    out = [pieces[0]]
    for piece in pieces[1:]:
        if _opens_with_imperative(piece) and says_something(piece):
            out.append(piece)
        else:
            out[-1] = f"{out[-1]} and {piece}"
    return out


#: A field named as a label at the head of a terse part ("pressure: tenths").
_LABEL_HEAD: Final = re.compile(r"^\s*([A-Za-z][\w.-]{1,30})\s*[:：]\s*\S")


def split_conventions(line: LessonLine) -> list[LessonLine]:
    """A sentence that teaches two conventions, each with a subject of its own that the other does not share
    ("the five files under archive/ don't count, and size is in KiB"), as two lines; any other sentence as it is.
    The lead-in before a colon ("Two things about our API:") goes with the first."""
    parts = [piece for part in _COORDINATION.split(line.text) for piece in _imperative_parts(part)]
    if len(parts) < 2 or any(_refers_back(part, parts[:i]) for i, part in enumerate(parts) if i):
        return [line]
    wanted = set(line.subject.numbers)
    subjects = [subject_of(part, [n for n in numbers(part) if number_key(n.value) in wanted]) for part in parts]
    # a terse note's parts each open on the field they are about ("flow: litres, /1000; pressure: tenths, /10")
    labels = [_LABEL_HEAD.match(part) for part in parts]
    if all(labels) and len({m.group(1).casefold() for m in labels if m}) == len(parts):
        subjects = [
            replace(s, identifiers=(*s.identifiers, m.group(1))) for s, m in zip(subjects, labels, strict=True) if m
        ]
    owned = [bool(s.identifiers or s.units) for s in subjects]
    topics = [_topic_words(part) for part in parts]
    # each part a statement of its own (a verb, or a relation such as "comma = decimal", and content) ...
    statements = [
        (has_verb(part) or "=" in part or owned[i]) and len(specific_tokens(part)) >= 2 for i, part in enumerate(parts)
    ]
    # ... about things the others do not name: no shared name, dimension or topic word, and not one kind of rule
    # stated twice with a field named on one side only ("the clock runs on UTC; add two hours for local time")
    kinds = [rule_kinds(part) for part in parts]
    disjoint = all(
        not (
            a.names & b.names
            or set(a.numbers) & set(b.numbers)  # "9999 is no weight; 9999 = no reading": one value, one rule
            or a.dimensions & b.dimensions
            or topics[i] & topics[j]
            or (kinds_meet(kinds[i], kinds[j]) and not (a.names and b.names) and not parameters_conflict(a, b))
        )
        for i, a in enumerate(subjects)
        for j, b in enumerate(subjects[i + 1 :], start=i + 1)
    )
    substantial = any(owned) or all(len(t) >= 2 for t in topics)
    # a bare name is no statement: "AB-1a and AB-1b are channels of AB-1" has one compound subject
    said = all(has_verb(part) or "=" in part or len(specific_tokens(part)) >= 2 for part in parts)
    if not disjoint or not said or not (all(owned) or (all(statements) and substantial)):
        return [line]
    out: list[LessonLine] = []
    for part, subject in zip(parts, subjects, strict=True):
        text = part.strip(" ,;，；")
        if text[:1].islower() and line.text[:1].isupper():
            text = text[:1].upper() + text[1:]
        if not re.search(r"[.!?。！？]$", text):
            text += "。" if re.search(f"[{CJK_CHARS}]", text) else "."
        role = role_of(text)
        if role in ("diagnosis", "complaint", "praise", "instance"):
            continue  # "…; rows with zt-009152 were dropped": what happened to this attempt, not a convention
        out.append(replace(line, text=text, subject=subject, role=role if role in ACTIONABLE else line.role))
    return out or [line]


def group_lessons(lines: Sequence[LessonLine]) -> list[LessonGroup]:
    """Split lesson lines into conventions: a line with a subject of its own that shares nothing with the lesson
    before it starts a new one; every other line continues it. A sentence that teaches two conventions is split
    first (`split_conventions`)."""
    groups: list[list[LessonLine]] = []
    itemised = False  # after "Two things:" each sentence is an item of its own
    for whole in lines:
        itemised = itemised or bool(_ITEMISED.match(whole.source))
        for index, line in enumerate(split_conventions(whole)):
            points_back = bool(_CONTINUES.match(line.text) or _POINTS_BACK.match(line.text))
            if index == 0:
                joins = bool(groups) and _continues(line, groups[-1])
            else:  # split off as a convention of its own: only a bare operation still belongs to the part before
                joins = bool(_OPERATION.match(line.text)) and not _own_subject(line)
            if joins and (not itemised or points_back):
                groups[-1].append(line)
            else:
                groups.append([line])
    return [LessonGroup(tuple(group)) for group in groups]


#: An operation on what the part before named ("divide by 100", "× 0.4536", "乘以 1000"): its remedy.
_OPERATION: Final = re.compile(
    r"^\W*(?:then\s+)?(?:(?:multiply|divide|scale|convert|add|subtract|round|times)\b|[×x*/÷+-])\s*"
    r"(?:(?:it|them|by|with)\s+)*[\d.,]+|^\W*(?:乘以|除以|乘|除|加上|减去)",
    re.IGNORECASE,
)
#: A lead-in that counts what follows ("Two things:", "A few issues —", "两个问题："): each item is its own lesson.
_ITEMISED: Final = re.compile(
    r"^\W*(?:(?:two|three|four|several|a\s+few|a\s+couple\s+of|\d)\s+(?:more\s+)?(?:things|issues|problems|"
    r"points|notes|fixes|mistakes|errors|changes|reminders)\b|[两二三四几]个(?:问题|地方|错误|点|事))",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------------------------------
# the same convention again?

#: Numbers that say too little to tie two lessons together (rounding digits, percentages' 100…).
_WEAK_NUMBERS: Final = frozenset({"0", "1", "2", "3", "4", "5", "10", "100"})


def parameters_conflict(a: Subject, b: Subject) -> bool:
    """Whether two statements give different parameters: each its own numbers and none in common ("÷ 1000" and
    "÷ 10"), or units of different dimensions. Two rules of one kind that disagree so are two conventions."""
    if a.numbers and b.numbers and not set(a.numbers) & set(b.numbers):
        return True
    return bool(a.dimensions and b.dimensions and not a.dimensions & b.dimensions)


def particular_numbers(subject: Subject) -> set[str]:
    """A lesson's numbers of three or more significant digits (`65535`, `0.4536`): values no other rule of the
    same work is likely to share by chance."""
    return {n for n in subject.numbers if len(n.replace(".", "").replace("-", "").strip("0")) >= 3}


def strong_numbers(subject: Subject) -> set[str]:
    return {n for n in subject.numbers if n not in _WEAK_NUMBERS}


def convention_overlap(
    a: Subject,
    b: Subject,
    token_similarity: float,
    same_context: bool = True,
    kinds: tuple[frozenset[str], frozenset[str]] | None = None,
) -> bool:
    """Whether two lessons are about the same convention, judged on their subjects: a shared name with another
    agreeing sign (a unit, a number, similar words), or a shared non-trivial number with a shared unit; two
    lessons naming different things are different conventions even when their wording is alike. Cross-language
    pairs share names and numbers, which are written alike in every language. `same_context` says whether the
    two were learnt on the same inputs (a file in common): a unit alone, or a number and a unit without a
    shared name, ties two lessons only then ("cents" and "÷ 1000" are in every company's exports). `kinds` are the
    kinds of rule each states (`rules.kinds`): learnt on the same inputs, two statements of one kind of rule that
    name no different fields and give no different parameters are one convention, however differently worded
    ("the clock runs on UTC" / "add two hours, the log is in UTC")."""
    shared_names = a.names & b.names
    shared_numbers = strong_numbers(a) & strong_numbers(b)
    shared_units = a.unit_keys & b.unit_keys
    if kinds is not None and same_context and not (a.names and b.names and not shared_names):
        if kinds_meet(*kinds) and not parameters_conflict(a, b):
            return True  # one kind of rule on one field (or on a field one side leaves unnamed)
        if particular_numbers(a) & particular_numbers(b):
            return True  # the same particular value on the same work (a sentinel, a factor): one convention
        if kinds_differ(*kinds) and not shared_names:
            return False  # another kind of rule on the same inputs: another convention
    if shared_names:
        return bool(shared_units or shared_numbers or token_similarity >= 0.2 or not (a.units or b.units))
    if a.names and b.names:
        # Different names, the same factor and unit: one convention of one export ("gross and net weight are
        # both in pounds, ×0.4536") — but on other inputs it is another company's look-alike rule ("usage is
        # in litres, ÷1000" vs "water is in millilitres, ÷1000"), which must stay a lesson of its own.
        return bool(shared_numbers and shared_units and same_context)
    if shared_numbers and (shared_units or a.dimensions & b.dimensions):
        return same_context
    if same_context and token_similarity >= 0.5 and not (a.names and b.names):
        return True  # the same words on the same inputs ("SKUs are case-insensitive"), one side naming an example
    # one side names nothing: the same unit ties them ("in pounds, not kilograms" / "convert first: times 0.4536,
    # then the 10 kg cut-off") when they were learnt on the same inputs, unless a side has another dimension too
    return same_context and bool(shared_units) and not (a.dimensions ^ b.dimensions)


def join_lines(texts: Iterable[str]) -> str:
    """Lines of one lesson as one text, each ending with its sentence mark."""
    out: list[str] = []
    for text in texts:
        text = text.strip()
        if text and not re.search(r"[.!?。！？:：]$", text):
            text += "。" if re.search(f"[{CJK_CHARS}]$", text) else "."
        if text:
            out.append(text)
    return " ".join(out)


def key_terms(texts: Iterable[str], numbers_kept: Iterable[Number] = ()) -> set[str]:
    """The terms a rewording of a lesson must keep: its names, units (canonical) and convention numbers."""
    blob = "\n".join(texts)
    terms = {i.casefold() for i in identifiers(blob)}
    terms |= {u.canonical for u in units(blob)}
    terms |= {number_key(n.value) for n in numbers_kept}
    return terms
