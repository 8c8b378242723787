"""Find credentials in text and replace them with `[REDACTED:<kind>]` before anything keeps them.

Agents paste tool output verbatim: `cat .env`, a failing `curl -H "Authorization: …"`, a connection string in
a stack trace. Whatever the service stores it also embeds, indexes, summarises, logs, sends to an LLM and
injects into later turns — of other sessions too. So the one safe place to drop a secret is on the way in,
before any of that; this module is that filter, and it knows nothing about where the text came from.

Three families of rules, applied in order, each on what the previous left:

1. **Shapes that are secrets by themselves**: provider keys with a fixed prefix (OpenAI, Anthropic, Google,
   AWS access keys, GitHub, GitLab, Slack, Stripe, npm, PyPI), JWTs, PEM private key blocks, the password part
   of a URL (`scheme://user:password@host`), and `Authorization:` / `Bearer` credentials.
2. **Assignments to a secret-sounding name**: `password=…`, `"api_key": "…"`, `DB_PASSWD: …`, `--token …`.
   A name is split into its words (`snake_case`, `kebab-case`, `camelCase`, dots); *strong* names (password,
   secret, api key, private key, credentials, …) have any real value redacted, *weak* names (token, auth,
   key) only a value that looks random — so `max_tokens = 600` and `password: str` (a type annotation) stay.
3. **A random-looking value next to such a word** in prose: "the deploy token is 8f3kQ2…".

"Random-looking" is measured, not listed: long enough, more than one character class and enough Shannon
entropy per character that an English word or a plain number does not qualify.

Configurable by the operator: extra `kind → regex` rules (a named group `secret` limits what is replaced)
and an allow-list of regexes for values that must be kept (a documented example key, a test fixture).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

MARKER = "[REDACTED:{kind}]"
_ALREADY = re.compile(r"\[REDACTED:[a-z0-9_]+\]")

#: Name words that make any real value assigned to the name a secret.
_STRONG_WORDS = frozenset(
    {"password", "passwd", "passphrase", "pwd", "secret", "secrets", "credential", "credentials", "apikey"}
)
#: Word pairs with the same effect (`api_key`, `private-key`, `clientSecret`…).
_STRONG_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("private", "key"),
        ("signing", "key"),
        ("encryption", "key"),
        ("master", "key"),
        ("client", "secret"),
        ("auth", "token"),
        ("access", "token"),
        ("refresh", "token"),
        ("session", "token"),
        ("bearer", "token"),
        ("api", "token"),
    }
)
#: Name words whose value is a secret only when it looks random. Generic words (key, session, signature) are
#: left out: cache keys, session ids and pattern signatures are random-looking and not secrets.
_WEAK_WORDS = frozenset({"token", "tokens", "auth", "cookie"})
#: Values that are not secrets even after a strong name: empty, null-ish, references, placeholders, types.
_PLACEHOLDER = re.compile(
    r"""^(?:|null|none|nil|true|false|undefined|\*+|x{3,}|\.{3}|…|<[^<>]*>|\$\{?[\w.:-]*\}?|%\(?\w+\)?s?|\{\{[^{}]*\}\}|
    (?:str|int|bytes|bool|float|string|number|boolean|any|object|secretstr)(?:\s*[|,=].*)?|
    (?:optional|list|dict|union)\[.*)$""",
    re.IGNORECASE | re.VERBOSE,
)
_NAME_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """`DB_PASSWORD` → ["db", "password"]; `clientSecret` → ["client", "secret"]; `x-api-key` → ["x", "api", "key"]."""
    return [part.lower() for part in _NAME_SPLIT.split(name) if part]


def name_strength(name: str) -> str | None:
    """ "strong", "weak" or None: how much a value assigned to `name` is to be treated as a secret."""
    words = [word[:-1] if len(word) > 4 and word.endswith("s") else word for word in name_words(name)]
    if not words:
        return None
    if any(word in _STRONG_WORDS for word in words) or any(pair in _STRONG_PAIRS for pair in itertools.pairwise(words)):
        return "strong"
    if any(word in _WEAK_WORDS for word in words) or words[-1].endswith(("token", "apikey")):
        return "weak"
    return None


def entropy_bits(value: str) -> float:
    """Shannon entropy of `value`'s characters, in bits per character."""
    if not value:
        return 0.0
    counts = Counter(value)
    total = len(value)
    return -sum(n / total * math.log2(n / total) for n in counts.values())


def looks_random(value: str, *, min_length: int = 16, min_bits: float = 3.0) -> bool:
    """Whether `value` reads like generated key material rather than a word, a number or a path.

    Long enough, at least two of lower / upper / digit (symbols count as a class too), and enough entropy per
    character; a word ("configuration"), a number ("1234567890123456") or a path ("/usr/local/lib") fails.
    """
    value = value.strip("\"'")
    if len(value) < min_length or " " in value:
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(c in "+/=_-." for c in value),
        )
    )
    if classes < 2 or (not any(c.isdigit() for c in value) and classes < 3):
        return False
    if value.count("/") >= 2 and not any(c in "+=" for c in value):  # a path, not base64
        return False
    return entropy_bits(value) >= min_bits


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


_PIECES = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[^A-Za-z]+")


def wordlike(value: str) -> bool:
    """Whether `value` is words joined up (`X-Deploy-Token`, `EventLoopToken`, `cache_key_prefix`), which a
    generated token is not: every piece alphabetic, and pieces word-long on average."""
    pieces = [p for p in _PIECES.findall(value) if p.strip("-_./")]
    if not pieces or any(not p.isalpha() for p in pieces):
        return False
    return sum(len(p) for p in pieces) / len(pieces) >= 3


def _plausible_value(value: str, strength: str, spaced: bool, *, quoted: bool | None = None) -> bool:
    """Whether `value`, assigned to a name of `strength`, is a credential rather than code, prose or a type.

    Quoted values are literals: any non-placeholder counts after a strong name. Unquoted ones may be code
    (`api_key = settings.api_key`, `token: EventLoopToken`): a dotted or snake_case identifier, or a word
    without digits, is taken for a name, not a value — except a plain word written right after `=` / `:`
    with no space (`DB_PASSWORD=changeme`, the .env form).
    """
    if quoted is None:
        quoted = len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]
    bare = value.strip().strip("\"'").strip()
    if _PLACEHOLDER.match(bare) or _ALREADY.fullmatch(bare):
        return False
    if strength == "weak":
        if not quoted and _IDENTIFIER.match(bare) and ("." in bare or not any(c.isdigit() for c in bare)):
            return False  # `token: anyio.EventLoopToken`, `token = next_token`: a name in code
        return looks_random(bare, min_length=12) and not wordlike(bare)
    if len(bare) < 3:
        return False
    if not quoted and _IDENTIFIER.match(bare):
        if "." in bare or "_" in bare:
            return False
        if not any(c.isdigit() for c in bare) and spaced:
            return False
    return True


def _credential_check(m: re.Match[str]) -> bool:
    """An `Authorization:` / `Bearer` value: a real credential, not a placeholder (`$TOKEN`), a word or a code."""
    bare = m.group("secret").strip("\"'.")
    if _PLACEHOLDER.match(bare) or bare.isalpha() or len(bare) < 8 or not bare.isascii():
        return False
    classes = sum((any(c.islower() for c in bare), any(c.isupper() for c in bare), any(c.isdigit() for c in bare)))
    return classes >= 2


_PLACEHOLDER_PASSWORDS = frozenset({"password", "passwd", "pass", "pwd", "secret", "token", "user", "username"})


def _url_password_check(m: re.Match[str]) -> bool:
    """`scheme://user:password@host`: any password but the placeholder words documentation writes."""
    bare = m.group("secret")
    return not _PLACEHOLDER.match(bare) and bare.lower().strip("<>{}$") not in _PLACEHOLDER_PASSWORDS


@dataclass(frozen=True)
class Rule:
    """One way a secret shows up: `pattern` finds it, `group` is the part replaced, `check` vetoes a match.

    Speed matters (every request's text passes here): `needles` are lowercase literals of which the text must
    hold one for the rule to run at all, and an `anchor` (for rules that start with a name) finds the few
    places worth trying, so the pattern is matched there instead of at every character.
    """

    kind: str
    pattern: re.Pattern[str]
    group: str | int = 0
    check: Callable[[re.Match[str]], bool] | None = None
    kind_of: Callable[[re.Match[str]], str] | None = None
    needles: tuple[str, ...] = ()
    anchor: re.Pattern[str] | None = None


def _random_group(name: str, **kwargs: Any) -> Callable[[re.Match[str]], bool]:
    return lambda m: looks_random(m.group(name), **kwargs)


def _assignment_check(m: re.Match[str]) -> bool:
    strength = name_strength(m.group("name"))
    if strength is None:
        return False
    rest = m.string[m.end() : m.end() + 1]
    if rest in {"(", "[", "."}:  # a call, an index or an attribute: code, not a value
        return False
    spaced = m.group("sep").endswith(" ") or m.string[m.start("secret") - 1 : m.start("secret")].isspace()
    return _plausible_value(m.group("secret"), strength, spaced)


def kind_for_name(name: str) -> str:
    """The `<kind>` of a secret assigned to `name`: password, token, api_key, aws_secret_key or secret."""
    words = name_words(name)
    if "aws" in words and ("secret" in words or "key" in words):
        return "aws_secret_key"
    if any(w in {"password", "passwd", "passphrase", "pwd", "pass"} for w in words):
        return "password"
    if any(w in {"token", "auth", "cookie", "session"} for w in words):
        return "token"
    if "key" in words or "apikey" in words:
        return "api_key"
    return "secret"


def _prose_check(m: re.Match[str]) -> bool:
    """ "the deploy token is 8f3kQ2…": a random-looking value with letters and digits, not an expression."""
    value = m.group("secret")
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    if "." in value and _IDENTIFIER.match(value):  # `module.attr1`: a name in code
        return False
    return looks_random(value, min_bits=3.3)


def _assignment_kind(m: re.Match[str]) -> str:
    return kind_for_name(m.group("name"))


def _flag_check(m: re.Match[str]) -> bool:
    """`--password hunter2`, `--token 8f3k…`: a flag whose value follows after a space."""
    strength = name_strength(m.group("name"))
    value = m.group("secret")
    if strength is None or value.startswith("-"):
        return False
    if strength == "strong" and value.isalpha():
        return False  # `--password prompt`, `--secret-file`: a mode word, not a value
    return _plausible_value(value, strength, spaced=True)


_I = re.IGNORECASE
#: Literals one of which any secret-sounding name holds (lowercase).
_NAME_NEEDLES = ("pass", "pwd", "secret", "token", "auth", "key", "credential", "cookie")
#: Where a secret-named assignment may start: the needle, from which the name is widened to its full extent.
_NAME_ANCHOR = re.compile("|".join(_NAME_NEEDLES), _I)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
_VALUE = r"""(?P<secret>\[REDACTED:[a-z0-9_]+\]|"[^"\n]{1,512}"|'[^'\n]{1,512}'|[^\s"'`,;&()\[\]{}<>]{1,512})"""

BUILTIN_RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        needles=("private key",),
    ),
    Rule(
        "url_password",
        re.compile(r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@?#\"']{0,256}:(?P<secret>[^\s@/?#\"']{1,256})@", _I),
        "secret",
        check=_url_password_check,
        needles=("://",),
    ),
    Rule("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}"), needles=("sk-ant-",)),
    Rule(
        "openai_key",
        re.compile(r"\bsk-(?:proj-|svcacct-|admin-|None-)?(?P<body>[A-Za-z0-9_-]{20,})"),
        check=_random_group("body", min_length=20),
        needles=("sk-",),
    ),
    Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"), needles=("aiza",)),
    Rule(
        "google_oauth",
        re.compile(r"\b(?:GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[0-9A-Za-z_-]{20,})"),
        needles=("gocspx-", "ya29."),
    ),
    Rule(
        "aws_access_key",
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
        needles=("akia", "asia", "abia", "acca", "agpa", "aida", "aroa"),
    ),
    Rule(
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,255}|github_pat_[A-Za-z0-9_]{22,255})\b"),
        needles=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Rule(
        "gitlab_token",
        re.compile(r"\bgl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_-]{20,}"),
        needles=("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
    ),
    Rule(
        "slack_token",
        re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9_/]{20,}"),
        needles=("xox", "hooks.slack.com"),
    ),
    Rule(
        "stripe_key",
        re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}|\bwhsec_[A-Za-z0-9]{20,}"),
        needles=("_live_", "_test_", "whsec_"),
    ),
    Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), needles=("npm_",)),
    Rule("pypi_token", re.compile(r"\bpypi-[A-Za-z0-9_-]{40,}"), needles=("pypi-",)),
    Rule("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), needles=("eyj",)),
    Rule(
        "authorization",
        re.compile(
            r"\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest|bot|apikey)\s+)?"
            r"(?P<secret>[^\s\"',;]{4,})",
            _I,
        ),
        "secret",
        check=_credential_check,
        needles=("authorization",),
    ),
    Rule(
        "bearer_token",
        re.compile(r"\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{16,}=*)", _I),
        "secret",
        check=_credential_check,
        needles=("bearer",),
    ),
    Rule(
        "secret",
        re.compile(
            r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,80})[\"']?[ \t]*(?P<sep>:=|=>|=|:)[ \t]*" + _VALUE,
        ),
        "secret",
        check=_assignment_check,
        kind_of=_assignment_kind,
        needles=_NAME_NEEDLES,
        anchor=_NAME_ANCHOR,
    ),
    Rule(
        "secret",
        re.compile(r"(?<![\w-])--?(?P<name>[A-Za-z][A-Za-z0-9_-]{1,60})(?P<sep>\s+)" + _VALUE),
        "secret",
        check=_flag_check,
        kind_of=_assignment_kind,
        needles=_NAME_NEEDLES,
    ),
    Rule(
        "secret",
        re.compile(
            r"\b(?P<name>password|passwd|passphrase|secret|token|api[ _-]?key|access[ _-]?key|private[ _-]?key)s?\b"
            r"[^\n\[]{0,24}?(?P<secret>(?<![A-Za-z0-9+/_=.-])[A-Za-z0-9+/_=.-]{16,512})",
            _I,
        ),
        "secret",
        check=_prose_check,
        kind_of=_assignment_kind,
        needles=_NAME_NEEDLES,
    ),
)

_KIND = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def compile_extra_rules(patterns: Mapping[str, str]) -> tuple[Rule, ...]:
    """Operator rules `kind → regex`; raises ValueError naming the bad entry."""
    rules: list[Rule] = []
    for kind, source in patterns.items():
        if not _KIND.match(kind):
            raise ValueError(f"redaction kind {kind!r}: use lowercase letters, digits and _ (at most 41)")
        try:
            pattern = re.compile(source)
        except re.error as exc:
            raise ValueError(f"redaction pattern {kind!r}: {exc}") from exc
        rules.append(Rule(kind, pattern, "secret" if "secret" in pattern.groupindex else 0))
    return tuple(rules)


def compile_allow(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """Allow-list regexes; raises ValueError naming the bad entry."""
    compiled: list[re.Pattern[str]] = []
    for source in patterns:
        try:
            compiled.append(re.compile(source))
        except re.error as exc:
            raise ValueError(f"redaction allow pattern {source!r}: {exc}") from exc
    return tuple(compiled)


def _anchored(rule: Rule, text: str) -> Iterator[re.Match[str]]:
    """Matches of `rule.pattern` that start where a name holding an anchor starts, left to right."""
    assert rule.anchor is not None
    covered = 0
    for hit in rule.anchor.finditer(text):
        start = hit.start()
        if start < covered:
            continue
        while start > covered and text[start - 1] in _NAME_CHARS:
            start -= 1
        match = rule.pattern.match(text, start)
        if match is not None:
            covered = match.end()
            yield match


class Redactor:
    """Replaces secrets in text, JSON values and pydantic models; counts what it replaced, by kind.

    Returns its input object unchanged (the same object) when nothing matched, so callers can tell cheaply
    whether anything was redacted and the common case allocates nothing.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        extra_patterns: Mapping[str, str] | None = None,
        allow: Iterable[str] = (),
    ) -> None:
        self.enabled = enabled
        self._extra = compile_extra_rules(extra_patterns or {})
        self._allow = compile_allow(allow)
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------- text

    def redact(self, text: str, *, count: bool = True) -> str:
        """`text` with every secret replaced by `[REDACTED:<kind>]` (the same object when there was none).

        `count=False` for the service's own values (a configured URL shown in health), which are not
        secrets a client sent."""
        if not self.enabled or not text:
            return text
        found: Counter[str] = Counter()
        out = text
        lowered = text.lower()
        for rule in BUILTIN_RULES:
            if any(needle in lowered for needle in rule.needles):
                out = self._apply(rule, out, found)
        for rule in self._extra:
            out = self._apply(rule, out, found)
        if not found:
            return text
        if not count:
            return out
        with self._lock:
            self._counts.update(found)
        return out

    def _apply(self, rule: Rule, text: str, found: Counter[str]) -> str:
        def replace(m: re.Match[str]) -> str:
            secret = m.group(rule.group)
            if not secret or _ALREADY.search(m.group(0)) or (rule.check is not None and not rule.check(m)):
                return m.group(0)
            bare = secret.strip("\"'")
            if any(allowed.fullmatch(bare) for allowed in self._allow):
                return m.group(0)
            kind = rule.kind_of(m) if rule.kind_of is not None else rule.kind
            found[kind] += 1
            quote = secret[0] if secret[:1] in {'"', "'"} and secret[-1:] == secret[0] and len(secret) > 1 else ""
            start, end = m.start(rule.group) - m.start(0), m.end(rule.group) - m.start(0)
            whole = m.group(0)
            return whole[:start] + quote + MARKER.format(kind=kind) + quote + whole[end:]

        if rule.anchor is None:
            return rule.pattern.sub(replace, text)
        pieces: list[str] = []
        done = 0
        for match in _anchored(rule, text):
            pieces += (text[done : match.start()], replace(match))
            done = match.end()
        return "".join(pieces) + text[done:] if pieces else text

    # ----------------------------------------------------------------------------- structures

    def redact_value(self, value: Any, key: str | None = None) -> Any:
        """A JSON-like value with secrets replaced in every string; a string under a secret-named key is
        judged as an assignment to that name (`{"password": "hunter2"}`)."""
        if not self.enabled:
            return value
        if isinstance(value, str):
            if key is not None:
                strength = name_strength(key)
                if (
                    strength is not None
                    and _plausible_value(value, strength, spaced=False, quoted=True)
                    and not _ALREADY.search(value)
                    and not any(allowed.fullmatch(value) for allowed in self._allow)
                ):
                    kind = kind_for_name(key)
                    with self._lock:
                        self._counts[kind] += 1
                    return MARKER.format(kind=kind)
            return self.redact(value)
        if isinstance(value, BaseModel):
            return self.redact_model(value)
        if isinstance(value, dict):
            changed = False
            out: dict[Any, Any] = {}
            for k, v in value.items():
                new_key = self.redact(k) if isinstance(k, str) else k
                new = self.redact_value(v, k if isinstance(k, str) else None)
                changed = changed or new is not v or new_key is not k
                out[new_key] = new
            return out if changed else value
        if isinstance(value, list | tuple):
            items = [self.redact_value(v) for v in value]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return type(value)(items) if isinstance(value, tuple) else items
        return value

    def redact_model(self, model: BaseModel) -> BaseModel:
        """A copy of `model` with secrets replaced in every field (the same object when there was none)."""
        if not self.enabled:
            return model
        updates: dict[str, Any] = {}
        for name in type(model).model_fields:
            old = getattr(model, name)
            new = self.redact_value(old)
            if new is not old:
                updates[name] = new
        return model.model_copy(update=updates) if updates else model

    # ----------------------------------------------------------------------------- counters

    def counts(self) -> dict[str, int]:
        """Replacements since the process started, by kind."""
        with self._lock:
            return dict(sorted(self._counts.items()))
