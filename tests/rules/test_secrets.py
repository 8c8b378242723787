"""The secret filter: every kind it knows in the shapes tool output shows them, and no false alarms on code,
prose, placeholders or ids."""

from __future__ import annotations

import pytest

from memos_bridge.contract import dto
from memos_bridge.rules.secrets import Redactor, entropy_bits, looks_random, name_strength

POSITIVES: list[tuple[str, str, str]] = [
    # (text, the secret that must go, kind)
    (
        "OPENAI_API_KEY=sk-proj-Ab3dEf9hIjKlMn0pQrStUvWxYz1234567890abcd",
        "sk-proj-Ab3dEf9hIjKlMn0pQrStUvWx",
        "openai_key",
    ),
    (
        "key sk-Zq8XwP2mN4bV6cL1kJ9hG3fD5sA7eR0tY2uI4oP6 in use",
        "sk-Zq8XwP2mN4bV6cL1kJ9hG3fD5sA7eR0tY2uI4oP6",
        "openai_key",
    ),
    (
        "export ANTHROPIC_API_KEY='sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2'",
        "sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2",
        "anthropic_key",
    ),
    ("maps: AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "google_api_key"),
    ("aws_access_key_id = AKIAZ7Q3L5N2X8W4Y6V1", "AKIAZ7Q3L5N2X8W4Y6V1", "aws_access_key"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG", "aws_secret_key"),
    (
        "git remote set-url origin https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r",
        "ghp_16C7e42F",
        "github_token",
    ),
    ("token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github_pat_11ABCDEFG", "github_token"),
    ("CI uses glpat-xXyYzZ1234567890abcd for the registry", "glpat-xXyYzZ1234567890abcd", "gitlab_token"),
    ("slack: xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-1234567890", "slack_token"),
    ("Stripe.api_key = 'sk_live_4eC39HqLyjWDarjtT1zdp7dc'", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
    ("//registry.npmjs.org/:_authToken=npm_abcdefghijklmnopqrstuvwxyz0123456789", "npm_abcdefghij", "npm_token"),
    (
        "password = pypi-AgEIcHlwaS5vcmcCJGE0ZjM2ZTFiLTU2NmYtNDk2ZS1hMjQxLWE0ZDI3NTQ5ZjU1MQ",
        "pypi-AgEIcHlwaS5vcmc",
        "pypi_token",
    ),
    (
        "cookie: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0",
        "jwt",
    ),
    ('curl -H "Authorization: Basic Zm9vYmFyOmJhenF1eDEyMzQ1" https://x', "Zm9vYmFyOmJhenF1eDEyMzQ1", "authorization"),
    (
        "requests.get(url, headers={'Authorization': 'Bearer 9f8e7d6c5b4a39281706abcd'})",
        "9f8e7d6c5b4a39281706abcd",
        "authorization",
    ),
    ("sent Bearer Q2hhbmdlTWVQbGVhc2UxMjM0NTY3OA== to the proxy", "Q2hhbmdlTWVQbGVhc2UxMjM0NTY3OA", "bearer_token"),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "private_key",
    ),
    (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC (truncated)",
        "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC",
        "private_key",
    ),
    ("DATABASE_URL=postgresql://app:Xk2p9Lq7@db.internal:5432/prod", "Xk2p9Lq7", "url_password"),
    ("redis://:hunter2@cache:6379/0", "hunter2", "url_password"),
    ("DB_PASSWORD=changeme", "changeme", "password"),
    ("db:\n  passwd: Tr0ub4dor#3", "Tr0ub4dor#3", "password"),
    ('{"password": "correct horse battery staple"}', "correct horse battery staple", "password"),
    ("mysql -u root --password s3cr3t! -h db", "s3cr3t!", "password"),
    ("client_secret=Pq9xV2mL7kR4tW8z", "Pq9xV2mL7kR4tW8z", "secret"),
    ("APP_SECRET: 'a-very-long-phrase-nobody-guesses'", "a-very-long-phrase-nobody-guesses", "secret"),
    ("X_AUTH_TOKEN=4f9d2c7a1b8e6f3d0a5c9b2e7f1a4d8c", "4f9d2c7a1b8e6f3d0a5c9b2e7f1a4d8c", "token"),
    ("--token 9Kq2LmX8vB4nR7tY1wZ3", "9Kq2LmX8vB4nR7tY1wZ3", "token"),
    ("the deploy token is 8f3kQ2xLm9Zr7TpW4vYb, keep it safe", "8f3kQ2xLm9Zr7TpW4vYb", "token"),
    ("我的 API key 是 Zx81kd9QmP02LxV7Rt5s 请保存", "Zx81kd9QmP02LxV7Rt5s", "api_key"),
]

NEGATIVES: list[str] = [
    "max_tokens = 600",
    "def login(password: str) -> None:",
    "password: Optional[str] = None",
    "Password: required, at least 12 characters",
    "api_key = settings.api_key.get_secret_value()",
    "self._api_key = api_key",
    "token = match.group(0).strip()",
    "def _run(self, token: anyio.lowlevel.EventLoopToken) -> None:",
    "for token in content_tokens(_THOUSANDS_SEPARATOR.sub('', text)):",
    "key = name[len(ENV_PREFIX) :].lower()",
    "session_id=hermes-reinit-1",
    'signature="docker|_|bash|EACCES"',
    "author: Jane Doe",
    'curl -H "Authorization: Bearer $FERRY_TOKEN" https://deploy.example.com',
    "the Deploy API rejects Authorization: Bearer (401)",
    "PASSWORD=${DB_PASSWORD}",
    "password=<your password>",
    "export API_KEY=",
    "see scheme://user:password@host in the docs",
    "commit 3f2a9b1c4d5e6f708192a3b4c5d6e7f8091a2b3c fixed the parser",
    "request id 123e4567-e89b-12d3-a456-426614174000 timed out",
    "cp /usr/local/lib/python3.11/site-packages/x.py /tmp/y.py",
    "The total weight was 1234567.89 kg over 42 shipments.",
    "Use the token bucket limiter with a rate of 50 per second.",
    "sk-learn is a typo for scikit-learn",
    "我们下周二开会，讨论密码策略。",
    "Deploy API auth = X-Deploy-Token header.",
]


@pytest.mark.parametrize(("text", "secret", "kind"), POSITIVES)
def test_every_kind_is_redacted_with_its_marker(text: str, secret: str, kind: str) -> None:
    redactor = Redactor()
    out = redactor.redact(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out, out
    assert redactor.counts().get(kind, 0) >= 1
    assert redactor.redact(out) == out  # idempotent: a second pass finds nothing new


@pytest.mark.parametrize("text", NEGATIVES)
def test_code_prose_placeholders_and_ids_are_left_alone(text: str) -> None:
    redactor = Redactor()
    assert redactor.redact(text) is text
    assert redactor.counts() == {}


def test_json_values_under_secret_names_and_models() -> None:
    redactor = Redactor()
    value = {"user": "bob", "password": "hunter2", "headers": {"X-Api-Key": "Zx81kd9QmP02LxV7"}, "n": [1, "ok"]}
    out = redactor.redact_value(value)
    assert out == {
        "user": "bob",
        "password": "[REDACTED:password]",
        "headers": {"X-Api-Key": "[REDACTED:api_key]"},
        "n": [1, "ok"],
    }
    clean = {"user": "bob", "tokens": 12, "n": [1, "ok"]}
    assert redactor.redact_value(clean) is clean
    call = dto.ToolCallDTO(name="bash", input={"command": "env"}, output="GH=ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    redacted = redactor.redact_model(call)
    assert isinstance(redacted, dto.ToolCallDTO) and redacted.output == "GH=[REDACTED:github_token]"
    assert redactor.redact_model(redacted) is redacted


def test_extra_patterns_allow_list_and_off_switch() -> None:
    redactor = Redactor(extra_patterns={"employee_id": r"EMP-(?P<secret>\d{6})"}, allow=[r"AKIAIOSFODNN7EXAMPLE"])
    out = redactor.redact("EMP-123456 uses AKIAIOSFODNN7EXAMPLE and AKIAZ7Q3L5N2X8W4Y6V1")
    assert out == "EMP-[REDACTED:employee_id] uses AKIAIOSFODNN7EXAMPLE and [REDACTED:aws_access_key]"
    off = Redactor(enabled=False)
    text = "password=hunter2"
    assert off.redact(text) is text and off.counts() == {}
    with pytest.raises(ValueError, match="broken"):
        Redactor(extra_patterns={"broken": "([a-z"})
    with pytest.raises(ValueError, match="kind"):
        Redactor(extra_patterns={"Bad Kind": "x"})


def test_names_and_randomness_are_measured_not_listed() -> None:
    assert name_strength("DB_PASSWORD") == "strong" and name_strength("clientSecret") == "strong"
    assert name_strength("x-api-key") == "strong" and name_strength("AUTH_TOKEN") == "strong"
    assert name_strength("refresh_tokens") == "strong" and name_strength("csrf_token") == "weak"
    assert name_strength("author") is None and name_strength("max_tokens") == "weak"
    assert name_strength("high_pass") is None and name_strength("cache_key") is None
    assert looks_random("8f3kQ2xLm9Zr7TpW4vYb") and not looks_random("configuration-file")
    assert not looks_random("1234567890123456") and not looks_random("/usr/local/lib/python3")
    assert entropy_bits("aaaa") == 0 and entropy_bits("abcd") == 2
