"""Topic relation: does a new user turn continue the open episode, correct it, or start a new task?

An episode is one task, and everything the learning loop does — reward, back-propagation, policy
induction — assumes that the steps of an episode serve one goal. Splitting a task in two loses the credit
chain; merging two tasks blames one for the other's outcome. So every user turn that arrives while an
episode is open is labelled against that episode (reference §6.1):

* `append` — the same task simply continues ("continue", "ok go ahead", "thanks", or no signal at all).
* `revision` — the user rejects or corrects the previous answer ("不对", "错了", "wrong", "that's not
  right", "no, use X instead"), or asks for the same task again ("redo it", "try again",
  "再算一次"). A revision is also a *correction*: `is_correction` is set and, when the user
  says what to do instead ("use polars instead of pandas", "应该用 pandas 读取"), `correction_text` carries
  that instruction for the decision-repair stage.
* `follow_up` — a short pronoun/ellipsis question or a continuation ("and the other one?", "那它呢",
  "what about Windows?", "also add tests", "再来一个"). Same episode, new sub-request.
* `new_task` — an explicit switch ("换个任务", "new task:", "unrelated question", "let's move on to …"),
  a clearly different topic (low similarity to the episode and no continuation cue), or a hard rule:
  the gap since the last activity exceeded the merge window, or the episode reached its user-turn cap.

Order of the checks, and why:

1. Hard rules first (gap, turn cap): they bound an episode whatever the words say. The cap counts *user*
   turns — the reference counted tool turns too and split tool-heavy tasks early (§13 item 12).
2. An episode with no text yet (opened by `episode.open`, no turn so far) takes the turn: the host opened
   it for exactly this. (The reference's "no previous context → new_task" is about the absence of any
   episode, which is the router's business, not this classifier's.)
3. Explicit new-task cues, then revisions/corrections, then continuation/follow-up cues. Start-anchored
   cues are read after stripping a leading filler ("ok, …", "好的，…", "hmm, …").
4. A judged episode (a `feedback.submit` verdict after its last user turn) is finished: a turn with no
   continuation, follow-up or correction cue starts the next task. Similar wording does not keep it: a host
   session often runs several tasks on the same data, and merging them blames one task for another's verdict.
5. Topic shift by similarity, only when no cue said "continue". The caller supplies a cosine similarity
   between the new text and the episode (this module never embeds); the packaged MiniLM is English-only,
   so for CJK-dominant texts its cosine is noise (unrelated Chinese pairs score 0.3–0.45) and the lexical
   overlap of content words and CJK bigrams is used instead.
6. Otherwise `append` with a low confidence.

False-positive guards matter more than recall, because without an LLM the heuristic answer is final and a
wrong split costs a task its credit: negations count only at the start of the message ("这不是问题" and
"I'm not sure" are not revisions); "no" counts only as a whole word followed by punctuation or the end
("No module named foo" is a pasted error, "no thanks" is a polite decline); "new" counts only inside a
switch phrase at the start or before a colon ("create a new file", "创建一个新任务" are tasks, not switches).

Decisions at or above `STRONG_HEURISTIC_CONFIDENCE` are final; weaker ones may be refined by the LLM
(`needs_llm`, `merge_llm_decision`). Everything here is pure: no I/O, no clock, no embedder.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal, get_args

from pydantic import BaseModel

from memos_bridge.rules.text import CJK_CHARS, clip

Relation = Literal["append", "revision", "follow_up", "new_task"]
RelationSource = Literal["rule", "heuristic", "llm"]

RELATIONS: Final[frozenset[str]] = frozenset(get_args(Relation))

#: Default merge window: a turn arriving later than this after the episode's last activity starts a new
#: episode (reference §6.1 `mergeMaxGapMs`, §6.14).
DEFAULT_MERGE_MAX_GAP_MS: Final = 7_200_000
#: Default cap on *user* turns per episode (reference §6.14 `maxTurnsPerEpisode`; §13.12: not tool turns).
DEFAULT_MAX_USER_TURNS: Final = 30
#: A gap this long (but inside the merge window) makes a detected topic shift more believable (reference
#: §6.1 "gap > 30 min → new_task 0.6"; here it only raises a shift's confidence, never splits on its own,
#: because a user back from lunch usually resumes the same task).
DEFAULT_SOFT_GAP_MS: Final = 1_800_000
#: Cosine below this (caller-supplied, English-reliable embedder) reads as a different topic. Calibrated
#: on the packaged MiniLM: unrelated requests score −0.07…0.08 against a coding episode, related
#: follow-ups without a cue 0.15…0.4.
DEFAULT_LOW_SIMILARITY: Final = 0.1
#: Cosine at or above this confirms the same topic.
DEFAULT_HIGH_SIMILARITY: Final = 0.5

#: A heuristic at or above this confidence is final: the LLM is not asked and cannot override it
#: (reference §6.1 / §6.14 "strong heuristic 0.85").
STRONG_HEURISTIC_CONFIDENCE: Final = 0.85
#: An LLM `new_task` below this confidence is not enough to split an episode on its own (reference
#: "arbitration threshold 0.8"; the reference spent a second LLM call biased to follow_up, here the
#: tie-break is deterministic).
LLM_NEW_TASK_MIN_CONFIDENCE: Final = 0.8

CONF_GAP: Final = 0.9
CONF_TURN_CAP: Final = 0.95
CONF_EMPTY_EPISODE: Final = 0.9
CONF_EXPLICIT_NEW_TASK: Final = 0.9
CONF_NEGATION: Final = 0.85
CONF_CORRECTION: Final = 0.8
CONF_CONTINUE: Final = 0.85
CONF_ACK: Final = 0.8
CONF_ELLIPSIS: Final = 0.85
CONF_PRONOUN_EN: Final = 0.8
CONF_CONTINUATION: Final = 0.8
CONF_PRONOUN_REFERENCE: Final = 0.75
CONF_QUOTE: Final = 0.75
CONF_SHIFT_SIMILARITY: Final = 0.7
CONF_SHIFT_LEXICAL: Final = 0.6
CONF_SAME_TOPIC: Final = 0.7
CONF_JUDGED: Final = 0.9
CONF_DEFAULT: Final = 0.5
CONF_LLM_LOW_NEW_TASK: Final = 0.55
#: Added to a topic-shift confidence when the soft gap was also exceeded.
SOFT_GAP_BONUS: Final = 0.1

#: Follow-up cues only count in short messages: a long message starting with "this" is a new statement.
SHORT_FOLLOW_UP_CHARS: Final = 60
#: Content tokens a message needs before a low *embedding* similarity may split (short requests such as
#: "add unit tests" have low cosine to anything and are usually continuations).
MIN_SHIFT_TOKENS: Final = 4
#: Content tokens both sides need before *zero lexical overlap* may split (a weaker signal than cosine).
MIN_LEXICAL_SHIFT_TOKENS: Final = 6
#: Share of CJK characters above which the English-only embedder's cosine is ignored.
CJK_DOMINANT_SHARE: Final = 0.3
#: Consecutive words (or CJK characters) of the previous answer that, quoted back, mark a follow-up.
QUOTE_MIN_WORDS: Final = 8
QUOTE_MIN_CJK_CHARS: Final = 12
CORRECTION_MAX_CHARS: Final = 240
_MAX_HEURISTIC_CHARS: Final = 4000
_MAX_DETAIL_CHARS: Final = 200


@dataclass(frozen=True)
class EpisodeContext:
    """What the classifier knows about the open episode; gathered by the caller from storage.

    `similarity` is the cosine between the new text and the episode (e.g. its first/last user texts),
    computed by the caller with whatever embedder it has; `None` when unavailable. `ms_since_last_activity`
    is `None` when unknown (no gap rule applies).
    """

    first_user_text: str = ""
    last_user_text: str = ""
    last_assistant_text: str = ""
    user_turns: int = 0
    ms_since_last_activity: int | None = None
    similarity: float | None = None
    #: A verdict (`feedback.submit`) judged the episode after its last user turn: the task it served is done.
    judged: bool = False


@dataclass(frozen=True)
class RelationDecision:
    """The label for one user turn, how sure we are, and a short stable reason code for logs and tests.

    `is_correction` is true for revisions (the user rejects or corrects the previous answer);
    `correction_text` is the instruction the user gave ("use polars instead of pandas") when one was found.
    `source` says whether a hard rule, the heuristics or the LLM decided; `detail` keeps the LLM's own
    free-text reason.
    """

    relation: Relation
    confidence: float
    reason: str
    is_correction: bool = False
    correction_text: str | None = None
    source: RelationSource = "heuristic"
    detail: str = ""

    @property
    def starts_new_episode(self) -> bool:
        """Whether the open episode must be finalised before this turn is recorded."""
        return self.relation == "new_task"


# --------------------------------------------------------------------------------------------------------
# Text helpers
# --------------------------------------------------------------------------------------------------------

_SPACES = re.compile(r"\s+")
_CJK = re.compile(f"[{CJK_CHARS}]")
_ASCII_WORD = re.compile(r"[a-z0-9][a-z0-9_'.+#-]*")
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")


def _normalize(text: str) -> str:
    """NFKC (full-width `，！：` become `,!:`), straight apostrophes, lower case, single spaces."""
    text = unicodedata.normalize("NFKC", text[:_MAX_HEURISTIC_CHARS])
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return _SPACES.sub(" ", text).strip().lower()


# Words that may precede the real opening of a message without changing it ("ok, new task: …",
# "hmm, that's wrong", "好的，换个话题"). CJK fillers must be followed by punctuation or a space, so
# "好像不对" keeps its 好.
_FILLER = re.compile(
    r"^(?:(?:ok|okay|alright|all right|hmm+|um+|uh+|well|so|hey|oh|ah|sorry|thanks|thank you|great|cool|btw|by the way|"
    r"nice|but|yeah|yes|sure)\b[\s,.!;:~-]*|(?:好的|好吧|好|嗯+|哦+|额|呃|唔|谢谢|行|可以|但是|不过|可是)"
    r"[\s,.!;:~、，。！；：-]+)+",
    re.IGNORECASE,
)


def _strip_filler(norm: str) -> str:
    return _FILLER.sub("", norm, count=1).strip()


def _cjk_share(text: str) -> float:
    letters = [ch for ch in text if not ch.isspace() and not unicodedata.category(ch).startswith("P")]
    if not letters:
        return 0.0
    return sum(1 for ch in letters if _CJK.match(ch)) / len(letters)


_STOPWORDS: Final = frozenset(
    """
    a an the and or but if then so to of in on at by for with from into onto about as is are was were be been
    being am it its it's this that these those there here i me my mine you your yours we us our they them
    their he she his her him do does did done doing have has had can could would should will shall may might
    must please pls just also now what what's whats how why when where which who whom whose not no yes ok
    okay some any all more most very too than let let's lets get got make made want need like one ones thing
    things way some something anything everything again still even only really
    """.split()
)
# Function characters that would make unrelated Chinese texts share bigrams (一个, 帮我, 的是 …).
_CJK_STOP_CHARS: Final = frozenset("的了是我你他她它们这那一个帮请吗呢吧啊呀么在和与及就都也还要把给让被着过得地很再又")


def content_tokens(text: str) -> set[str]:
    """Content words (ASCII, stop words dropped) plus CJK bigrams without function characters.

    Used for the lexical overlap that stands in for the embedding when it is absent or unreliable.
    """
    norm = _normalize(text)
    tokens = {w.strip("'.-") for w in _ASCII_WORD.findall(_CJK.sub(" ", norm))}
    tokens = {w for w in tokens if len(w) >= 2 and w not in _STOPWORDS}
    for run in _CJK_RUN.findall(norm):
        for i in range(len(run) - 1):
            pair = run[i : i + 2]
            if pair[0] not in _CJK_STOP_CHARS and pair[1] not in _CJK_STOP_CHARS:
                tokens.add(pair)
    return tokens


def lexical_coverage(new_text: str, episode_text: str) -> float:
    """Share of the new text's content tokens that also occur in the episode's text (0 when it has none)."""
    new = content_tokens(new_text)
    if not new:
        return 0.0
    return len(new & content_tokens(episode_text)) / len(new)


# --------------------------------------------------------------------------------------------------------
# Cues
# --------------------------------------------------------------------------------------------------------

# Explicit switches at the start of a message (after filler). "new task" must open the message or be
# followed by a colon: "create a new task in Jira" is a task, not a switch.
# "Let's move on to the next step" continues the task; only moving on to something else switches.
_NOT_NEXT_STEP = (
    r"(?!\s+(?:to\s+)?(?:the\s+)?(?:next|following|second|third|last|final)\s+(?:step|part|stage|phase|file|item"
    r"|section|one|bit|function|test|chapter|point|page)s?\b)"
)
# Explicit switches at the start of a message (after filler). "new task" must open the message or be
# followed by a colon: "create a new task in Jira" is a task, not a switch.
_NEW_TASK_START = re.compile(
    rf"""^(?:
      (?:a\s+)?(?:new|next|different|separate|unrelated)\s+(?:task|topic|question|subject|request)\b
    | another\s+(?:task|topic|subject)\b
    | (?:a\s+)?(?:different|separate|unrelated|other)\s+(?:thing|matter|problem)\b
    | (?:completely|totally|something)\s+(?:different|else|unrelated)\b
    | moving\s+on\b{_NOT_NEXT_STEP}
    | let'?s\s+(?:move\s+on\b{_NOT_NEXT_STEP}|switch\s+(?:topics?|gears|to\s+(?:something|another|a\s+different))
          |change\s+(?:the\s+)?(?:topic|subject)\b(?!\s+(?:line|of|field|to|in|for|header))
          |talk\s+about\s+something\s+else|do\s+something\s+else|start\s+(?:a\s+)?new\s+(?:task|topic|conversation))
    | (?:switching|changing)\s+(?:topics?|gears|subjects?)\b
    | change\s+of\s+(?:topic|subject|plans?)\b
    | on\s+(?:a|an|another)\s+(?:different|unrelated|separate|other)\s+(?:note|topic|subject)\b
    | forget\s+(?:about\s+)?(?:that|this|it|all\s+that|the\s+(?:previous|last|above)|everything(?:\s+above)?)
          (?:\s*[,.;:!-]|\s+and\b|\s*$)
    | new\s+(?:conversation|chat|session)\b
    )""",
    re.VERBOSE,
)
_NEW_TASK_ANYWHERE = re.compile(
    rf"""
      \b(?:new|next|different|separate|unrelated)\s+(?:task|topic|question)\s*[:：]
    | \bunrelated\s+(?:question|task|topic|note|request)\b
    | \b(?:question|task|topic)\s+(?:that\s+is\s+|that's\s+)?unrelated\s+to\s+(?:this|that|the\s+above|what\s+we)\b
    | \b(?:a|an)\s+(?:completely|totally|entirely)\s+(?:different|unrelated|new|separate)\s+
          (?:question|topic|task|subject|thing)\b
    | \b(?:let'?s|we\s+can|i'?d\s+like\s+to|i\s+want\s+to)\s+move\s+on\s+to\b{_NOT_NEXT_STEP}
    | \bmoving\s+on\s+to\b{_NOT_NEXT_STEP}
    | \blet'?s\s+(?:switch|change)\s+(?:the\s+)?(?:topic|subject)\b(?!\s+(?:line|of|field|to|in|for|header))
    """,
    re.VERBOSE,
)
_NEW_TASK_ZH_START = re.compile(
    r"^(?:(?:来|开始|再来)?(?:一个)?(?:新任务|新的任务|新问题|新的问题|新话题|新的话题)|下一个任务|下个任务|"
    r"另(?:外)?一个(?:问题|任务|话题)|换(?:一)?个(?:任务|话题|问题|主题|事情|事)|说点别的|聊点别的|问点别的|"
    r"聊聊别的|说说别的|不说这个了|不聊这个了|先不管这个|先不说这个|别管(?:这个|刚才|上面)|"
    r"忘(?:掉|了)(?:刚才|之前|上面|前面)(?:的|说的)?|接下来(?:是)?(?:一个)?新的?)"
)
_NEW_TASK_ZH_ANYWHERE = re.compile(
    r"换(?:一)?个(?:任务|话题|主题)|新(?:的)?(?:任务|问题|话题)\s*[:：]|"
    r"(?:与|和|跟)(?:此|这个|刚才|上面|之前|前面)(?:的)?(?:问题|任务)?(?:无关|没关系)|无关的(?:问题|任务|话题)|"
    r"这是(?:一个)?(?:新|另一个|另外一个)的?(?:任务|问题|话题)|另起(?:一个)?(?:话题|任务)"
)

# Rejections of the previous answer at the start of a message (after filler).
_NEGATION_EN = re.compile(
    r"""^(?:
      (?:no+|nope|nah)(?=\s*[,.!;:\-—]|\s*$)(?!\.\s*\d)(?!\s*[,.!]?\s*(?:thanks|thank\s+you|worries|problem|need\b|that'?s\s+(?:all|it|fine)))
    | nope\b | nah\b
    | wrong\b | incorrect\b
    | not\s+(?:quite|right|correct|really|exactly|what\s+i|like\s+that|the\s+right|true|working|it\b|this\b|that\b)
    | (?:that|this|it)(?:'s|\s+is|\s+was)\s+(?:still\s+)?(?:not\s+(?:right|correct|it|true|what\s+i|quite|working
          |how|the\s+right)|wrong|incorrect|broken)\b
    | (?:that|this|it|your\s+\w+)\s+(?:still\s+)?(?:doesn't|does\s+not|didn't|did\s+not|won't|isn't|is\s+not)\s+
          (?:work|compile|run|pass|help|fix|build|correct|right)\b
    | (?:(?:it|that|this)\s+)?still\s+(?:fails|failing|broken|doesn't\s+work|does\s+not\s+work|not\s+working|wrong
          |errors?|crashes|crashing|the\s+same|gives?\s+(?:the\s+same|an?\s+error))\b
    | you(?:'re|\s+are)\s+wrong\b
    | you\s+(?:made\s+a\s+mistake|misunderstood|got\s+it\s+wrong|misread|missed\s+the|broke)\b
    | (?:let'?s\s+)?(?:redo\b|try\s+again\b|start\s+over\b) | undo\s+(?:that|this|it)\b | revert\s+(?:that|this|it)\b
    | that\s+(?:was\s+)?not\s+what\s+i\b
    | i\s+(?:said|meant|asked\s+for)\b
    | actually,?\s+(?:no\b|use\b|it\s+should|i\s+meant|make\s+it|don't|do\s+not|the\s+\w+\s+should)
    | (?:the\s+|your\s+)?(?:result|answer|output|code|fix|number|numbers|total|totals|sum|format|tests?|translation
          |summary|solution|calculation|value|values)\s+(?:is|are|was|were)\s+(?:still\s+)?(?:wrong|incorrect
          |not\s+right|not\s+correct|off|broken|failing)\b
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_NEGATION_ZH = re.compile(
    r"^(?:好像|似乎|感觉|貌似)?(?:不对(?!的话)|不是说好|不是的|不是这样|不是这个|不是那个|不是吧|不是我(?:要|想)|错了|错啦|你错了|"
    r"(?:你|您)?(?:搞|弄|写|说|做|算|看|改|理解|翻译)错了|不正确|不行(?!的话)|没用|没有用|不好使|不管用|"
    r"(?:还是|依然|仍然|又)(?:不行|不对|错|报错|失败|有问题|没用|一样|不好使)|"
    r"重做|重来|重新来|重新做|重写|再试一次|再来一次|撤销|回滚|不要这样|别这样|"
    r"换(?:一)?(?:个|种)(?:方法|思路|办法|方式|做法)|我(?:的意思)?是说|我说的是|我要的是|我想要的是|"
    r"其实[,\s]*(?:应该|是|用|我(?:想|要|的意思)))"
)
# Short negative verdicts on the previous answer: "这个不对", "结果还是错的", "你的答案有误".
_VERDICT_ZH = re.compile(
    r"^(?:这|那|这个|那个|这样|那样|这里|那里|结果|答案|输出|代码|数字|格式|金额|总数|你的(?:答案|代码|回答|结果)?|它)"
    r"(?:个|样|次)?(?:(?:还是|也|都|又|仍然|依然)?(?:不对|错了|有错|是错的|错的|不正确|有误|不行|没用|不是我(?:要|想))"
    r"|(?:还是|又|仍然|依然)(?:报错|失败))"
)

# Continue / acknowledge: the same task goes on.
_CONTINUE_EN = re.compile(
    r"^(?:continue|go\s+on|keep\s+going|carry\s+on|proceed|go\s+ahead|do\s+it|resume|please\s+continue"
    r"|yes,?\s+(?:please|do\s+it|go\s+ahead|continue)|sounds\s+good,?\s+(?:go|do|continue|proceed))\b"
)
#: Asking the same task again ("redo it", "try again", "please redo the total", "再算一次", "重新来"): the task goes on.
_RETRY_EN = re.compile(
    r"^(?:please\s+)?(?:re-?do|retry|try\s+(?:it\s+|that\s+)?again|do\s+(?:it|that)\s+again|again|one\s+more\s+(?:time|try)|"
    r"re-?run|recompute|recalculate|redo)\b"
)
_RETRY_ZH = re.compile(r"^(?:请|麻烦)?(?:重新(?:算|做|来|试|跑|计算)?|再(?:算|做|试|跑)(?:一次|一遍|一下)?)")
_CONTINUE_ZH = re.compile(
    r"^(?:继续|接着(?:做|来|写|干)?$|请继续|开始吧|就这样(?:做|吧)?|照这个|按这个|按(?:你|您)说的)"
)
_ACK_ONLY = re.compile(
    r"^(?:(?:ok|okay|k|kk|alright|all right|sure|yes|yeah|yep|great|cool|nice|perfect|awesome|excellent|good"
    r"|thanks|thank you|thx|ty|cheers|got it|understood|makes sense|sounds good|looks good|lgtm|works|it works"
    r"|that works|no,? thanks|no,? thank you|that's all|that's it|that's fine|fine|done|好的|好|好吧|嗯+|行|可以"
    r"|谢谢|谢谢你|多谢|感谢|收到|明白了?|知道了|懂了|没问题|不错|很好|太好了|完美|可以了|行了|好了)"
    r"[\s,.!~、👍🙏]*)+$"
)

# Follow-ups: pronoun or ellipsis questions and continuation phrases.
_ELLIPSIS_EN = re.compile(r"^(?:and|or|what\s+about|how\s+about|and\s+what\s+about|and\s+how\s+about)\b")
_PRONOUN_EN = re.compile(
    r"^(?:it|its|it's|that|that's|this|these|those|they|they're|them|their|the\s+other(?:\s+ones?)?|the\s+same"
    r"|which\s+one|which\s+of\s+(?:them|these|those)|what\s+if|why\s+(?:did\s+you|not|is\s+that|does\s+it|do\s+you"
    r"|would\s+you)|why\s*\??$|how\s+come)\b"
)
_CONTINUATION_EN = re.compile(
    r"""^(?:also|plus|additionally|then|and\s+then|and\s+also|next|after\s+that|afterwards
    | one\s+more(?:\s+(?:thing|question|change))?|another\s+(?:one|similar|example|version)
    | same\s+(?:for|with|thing|here)|do\s+the\s+same|repeat\s+(?:that|this|it)
    | now\s+(?:do|make|add|run|try|write|change|update|fix|let's|lets|can\s+you|could\s+you|please|show|test)
    | (?:can|could|would)\s+you\s+also|please\s+also|let'?s\s+also)\b""",
    re.VERBOSE,
)
_TRAILING_CONTINUATION_EN = re.compile(r"\b(?:as\s+well|too)\s*[?.!]*$")
_PRONOUN_REFERENCE_EN = re.compile(r"\b(?:it|that|this|them|those|these|the\s+same|the\s+other\s+one)\b")
_PRONOUN_ZH = re.compile(r"^(?:那|这|它|其(?!实)|还(?!原|款|钱)|哪|啥)")
_ELLIPSIS_ZH = re.compile(r"^.{1,24}?呢\s*[?？]?$")
_CONTINUATION_ZH = re.compile(
    r"^(?:再(?!见)|也(?:帮|给|把|要|加|写)|另外再|顺便|同样|同理|然后|接下来|接着|下一个|下一步|还有|并且|而且|此外|以及)"
)

# --------------------------------------------------------------------------------------------------------
# Corrections: "use X instead", "应该用 …"
# --------------------------------------------------------------------------------------------------------

# A clause runs to the end of its sentence; a dot inside a token ("os.path", "parse.py") does not end it.
_CLAUSE = r"(?:[^.!?\n。！？]|\.(?=\S))"
# Strong patterns say by themselves that the previous answer is being corrected.
_STRONG_CORRECTIONS: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"(?<!did\syou\s)(?<!why\syou\s)\b(?:use|try|call|run|do|pick|choose|switch\s+to|go\s+with|return|write"
        rf"|make\s+it|read|load|put)\b{_CLAUSE}"
        rf"{{1,200}}?\s+instead\b(?:\s+of\s+{_CLAUSE}{{1,120}})?",
        rf"\b(?:use|prefer|try|pick|choose)\b{_CLAUSE}{{1,120}}?\s+(?:rather\s+than|over)\s+{_CLAUSE}{{1,120}}",
        rf"\binstead\s*,\s*{_CLAUSE}{{3,200}}",
        rf"\b(?:it|this|that|they|he|the\s+\w+|you)\s+should(?:\s+have)?\s+{_CLAUSE}{{2,200}}?[\s,]+"
        rf"(?:not(?!\s+sure)|rather\s+than|instead\s+of)\b{_CLAUSE}{{0,120}}",
        rf"\byou\s+should\s+have\s+{_CLAUSE}{{2,200}}",
        rf"\b(?:don't|do\s+not|never)\s+(?!worry|bother|mind|know|think|understand|care)[^.!?\n,;。！？，]{{2,120}}[,;，]\s*(?:use|try|do|call|run|just|instead|write)\b"
        rf"{_CLAUSE}{{1,160}}",
        rf"\bi\s+meant\s+{_CLAUSE}{{2,200}}",
        rf"(?:^|[,;:]\s*)not\s+(?!only\b|sure\b|bad\b)[^.!?\n,]{{1,60}},?\s+but\s+(?!also\b){_CLAUSE}{{2,160}}",
        rf"用{_CLAUSE}{{1,60}}?(?:代替|替代|替换|取代|而不是|而非){_CLAUSE}{{1,60}}",
        rf"(?:改用|换用){_CLAUSE}{{1,120}}",
        rf"应该(?:是|用|改成|改为|为)?{_CLAUSE}{{1,80}}?(?:而不是|而非|不是){_CLAUSE}{{1,60}}",
        rf"(?:^|[,，;；\s])不是(?!很|太|特别|非常|吗|吧)[^.!?\n。！？,，]{{1,40}}[,，]?\s*(?:而)?是(?!不|否){_CLAUSE}{{1,80}}",
        rf"(?:不要|别)[^.!?\n。！？,，]{{1,40}}[,，]\s*(?:要|用|改|换|直接|请){_CLAUSE}{{1,80}}",
        rf"(?:^|[,，\s])还是(?:用|改用|换成|换回){_CLAUSE}{{1,80}}",
        rf"我(?:的意思)?是说{_CLAUSE}{{1,120}}",
        rf"我(?:说的|要的|想要的)是{_CLAUSE}{{1,120}}",
    )
)
# Weak patterns ("it should …", "use X", "应该 …") are instructions only after a rejection.
_WEAK_CORRECTIONS: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        rf"\b(?:it|this|that|they|the\s+\w+|you|we)\s+(?:should|must|need\s+to|needs\s+to|has\s+to|have\s+to)\s+"
        rf"{_CLAUSE}{{2,200}}",
        rf"\b(?:use|try|call|run|make\s+it|change\s+it\s+to|set\s+it\s+to|switch\s+to|do)\b{_CLAUSE}{{2,200}}",
        rf"\bi\s+(?:said|mean|asked\s+for|wanted)\b{_CLAUSE}{{2,200}}",
        rf"(?:应该|应当|要用|需要|得用){_CLAUSE}{{1,120}}",
        rf"(?:换成|改成|改为|换为){_CLAUSE}{{1,120}}",
        rf"用{_CLAUSE}{{1,120}}",
    )
)


def _clean_clause(text: str) -> str:
    clause = text.strip().lstrip(",，;；、 ").rstrip(" ,，;；:：")
    clause = re.sub(r"\s*吗$", "", clause)  # "不是说好用 Python 吗" → "用 Python": the rhetorical particle goes
    return clip(clause, CORRECTION_MAX_CHARS)


def _first_match(patterns: tuple[re.Pattern[str], ...], text: str) -> str | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            clause = _clean_clause(match.group(0))
            if clause:
                return clause
    return None


def _prepare(text: str) -> str:
    """Straight quotes and single spaces, but the user's own case and punctuation: the extracted instruction
    is shown back to the agent, and identifiers such as `DictReader` must survive intact."""
    text = text[:_MAX_HEURISTIC_CHARS].replace("\u2019", "'").replace("\u2018", "'")
    return _SPACES.sub(" ", text).strip()


def _strip_rejection(prepared: str) -> str:
    """The text after a leading filler and rejection ("No, use X" → ", use X"), for the weak patterns, so the
    rejection itself ("try again", "重做") is never mistaken for the instruction."""
    head = _FILLER.sub("", prepared, count=1).lstrip()
    for pattern in (_NEGATION_EN, _NEGATION_ZH, _VERDICT_ZH):
        match = pattern.match(head)
        if match:
            return head[match.end() :]
    return head


def extract_correction(text: str, *, after_rejection: bool = False) -> str | None:
    """The instruction a user gives in place of the previous answer, or `None`.

    Strong forms ("use X instead of Y", "用X代替Y", "不是A，是B", "应该是X不是Y", "I meant X") count on their
    own. Weak forms ("it should …", "use …", "应该…", "改成…") are instructions only when the message
    opens with a rejection (`after_rejection`): "应该怎么安装 numpy？" is a question, "不对，应该用 pandas"
    is a correction.
    """
    prepared = _prepare(text)
    if not prepared:
        return None
    strong = _first_match(_STRONG_CORRECTIONS, prepared)
    if strong is not None or not after_rejection:
        return strong
    return _first_match(_WEAK_CORRECTIONS, _strip_rejection(prepared))


def _is_rejection(head: str) -> bool:
    return bool(_NEGATION_EN.match(head) or _NEGATION_ZH.match(head) or _VERDICT_ZH.match(head))


def is_explicit_new_task(text: str) -> bool:
    """Whether `text` explicitly announces a switch to another task ("换个任务", "new task: …")."""
    norm = _normalize(text)
    head = _strip_filler(norm)
    return bool(
        _NEW_TASK_START.match(head)
        or _NEW_TASK_ZH_START.match(head)
        or _NEW_TASK_ANYWHERE.search(norm)
        or _NEW_TASK_ZH_ANYWHERE.search(norm)
    )


def _quotes_previous_answer(norm: str, assistant: str) -> bool:
    """Whether the message repeats ≥ 8 consecutive words (or ≥ 12 CJK characters) of the previous answer."""
    if not assistant:
        return False
    words = norm.split()
    if len(words) >= QUOTE_MIN_WORDS:
        source = " " + " ".join(_normalize(assistant).split()) + " "
        for i in range(len(words) - QUOTE_MIN_WORDS + 1):
            if " " + " ".join(words[i : i + QUOTE_MIN_WORDS]) + " " in source:
                return True
    runs = [run for run in _CJK_RUN.findall(norm) if len(run) >= QUOTE_MIN_CJK_CHARS]
    if runs:
        answer = _normalize(assistant)
        for run in runs:
            for i in range(len(run) - QUOTE_MIN_CJK_CHARS + 1):
                if run[i : i + QUOTE_MIN_CJK_CHARS] in answer:
                    return True
    return False


# --------------------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------------------


def _decision(relation: Relation, confidence: float, reason: str, **extra: Any) -> RelationDecision:
    return RelationDecision(
        relation=relation, confidence=round(min(1.0, max(0.0, confidence)), 4), reason=reason, **extra
    )


def _cue_decision(original: str, norm: str, head: str, context: EpisodeContext) -> RelationDecision | None:
    """Cue-based decisions (switch, rejection, correction, continue, follow-up), or `None` without a cue."""
    if is_explicit_new_task(norm):
        return _decision("new_task", CONF_EXPLICIT_NEW_TASK, "explicit_new_task_cue")
    if _is_rejection(head):
        correction = extract_correction(original, after_rejection=True)
        return _decision("revision", CONF_NEGATION, "negation_revision", is_correction=True, correction_text=correction)
    correction = extract_correction(original)
    if correction is not None:
        return _decision(
            "revision", CONF_CORRECTION, "correction_instruction", is_correction=True, correction_text=correction
        )
    if _CONTINUE_EN.match(head) or _CONTINUE_ZH.match(head):
        return _decision("append", CONF_CONTINUE, "continue_cue")
    if _RETRY_EN.match(head) or _RETRY_ZH.match(head):
        return _decision("revision", CONF_CONTINUE, "retry_cue")
    if len(head) <= SHORT_FOLLOW_UP_CHARS * 2 and _ACK_ONLY.match(head):
        return _decision("append", CONF_ACK, "acknowledgement")
    short = len(head) <= SHORT_FOLLOW_UP_CHARS
    if short and (_ELLIPSIS_EN.match(head) or _ELLIPSIS_ZH.match(head)):
        return _decision("follow_up", CONF_ELLIPSIS, "ellipsis_follow_up")
    if short and _PRONOUN_ZH.match(head):
        return _decision("follow_up", CONF_ELLIPSIS, "pronoun_follow_up")
    if short and _PRONOUN_EN.match(head):
        return _decision("follow_up", CONF_PRONOUN_EN, "pronoun_follow_up")
    if _CONTINUATION_EN.match(head) or _CONTINUATION_ZH.match(head):
        return _decision("follow_up", CONF_CONTINUATION, "continuation_cue")
    if short and _TRAILING_CONTINUATION_EN.search(head):
        return _decision("follow_up", CONF_CONTINUATION, "continuation_cue")
    if short and head.rstrip().endswith(("?", "？")) and _PRONOUN_REFERENCE_EN.search(head):
        return _decision("follow_up", CONF_PRONOUN_REFERENCE, "pronoun_reference")
    if _quotes_previous_answer(norm, context.last_assistant_text):
        return _decision("follow_up", CONF_QUOTE, "quotes_previous_answer")
    return None


def _episode_text(context: EpisodeContext) -> str:
    return "\n".join(t for t in (context.first_user_text, context.last_user_text, context.last_assistant_text) if t)


def _similarity_decision(
    new_text: str,
    context: EpisodeContext,
    *,
    low_similarity: float,
    high_similarity: float,
    soft_gap_ms: int,
) -> RelationDecision | None:
    """Topic shift (or confirmation) from the caller's cosine, or from lexical overlap when it is unusable."""
    episode_text = _episode_text(context)
    new_tokens = content_tokens(new_text)
    episode_tokens = content_tokens(episode_text)
    overlap = len(new_tokens & episode_tokens)
    soft_gap = bool(soft_gap_ms and context.ms_since_last_activity and context.ms_since_last_activity > soft_gap_ms)
    bonus = SOFT_GAP_BONUS if soft_gap else 0.0
    similarity = context.similarity
    cjk = max(_cjk_share(new_text), _cjk_share(episode_text)) > CJK_DOMINANT_SHARE
    if similarity is not None and not math.isnan(similarity) and not cjk:
        if similarity < low_similarity and len(new_tokens) >= MIN_SHIFT_TOKENS:
            extra = 0.05 if overlap == 0 else 0.0
            return _decision("new_task", CONF_SHIFT_SIMILARITY + extra + bonus, "topic_shift_low_similarity")
        if similarity >= high_similarity:
            return _decision("append", CONF_SAME_TOPIC, "same_topic_similarity")
        return None
    if overlap == 0 and len(new_tokens) >= MIN_LEXICAL_SHIFT_TOKENS and len(episode_tokens) >= MIN_LEXICAL_SHIFT_TOKENS:
        return _decision("new_task", CONF_SHIFT_LEXICAL + bonus, "topic_shift_no_overlap")
    return None


def classify_relation(
    new_text: str,
    context: EpisodeContext,
    *,
    merge_max_gap_ms: int = DEFAULT_MERGE_MAX_GAP_MS,
    max_user_turns: int = DEFAULT_MAX_USER_TURNS,
    low_similarity: float = DEFAULT_LOW_SIMILARITY,
    high_similarity: float = DEFAULT_HIGH_SIMILARITY,
    soft_gap_ms: int = DEFAULT_SOFT_GAP_MS,
) -> RelationDecision:
    """Label `new_text` against the open episode with hard rules and bilingual heuristics; never raises.

    `merge_max_gap_ms` / `max_user_turns` of 0 disable the gap / cap rules. See the module docstring for
    the order of the checks.
    """
    gap = context.ms_since_last_activity
    if merge_max_gap_ms > 0 and gap is not None and gap > merge_max_gap_ms:
        return _decision("new_task", CONF_GAP, "gap_exceeded", source="rule")
    if max_user_turns > 0 and context.user_turns >= max_user_turns:
        return _decision("new_task", CONF_TURN_CAP, "turn_cap", source="rule")
    if not _episode_text(context).strip():
        return _decision("append", CONF_EMPTY_EPISODE, "empty_episode", source="rule")
    norm = _normalize(new_text)
    if not norm:
        return _decision("append", CONF_DEFAULT, "empty_message")
    head = _strip_filler(norm) or norm
    cue = _cue_decision(new_text, norm, head, context)
    if cue is not None:
        return cue
    if context.judged:
        # The verdict closed the task; a request with no cue that continues or corrects it is the next task,
        # however alike its topic (one host session may serve many tasks on the same data).
        return _decision("new_task", CONF_JUDGED, "judged_episode", source="rule")
    shift = _similarity_decision(
        new_text, context, low_similarity=low_similarity, high_similarity=high_similarity, soft_gap_ms=soft_gap_ms
    )
    if shift is not None:
        return shift
    return _decision("append", CONF_DEFAULT, "no_signal")


def needs_llm(decision: RelationDecision) -> bool:
    """Whether asking the LLM could change `decision`: hard rules and strong heuristics are final."""
    return decision.source == "heuristic" and decision.confidence < STRONG_HEURISTIC_CONFIDENCE


# --------------------------------------------------------------------------------------------------------
# LLM answers
# --------------------------------------------------------------------------------------------------------

_LLM_LABELS: Final[dict[str, Relation]] = {
    "append": "append",
    "continue": "append",
    "continuation": "append",
    "same_task": "append",
    "same": "append",
    "revision": "revision",
    "revise": "revision",
    "correction": "revision",
    "follow_up": "follow_up",
    "followup": "follow_up",
    "follow": "follow_up",
    "new_task": "new_task",
    "new_topic": "new_task",
    "new": "new_task",
    "switch": "new_task",
}


def _llm_confidence(value: Any) -> float:
    """A confidence in [0, 1]; strings like "0.7" or "85%" are accepted; anything unreadable is 0.5."""
    if isinstance(value, bool):
        return 0.5
    number: float
    if isinstance(value, str):
        raw = value.strip()
        try:
            number = float(raw.rstrip("%").strip()) / (100.0 if raw.endswith("%") else 1.0)
        except ValueError:
            return 0.5
    elif isinstance(value, int | float):
        number = float(value)
    else:
        return 0.5
    if math.isnan(number):
        return 0.5
    return min(1.0, max(0.0, number))


def parse_llm_relation(answer: Mapping[str, Any] | BaseModel | None) -> tuple[Relation, float, str] | None:
    """`(relation, confidence, reason)` from an LLM answer, or `None` for a missing/unknown label."""
    if answer is None:
        return None
    data: Mapping[str, Any] = answer.model_dump() if isinstance(answer, BaseModel) else answer
    raw = data.get("relation", data.get("label"))
    if not isinstance(raw, str):
        return None
    label = re.sub(r"[\s-]+", "_", raw.strip().lower())
    relation = _LLM_LABELS.get(label)
    if relation is None:
        return None
    reason = data.get("reason")
    text = reason.strip()[:_MAX_DETAIL_CHARS] if isinstance(reason, str) else ""
    return relation, _llm_confidence(data.get("confidence")), text


def merge_llm_decision(
    heuristic: RelationDecision,
    answer: Mapping[str, Any] | BaseModel | None,
    new_text: str = "",
) -> RelationDecision:
    """Combine the heuristic decision with the LLM's answer; the heuristic stands when the LLM cannot help.

    Rules, in order:

    * Hard rules (gap, cap, empty episode) and strong heuristics (≥ 0.85, i.e. an explicit cue such as
      "换个任务" or a sentence-initial "不对") win: the user's own words beat a model's reading of them.
    * A missing or unknown LLM label (including "unknown") keeps the heuristic.
    * An LLM `new_task` below 0.8 confidence does not split on its own: if the heuristic also saw a topic
      shift the two weak signals agree (new_task, the higher confidence); otherwise the turn is kept as a
      follow-up (0.55) — a wrong split costs the task its credit chain.
    * Otherwise the LLM decides. A `revision` is a correction; its instruction is extracted from
      `new_text` (or kept from the heuristic). A heuristic correction survives an LLM continuation label,
      since "use X instead" is useful to decision repair whatever the label.
    """
    if not needs_llm(heuristic):
        return heuristic
    parsed = parse_llm_relation(answer)
    if parsed is None:
        return heuristic
    relation, confidence, detail = parsed
    if relation == "new_task" and confidence < LLM_NEW_TASK_MIN_CONFIDENCE:
        if heuristic.relation == "new_task":
            return replace(
                heuristic,
                confidence=max(heuristic.confidence, confidence),
                reason="llm_agrees_topic_shift",
                source="llm",
                detail=detail,
            )
        return _decision("follow_up", CONF_LLM_LOW_NEW_TASK, "llm_new_task_low_confidence", source="llm", detail=detail)
    if relation == "new_task":
        return _decision("new_task", confidence, "llm", source="llm", detail=detail)
    is_correction = heuristic.is_correction or relation == "revision"
    correction_text = heuristic.correction_text
    if relation == "revision" and correction_text is None and new_text:
        correction_text = extract_correction(new_text, after_rejection=True)
    return _decision(
        relation,
        confidence,
        "llm",
        source="llm",
        detail=detail,
        is_correction=is_correction,
        correction_text=correction_text,
    )
