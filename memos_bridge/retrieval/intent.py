"""Intent classification and the injection scheduler that decides whether (and how) to retrieve for a turn.

Retrieval is the expensive and risky part of a turn: it costs latency, and injecting memories into a
greeting or a `/memos` command only adds noise to the host's prompt. So every user turn is first labelled
with an intent (reference §6.2):

* `task` — the user wants something done or answered; all three tiers are useful.
* `memory_probe` — the user asks about the shared past ("do you remember…", 上次…); traces and episodes
  (T1+T2) matter, skills (T3) do not. A first-person *personal fact* question ("what is my dog's name")
  additionally switches to the `personal_fact` retrieval profile, which searches Tier 2 only.
* `chitchat` — greetings, thanks, acknowledgements: nothing to retrieve.
* `meta` — commands aimed at the memory system or the host (`/memos …`): nothing to retrieve.
* `unknown` — no signal: retrieve everything, because a missed memory costs more than a spare one.

Cheap bilingual (EN + ZH) heuristics run first. Strong rules (confidence ≥ 0.85) are trusted outright;
weak ones (an imperative verb, a long message) only decide when no LLM can be asked, because a verb at the
start of a sentence is a poor signal on its own. The LLM is optional and bounded by a timeout; whatever
goes wrong with it, the heuristic answer stands — classification never fails a turn.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Final, Literal, get_args

from memos_bridge.contract.errors import MemosError
from memos_bridge.llm.base import LLMProvider
from memos_bridge.llm.facade import LLMFacade
from memos_bridge.llm.prompts import INTENT_CLASSIFY, IntentOutput
from memos_bridge.llm.schema import MalformedOutput, validate_output

log = logging.getLogger(__name__)

IntentKind = Literal["task", "memory_probe", "chitchat", "meta", "unknown"]
IntentSource = Literal["heuristic", "llm"]
RetrievalProfile = Literal["default", "personal_fact"]

INTENT_KINDS: Final[frozenset[str]] = frozenset(get_args(IntentKind))

#: A heuristic at or above this confidence is trusted without asking the LLM (reference §6.2).
STRONG_HEURISTIC_CONFIDENCE: Final = 0.85
#: Chitchat below this confidence is not trusted enough to skip retrieval.
CHITCHAT_SKIP_CONFIDENCE: Final = 0.6
#: Default budget for the LLM intent call (reference §6.14, "intent LLM timeout").
DEFAULT_INTENT_TIMEOUT_S: Final = 6.0
#: Greetings and acknowledgements are short; anything longer carries content worth retrieving for.
CHITCHAT_MAX_CHARS: Final = 48
#: A message this long (in words, or in CJK characters) is almost certainly substantive.
LONG_MESSAGE_WORDS: Final = 40
LONG_MESSAGE_CJK_CHARS: Final = 40

CONF_EMPTY: Final = 0.9
CONF_META: Final = 0.98
CONF_CHITCHAT: Final = 0.9
CONF_MEMORY_PROBE: Final = 0.88
CONF_PERSONAL_FACT: Final = 0.8
CONF_TASK_VERB: Final = 0.75
CONF_LONG: Final = 0.6
CONF_UNKNOWN: Final = 0.4

#: How much of the user's text is shown to the LLM; the start of a message carries its intent.
_LLM_MAX_INPUT_CHARS: Final = 2000
_MAX_HEURISTIC_CHARS: Final = 4000

ALL_TIERS: Final[frozenset[int]] = frozenset({1, 2, 3})
MEMORY_PROBE_TIERS: Final[frozenset[int]] = frozenset({1, 2})
PERSONAL_FACT_TIERS: Final[frozenset[int]] = frozenset({2})
NO_TIERS: Final[frozenset[int]] = frozenset()


@dataclass(frozen=True)
class Intent:
    """What a user turn is for, how sure we are, and whether a heuristic or the LLM said so."""

    kind: IntentKind
    confidence: float
    reason: str
    source: IntentSource = "heuristic"


@dataclass(frozen=True)
class InjectionPlan:
    """The scheduler's decision for one turn.

    `scenario` is a label for logs and stats; only `retrieve`, `tiers` and `profile` change behaviour.
    """

    scenario: str
    retrieve: bool
    tiers: frozenset[int]
    profile: RetrievalProfile
    reason: str


# --------------------------------------------------------------------------------------------------------
# Text normalisation
# --------------------------------------------------------------------------------------------------------

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_NON_WORD = re.compile(r"[^\w\s']+|(?<!\w)'|'(?!\w)")
_SPACES = re.compile(r"\s+")


def _normalize(text: str) -> str:
    """NFKC (full-width `！／` become `!/`), straight apostrophes, lower case, single spaces.

    Only the head of a huge message is examined: intent shows early, and the rules stay cheap on pastes.
    """
    text = unicodedata.normalize("NFKC", text[:_MAX_HEURISTIC_CHARS]).replace("\u2019", "'").replace("\u2018", "'")
    return _SPACES.sub(" ", text).strip().lower()


def _words_only(norm: str) -> str:
    """Punctuation and emoji become spaces, so "thanks!! 🙏" reads as the single word "thanks"."""
    return _SPACES.sub(" ", _NON_WORD.sub(" ", norm)).strip()


def _alternation(tokens: list[str]) -> str:
    """Regex alternation, longest first (so "thank you" beats "thank"); ASCII tokens must end at a word edge.

    CJK tokens get no `\\b`: Chinese has no spaces, and "好的谢谢" must still split into 好的 + 谢谢.
    """
    parts = []
    for token in sorted(set(tokens), key=len, reverse=True):
        escaped = re.escape(token).replace(r"\ ", r"\s+")
        parts.append(escaped + r"\b" if token.isascii() else escaped)
    return "|".join(parts)


# --------------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------------

# `/memos …`, `/memory`, `/memo`: commands aimed at this service. Any other leading slash command is aimed
# at the host (`/clear`, `/model`); neither needs memories. A path such as `/usr/bin/python is broken` is
# not a command: the token after the slash must end at whitespace or the end of the message.
_MEMOS_COMMAND = re.compile(r"^/(?:memos|memory|memo)(?=\s|$|[:.])")
_SLASH_COMMAND = re.compile(r"^/[a-z][\w-]*(?=\s|$)")
#: Top-level directories: "/tmp is full" is a message about a path, not a `/tmp` command.
_ROOT_DIRS: Final = frozenset(
    "bin boot dev etc home lib lib64 mnt opt proc root run sbin srv sys tmp usr var workspace data".split()
)

# A chitchat message consists *only* of these (after punctuation and emoji are dropped), so a greeting
# followed by a request ("ok now fix the tests", "thanks, also add a test") is never chitchat.
_CHITCHAT_EN = """
hi|hello|hey|hey there|hi there|hello there|hiya|howdy|yo|sup|what's up|whats up|greetings|
good morning|good afternoon|good evening|good night|good day|morning|evening|night|gn|
how are you|how are you doing|how's it going|hows it going|how do you do|nice to meet you|
thanks|thank you|thank u|thanks a lot|thanks so much|thank you so much|thank you very much|many thanks|
thx|thnx|ty|tysm|cheers|much appreciated|appreciate it|i appreciate it|
ok|okay|k|kk|okey|okie|alright|all right|sure|sure thing|got it|gotcha|understood|noted|roger|
roger that|i see|makes sense|sounds good|fair enough|no problem|no worries|np|you're welcome|
youre welcome|welcome|yes|yeah|yep|yup|great|cool|nice|awesome|perfect|excellent|good|fine|
wonderful|amazing|brilliant|neat|sweet|great job|good job|nice job|nice work|good work|well done|
lol|haha|hahaha|hehe|wow|hmm|hm|mhm|uh huh|bye|goodbye|bye bye|see you|see ya|see you later|later|take care|
have a nice day|have a good day|you too|same to you|again|very much|so much|a lot|man|buddy|
friend|everyone|all|guys|there|indeed|really|too|as well
"""
_CHITCHAT_ZH = """
你好|您好|你好啊|您好啊|嗨|哈喽|哈啰|哈罗|在吗|在不在|早|早啊|早上好|早安|上午好|中午好|下午好|晚上好|晚安|
谢谢|谢谢你|谢谢您|谢谢啦|谢啦|谢了|多谢|感谢|非常感谢|十分感谢|太感谢了|辛苦了|辛苦啦|麻烦了|
好|好的|好滴|好嘞|好哒|好吧|好呀|好啊|行|行吧|可以|可以的|没问题|没事|不客气|嗯|嗯嗯|哦|哦哦|噢|喔|
收到|明白|明白了|知道了|了解|了解了|懂了|懂|清楚了|是的|对|对的|没错|
再见|拜拜|回头见|下次见|明天见|哈哈|哈哈哈|嘿嘿|呵呵|不错|很好|非常好|太好了|真棒|太棒了|棒|厉害|赞|
做得好|干得好|牛|牛啊|啊|呀|啦|哈|呢|吧|了
"""


def _token_list(block: str) -> list[str]:
    return [t.strip() for t in block.replace("\n", "").split("|") if t.strip()]


_CHITCHAT = re.compile(r"^(?:(?:" + _alternation(_token_list(_CHITCHAT_EN) + _token_list(_CHITCHAT_ZH)) + r")\s*)+$")

# References to the shared past. Bare "recall"/"remember"/"之前" are too common inside ordinary tasks
# ("precision and recall", "remember to run the tests", "提交之前运行测试"), so each needs a context that
# makes it point back at an earlier conversation.
_MEMORY_PROBE_EN = re.compile(
    r"""
    \b(?:do|did|can|could|would|will)\s+you\s+(?:still\s+|even\s+)?(?:remember|recall)\b
    | \byou\s+(?:still\s+)?remember\s+(?:when|what|how|where|who|which|that|the|my|our|me)\b
    | ^(?:please\s+)?(?:remember|recall)\s+(?:when|what|how|where|who|which|that\s+time|the\s+time|our)\b
    | \bwhat\s+do\s+you\s+(?:remember|recall|know)\s+about\s+(?:me|us|my|our)\b
    | \b(?:did|have|had)\s+i\s+(?:ever\s+|already\s+)?(?:tell|told|mention|mentioned|say|said|share|shared
        |ask|asked|give|gave)\b
    | \bwhat\s+did\s+we\b
    | \bwhat\s+(?:did|have|had)\s+(?:i|you)\s+(?:\w+\s+)?(?:say|said|tell|told|decide|decided|mention
        |mentioned|suggest|suggested|recommend|recommended|choose|chose|pick|picked|call|called|name
        |named|agree|agreed|conclude|concluded|settle|settled|share|shared)\b
    | \blast\s+time\b
    | \bearlier\s+(?:you|we|i)\b
    | \byou\s+(?:said|told\s+me|mentioned|suggested|recommended)\s+(?:earlier|before|previously
        |last|yesterday)\b
    | \b(?:as|like)\s+(?:we|i|you)\s+(?:discussed|mentioned|said|agreed|talked\s+about)\b
    | \bwe\s+(?:talked|spoke|chatted)\s+about\b
    | \bwe\s+(?:discussed|decided|agreed)\b
    | \b(?:our|the)\s+(?:last|previous|earlier|prior)\s+(?:conversation|chat|session|discussion|talk)\b
    | \bremind\s+me\s+(?:what|when|where|who|how|which|of|about)\b
    """,
    re.VERBOSE,
)
_MEMORY_PROBE_ZH = re.compile(
    r"上次|上一次|上回|你还记得|还记得|你记得|记得吗|记不记得|回忆|我们之前|你之前|"
    r"我之前(?:说|提|告诉|讲|聊|问|让|给)|^之前|之前(?:说|提|聊|讨论|告诉|讲|问)过?|以前(?:聊|说|提|讨论|讲)过|"
    r"我们(?:之前|以前)?(?:聊|讨论|谈)过|我(?:跟|和|对)你(?:说|讲|提)过|你(?:跟|和|对)我(?:说|讲|提)过|"
    r"我告诉过你|我提过"
)

# Words that may precede the actual request without changing it: "ok now fix…", "thanks, also add…",
# "can you please write…", "好的，帮我…".
_LEADING_FILLER = re.compile(
    r"^(?:(?:"
    + _alternation(
        _token_list(
            """
            ok|okay|alright|all right|great|cool|nice|good|perfect|thanks|thank you|sure|yes|yeah|hey|hi|hello|
            so|now|then|also|and|next|but|please|pls|plz|kindly|just|quickly|first|finally|ok so|
            can you|could you|would you|will you|can u|could u|you can|i need you to|i want you to|
            i'd like you to|id like you to|go ahead and|let's|lets|let us|
            好的|好|嗯|嗯嗯|那|那么|现在|然后|接着|另外|还有|再|也|麻烦|麻烦你|你能|你可以|能不能|可不可以|可以|谢谢
            """
        )
    )
    + r")[\s,.!;:'-]*)+"
)
_TASK_VERB_EN = re.compile(
    r"^(?:"
    + _alternation(
        _token_list(
            """
            fix|write|create|implement|add|run|debug|refactor|parse|deploy|install|build|update|explain|find|
            make|generate|remove|delete|rename|move|convert|translate|summarize|summarise|analyze|analyse|
            optimize|optimise|test|check|review|set up|setup|configure|migrate|upgrade|show|list|compute|
            calculate|design|draft|edit|change|modify|replace|search|investigate|compare|plan|rewrite|
            document|format|lint|merge|revert|commit|push|read|help|benchmark|clean up|
            cleanup|split|extract|draw|give me|tell me how|compose|outline|prepare|restructure|resolve
            """
        )
    )
    + r")"
)
_TASK_VERB_ZH = re.compile(
    r"^(?:帮我|帮忙|请(?!问)|写|编写|修复|修改|修一下|实现|生成|分析|创建|新建|添加|增加|删除|删掉|运行|执行|"
    r"跑一下|调试|重构|部署|安装|构建|编译|更新|升级|解释|说明一下|查找|查一下|找一下|找出|搜索|翻译|总结|优化|"
    r"检查|测试|设计|给我|整理|列出|计算|转换|配置|改成|改一下|把)"
)

# First-person personal-fact questions ("what is my…", 我的…是什么). Procedural questions that merely
# mention "my" ("how do I fix my build", 我的代码怎么修复) are excluded: they need skills and traces, not
# a remembered fact about the user.
_PROCEDURAL_EN = re.compile(
    r"\bhow\s+(?:do|can|could|should|would|shall)\s+(?:i|we|you)\b|\bhow\s+to\b|\bfix\w*\b|\berrors?\b|\bbugs?\b"
    r"|\bwrong\b|\bbroken\b|\bfail\w*\b|\bcrash\w*\b|\bdebug\w*\b|\bimplement\w*\b|\binstall\w*\b"
    r"|\bconfigur\w*\b|\bset\s*up\b|\bexception\b|\btraceback\b|\bcompil\w*\b|\bdeploy\w*\b"
    # Questions about the user's *artifacts* ("what does my function return") are about code, not the user.
    r"|\b(?:code|function|script|file|tests?|repo|repository|class|method|variable|query|program|api|server"
    r"|database|schema|config|build|app|branch|commit|pipeline|container|cluster)s?\b"
)
_PERSONAL_FACT_EN = re.compile(
    r"""
    ^(?:so\s+|and\s+|hey\s+|um\s+)?(?:what|what's|whats|which|who|who's|where|where's|when|when's|how\s+old
        |how\s+many|how\s+much)\b[^?.!]{0,40}?\bmy\b
    | \b(?:what|where|when|who)\s+(?:is|was|are|were)\s+my\b
    | \bwhere\s+(?:do|did)\s+i\s+(?:live|work|grow\s+up|go\s+to\s+school|study|come\s+from|park)\b
    | \bwhere\s+am\s+i\s+from\b
    | \bwhat\s+(?:do|did)\s+i\s+(?:like|love|hate|prefer|enjoy|do\s+for\s+(?:a\s+)?(?:living|work)|study|drive
        |eat|drink|play)\b
    | \bwhat(?:'s|\s+is)\s+(?:my|the)\s+name\s+of\s+my\b
    | \bdo\s+i\s+have\s+(?:a|an|any|kids|children|pets|siblings|brothers|sisters)\b
    | \b(?:am\s+i|do\s+i)\s+(?:allergic|married|vegetarian|vegan|single|left-handed|right-handed)\b
    | \bhow\s+old\s+am\s+i\b
    | \bwho\s+am\s+i\b
    | \bwhat(?:'s|\s+is)\s+my\s+name\b
    | \b(?:remember|recall|know)\s+my\s+(?:name|birthday|age|address|email|phone|wife|husband|partner|son
        |daughter|kids?|children|dog|cat|pet|favou?rite|job|employer|company|hometown|city|allerg\w*|hobby
        |hobbies|mom|mother|dad|father|brother|sister|boss|manager|preference\w*)\b
    """,
    re.VERBOSE,
)
_PROCEDURAL_ZH = re.compile(r"怎么|怎样|如何|为什么|为啥|修复|报错|错误|错了|出错|解决|bug|异常|安装|配置|部署|编译")
_PERSONAL_FACT_ZH = re.compile(
    r"我的.{0,12}?(?:是什么|是啥|是谁|是哪|是多少|叫什么|叫啥|在哪|多少|几[岁号月点个]|哪[天年个里儿])|"
    r"我(?:家)?住(?:在)?(?:哪|什么地方)|我叫(?:什么|啥)|我是谁|我(?:今年)?(?:几岁|多大)|"
    r"我(?:最)?(?:喜欢|爱|讨厌|不喜欢)(?:什么|吃什么|喝什么|哪)|我在(?:哪|什么地方)(?:工作|上班|上学|读书)|"
    r"我有(?:没有|几个|几只|多少)|我.{0,6}(?:生日|名字|电话|邮箱|地址)(?:是)?(?:什么|多少|哪|几)|"
    r"你(?:还)?(?:记得|知道)我(?:的|叫|住|是)"
)


def is_personal_fact_question(text: str) -> bool:
    """Whether `text` asks for a fact about the user themself ("what is my …", 我住在哪).

    Such questions are answered by one remembered statement, so retrieval switches to the `personal_fact`
    profile (Tier 2 only, tighter similarity floors). Procedural questions that merely mention the user's
    things ("how do I fix my build") are not personal facts and keep the normal tiers.
    """
    norm = _normalize(text)
    if not norm:
        return False
    if _PROCEDURAL_EN.search(norm) or _PROCEDURAL_ZH.search(norm):
        return False
    return bool(_PERSONAL_FACT_EN.search(norm) or _PERSONAL_FACT_ZH.search(norm))


def _is_long(norm: str) -> bool:
    cjk = len(_CJK.findall(norm))
    words = len(_CJK.sub(" ", norm).split())
    return words >= LONG_MESSAGE_WORDS or cjk >= LONG_MESSAGE_CJK_CHARS


def _starts_with_task_verb(norm: str) -> bool:
    words = _words_only(norm)
    rest = _LEADING_FILLER.sub("", words, count=1).lstrip()
    # If the filler consumed everything ("ok then"), there is no verb to find.
    return bool(rest) and bool(_TASK_VERB_EN.match(rest) or _TASK_VERB_ZH.match(rest))


def classify_intent_heuristic(text: str) -> Intent:
    """Classify `text` with bilingual rules only; never calls anything slow and never raises.

    Order matters: commands first (they are unambiguous), then whole-message chitchat, then references
    to the past, then the weak task signals. Only the first three are strong enough (≥ 0.85) to skip the
    LLM in `classify_intent`.
    """
    norm = _normalize(text)
    if not norm:
        return Intent("chitchat", CONF_EMPTY, "empty message")
    if _MEMOS_COMMAND.match(norm):
        return Intent("meta", CONF_META, "memos slash command")
    command = _SLASH_COMMAND.match(norm)
    if command and command.group(0)[1:] not in _ROOT_DIRS:
        return Intent("meta", CONF_META, "slash command")
    if len(norm) <= CHITCHAT_MAX_CHARS:
        words = _words_only(norm)
        if not words or _CHITCHAT.match(words):
            return Intent("chitchat", CONF_CHITCHAT, "greeting/thanks/acknowledgement")
    if _MEMORY_PROBE_EN.search(norm) or _MEMORY_PROBE_ZH.search(norm):
        return Intent("memory_probe", CONF_MEMORY_PROBE, "refers to an earlier conversation")
    if is_personal_fact_question(norm):
        # Only memory can answer "what is my dog's name"; weak so that an LLM, when present, still decides.
        return Intent("memory_probe", CONF_PERSONAL_FACT, "first-person personal fact question")
    if _starts_with_task_verb(norm):
        return Intent("task", CONF_TASK_VERB, "starts with an imperative/task verb")
    if _is_long(norm):
        return Intent("task", CONF_LONG, "long message")
    return Intent("unknown", CONF_UNKNOWN, "no heuristic signal")


# --------------------------------------------------------------------------------------------------------
# LLM path
# --------------------------------------------------------------------------------------------------------

#: The prompt lives with every other prompt in `llm.prompts`; this alias keeps the old import working.
INTENT_SYSTEM_PROMPT: Final = INTENT_CLASSIFY.system
#: `op` of the intent call in `api_logs` and the facade's stats.
INTENT_OP: Final = "session.intent"


def parse_llm_intent(text: str) -> Intent | None:
    """Parse the LLM's answer tolerantly; `None` when no valid kind can be found.

    A missing or unreadable confidence becomes 0.5 rather than a rejection: the kind is what matters,
    and the scheduler only compares confidence for chitchat. (The normalisation lives in `IntentOutput`.)
    """
    try:
        output = validate_output(text, IntentOutput)
    except MalformedOutput:
        return None
    return _from_output(output)


def _from_output(output: IntentOutput) -> Intent:
    return Intent(kind=output.kind, confidence=output.confidence, reason=output.reason, source="llm")


def _llm_available(llm: LLMProvider) -> bool:
    try:
        return bool(llm.available())
    except Exception:
        log.debug("intent: llm.available() raised", exc_info=True)
        return False


async def classify_intent(
    text: str,
    llm: LLMProvider | None,
    *,
    timeout_s: float = DEFAULT_INTENT_TIMEOUT_S,
    episode_id: str | None = None,
) -> Intent:
    """Heuristics first; ask the LLM only when they are weak; fall back to them on any LLM failure.

    The call goes through the `LLMFacade` (a bare provider is wrapped in one), which bounds it by
    `timeout_s`, validates the answer and retries once on malformed output; `episode_id` (the turn's
    episode) counts it against that episode's LLM budget like the learning stages' calls. Never raises (except
    cancellation from the caller, which must propagate): a broken or slow LLM must not cost the user
    their turn, and the heuristic answer is always a usable default.
    """
    heuristic = classify_intent_heuristic(text)
    if heuristic.confidence >= STRONG_HEURISTIC_CONFIDENCE or llm is None or timeout_s <= 0:
        return heuristic
    if not _llm_available(llm):
        return heuristic
    try:
        output = await LLMFacade.wrap(llm).complete_json(
            INTENT_CLASSIFY,
            {"text": text.strip()[:_LLM_MAX_INPUT_CHARS]},
            op=INTENT_OP,
            episode_id=episode_id,
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
    except MemosError as exc:  # unavailable, timeout, malformed twice, budget, circuit open: same fallback
        log.info("intent: LLM gave no usable answer (%s); using heuristic %s", exc.code.value, heuristic.kind)
        return heuristic
    except Exception as exc:  # a provider bug: same fallback
        log.info("intent: LLM failed (%r); using heuristic %s", exc, heuristic.kind)
        return heuristic
    return _from_output(output)


# --------------------------------------------------------------------------------------------------------
# Scheduler
# --------------------------------------------------------------------------------------------------------


def schedule_injection(intent: Intent, text: str, relation: str | None = None) -> InjectionPlan:
    """Decide whether to retrieve for this turn, from which tiers, and with which profile (reference §6.2).

    `relation` is the session relation classifier's label for this turn (`new_task`, `revision`,
    `follow_up`, `unknown`) or `None` when there was no previous turn. Only chitchat and meta skip
    retrieval: when unsure, retrieving everything is the safe side. Low-confidence chitchat is treated as
    unknown for the same reason.
    """
    if intent.kind == "chitchat":
        if intent.confidence >= CHITCHAT_SKIP_CONFIDENCE:
            return InjectionPlan("chitchat", False, NO_TIERS, "default", "chitchat: nothing to retrieve")
        return InjectionPlan("unknown_safe", True, ALL_TIERS, "default", "low-confidence chitchat: retrieve all")
    if intent.kind == "meta":
        return InjectionPlan("meta", False, NO_TIERS, "default", "meta command: nothing to retrieve")
    if intent.kind == "memory_probe":
        if is_personal_fact_question(text):
            return InjectionPlan(
                "memory_probe", True, PERSONAL_FACT_TIERS, "personal_fact", "personal fact question: tier 2 only"
            )
        return InjectionPlan("memory_probe", True, MEMORY_PROBE_TIERS, "default", "memory probe: tiers 1+2")
    if relation == "new_task":
        return InjectionPlan("new_task", True, ALL_TIERS, "default", "new task: retrieve all")
    # The reference routes an unknown relation here too: an open topic with an unclear relation is kept
    # as a follow-up by the session router, so the turn is scheduled the same way.
    if relation in ("revision", "follow_up", "unknown"):
        return InjectionPlan("follow_up", True, ALL_TIERS, "default", f"{relation}: retrieve all")
    if intent.kind == "unknown":
        return InjectionPlan("unknown_safe", True, ALL_TIERS, "default", "unknown intent: retrieve all")
    return InjectionPlan("task", True, ALL_TIERS, "default", "task: retrieve all")
