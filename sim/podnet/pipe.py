"""SIMULATOR. In-memory byte streams: what a TCP connection to a simulated pod looks like.

`pipe()` returns the two ends of one connection. Each end reads what the other writes (an
`asyncio.StreamReader` underneath, so `read`, `readline` and `readexactly` behave as on a socket),
can half-close (`write_eof`: the peer reads b"" once it has read everything) and close (the peer's
later writes fail with `ConnectionResetError`, as writing to a socket the peer closed does). Writes
wait while the peer has more than `BUFFER_LIMIT` bytes unread, so a slow reader slows its writer
down instead of buffering without bound.

Nothing is bound on the host: port-forwards (`sim/apiserver/portforward.py`) and the tenant
gateway's data plane (`sim/controllers/gateway_dataplane.py`) open these to the simulated
workloads (`sim/podnet/apps.py`).
"""

from __future__ import annotations

import asyncio

BUFFER_LIMIT = 256 * 1024
"""Unread bytes a reader holds before its writer waits (a socket buffer's order of magnitude)."""


class _Direction:
    """One direction of a connection: the reader's buffer and whether its writer may go on.

    The `StreamReader` pauses its "transport" (this object) when more than twice its limit is
    unread and resumes it once drained below the limit: the writer awaits `_writable`.
    """

    def __init__(self) -> None:
        self.reader = asyncio.StreamReader(limit=BUFFER_LIMIT // 2)
        self.reader.set_transport(self)  # type: ignore[arg-type]
        self._writable = asyncio.Event()
        self._writable.set()
        self.reader_closed = False
        self.writer_done = False

    # The two methods StreamReader calls on its transport.
    def pause_reading(self) -> None:
        self._writable.clear()

    def resume_reading(self) -> None:
        self._writable.set()

    async def write(self, data: bytes) -> None:
        if self.reader_closed:
            raise ConnectionResetError("connection reset by peer")
        if self.writer_done:
            raise RuntimeError("write after write_eof")
        if data:
            self.reader.feed_data(data)
            await self._writable.wait()
            if self.reader_closed:
                raise ConnectionResetError("connection reset by peer")

    def end(self) -> None:
        if not self.writer_done:
            self.writer_done = True
            self.reader.feed_eof()

    def close_reader(self) -> None:
        self.reader_closed = True
        self._writable.set()  # a writer waiting on a reader that is gone must not wait forever


class PipeEnd:
    """One end of an in-memory connection (see the module docstring)."""

    def __init__(self, inbound: _Direction, outbound: _Direction) -> None:
        self._inbound = inbound
        self._outbound = outbound

    @property
    def reader(self) -> asyncio.StreamReader:
        """What the peer wrote (b"" once it half-closed or closed and everything was read)."""
        return self._inbound.reader

    async def read(self, max_bytes: int = 65536) -> bytes:
        """Up to `max_bytes` bytes, b"" at end of stream."""
        return await self._inbound.reader.read(max_bytes)

    async def write(self, data: bytes) -> None:
        """Send `data`; waits while the peer has too much unread.

        Raises:
            ConnectionResetError: the peer closed its end.
        """
        await self._outbound.write(data)

    def write_eof(self) -> None:
        """Half-close: the peer reads end of stream; this end can still read."""
        self._outbound.end()

    @property
    def closed(self) -> bool:
        return self._inbound.reader_closed

    def close(self) -> None:
        """Close both directions: the peer reads end of stream and its writes fail."""
        self._outbound.end()
        self._inbound.close_reader()
        self._inbound.end()


def pipe() -> tuple[PipeEnd, PipeEnd]:
    """The (client, server) ends of a new in-memory connection."""
    forward, backward = _Direction(), _Direction()
    return PipeEnd(backward, forward), PipeEnd(forward, backward)
