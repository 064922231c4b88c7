"""A deadline on each request head, which uvicorn's settings cannot give (docs/server.md,
"Timeouts and limits").

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but a connection that
sends nothing, or a head a line at a time, it keeps for ever: every byte restarts nothing and
nothing is timed before a request's head is read. This is its h11 protocol with one timer more,
running while a connection waits for a request head (from the connection, and again after each
response) and stopped once the head is read; when it fires the client gets a 408 and the
connection is closed. The body's deadline is the app's (app.py, `_ReadBody`), where the
response can be a JSON error.
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def head_timeout_protocol(header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection whose request head takes longer than
    `header_timeout` seconds (for uvicorn.Config(http=...))."""
    reply = f"no complete request head within {header_timeout:g} s (--header-timeout)\n".encode()
    response = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
                b"content-length: %d\r\n\r\n" % len(reply)) + reply

    class HeadTimeoutProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_head()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's head was read (a cycle starts with each)
                self._head_read()

        def handle_websocket_upgrade(self, event: Any) -> None:
            self._head_read()
            super().handle_websocket_upgrade(event)

        def on_response_complete(self) -> None:
            self._await_head()  # first: a pipelined head read within is seen by handle_events
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_read()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout, self._expire)

        def _head_read(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _expire(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.write(response)  # no request to answer in h11's eyes: written as is
                self.transport.close()

    return HeadTimeoutProtocol
