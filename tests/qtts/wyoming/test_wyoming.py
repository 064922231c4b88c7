"""The Wyoming server (docs/integrations.md, "Home Assistant"), run as a user would (`qtts-cli
wyoming` on a loopback port) and driven with the `wyoming` package's own client, as Home
Assistant drives it: describe, synthesize and streaming synthesis give the library's PCM for the
server's seed; bad input of every kind the protocol allows is an error event on a connection
that stays usable; a client that leaves cancels its job; SIGTERM drains (tiny CustomVoice model,
F32)."""
from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, read_event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.wyoming import LiveWyoming, read_until, start_wyoming

MODEL = "tiny_custom_voice-f32"
SEED, FRAMES = 5, 13  # the server's --seed and --max-new-tokens: 12 frames a request
TEXT = "Hello there, how are you today? I am fine, thank you."


@pytest.fixture(scope="module")
def cv_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def local(cv_path: Path) -> qtts.Model:
    return qtts.load(cv_path, n_threads=1)


@pytest.fixture(scope="module")
def server(cv_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveWyoming:
    log = tmp_path_factory.mktemp("wyoming") / "wyoming.log"
    s = start_wyoming(cv_path, log, "--seed", str(SEED), "--max-new-tokens", str(FRAMES), "--max-batch", "2",
                      "--voice-alias", "narrator=ryan")
    yield s
    assert s.stop() == 0, log.read_text()
    assert "Traceback" not in log.read_text(), log.read_text()


def _expected(local: qtts.Model, speaker: str, text: str = TEXT, **kw: Any) -> bytes:
    kw = {"seed": SEED, "max_new_tokens": FRAMES, **kw}
    return pcm16(np.concatenate([c.samples for c in local.stream(text, speaker=speaker, **kw)]))


def _audio(events: list[Event]) -> bytes:
    return b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type))


def _is(*types: type) -> Any:
    return lambda e: any(t.is_type(e.type) for t in types)  # type: ignore[attr-defined]


async def _synthesize(server: LiveWyoming, text: str, voice: str | None) -> list[Event]:
    async with server.client() as c:
        await c.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice) if voice else None).event())
        return await read_until(c, _is(AudioStop))


def test_describe_lists_the_voices_with_their_languages(server: LiveWyoming) -> None:
    async def run() -> Info:
        async with server.client() as c:
            await c.write_event(Describe().event())
            (event,) = await read_until(c, _is(Info))
            return Info.from_event(event)

    (program,) = asyncio.run(run()).tts
    assert program.name == "qtts" and program.installed and program.supports_synthesize_streaming
    assert [v.name for v in program.voices] == ["dylan", "ryan", "vivian", "narrator"]  # speakers, the alias
    assert all({"en", "zh", "ja"} <= set(v.languages) for v in program.voices)
    assert program.voices[3].description == "narrator: ryan"


@pytest.mark.parametrize(("voice", "speaker"), [("ryan", "ryan"), ("narrator", "ryan"), ("alloy", "vivian"),
                                                (None, "dylan")])  # None: the first voice listed
def test_synthesize_streams_the_library_audio(server: LiveWyoming, local: qtts.Model, voice: str | None,
                                              speaker: str) -> None:
    events = asyncio.run(_synthesize(server, TEXT, voice))
    assert AudioStart.is_type(events[0].type) and AudioStop.is_type(events[-1].type)
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (24000, 2, 1)
    chunks = [e for e in events if AudioChunk.is_type(e.type)]
    assert len(chunks) > 1  # as generated: the first chunk is one frame
    assert _audio(events) == _expected(local, speaker)


def test_streaming_synthesis_starts_before_the_text_ends(server: LiveWyoming, local: qtts.Model) -> None:
    """Home Assistant's order: start, the text as its LLM writes it, the whole text again, stop.
    The first audio comes while the text is still open; all of it is the library's streamed-text
    synthesis (non_streaming_mode=False) of the whole text."""
    words = TEXT.split(" ")
    deltas = [words[0]] + [" " + w for w in words[1:]]

    async def run() -> tuple[list[Event], list[Event]]:
        async with server.client() as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="vivian")).event())
            for d in deltas[:3]:
                await c.write_event(SynthesizeChunk(text=d).event())
            early = await read_until(c, _is(AudioChunk))  # before the rest of the text is sent
            for d in deltas[3:]:
                await c.write_event(SynthesizeChunk(text=d).event())
            await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="vivian")).event())
            await c.write_event(SynthesizeStop().event())
            return early, await read_until(c, _is(SynthesizeStopped))

    early, rest = asyncio.run(run())
    events = early + rest
    assert AudioStart.is_type(events[0].type) and [e.type for e in events[-2:]] == ["audio-stop",
                                                                                     "synthesize-stopped"]
    assert _audio(events) == _expected(local, "vivian", non_streaming_mode=False)


def test_connections_share_the_scheduler(server: LiveWyoming, local: qtts.Model) -> None:
    """Three connections at once, on a server of two slots: each gets its own audio."""
    async def run() -> list[list[Event]]:
        return await asyncio.gather(*(_synthesize(server, TEXT, v) for v in ("ryan", "vivian", "dylan")))

    for events, speaker in zip(asyncio.run(run()), ("ryan", "vivian", "dylan"), strict=True):
        assert _audio(events) == _expected(local, speaker)


BAD = [
    (Synthesize(text=TEXT, voice=SynthesizeVoice(name="nobody")).event(), "voice_not_found", "unknown voice 'nobody'"),
    (Synthesize(text="x" * 4097).event(), "text_too_long", "over 4096 characters"),
    (Synthesize(text="y" * (1 << 20)).event(), "too_large", "synthesize's data is over 64 KiB"),
    (Synthesize(text="   ").event(), "invalid_value", "text is empty"),
    (Event("synthesize", {"text": 3}), "invalid_value", "synthesize needs a text string"),
    (Event("synthesize", {"text": "Hi.", "voice": "ryan"}), "voice_not_found", "voice must be an object"),
    (Event("synthesize", {"text": "Hi.", "voice": {"language": "xx"}}), "voice_not_found", "unsupported language"),
    (Event("synthesize", {"text": "Hi.", "text_format": "ssml"}), "invalid_value", "plain text only"),
]


def test_bad_requests_are_error_events_and_the_connection_stays(server: LiveWyoming, local: qtts.Model) -> None:
    async def run() -> tuple[list[list[Event]], list[Event], list[Event]]:
        async with server.client() as c:
            answers = []
            for event, _, _ in BAD:
                await c.write_event(event)
                answers.append(await read_until(c, _is(AudioStop)))
            await c.write_event(Event("transcribe", {}))
            other = await read_until(c, _is(Error))
            await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
            return answers, other, await read_until(c, _is(AudioStop))

    answers, other, good = asyncio.run(run())
    for (_, code, text), events in zip(BAD, answers, strict=True):
        assert [e.type for e in events] == ["error", "audio-stop"], events  # the error, then the request's end
        error = Error.from_event(events[0])
        assert error.code == code and text in error.text, error
    assert Error.from_event(other[0]).code == "unknown_event"
    assert _audio(good) == _expected(local, "ryan")


def test_streamed_text_over_the_limit_fails_that_request_only(server: LiveWyoming, local: qtts.Model) -> None:
    async def run() -> tuple[list[Event], list[Event]]:
        async with server.client() as c:
            await c.write_event(SynthesizeStart(voice=SynthesizeVoice(name="ryan")).event())
            for _ in range(5):
                await c.write_event(SynthesizeChunk(text="word " * 200).event())
            await c.write_event(SynthesizeStop().event())
            failed = await read_until(c, _is(SynthesizeStopped))
            await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
            return failed, await read_until(c, _is(AudioStop))

    failed, good = asyncio.run(run())
    errors = [Error.from_event(e) for e in failed if Error.is_type(e.type)]
    assert len(errors) == 1 and errors[0].code == "text_too_long"
    assert [e.type for e in failed[-2:]] == ["audio-stop", "synthesize-stopped"]
    assert _audio(good) == _expected(local, "ryan")


def _raw(server: LiveWyoming, data: bytes, answers: int) -> list[Event]:
    """`data` sent as is on a plain socket: the first `answers` events that come back."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(data)
        f = s.makefile("rb")
        events = []
        while len(events) < answers:
            event = read_event(f)
            assert event is not None, events
            events.append(event)
        return events


def test_malformed_events_are_errors_and_the_connection_stays(server: LiveWyoming) -> None:
    junk = b"not json\n" + b'{"type": 3}\n' + b"[1, 2]\n" + b'{"type": "x", "data_length": -1}\n'
    long_header = b'{"type": "synthesize", "data": {"text": "' + b"z" * (200 << 10) + b'"}}\n'
    ping = b'{"type": "ping", "data": {"text": "still here"}}\n'
    events = _raw(server, junk + long_header + ping, 6)
    codes = [Error.from_event(e).code for e in events[:5]]
    assert codes == ["invalid_json", "invalid_event", "invalid_event", "invalid_event", "too_large"], events
    assert events[5].type == "pong" and events[5].data["text"] == "still here"


def test_a_client_that_leaves_cancels_its_job(long_server: LiveWyoming) -> None:
    """The job of a client that closes mid-stream ends as cancelled, far short of its 1499
    frames (the log's line for it), and the server takes the next request."""
    async def leave() -> int:
        async with long_server.client() as c:
            await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
            return len(await read_until(c, _is(AudioChunk)))  # then the connection closes

    asyncio.run(leave())
    m = long_server.wait_for_log(r"synthesize \(ryan\): cancelled: the client left; cancelled, (\d+) frames")
    assert int(m.group(1)) < LONG_FRAMES - 1
    events = asyncio.run(_synthesize(long_server, "Hi.", "vivian"))  # a short one still runs to its end
    assert AudioStop.is_type(events[-1].type) and not any(Error.is_type(e.type) for e in events)


LONG_FRAMES = 1500


@pytest.fixture
def long_server(cv_path: Path, tmp_path: Path) -> LiveWyoming:
    s = start_wyoming(cv_path, tmp_path / "wyoming.log", "--seed", str(SEED), "--max-new-tokens", str(LONG_FRAMES),
                      "--frame-budget", "none", "--shutdown-timeout", "0")
    yield s
    s.stop()


def test_sigterm_cancels_what_the_grace_period_leaves(long_server: LiveWyoming) -> None:
    """--shutdown-timeout 0: a request in flight at SIGTERM ends with an error event and its end."""
    async def run() -> list[Event]:
        async with long_server.client() as c:
            await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
            first = await read_until(c, _is(AudioChunk))
            long_server.process.send_signal(15)
            return first + await read_until(c, _is(AudioStop))

    events = asyncio.run(run())
    errors = [Error.from_event(e) for e in events if Error.is_type(e.type)]
    assert len(errors) == 1 and errors[0].code == "cancelled" and "shutting down" in errors[0].text
    assert long_server.process.wait(60) == 0


def test_sigterm_lets_requests_in_flight_finish(cv_path: Path, tmp_path: Path, local: qtts.Model) -> None:
    s = start_wyoming(cv_path, tmp_path / "wyoming.log", "--seed", str(SEED), "--max-new-tokens", "40",
                      "--frame-budget", "none")
    try:
        async def run() -> list[Event]:
            async with s.client() as c:
                await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="ryan")).event())
                first = await read_until(c, _is(AudioChunk))
                s.process.send_signal(15)
                s.wait_for_log("qtts-cli wyoming: draining")
                with pytest.raises(OSError):  # no new connections
                    socket.create_connection(("127.0.0.1", s.port), timeout=10)
                return first + await read_until(c, _is(AudioStop))

        events = asyncio.run(run())
        assert not any(Error.is_type(e.type) for e in events)
        assert _audio(events) == _expected(local, "ryan", max_new_tokens=40, frame_budget=None)
        assert s.process.wait(60) == 0
    finally:
        s.stop()
