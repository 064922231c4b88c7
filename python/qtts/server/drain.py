"""The server's shutdown as its WebSocket sessions see it (docs/serving.md, "Server", shutdown).

uvicorn's own shutdown closes every WebSocket at once (1012, no message), while it lets HTTP
responses in flight finish. So `qtts-cli serve` drains the WebSocket sessions first: `begin()`
closes the sessions that have not started (1001 and an error message, as a new one would get),
the sessions in flight go on, and `ended()` returns once the last one has ended: finished, or
cancelled at the end of --shutdown-timeout (1001 and an error message). Only then does uvicorn's
shutdown run.
"""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class Drain:
    def __init__(self) -> None:
        self.closing = asyncio.Event()  # set by begin(); sessions not started yet wait on it
        self._sessions = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextmanager
    def session(self) -> Iterator[None]:
        """One WebSocket session, from its handshake to its close."""
        self._sessions += 1
        self._none.clear()
        try:
            yield
        finally:
            self._sessions -= 1
            if self._sessions == 0:
                self._none.set()

    def begin(self) -> None:
        self.closing.set()

    async def ended(self) -> None:
        """Once no session is open (begin() first: no new one starts)."""
        await self._none.wait()
