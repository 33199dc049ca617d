"""The server side of SPDY/3.1 as Kubernetes streams use it (moby/spdystream, which kubectl and
client-go speak to the kubelet for port-forward, exec and attach).

Frames (draft 3.1): a control bit, then either version 3 + type + flags + 24-bit length (control
frames) or a 31-bit stream id + flags + length (data frames). Header blocks of SYN_STREAM,
SYN_REPLY and HEADERS are a count then length-prefixed lowercase names and NUL-joined values,
compressed with one zlib stream per direction for the whole connection, primed with the spec's
dictionary and sync-flushed after each block.

`SpdySession(reader, send, accept)` serves one upgraded connection: for every SYN_STREAM from the
client it asks `accept(stream)` (an error message refuses it with RST_STREAM CANCEL, as
client-go's server side resets rejected streams), answers SYN_REPLY otherwise and passes the
stream on through `streams()`. Pings are echoed; GOAWAY or the end of the connection ends the
session and every stream's reader. Flow control (WINDOW_UPDATE) is ignored, as spdystream does.
Bytes come in through an `asyncio.StreamReader` and go out through `send` (the socket of a raw
`Upgrade: SPDY/3.1` connection, or WebSocket messages when kubectl tunnels SPDY through a
WebSocket): see `sim/apiserver/portforward.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

VERSION = 3
SYN_STREAM = 1
SYN_REPLY = 2
RST_STREAM = 3
SETTINGS = 4
PING = 6
GOAWAY = 7
HEADERS = 8
WINDOW_UPDATE = 9
FLAG_FIN = 0x01
RST_PROTOCOL_ERROR = 1
RST_CANCEL = 5
GOAWAY_OK = 0
MAX_DATA_CHUNK = 32 * 1024
"""Bytes per DATA frame written (io.Copy's buffer size; the protocol allows 16 MiB)."""

_HEADER_NAMES = (
    *[
        "options",
        "head",
        "post",
        "put",
        "delete",
        "trace",
        "accept",
        "accept-charset",
        "accept-encoding",
        "accept-language",
        "accept-ranges",
        "age",
        "allow",
        "authorization",
        "cache-control",
        "connection",
        "content-base",
        "content-encoding",
        "content-language",
        "content-length",
        "content-location",
        "content-md5",
        "content-range",
        "content-type",
        "date",
        "etag",
        "expect",
        "expires",
        "from",
        "host",
        "if-match",
        "if-modified-since",
        "if-none-match",
        "if-range",
        "if-unmodified-since",
        "last-modified",
        "location",
        "max-forwards",
        "pragma",
        "proxy-authenticate",
        "proxy-authorization",
        "range",
        "referer",
        "retry-after",
        "server",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "user-agent",
        "vary",
        "via",
        "warning",
        "www-authenticate",
        "method",
        "get",
        "status",
    ],
    "200 OK",
    *["version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"],
)
_HEADER_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 "
    "Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 "
    "Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, "
    "Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xml,"
    "application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch"
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
HEADER_DICTIONARY = (
    b"".join(struct.pack(">I", len(n)) + n.encode() for n in _HEADER_NAMES) + _HEADER_TAIL.encode()
)
"""The zlib dictionary of SPDY/3 header blocks (draft 3, 2.6.10.1): length-prefixed common header
names and values, then common status lines, dates and tokens."""

Headers = dict[str, list[str]]


class SpdyError(Exception):
    """The peer broke the protocol: the session ends."""


def _control(frame_type: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, frame_type, (flags << 24) | len(payload)) + payload


def data_frame(stream_id: int, data: bytes, *, fin: bool = False) -> bytes:
    """A DATA frame (stream id < 2^31, data < 16 MiB)."""
    flags = FLAG_FIN if fin else 0
    return struct.pack(">II", stream_id & 0x7FFFFFFF, (flags << 24) | len(data)) + data


class HeaderCompressor:
    """One direction's header block compression (one zlib stream for the connection)."""

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(level=9, zdict=HEADER_DICTIONARY)

    def block(self, headers: Headers) -> bytes:
        raw = struct.pack(">I", len(headers))
        for name, values in headers.items():
            key, value = name.lower().encode(), "\x00".join(values).encode()
            raw += struct.pack(">I", len(key)) + key + struct.pack(">I", len(value)) + value
        return self._zlib.compress(raw) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The other direction's: every block continues the same zlib stream."""

    def __init__(self) -> None:
        self._zlib = zlib.decompressobj(zdict=HEADER_DICTIONARY)

    def block(self, compressed: bytes) -> Headers:
        try:
            raw = self._zlib.decompress(compressed)
        except zlib.error as exc:
            raise SpdyError(f"header block: {exc}") from exc
        try:
            (count,) = struct.unpack_from(">I", raw, 0)
            offset = 4
            headers: Headers = {}
            for _ in range(count):
                (size,) = struct.unpack_from(">I", raw, offset)
                name = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                (size,) = struct.unpack_from(">I", raw, offset)
                value = raw[offset + 4 : offset + 4 + size].decode()
                offset += 4 + size
                headers.setdefault(name.lower(), []).extend(value.split("\x00"))
        except (struct.error, UnicodeDecodeError) as exc:
            raise SpdyError(f"header block: {exc}") from exc
        return headers


def syn_stream(compressor: HeaderCompressor, stream_id: int, headers: Headers, *, fin: bool = False) -> bytes:  # fmt: skip
    """A SYN_STREAM (used by tests playing the client)."""
    payload = struct.pack(">IIBB", stream_id, 0, 0, 0) + compressor.block(headers)
    return _control(SYN_STREAM, FLAG_FIN if fin else 0, payload)


def ping_frame(ping_id: int) -> bytes:
    return _control(PING, 0, struct.pack(">I", ping_id))


def goaway_frame(last_good_stream: int = 0) -> bytes:
    return _control(GOAWAY, 0, struct.pack(">II", last_good_stream, GOAWAY_OK))


@dataclass
class Frame:
    """One frame read from the wire: a control frame (`frame_type` set) or a DATA frame."""

    control: bool
    flags: int
    payload: bytes
    frame_type: int = 0
    stream_id: int = 0

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at the end of the connection."""
    try:
        head = await reader.readexactly(8)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise SpdyError("connection ended inside a frame header") from exc
        return None
    first, second = struct.unpack(">II", head)
    flags, length = second >> 24, second & 0xFFFFFF
    try:
        payload = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise SpdyError("connection ended inside a frame") from exc
    if first & 0x80000000:
        version = (first >> 16) & 0x7FFF
        if version != VERSION:
            raise SpdyError(f"unsupported SPDY version {version}")
        return Frame(True, flags, payload, frame_type=first & 0xFFFF)
    return Frame(False, flags, payload, stream_id=first & 0x7FFFFFFF)


class SpdyStream:
    """A stream the client opened: its headers, what it sends (`reader`), and writing back."""

    def __init__(
        self, session: SpdySession, stream_id: int, headers: Headers, *, fin: bool
    ) -> None:
        self.session = session
        self.id = stream_id
        self.headers = headers
        self.reader = asyncio.StreamReader()
        self.remote_closed = fin
        self.local_closed = False
        self.reset = False
        if fin:
            self.reader.feed_eof()

    def header(self, name: str) -> str:
        """The first value of a header ("" when absent)."""
        values = self.headers.get(name.lower()) or [""]
        return values[0]

    async def write(self, data: bytes) -> None:
        """Send `data` on the stream (nothing once closed, reset, or the session ended)."""
        for start in range(0, len(data), MAX_DATA_CHUNK):
            if self.local_closed or self.reset or self.session.ended:
                return
            await self.session.send(data_frame(self.id, data[start : start + MAX_DATA_CHUNK]))

    async def close(self) -> None:
        """Half-close: an empty DATA frame with FIN (spdystream's Stream.Close)."""
        if self.local_closed or self.reset or self.session.ended:
            self.local_closed = True
            return
        self.local_closed = True
        await self.session.send(data_frame(self.id, b"", fin=True))
        self.session.forget_if_done(self)

    def _remote_fin(self) -> None:
        if not self.remote_closed:
            self.remote_closed = True
            self.reader.feed_eof()
        self.session.forget_if_done(self)

    def _remote_reset(self) -> None:
        self.reset = True
        self._remote_fin()


Accept = Callable[[SpdyStream], str | None]
"""Called on every new stream: None accepts it, a message refuses it (the stream is reset)."""


class SpdySession:
    """The server end of one SPDY connection (see the module docstring)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        send: Callable[[bytes], Awaitable[None]],
        accept: Accept,
    ) -> None:
        self._reader = reader
        self._send = send
        self._accept = accept
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor()
        self._lock = asyncio.Lock()
        self._streams: dict[int, SpdyStream] = {}
        self._new: asyncio.Queue[SpdyStream | None] = asyncio.Queue()
        self._last_stream_id = 0
        self.ended = False

    async def send(self, frame: bytes) -> None:
        # One writer at a time: frames must not interleave, and header blocks must reach the wire
        # in the order they were compressed.
        async with self._lock:
            if not self.ended:
                await self._send(frame)

    async def _reply(self, stream_id: int) -> None:
        async with self._lock:
            if not self.ended:
                block = self._compressor.block({})
                await self._send(_control(SYN_REPLY, 0, struct.pack(">I", stream_id) + block))

    async def _reset(self, stream_id: int, status: int) -> None:
        await self.send(_control(RST_STREAM, 0, struct.pack(">II", stream_id, status)))

    async def streams(self) -> AsyncIterator[SpdyStream]:
        """Accepted streams, in the order they were opened, until the session ends."""
        while (stream := await self._new.get()) is not None:
            yield stream

    def forget_if_done(self, stream: SpdyStream) -> None:
        if (stream.local_closed and stream.remote_closed) or stream.reset:
            self._streams.pop(stream.id, None)

    async def run(self) -> None:
        """Read and handle frames until the connection ends or the client goes away."""
        try:
            while (frame := await read_frame(self._reader)) is not None:
                if not await self._handle(frame):
                    break
        except SpdyError as exc:
            log.info("SPDY session ended: %s", exc)
        finally:
            self.end()

    def end(self) -> None:
        """End the session: every stream's reader ends, `streams()` stops."""
        if self.ended:
            return
        self.ended = True
        for stream in list(self._streams.values()):
            stream._remote_reset()
        self._streams.clear()
        self._new.put_nowait(None)

    async def _handle(self, frame: Frame) -> bool:
        if not frame.control:
            stream = self._streams.get(frame.stream_id)
            if stream is None or stream.remote_closed:
                return True  # gone away already: spdystream drops it as well
            if frame.payload:
                stream.reader.feed_data(frame.payload)
            if frame.fin:
                stream._remote_fin()
            return True
        payload = frame.payload
        if frame.frame_type == SYN_STREAM:
            if len(payload) < 10:
                raise SpdyError("short SYN_STREAM")
            stream_id = struct.unpack_from(">I", payload, 0)[0] & 0x7FFFFFFF
            headers = self._decompressor.block(payload[10:])
            if stream_id == 0 or stream_id % 2 == 0 or stream_id <= self._last_stream_id:
                await self._reset(stream_id, RST_PROTOCOL_ERROR)
                return True
            self._last_stream_id = stream_id
            stream = SpdyStream(self, stream_id, headers, fin=frame.fin)
            refused = self._accept(stream)
            if refused is not None:
                log.info("SPDY stream %d rejected: %s", stream_id, refused)
                await self._reset(stream_id, RST_CANCEL)
                return True
            self._streams[stream_id] = stream
            await self._reply(stream_id)
            self._new.put_nowait(stream)
        elif frame.frame_type == RST_STREAM:
            (stream_id,) = struct.unpack_from(">I", payload, 0)
            stream = self._streams.pop(stream_id & 0x7FFFFFFF, None)
            if stream is not None:
                stream._remote_reset()
        elif frame.frame_type == PING:
            (ping_id,) = struct.unpack_from(">I", payload, 0)
            if ping_id % 2 == 1:  # the client's (odd ids); the server sends none of its own
                await self.send(ping_frame(ping_id))
        elif frame.frame_type == GOAWAY:
            return False
        elif frame.frame_type == HEADERS:
            self._decompressor.block(payload[4:])  # keeps the zlib stream in step
        elif frame.frame_type == SYN_REPLY:
            self._decompressor.block(payload[4:])
        # SETTINGS, WINDOW_UPDATE and unknown types: ignored, as spdystream does.
        return True

    async def goaway(self) -> None:
        """Tell the client no more streams are accepted, then end."""
        with contextlib.suppress(Exception):
            await self.send(goaway_frame(self._last_stream_id))
        self.end()
