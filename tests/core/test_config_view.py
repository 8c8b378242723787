"""`core.config`'s masking: secrets by setting name and in URLs, never sizes, switches or redaction patterns."""

from __future__ import annotations

import json
from pathlib import Path

from memos_bridge.config import env_names, load_settings
from memos_bridge.core.config_view import MASK, core_config, mask_url

TOKEN = "tok-unit-8c1e55d0a4b2"
KEY = "sk-unit-abcdefghijklmnop1234"


def test_secrets_are_masked_and_everything_else_is_shown(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[llm]\nprovider = "openai_compatible"\nbase_url = "http://me:hunter2@127.0.0.1:11434/v1"\n\n'
        '[redaction.patterns]\ninternal_token = "INT-[0-9]{8}"\n',
        encoding="utf-8",
    )
    env = {"MEMOS_BRIDGE_TOKEN": TOKEN, "MEMOS_BRIDGE_LLM__API_KEY": KEY, "MEMOS_BRIDGE_RETRIEVAL__TIER1_TOP_K": "2"}
    settings = load_settings(tmp_path, env=env)
    result = core_config(settings, env={**env, "PATH": "/usr/bin", "MEMOS_BRIDGE_RETRIEVAL_TIER2_TOP_K": "9"})
    text = json.dumps(result.to_wire(), ensure_ascii=False)
    assert TOKEN not in text and KEY not in text and "hunter2" not in text
    shown = result.settings
    assert shown["transport"]["token"] == MASK and shown["llm"]["api_key"] == MASK
    assert shown["llm"]["base_url"] == f"http://me:{MASK}@127.0.0.1:11434/v1"
    assert shown["storage"]["url"] is None  # unset: null, not masked
    assert shown["session"]["turn_key_cache"] == 4096 and shown["llm"]["max_tokens"] == 1024
    assert shown["redaction"]["patterns"] == {"internal_token": "INT-[0-9]{8}"}
    assert shown["retrieval"]["tier1_top_k"] == 2 and shown["home"] == str(tmp_path)
    assert result.sources.config_file_exists and result.sources.config_file == str(tmp_path / "config.toml")
    # names of what was read; a variable the settings do not read (a typo) is not a source
    assert result.sources.env == [
        "MEMOS_BRIDGE_LLM__API_KEY",
        "MEMOS_BRIDGE_RETRIEVAL__TIER1_TOP_K",
        "MEMOS_BRIDGE_TOKEN",
    ]


def test_url_credentials_and_env_names() -> None:
    assert (
        mask_url("postgresql+psycopg://memos:s3cr3t@db:5432/memos")
        == f"postgresql+psycopg://memos:{MASK}@db:5432/memos"
    )
    assert mask_url("sqlite:////home/me/.memos-bridge/memos.db") == "sqlite:////home/me/.memos-bridge/memos.db"
    assert "sk-abcdefabcdef1234567890" not in mask_url("https://api.example.com/v1?api_key=sk-abcdefabcdef1234567890")
    assert env_names({"MEMOS_BRIDGE_HOME": "/x", "MEMOS_BRIDGE_LIGHTWEIGHT": "1", "HOME": "/root"}) == [
        "MEMOS_BRIDGE_HOME",
        "MEMOS_BRIDGE_LIGHTWEIGHT",
    ]
