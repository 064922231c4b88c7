"""One Wyoming connection (docs/integrations.md, "Home Assistant"): its events read as they come,
its syntheses submitted to the server's Scheduler (batched with every other connection's) and
answered in order.

`synthesize {text, voice}` is answered `audio-start`, an `audio-chunk` per chunk as it is
generated, `audio-stop`. Streamed text, `synthesize-start {voice}`, `synthesize-chunk {text}`...,
`synthesize-stop`, is one streamed-text job (Scheduler.submit_text): each chunk's text is written
into it as it comes, so speech starts once the first word is complete; the `synthesize` a client
sends inside it (the whole text again, for servers that do not stream) is ignored; it is
answered like `synthesize`, then `synthesize-stopped`. A request that fails is answered `error
{text, code}` and then the events that end it (`audio-stop`; `synthesize-stopped` once its stop
came), so a client waiting for them is never left waiting; the connection stays usable. The
events are read all the while, so a client that goes away cancels its jobs within a frame.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_write_event
from wyoming.info import Describe
from wyoming.ping import Ping, Pong
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from ..errors import QttsError
from ..runtime.audio.audio import pcm16
from ..runtime.scheduling.scheduler import Job, QueueFull, SchedulerClosed
from .protocol import BadEvent, read_event
from .voices import VoiceError

log = logging.getLogger("qtts.wyoming")
MAX_TEXT_CHARS = 4096  # a request's text, whole or streamed: the HTTP server's limit on input
MAX_PENDING = 8  # requests of one connection not yet answered; more wait until one is
WIDTH, CHANNELS = 2, 1  # s16le mono


@dataclass(frozen=True)
class Failure:
    message: str
    code: str


def failure_of(e: BaseException) -> Failure:
    """A submission's or a job's exception as the error event it is answered with."""
    if isinstance(e, VoiceError):
        return Failure(str(e), "voice_not_found")
    if isinstance(e, QueueFull):
        return Failure(f"the server is busy: {e}", "queue_full")
    if isinstance(e, SchedulerClosed):
        return Failure("the server is shutting down", "shutting_down")
    if isinstance(e, QttsError):
        return Failure(f"the engine failed: {e}", "engine_error")
    return Failure(str(e), "invalid_value")  # TypeError, ValueError: the request's text or settings


class Request:
    """One synthesis: a whole text (`synthesize`) or streamed text (`synthesize-start` .. `-stop`).
    Its job comes from a worker thread; text that comes before it is kept for it."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        self.voice: str | None = None  # as the request named it (for the log)
        self.job: Job | None = None
        self.failure: Failure | None = None
        self.submitted = asyncio.Event()  # the job, or the failure, is known
        self.stopped = asyncio.Event()  # its text is complete (a whole text's at once)
        self.length = 0
        self._early: list[str] = []
        if not streamed:
            self.stopped.set()

    def fail(self, failure: Failure) -> None:
        """The first failure is the one answered; the job is cancelled (within a frame)."""
        if self.failure is None:
            self.failure = failure
        if self.job is not None and not self.job.done:
            self.job.cancel()

    def refuse(self, failure: Failure) -> Request:
        self.fail(failure)
        self.submitted.set()
        return self

    def attach(self, job: Job) -> None:
        self.job = job
        for text in self._early:
            job.write(text)
        if self.streamed and self.stopped.is_set():
            job.end_text()
        if self.failure is not None:
            job.cancel()
        self.submitted.set()

    def write(self, text: str) -> None:
        self.length += len(text)
        if self.length > MAX_TEXT_CHARS:
            self.fail(Failure(f"the text is over {MAX_TEXT_CHARS} characters", "text_too_long"))
        if self.failure is not None:
            return
        if self.job is not None:
            self.job.write(text)
        else:
            self._early.append(text)

    def stop(self) -> None:
        self.stopped.set()
        if self.job is not None:
            self.job.end_text()


class _Gone(Exception):
    """The client cannot be written to any more."""


def _voice(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """A request's voice field: (name, language), either may be None."""
    voice = data.get("voice")
    if voice is None:
        return None, None
    if not isinstance(voice, dict):
        raise VoiceError(f"voice must be an object with a name (or a language), got {type(voice).__name__}")
    name, language = voice.get("name"), voice.get("language")
    for key, value in (("name", name), ("language", language)):
        if value is not None and not isinstance(value, str):
            raise VoiceError(f"voice.{key} must be a string, got {type(value).__name__}")
    return name, language


class Server(Protocol):
    """What a connection asks of its server (server.py's WyomingServer)."""
    streaming: bool  # streamed text is taken as it comes
    draining: bool  # shutting down: new requests are refused
    sample_rate: int

    def info(self) -> Event: ...

    def submit(self, text: str | None, voice: str | None, language: str | None) -> Job: ...

    def changed(self) -> None: ...  # a request came or was answered


class Connection:
    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        self.queue: asyncio.Queue[Request] = asyncio.Queue(MAX_PENDING)
        self.requests: list[Request] = []  # queued or being answered
        self.session: Request | None = None  # the streamed request whose stop has not come
        self.gone = False
        self._tasks: set[asyncio.Task[None]] = set()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "unix socket"

    async def run(self) -> None:
        answering = asyncio.create_task(self._answer())
        try:
            while not self.gone:
                try:
                    event = await read_event(self.reader)
                except BadEvent as e:
                    await self._bad_event(e)
                    continue
                if event is None:
                    break
                await self._handle(event)
        except _Gone:
            pass
        finally:  # a submission under way finishes, and attach() cancels its job
            self.gone = True
            left = list(self.requests)
            answering.cancel()
            for req in left:
                req.fail(Failure("the client left", "cancelled"))
                self._spawn(self._settle(req))
            self.close()

    def close(self) -> None:
        self.writer.close()

    @property
    def busy(self) -> bool:
        return bool(self.requests)

    # -- events ------------------------------------------------------------------------------
    async def _handle(self, event: Event) -> None:
        kind, data = event.type, event.data
        if Describe.is_type(kind):
            await self._write(self.server.info())
        elif Ping.is_type(kind):
            await self._write(Pong(text=data.get("text") if isinstance(data.get("text"), str) else None).event())
        elif SynthesizeStart.is_type(kind) or SynthesizeChunk.is_type(kind) or SynthesizeStop.is_type(kind):
            if self.server.streaming:
                await self._streamed(kind, data)
            # else: a server without streaming takes the synthesize that comes with them
        elif Synthesize.is_type(kind):
            if self.session is None:  # inside a session it is the whole text again: spoken already
                await self._synthesize(data)
        else:
            await self._error(Failure(f"unknown event type {kind!r}: a TTS server takes describe, synthesize, "
                                      "synthesize-start, synthesize-chunk, synthesize-stop and ping",
                                      "unknown_event"))

    async def _bad_event(self, e: BadEvent) -> None:
        failure = Failure(e.message, e.code)
        if e.type is not None and Synthesize.is_type(e.type) and self.session is None:
            await self._enqueue(Request(False).refuse(failure))
        elif e.type is not None and SynthesizeStart.is_type(e.type) and self.server.streaming and self.session is None:
            self.session = Request(True).refuse(failure)
            await self._enqueue(self.session)
        elif e.type is not None and SynthesizeChunk.is_type(e.type) and self.session is not None:
            self.session.fail(failure)
        else:
            await self._error(failure)

    async def _synthesize(self, data: dict[str, Any]) -> None:
        req = Request(False)
        text = data.get("text")
        if not isinstance(text, str):
            await self._enqueue(req.refuse(Failure("synthesize needs a text string", "invalid_value")))
        elif len(text) > MAX_TEXT_CHARS:
            await self._enqueue(req.refuse(Failure(f"the text is over {MAX_TEXT_CHARS} characters ({len(text)})",
                                                   "text_too_long")))
        else:
            await self._enqueue(self._submit(req, text, data))

    async def _streamed(self, kind: str, data: dict[str, Any]) -> None:
        if SynthesizeStart.is_type(kind):
            if self.session is not None:
                await self._error(Failure("synthesize-start while a streamed synthesis is open: send "
                                          "synthesize-stop first", "invalid_event"))
                return
            self.session = self._submit(Request(True), None, data)
            await self._enqueue(self.session)
        elif self.session is None:
            await self._error(Failure(f"{kind} outside a streamed synthesis: send synthesize-start first",
                                      "invalid_event"))
        elif SynthesizeChunk.is_type(kind):
            text = data.get("text")
            if isinstance(text, str):
                self.session.write(text)
            else:
                self.session.fail(Failure("synthesize-chunk needs a text string", "invalid_value"))
        else:
            self.session.stop()
            self.session = None

    def _submit(self, req: Request, text: str | None, data: dict[str, Any]) -> Request:
        """Submit the request's job in a worker thread (voice loading and prompt checks take time)."""
        if data.get("text_format") not in (None, "text"):
            return req.refuse(Failure(f"text_format {data['text_format']!r} is not supported: plain text only",
                                      "invalid_value"))
        if self.server.draining:
            return req.refuse(Failure("the server is shutting down", "shutting_down"))
        try:
            name, language = _voice(data)
        except VoiceError as e:
            return req.refuse(failure_of(e))
        req.voice = name

        async def submit() -> None:
            try:
                job = await asyncio.get_running_loop().run_in_executor(
                    None, self.server.submit, text, name, language)
            except (ValueError, TypeError, RuntimeError, OSError, QttsError) as e:  # QueueFull, SchedulerClosed
                req.refuse(failure_of(e))
                return
            except BaseException:  # a bug: the request still ends, and the error is logged
                req.refuse(Failure("the server failed to take the request", "server_error"))
                raise
            req.attach(job)

        self._spawn(submit())
        return req

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)  # referenced until done
        task.add_done_callback(self._tasks.discard)

    async def _enqueue(self, req: Request) -> None:
        self.requests.append(req)
        self.server.changed()
        await self.queue.put(req)

    # -- answers -----------------------------------------------------------------------------
    async def _answer(self) -> None:
        while True:
            req = await self.queue.get()
            try:
                await self._respond(req)
            except _Gone:
                self.gone = True
                req.fail(Failure("the client left", "cancelled"))
                self._spawn(self._settle(req))
                self.writer.transport.abort()  # the reading loop sees the end, and cancels the rest
                return
            finally:
                self.requests.remove(req)
                self.server.changed()
            self._log(req)

    async def _respond(self, req: Request) -> None:
        await req.submitted.wait()
        started = False
        if req.job is not None and req.failure is None:
            try:
                async for chunk in req.job:
                    if not started:
                        started = True
                        await self._write(AudioStart(rate=chunk.sample_rate, width=WIDTH, channels=CHANNELS).event())
                    if len(chunk.samples):
                        await self._write(AudioChunk(rate=chunk.sample_rate, width=WIDTH, channels=CHANNELS,
                                                     audio=pcm16(chunk.samples)).event())
            except (QttsError, TypeError, ValueError) as e:
                req.fail(failure_of(e))
            if req.job.stop_reason == "cancelled":
                req.fail(Failure("the request was cancelled: the server is shutting down", "cancelled"))
        if req.failure is None and not started:
            await self._write(AudioStart(rate=self.server.sample_rate, width=WIDTH, channels=CHANNELS).event())
        if req.failure is not None:
            await self._write(Error(text=req.failure.message, code=req.failure.code).event())
        await req.stopped.wait()
        await self._write(AudioStop().event())
        if req.streamed:
            await self._write(SynthesizeStopped().event())

    async def _settle(self, req: Request) -> None:
        """A request of a client that left: its job, cancelled, runs to its end (within a frame)."""
        await req.submitted.wait()
        if req.job is not None:
            try:
                async for _ in req.job:
                    pass
            except (QttsError, TypeError, ValueError):
                pass
        self._log(req)

    def _log(self, req: Request) -> None:
        what = f"{'synthesize-start' if req.streamed else 'synthesize'} ({req.voice or 'default voice'})"
        outcome = f"{req.failure.code}: {req.failure.message}" if req.failure is not None else "ok"
        if req.job is not None and req.job.done:
            outcome += f"; {req.job.stop_reason}, {req.job.timings.frames} frames"
        log.info("%s %s: %s", self.peer, what, outcome)

    async def _error(self, failure: Failure) -> None:
        await self._write(Error(text=failure.message, code=failure.code).event())

    async def _write(self, event: Event) -> None:
        if self.gone:
            raise _Gone
        try:
            await async_write_event(event, self.writer)
        except (ConnectionError, OSError, RuntimeError):
            raise _Gone from None
