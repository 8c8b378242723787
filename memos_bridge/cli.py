"""Command line: `serve` (stdio, default), `serve --tcp HOST:PORT`, `doctor`, `demo`, `contract`, `llm serve`,
`memories …` (see `cli_memories.py`), `backup PATH`, `migrate --from … --to …` (see `cli_migrate.py`), and the
MCP face's `mcp`, `hook`, `install`, `uninstall` (see `cli_mcp.py`).

Imports stay light at module level: `serve` must claim stdout for the protocol before anything that may
print (onnxruntime, loguru) is imported.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def _parse_hostport(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError("expected HOST:PORT, e.g. 127.0.0.1:18911")
    return host.strip("[]") or "127.0.0.1", int(port)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memos-bridge", description="Self-evolving memory service for LLM agents.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command")

    serve = sub.add_parser("serve", help="serve JSON-RPC on stdio (default) or TCP")
    serve.add_argument("--tcp", type=_parse_hostport, metavar="HOST:PORT", help="daemon mode on a TCP address")
    serve.add_argument("--home", help="data home (default: $MEMOS_BRIDGE_HOME or ~/.memos-bridge)")
    serve.add_argument("--lightweight", action="store_true", help="capture + retrieval only")
    serve.add_argument(
        "--no-attach",
        action="store_true",
        help="exit 2 when another process already serves the data home, instead of attaching to it",
    )
    serve.add_argument(
        "--viewer", type=_parse_hostport, metavar="HOST:PORT", help="also serve the web viewer (e.g. 127.0.0.1:18799)"
    )

    viewer = sub.add_parser(
        "viewer",
        help="the web viewer: see what the agent learnt, live, and correct it",
        description="Serves the viewer from this process, which then owns the data home (hosts attach to it). "
        "Loopback by default; any other address needs transport.token, asked at a login page.",
    )
    viewer.add_argument(
        "--bind",
        type=_parse_hostport,
        default=("127.0.0.1", 18799),
        metavar="HOST:PORT",
        help="default 127.0.0.1:18799",
    )
    viewer.add_argument("--home", help="data home (default: $MEMOS_BRIDGE_HOME or ~/.memos-bridge)")

    doctor = sub.add_parser("doctor", help="print data home, database, schema version, embedder status, counts")
    doctor.add_argument("--home")
    doctor.add_argument("--no-model", action="store_true", help="skip loading the embedding model")

    from memos_bridge import cli_memories  # stdlib-only at import time, like this module

    cli_memories.add_parser(sub)

    from memos_bridge import cli_mcp  # stdlib-only at import time

    cli_mcp.add_parsers(sub)

    from memos_bridge import cli_migrate  # stdlib-only at import time

    cli_migrate.add_parser(sub)

    from memos_bridge.backup import RESTORE_HELP  # stdlib-only at import time

    backup = sub.add_parser(
        "backup",
        help="copy the data home's SQLite database to PATH, consistent even while it is served",
        description="Copy the data home's SQLite database with SQLite's online backup API: a consistent copy even "
        "while a service writes to it. The copy is checked with PRAGMA integrity_check before it is kept.",
        epilog=RESTORE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    backup.add_argument("path", help="the file to write")
    backup.add_argument("--home", help="data home (default: $MEMOS_BRIDGE_HOME or ~/.memos-bridge)")
    backup.add_argument("--overwrite", action="store_true", help="replace an existing PATH (with a verified copy)")

    demo = sub.add_parser("demo", help="run a short scripted session that shows capture and recall")
    demo.add_argument("--home", help="data home for the demo (default: a temporary folder)")

    contract = sub.add_parser("contract", help="generate or check contracts/ (OpenRPC + JSON Schemas)")
    group = contract.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true")
    group.add_argument("--check", action="store_true")
    contract.add_argument("--dir", default="contracts", help="contract folder (default: ./contracts)")

    from memos_bridge.llm.local import MODELS  # stdlib-only module: cheap to import here

    llm = sub.add_parser("llm", help="local LLM tools (needs the local-llm extra)")
    llm_sub = llm.add_subparsers(dest="llm_command", required=True)
    llm_serve = llm_sub.add_parser("serve", help="serve a PyPI-shipped model as an OpenAI-compatible API on 127.0.0.1")
    llm_serve.add_argument("--model", required=True, choices=sorted(MODELS))
    llm_serve.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    llm_serve.add_argument("--threads", type=int, default=2)
    llm_serve.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    llm_serve.add_argument("--home", help="data home; the verified model is cached in <home>/models/llm/")
    return parser


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {"lightweight": True} if getattr(args, "lightweight", False) else {}


def _cmd_serve(args: argparse.Namespace) -> int:
    # One BLAS thread: vector search is a single matrix-vector product per query, and OpenBLAS's thread
    # hand-off costs more than it saves (10k x 384: 16 ms with 2 threads under load, 2.4 ms with 1).
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    tcp = args.tcp
    if tcp is None and args.command != "viewer":
        from memos_bridge.transport.stdio import claim_stdio

        claim_stdio()  # before any import that may print
    import anyio

    from memos_bridge.config import ensure_home, env_typos, load_settings
    from memos_bridge.contract.errors import MemosError
    from memos_bridge.logging_setup import configure_logging

    for hint in env_typos(os.environ):
        print(f"memos-bridge: warning: {hint}", file=sys.stderr)
    try:
        settings = load_settings(args.home, overrides=_overrides(args))
    except MemosError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        return 2
    from memos_bridge.transport import owner
    from memos_bridge.transport.tcp import PortInUse, check_bind_allowed, check_port_free

    if tcp is not None:  # checked before the home or its database is created
        try:
            check_bind_allowed(tcp[0], settings.transport.token)
            check_port_free(tcp[0], tcp[1])
        except MemosError as exc:
            print(f"memos-bridge: {exc.message}", file=sys.stderr)
            return 2
        except PortInUse as exc:
            print(f"memos-bridge: {exc.strerror}", file=sys.stderr)
            return 1
    viewer_sock = None
    if getattr(args, "viewer", None) is not None:
        from memos_bridge.viewer.runner import bind_socket

        try:
            viewer_sock = bind_socket(args.viewer[0], args.viewer[1], settings.transport.token)
        except MemosError as exc:
            print(f"memos-bridge: {exc.message}", file=sys.stderr)
            return 2
    try:
        ensure_home(settings)
        lock = owner.try_lock(settings.home)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"memos-bridge: cannot use data home {settings.home}: {reason}; choose a writable folder "
            "(--home or MEMOS_BRIDGE_HOME)",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings)
    from memos_bridge import server

    if lock is None and args.command == "viewer":
        if viewer_sock is not None:
            viewer_sock.close()  # the owner binds it instead
        return _view_through_owner(settings.home, args.bind)
    if lock is None:
        if viewer_sock is not None:
            viewer_sock.close()
            print(
                "memos-bridge: warning: the data home's owner serves the viewer, not this attached process; "
                "run `memos-bridge viewer` once the owner is gone, or start the owner with --viewer",
                file=sys.stderr,
            )
        if tcp is not None or args.no_attach:
            return _refuse(settings.home)
        lock = _attach_until_owner(settings.home)
        if lock is None:
            return 0  # the host ended its input while attached: a normal end
    try:
        if getattr(args, "command", None) == "viewer":
            anyio.run(server.run_owner, settings, lock.socket_path, viewer_sock)
        elif tcp is None:
            anyio.run(server.run_stdio, settings, lock.socket_path, viewer_sock)
        else:
            anyio.run(server.run_tcp, settings, tcp[0], tcp[1], None, lock.socket_path, viewer_sock)
    except MemosError as exc:
        print(f"memos-bridge: {exc.message}", file=sys.stderr)
        return 2
    except PortInUse as exc:
        print(f"memos-bridge: {exc.strerror}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        matched, _rest = group.split(MemosError)
        if matched is None:
            raise
        first = matched.exceptions[0]
        print(f"memos-bridge: {getattr(first, 'message', first)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        lock.release()
    return 0


#: `_view_through_owner`: the owner it attached to went away.
OWNER_LEFT = -75


def _cmd_viewer(args: argparse.Namespace) -> int:
    """`serve` with no host of its own: own the home, serve its socket and the viewer until Ctrl-C; when
    another process owns the home, that process serves the viewer, and when it stops, this command takes
    over (or attaches to whichever process took over first)."""
    args.tcp, args.viewer, args.no_attach, args.lightweight = None, args.bind, True, False
    while True:
        status = _cmd_serve(args)
        if status != OWNER_LEFT:
            return status
        print("memos-bridge: the data home's owner stopped; serving the viewer again", file=sys.stderr, flush=True)
        time.sleep(0.5)


def _view_through_owner(home: Path, bind: tuple[str, int]) -> int:
    """Another process owns the home: ask it to serve the viewer (`viewer.start`), and stay attached so it
    keeps serving after its own host leaves, until Ctrl-C. `OWNER_LEFT` when the owner goes away (the caller
    then serves the viewer itself, or through the next owner)."""
    from memos_bridge.client import RpcError, TransportClosed
    from memos_bridge.home_client import open_client, owner_socket

    if owner_socket(home) is None:
        print(f"memos-bridge: data home {home} is locked but its owner does not answer", file=sys.stderr)
        return 1
    client = open_client(home)
    try:
        answer = client.viewer_start(host=bind[0], port=bind[1])
        state = "viewer on" if answer["started"] else "viewer already on"
        print(f"memos-bridge: {state} {answer['url']} (served by the process that owns {home}; Ctrl-C to leave)")
        while True:
            client.call("core.ping", timeout=10)
            time.sleep(2)
    except RpcError as exc:
        print(f"memos-bridge: {exc}", file=sys.stderr)
        return 2
    except TransportClosed:
        return OWNER_LEFT
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()


def _refuse(home: Path) -> int:
    """`--no-attach` (or a TCP daemon, which cannot relay) on a home another process serves: exit 2."""
    from memos_bridge.transport import owner

    info = owner.read_owner(home)
    who = f"pid {info.pid}" if info.pid is not None else "another process"
    print(f"memos-bridge: data home {home} is served by {who}", file=sys.stderr)
    return 2


def _attach_until_owner(home: Path) -> Any:
    """Relay this host's stdio to the owner of `home`; when the owner goes away while the host is still
    connected, take the home over (wait for the lock) and return it, so the caller serves the rest of the
    host's input itself. None when the host ended its input (nothing left to serve).

    A request the host sent while the owner was dying may get no answer; retries are safe (turnKey,
    evidenceId and step keys make every write idempotent)."""
    import time

    from memos_bridge.transport import owner
    from memos_bridge.transport.stdio import claim_stdio

    channel = claim_stdio()
    while True:
        info = owner.read_owner(home)
        if info.socket_path is not None:
            try:
                ended = owner.relay(info.socket_path, channel.read_fd, channel.write_fd) == 0
            except OSError:
                ended = False  # no listener (yet, or any more): try to become the owner
            if ended:
                return None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            lock = owner.try_lock(home)
            if lock is not None:
                print(f"memos-bridge: taking over data home {home}", file=sys.stderr)
                return lock
            if owner.read_owner(home).socket_path not in (None, info.socket_path) or _listening(home):
                break  # another process took over first: attach to it
            time.sleep(0.1)
        else:
            print(f"memos-bridge: data home {home} is locked but its owner does not answer", file=sys.stderr)
            raise SystemExit(1)


def _listening(home: Path) -> bool:
    import socket

    from memos_bridge.transport import owner

    path = owner.read_owner(home).socket_path
    if path is None:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _cmd_doctor(args: argparse.Namespace) -> int:
    from memos_bridge.doctor import run_doctor

    return run_doctor(args.home, load_model=not args.no_model)


def _cmd_memories(args: argparse.Namespace) -> int:
    from memos_bridge.cli_memories import run

    return run(args)


def _cmd_backup(args: argparse.Namespace) -> int:
    from memos_bridge.backup import run_backup

    return run_backup(args.home, args.path, overwrite=args.overwrite)


def _cmd_demo(args: argparse.Namespace) -> int:
    from memos_bridge.demo import run_demo

    return run_demo(args.home)


def _cmd_contract(args: argparse.Namespace) -> int:
    from memos_bridge.contract.openrpc import diff_contract, write_contract

    root = Path(args.dir)
    if args.write:
        written = write_contract(root)
        print(f"contract: {len(written)} file(s) updated under {root}")
        return 0
    problems = diff_contract(root)
    for problem in problems:
        print(f"contract drift: {problem}")
    if problems:
        print("run `memos-bridge contract --write` and commit the result")
        return 1
    print("contract: up to date")
    return 0


def _cmd_llm(args: argparse.Namespace) -> int:
    import os

    from memos_bridge.config import default_home
    from memos_bridge.llm.local import LocalModelError, serve_forever

    home = Path(args.home).expanduser() if args.home else default_home(os.environ)
    try:
        return serve_forever(args.model, home, port=args.port, threads=args.threads, n_ctx=args.ctx)
    except LocalModelError as exc:
        print(f"memos-bridge: {exc}", file=sys.stderr)
        return 2


def _cmd_mcp(args: argparse.Namespace) -> int:
    from memos_bridge.cli_mcp import cmd_mcp

    return cmd_mcp(args)


def _cmd_hook(args: argparse.Namespace) -> int:
    from memos_bridge.cli_mcp import cmd_hook

    return cmd_hook(args)


def _cmd_install(args: argparse.Namespace) -> int:
    from memos_bridge.cli_mcp import cmd_install

    return cmd_install(args)


def _cmd_migrate(args: argparse.Namespace) -> int:
    from memos_bridge.cli_migrate import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.version:
        from memos_bridge import __version__

        print(__version__)
        return 0
    if args.command is None:  # bare `memos-bridge` serves on stdio, as hosts spawn it
        args = _build_parser().parse_args(["serve"])
    command = args.command
    handlers = {
        "serve": _cmd_serve,
        "viewer": _cmd_viewer,
        "doctor": _cmd_doctor,
        "memories": _cmd_memories,
        "backup": _cmd_backup,
        "migrate": _cmd_migrate,
        "demo": _cmd_demo,
        "contract": _cmd_contract,
        "llm": _cmd_llm,
        "mcp": _cmd_mcp,
        "hook": _cmd_hook,
        "install": _cmd_install,
        "uninstall": _cmd_install,
    }
    return handlers[command](args)


if __name__ == "__main__":
    raise SystemExit(main())
