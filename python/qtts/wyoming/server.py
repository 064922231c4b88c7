"""The Wyoming server: one model and its Scheduler behind a TCP (or Unix) socket, every
connection's requests batched together (docs/integrations.md, "Home Assistant").

On SIGTERM or SIGINT it stops listening, refuses new requests (an error event, code
shutting_down), lets the ones in flight finish for up to `shutdown_timeout` seconds, then cancels
what is left (their clients get an error event and the events that end the request), closes every
connection and returns.
"""
from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wyoming.event import Event
from wyoming.info import Attribution, Info, TtsProgram

from .. import __version__
from ..runtime.scheduling.scheduler import Job, Scheduler
from .handler import Connection
from .protocol import MAX_LINE_BYTES
from .voices import Voices

log = logging.getLogger("qtts.wyoming")
CANCEL_TIMEOUT_S = 10.0  # after the grace period: the scheduler's cancelled jobs end within a frame
ATTRIBUTION = Attribution(name="qtts: Qwen3-TTS on ggml", url="https://github.com/QwenLM/Qwen3-TTS")


class WyomingServer:
    def __init__(self, model: Any, scheduler: Scheduler, voices: Voices, request: dict[str, Any], *, model_id: str,
                 streaming: bool = True, shutdown_timeout: float = 30.0) -> None:
        """`request`: every request's keyword arguments besides its text and voice (seed, settings)."""
        self.model, self.scheduler, self.voices, self.request = model, scheduler, voices, request
        self.model_id, self.streaming, self.shutdown_timeout = model_id, streaming, shutdown_timeout
        self.sample_rate: int = model.sample_rate
        self.draining = False
        self.connections: dict[Connection, asyncio.Task[Any]] = {}
        self._changed = asyncio.Event()

    def info(self) -> Event:
        program = TtsProgram(name="qtts", attribution=ATTRIBUTION, installed=True,
                             description=f"Qwen3-TTS {self.model.variant} ({self.model_id})", version=__version__,
                             voices=self.voices.info(__version__), supports_synthesize_streaming=self.streaming)
        return Info(tts=[program]).event()

    def submit(self, text: str | None, voice: str | None, language: str | None) -> Job:
        """A request's job (a worker thread's call): `text` whole, or None for streamed text."""
        args = {**self.request, **self.voices.args(voice, language)}
        if text is None:
            return self.scheduler.submit_text(**args)
        return self.scheduler.submit(text, **args)

    def changed(self) -> None:
        self._changed.set()

    async def serve(self, uri: str, ready: Callable[[str], None] = lambda where: None) -> None:
        """Listen on `uri` (tcp://HOST:PORT, unix://PATH) until SIGTERM or SIGINT; `ready` is told
        where (a tcp port 0 resolved)."""
        loop = asyncio.get_running_loop()
        scheme, _, rest = uri.partition("://")
        if scheme == "unix":
            listener = await asyncio.start_unix_server(self._connected, path=rest, limit=MAX_LINE_BYTES)
            where = uri
        else:
            host, _, port = rest.rpartition(":")
            listener = await asyncio.start_server(self._connected, host=host.strip("[]"), port=int(port),
                                                  limit=MAX_LINE_BYTES)
            where = f"tcp://{host}:{listener.sockets[0].getsockname()[1]}"
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready(where)
        try:
            await stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            listener.close()
            await self._drain(loop)
            if scheme == "unix":
                Path(rest).unlink(missing_ok=True)

    async def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        self.draining = True
        busy = sum(len(c.requests) for c in self.connections)
        log.info("draining: %d requests in flight, up to %g s", busy, self.shutdown_timeout)
        try:
            await asyncio.wait_for(self._idle(), self.shutdown_timeout)
        except asyncio.TimeoutError:
            pass
        await loop.run_in_executor(None, lambda: self.scheduler.close(cancel=True, timeout=CANCEL_TIMEOUT_S))
        try:  # the cancelled requests' last events go out
            await asyncio.wait_for(self._idle(), CANCEL_TIMEOUT_S)
        except asyncio.TimeoutError:
            pass
        for connection in list(self.connections):
            connection.close()
        if self.connections:  # their reading loops see the end and finish
            await asyncio.wait(list(self.connections.values()), timeout=CANCEL_TIMEOUT_S)

    async def _idle(self) -> None:
        while any(c.busy for c in self.connections):
            self._changed.clear()
            await self._changed.wait()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = Connection(self, reader, writer)
        task = asyncio.current_task()
        assert task is not None
        self.connections[connection] = task
        try:
            await connection.run()
        finally:
            del self.connections[connection]
            self.changed()
