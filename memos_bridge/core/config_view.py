"""`core.config`: the effective settings as a client may see them — every secret masked.

A person looking at the viewer's settings page wants to see what the service actually runs with (file, env
overrides and defaults merged), but the page may be on a shared screen, in a screenshot or in a bug report,
so a secret never leaves the service. Masked, when set:

* a setting whose name says it holds one — it contains `token`, `key`, `secret` or `password`
  (`transport.token`, `llm.api_key`) — unless its value is a number or a switch (`session.turn_key_cache`,
  `llm.max_tokens` are sizes, not secrets);
* the password of a URL setting (`storage.url = "postgresql://me:…@db/memos"`), and any credential the
  built-in redaction rules find in it (an `api_key=` query parameter).

Only settings are masked by name, not the keys of free-form tables: `redaction.patterns` maps a kind name
(which may well be `api_key`) to a regex, and regexes are configuration, not secrets, so they are shown.
A masked value is `"••••"`; an unset one stays null, so the page can tell "not configured" from "hidden".
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, SecretStr

from memos_bridge.config import Settings, env_names
from memos_bridge.contract import dto
from memos_bridge.rules.secrets import Redactor

MASK: Final = "••••"
SECRET_WORDS: Final = ("token", "key", "secret", "password")
_URL_PASSWORD: Final = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/@:]*):[^/@]*@")
_REDACTOR: Final = Redactor(enabled=True)


def is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def mask_url(url: str) -> str:
    """`url` with its password (`scheme://user:password@host`) and any credential it carries masked."""
    redacted = _REDACTOR.redact(url, count=False)  # first: its URL rule would take the mask for a password
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:{MASK}@", redacted)


def _value(name: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, BaseModel):
        return masked(value)
    if is_secret_name(name) and not isinstance(value, bool | int | float):
        return MASK
    if isinstance(value, SecretStr):  # a secret type under an innocent name is still a secret
        return MASK
    if isinstance(value, str) and name.lower().endswith("url"):
        return mask_url(value)
    if isinstance(value, Mapping):  # a free-form table: shown as configured (see the module docstring)
        return {str(k): v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in value.items()}
    return _plain(value)


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a non-model value (paths become strings, tuples lists)."""
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool):
        return value
    return str(value)


def masked(model: BaseModel) -> dict[str, Any]:
    """`model`'s fields (nested sections included) as JSON, secrets masked."""
    return {name: _value(name, getattr(model, name)) for name in type(model).model_fields}


def core_config(settings: Settings, env: Mapping[str, str] | None = None) -> dto.CoreConfigResult:
    environ = os.environ if env is None else env
    return dto.CoreConfigResult(
        settings=masked(settings),
        sources=dto.ConfigSourcesDTO(
            config_file=str(settings.config_path),
            config_file_exists=settings.config_path.is_file(),
            env=env_names(environ),
        ),
    )
