"""The Wyoming event reader (qtts/wyoming/protocol.py): the package's own events read back; what
is malformed or oversized is a BadEvent once the stream is at the next event, in bounded memory."""
from __future__ import annotations

import asyncio
import io

import pytest
from wyoming.event import write_event
from wyoming.tts import Synthesize, SynthesizeVoice

from qtts.wyoming.protocol import MAX_DATA_BYTES, MAX_LINE_BYTES, BadEvent, read_event


def _reader(data: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES)
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def _encoded(event: object) -> bytes:
    f = io.BytesIO()
    write_event(event.event(), f)  # type: ignore[attr-defined]
    return f.getvalue()


async def _all(data: bytes) -> list[object]:
    reader, out = _reader(data), []
    while True:
        try:
            event = await read_event(reader)
        except BadEvent as e:
            out.append((e.code, e.type))
            continue
        if event is None:
            return out
        out.append(event)


def test_events_written_by_the_package_read_back() -> None:
    good = Synthesize(text="Hello.", voice=SynthesizeVoice(name="ryan"))
    (event,) = asyncio.run(_all(_encoded(good)))
    assert Synthesize.from_event(event) == good


@pytest.mark.parametrize(("data", "bad"), [
    (b"nope\n", ("invalid_json", None)),
    (b"\n", ("invalid_event", None)),
    (b'{"type": ["x"]}\n', ("invalid_event", None)),
    (b'{"type": "x", "data_length": "3"}\n', ("invalid_event", None)),
    (b'{"type": "x", "data_length": 5}\n[1,2]', ("invalid_event", "x")),
    (b'{"type": "x", "data_length": 3}\n{x}', ("invalid_json", "x")),
    (b'{"type": "x"' + b" " * (MAX_LINE_BYTES * 3) + b"}\n", ("too_large", None)),
    (b'{"type": "synthesize", "data_length": %d}\n' % (MAX_DATA_BYTES + 1) + b"z" * (MAX_DATA_BYTES + 1),
     ("too_large", "synthesize")),
])
def test_bad_events_leave_the_stream_at_the_next(data: bytes, bad: tuple[str, str | None]) -> None:
    ping = b'{"type": "ping", "payload_length": 3}\nxyz'  # a payload, dropped
    got = asyncio.run(_all(data + ping))
    assert got[0] == bad and got[1].type == "ping" and got[1].payload is None and len(got) == 2  # type: ignore


def test_a_stream_cut_inside_an_event_reads_as_the_end() -> None:
    assert asyncio.run(_all(b'{"type": "x", "data_length": 10}\n{"a"')) == []
