"""stdio transport: the host spawns us and speaks JSON-RPC over our stdin/stdout.

stdout is the protocol stream, so a single stray byte on it (a `print`, a banner from a native library,
a warning from onnxruntime) corrupts the conversation. `claim_stdio()` therefore moves the protocol to
private file descriptors at process start and points fd 1 (and `sys.stdout`) at stderr, where such noise
is harmless; fd 0 is pointed at /dev/null so nothing else can consume protocol input either. Private
descriptors made by `os.dup` are not inherited by child processes, which also keeps a subprocess from
holding the host's pipe open after we exit.

Neither asyncio nor anyio offers portable non-blocking stdio (and switching an inherited descriptor to
O_NONBLOCK would also affect every other process sharing it, a terminal for instance), so:

* stdin is read by one dedicated daemon thread with large `os.read` calls; each chunk, which may hold
  many lines, crosses to the event loop once. A small bounded hand-off queue makes the thread wait when
  the loop is not consuming, which carries the peer's back-pressure through to the pipe;
* stdout is written by a second daemon thread, one hop per batch the peer's writer has accumulated.

Both are daemon threads on purpose: a host that stops draining our stdout (or never closes stdin) must
not be able to keep this process alive after the transport has given up on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel

from memos_bridge.config import TransportSettings
from memos_bridge.transport.dispatch import Method, MethodTable
from memos_bridge.transport.peer import Peer

logger = logging.getLogger(__name__)

READ_CHUNK = 1 << 18
_HANDOFF_CHUNKS = 4


@dataclass(frozen=True, slots=True)
class StdioChannel:
    """The private descriptors that carry the protocol after `claim_stdio()`."""

    read_fd: int
    write_fd: int


_claimed: StdioChannel | None = None


def claim_stdio() -> StdioChannel:
    """Take fds 0/1 for the protocol and divert everything else; call first thing at process start.

    Call it before importing anything that may write to stdout (onnxruntime, loguru, ...). Idempotent: a
    second call returns the channel claimed by the first.
    """
    global _claimed
    if _claimed is not None:
        return _claimed
    channel = StdioChannel(read_fd=os.dup(0), write_fd=os.dup(1))
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr at all: discard stray output rather than corrupt the protocol
        _point_at_devnull(1, os.O_WRONLY)
    _point_at_devnull(0, os.O_RDONLY)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()  # anything buffered before the claim now lands on stderr
    sys.stdout = sys.stderr
    _claimed = channel
    return channel


def _point_at_devnull(fd: int, flags: int) -> None:
    devnull = os.open(os.devnull, flags)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class FdReader:
    """Reads a blocking file descriptor in a daemon thread and hands chunks to the event loop.

    A daemon thread rather than an anyio worker: the blocking `os.read` cannot be interrupted, and a
    non-daemon thread stuck in it would keep the process from exiting.
    """

    def __init__(self, fd: int, chunk_size: int = READ_CHUNK) -> None:
        self._fd = fd
        self._chunk_size = chunk_size
        self._send, self._receive = anyio.create_memory_object_stream[bytes](_HANDOFF_CHUNKS)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; call from within the event loop."""
        token = anyio.lowlevel.current_token()
        name = f"memos-read-fd{self._fd}"
        self._thread = threading.Thread(target=self._run, args=(token,), name=name, daemon=True)
        self._thread.start()

    async def receive(self) -> bytes:
        """Next chunk, `b""` at end of input."""
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return b""

    def close(self) -> None:
        """Stop consuming; the thread ends at its next hand-off."""
        self._receive.close()

    def _run(self, token: anyio.lowlevel.EventLoopToken) -> None:
        try:
            while True:
                try:
                    data = os.read(self._fd, self._chunk_size)
                except OSError as exc:
                    logger.warning("reading fd %d failed: %r; treating as end of input", self._fd, exc)
                    data = b""
                if not data:
                    break
                anyio.from_thread.run(self._send.send, data, token=token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.RunFinishedError):
            pass  # the loop side stopped listening
        finally:
            with contextlib.suppress(anyio.RunFinishedError):
                anyio.from_thread.run_sync(self._send.close, token=token)


class _Write:
    __slots__ = ("data", "done", "error")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.done = anyio.Event()
        self.error: OSError | None = None


class FdWriter:
    """Writes to a blocking file descriptor from a dedicated daemon thread, one batch at a time.

    Not an anyio worker thread: those are joined at interpreter exit, so one stuck in `os.write` on a
    pipe the host no longer drains would keep the process alive for ever. A cancelled `send` abandons
    its write; the daemon thread dies with the process.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._queue: queue.SimpleQueue[_Write | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread; call from within the event loop."""
        token = anyio.lowlevel.current_token()
        name = f"memos-write-fd{self._fd}"
        self._thread = threading.Thread(target=self._run, args=(token,), name=name, daemon=True)
        self._thread.start()

    async def send(self, data: bytes) -> None:
        """Write all of `data`; raises the OSError (e.g. BrokenPipeError) the write failed with."""
        if self._thread is None:
            raise RuntimeError("FdWriter.start() was not called")
        job = _Write(data)
        self._queue.put(job)
        await job.done.wait()
        if job.error is not None:
            raise job.error

    def close(self) -> None:
        """Let the thread finish once the queued writes are done."""
        self._queue.put(None)

    def _run(self, token: anyio.lowlevel.EventLoopToken) -> None:
        while (job := self._queue.get()) is not None:
            try:
                _write_all(self._fd, job.data)
            except OSError as exc:
                job.error = exc
            try:
                anyio.from_thread.run_sync(job.done.set, token=token)
            except anyio.RunFinishedError:
                return


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


async def serve_stdio(
    methods: Mapping[str, Method] | MethodTable,
    settings: TransportSettings,
    *,
    on_peer: Callable[[Peer], object] | None = None,
    channel: StdioChannel | None = None,
) -> None:
    """Serve one host over the claimed stdio until its input ends, then return.

    `channel` defaults to `claim_stdio()` (claiming now if nobody did, which is too late to catch output
    printed during imports). `on_peer` is called with the new peer before serving starts (e.g.
    `PeerHub.add`).
    """
    channel = channel if channel is not None else claim_stdio()
    reader = FdReader(channel.read_fd)
    writer = FdWriter(channel.write_fd)
    reader.start()
    writer.start()
    try:
        peer = Peer(
            reader.receive,
            writer.send,
            methods,
            settings,
            connection_id="stdio",
            transport="stdio",
        )
        if on_peer is not None:
            on_peer(peer)
        await peer.serve()
    finally:
        reader.close()
        writer.close()
