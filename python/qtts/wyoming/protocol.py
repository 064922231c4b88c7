"""Reading Wyoming events with bounded memory (docs/integrations.md, "Home Assistant").

An event is a JSON header line `{"type", "data"?, "data_length"?, "payload_length"?}`, then
`data_length` bytes of JSON merged into `data`, then `payload_length` bytes of payload. The
`wyoming` package's own reader trusts both lengths and reads them whole; a server must not, so
this one keeps a header line to MAX_LINE_BYTES and data to MAX_DATA_BYTES, reads anything longer
in blocks and drops it, and drops every payload (a TTS server takes none). A malformed or
oversized event raises BadEvent once the stream is at the next event, so the connection stays
usable; the end of the stream (or a cut inside an event) reads as None.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

from wyoming.event import Event

MAX_LINE_BYTES = 64 << 10  # a header line; also the StreamReader's limit (what it buffers)
MAX_DATA_BYTES = 64 << 10  # an event's data: 4096 characters of text escaped as \uXXXX fit in 25 KiB
_BLOCK = 64 << 10


class BadEvent(Exception):
    """An event that cannot be taken; `type` is its type when the header said it."""

    def __init__(self, message: str, code: str, type: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.type = message, code, type


async def _drop(reader: asyncio.StreamReader, n: int) -> None:
    while n > 0:
        block = await reader.readexactly(min(n, _BLOCK))
        n -= len(block)


async def _line(reader: asyncio.StreamReader) -> bytes:
    """The next header line; one over the limit is read to its end and dropped (BadEvent)."""
    too_long = False
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as e:  # left in the buffer: drop it and read on
            too_long = True
            await _drop(reader, max(e.consumed, 1))
            continue
        if too_long:
            raise BadEvent(f"an event header is over {MAX_LINE_BYTES >> 10} KiB", "too_large")
        return line


def _length(header: dict[str, Any], key: str) -> int:
    n = header.get(key)
    if n is None:
        return 0
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise BadEvent(f"{key} must be a non-negative integer, got {n!r}", "invalid_event")
    return n


async def read_event(reader: asyncio.StreamReader) -> Event | None:
    """The next event; None when the client has gone (end of stream, or cut inside an event)."""
    try:
        return await _read(reader)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


async def _read(reader: asyncio.StreamReader) -> Event | None:
    line = await _line(reader)
    if not line.strip():
        raise BadEvent("an event header is empty", "invalid_event")
    try:
        header = json.loads(line)
    except ValueError as e:  # bytes that are not UTF-8 too
        raise BadEvent(f"an event header is not valid JSON: {e}", "invalid_json") from None
    if not isinstance(header, dict) or not isinstance(header.get("type"), str):
        raise BadEvent("an event header must be a JSON object with a string type", "invalid_event")
    kind = header["type"]
    data_length, payload_length = _length(header, "data_length"), _length(header, "payload_length")
    data = header.get("data") or {}
    error: BadEvent | None = None
    if data_length > MAX_DATA_BYTES:
        await _drop(reader, data_length)
        error = BadEvent(f"{kind}'s data is over {MAX_DATA_BYTES >> 10} KiB ({data_length} bytes)", "too_large", kind)
    elif data_length:
        try:
            more = json.loads(await reader.readexactly(data_length))
        except ValueError as e:
            more, error = {}, BadEvent(f"{kind}'s data is not valid JSON: {e}", "invalid_json", kind)
        if isinstance(data, dict) and isinstance(more, dict):
            data = {**data, **more}
        elif error is None:
            error = BadEvent(f"{kind}'s data must be a JSON object", "invalid_event", kind)
    await _drop(reader, payload_length)
    if error is not None:
        raise error
    if not isinstance(data, dict):
        raise BadEvent(f"{kind}'s data must be a JSON object", "invalid_event", kind)
    return Event(type=kind, data=data)
