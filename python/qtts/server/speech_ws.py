"""WebSocket /v1/audio/speech/stream: speech for text that is still being written (an LLM's
reply), as a streamed-text job of the same Scheduler as every other request (docs/server.md,
"Streamed text over a WebSocket").

The client sends JSON text messages: {"type": "start", ...POST /v1/audio/speech's fields but
input}, then {"type": "text", "delta": "..."} as the text comes, then {"type": "done"}. The
server answers {"type": "started", ...}, the audio as binary messages while it is generated
(with word_timestamps, {"type": "words", "words": [...]} after each sentence's audio), and
{"type": "done", "stop_reason", "usage"}; or {"type": "error", "error": {...}} (the POST
route's error body) and a close whose code fits it. Closing the socket, or losing it, cancels
the job within a frame.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..runtime.audio.audio import pcm16
from ..runtime.scheduling.scheduler import Job
from .errors import ApiError, error_body
from .formats import STREAMED, wav_header
from .schemas import MAX_INPUT_CHARS, SpeechRequest, check_input_part
from .speech import OPENAI_MODEL_NAMES, Served, _job_args, _Tracked, clone_upload, job_error, submit_errors
from .timestamps import words_message

# WebSocket close codes (RFC 6455, 7.4.1) by the POST route's status for the same error
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_UNSUPPORTED, CLOSE_INVALID_DATA = 1000, 1001, 1003, 1007
CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_INTERNAL, CLOSE_TRY_LATER = 1008, 1009, 1011, 1013
_CLOSE_BY_STATUS = {413: CLOSE_TOO_BIG, 429: CLOSE_TRY_LATER, 500: CLOSE_INTERNAL, 503: CLOSE_GOING_AWAY}
# start fields that do not apply here: the text comes in text messages, the audio as generated
_NOT_START = {"input": "send the text in {\"type\": \"text\", \"delta\": ...} messages",
              "stream_format": "this route always streams"}


class TextTooLong(ApiError):
    """The text passed the limit on input: the POST route's 400, closed as a message too big."""


def close_code(e: ApiError) -> int:
    if isinstance(e, TextTooLong):
        return CLOSE_TOO_BIG
    if e.code == "invalid_json":
        return CLOSE_INVALID_DATA
    if e.code == "unsupported_media_type":
        return CLOSE_UNSUPPORTED
    return _CLOSE_BY_STATUS.get(e.status, CLOSE_POLICY)


def _validation_error(e: ValidationError, field: str | None = None) -> ApiError:
    """A message's schema error as the POST route words its 400 (`field`: the message field that
    was checked alone)."""
    first = e.errors()[0]
    param = ".".join(str(p) for p in (field, *first.get("loc", ())) if p is not None) or None
    if first["type"] == "missing":
        message = f"{param} is required"
    elif first["type"] == "extra_forbidden":
        message = f"unknown field {param}"
    else:
        message = f"{param}: {first['msg']}" if param else str(first["msg"])
    return ApiError(400, message, param=param, code="invalid_value")


def parse_message(message: dict[str, Any]) -> dict[str, Any]:
    """A client message as a JSON object with a type; ApiError otherwise."""
    if message.get("text") is None:
        raise ApiError(400, "messages must be JSON text messages, not binary ones", code="unsupported_media_type")
    try:
        data = json.loads(message["text"])
    except (ValueError, RecursionError) as e:  # a JSONDecodeError, or nesting too deep to read
        raise ApiError(400, f"a message is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "a message must be a JSON object", code="invalid_value")
    if not isinstance(data.get("type"), str):
        raise ApiError(400, "type is required: start, text or done", param="type", code="invalid_value")
    return data


def start_request(served: Served, data: dict[str, Any]) -> SpeechRequest:
    """The start message as a SpeechRequest (its input a placeholder), checked as the POST
    route checks its body, and for what streaming allows."""
    if data["type"] != "start":
        raise ApiError(400, f"the first message must be of type start, not {data['type']!r}", param="type",
                       code="invalid_value")
    fields = {k: v for k, v in data.items() if k != "type"}
    for name, why in _NOT_START.items():
        if name in fields:
            raise ApiError(400, f"{name} is not a start field: {why}", param=name, code="invalid_value")
    fields.setdefault("response_format", "pcm")
    try:
        body = SpeechRequest.model_validate({**fields, "input": "-"})
    except ValidationError as e:
        raise _validation_error(e) from None
    if body.model not in (served.model_id, *OPENAI_MODEL_NAMES):
        raise ApiError(404, f"model {body.model!r} is not served here; this server has {served.model_id!r}",
                       param="model", code="model_not_found")
    if body.response_format not in STREAMED:
        raise ApiError(400, f"response_format must be one of {', '.join(STREAMED)} on this route (audio goes out "
                            f"as it is generated), got {body.response_format!r}", param="response_format",
                       code="invalid_value")
    if body.speed != 1.0:
        raise ApiError(400, "speed must be 1.0 on this route (a speed change needs the whole audio)",
                       param="speed", code="invalid_value")
    return body


def _submit_text(served: Served, body: SpeechRequest, args: dict[str, Any]) -> Job:
    """As speech._submit, for a job whose text comes later."""
    clone_upload(served, body, args)
    with submit_errors():
        return served.scheduler.submit_text(**args)


@dataclass
class _Session:
    """One connection's text as it came, and how its reading ended."""
    ws: WebSocket
    job: Job
    idle_timeout: float | None
    text: list[str] = field(default_factory=list)
    length: int = 0
    error: ApiError | None = None
    gone: bool = False
    last_text: float = field(default_factory=time.monotonic)

    async def read(self) -> None:
        """Text messages into the job until done; then only watch for the client leaving. A bad
        message, a disconnect or a text that stops coming cancels the job."""
        ended = False
        try:
            while True:
                message = await (self.ws.receive() if ended else self._next())
                if message["type"] == "websocket.disconnect":
                    self.gone = True
                    break
                data = parse_message(message)
                if ended:
                    raise ApiError(400, f"the text has ended: no {data['type']!r} message may follow done",
                                   param="type", code="invalid_value")
                if data["type"] == "done":
                    ended = True
                    self.job.end_text()
                elif data["type"] == "text":
                    self._delta(data)
                else:
                    raise ApiError(400, f"unknown message type {data['type']!r}: after start, send text or done",
                                   param="type", code="invalid_value")
        except ApiError as e:
            self.error = e
        self.job.cancel()  # a job that ended is not affected

    async def _next(self) -> Message:
        """The next message while the text goes on; ApiError once the job has waited for text
        (its client's last text spoken, or its first words not final) idle_timeout seconds
        since the later of that and the last text message (docs/server.md, "Timeouts and limits")."""
        if self.idle_timeout is None:
            return await self.ws.receive()
        while True:
            now = time.monotonic()
            since = self.job.waiting_since
            idle_from = now if since is None else max(since, self.last_text)
            if now - idle_from >= self.idle_timeout:
                raise ApiError(408, f"no text for {self.idle_timeout:g} s (--text-idle-timeout): the session "
                                    "ends; send text as it comes and done once it is complete", code="timeout")
            try:
                return await asyncio.wait_for(self.ws.receive(), idle_from + self.idle_timeout - now)
            except asyncio.TimeoutError:
                continue  # look again: the job may have had text to speak meanwhile

    def _delta(self, data: dict[str, Any]) -> None:
        unknown = sorted(set(data) - {"type", "delta"})
        if unknown:
            raise ApiError(400, f"unknown field {unknown[0]}", param=unknown[0], code="invalid_value")
        delta = data.get("delta")
        if isinstance(delta, str) and self.length + len(delta) > MAX_INPUT_CHARS:  # as the POST route's input
            raise TextTooLong(400, f"input: String should have at most {MAX_INPUT_CHARS} characters",
                              param="input", code="invalid_value")
        try:
            delta = check_input_part(delta)  # the POST route's check of input, for a part of it
        except ValidationError as e:
            raise _validation_error(e, "delta") from None
        self.length += len(delta)
        self.text.append(delta)
        self.job.write(delta)
        if delta:
            self.last_text = time.monotonic()


async def _sent(ws: WebSocket, data: str | bytes) -> bool:
    """Send a message; False when the client is gone."""
    try:
        await (ws.send_text(data) if isinstance(data, str) else ws.send_bytes(data))
    except (WebSocketDisconnect, RuntimeError, OSError):
        return False
    return True


async def _send_error(ws: WebSocket, e: ApiError) -> None:
    try:
        await ws.send_json({"type": "error", **error_body(e.message, e.type, e.param, e.code)})
        # a close reason is at most 123 bytes of UTF-8: the message cut there (it is whole above)
        await ws.close(close_code(e), e.message.encode()[:120].decode(errors="ignore"))
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass  # the client is gone


def _authorized(ws: WebSocket, api_key: str | None) -> None:
    if api_key is None:
        return
    scheme, _, token = ws.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
        raise ApiError(401, "missing or incorrect API key: send Authorization: Bearer <key>", code="invalid_api_key")


async def speech_stream(served: Served, ws: WebSocket, api_key: str | None) -> None:
    await ws.accept()
    with served.drain.session():
        await _stream(served, ws, api_key)


async def _first_message(served: Served, ws: WebSocket) -> Message:
    """The client's first message; ApiError when none comes within ws_start_timeout or the
    server shuts down first (a session that has not started has nothing to finish)."""
    receive = asyncio.ensure_future(ws.receive())
    closing = asyncio.ensure_future(served.drain.closing.wait())
    try:
        await asyncio.wait({receive, closing}, timeout=served.ws_start_timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (receive, closing):
            task.cancel()
    if receive.done() and not receive.cancelled():
        return receive.result()
    if closing.done() and not closing.cancelled():
        raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")
    raise ApiError(408, f"no start message within {served.ws_start_timeout:g} s (--ws-start-timeout)",
                   code="timeout")


async def _stream(served: Served, ws: WebSocket, api_key: str | None) -> None:
    try:
        _authorized(ws, api_key)
        message = await _first_message(served, ws)
        if message["type"] == "websocket.disconnect":
            return
        body = start_request(served, parse_message(message))
        args = _job_args(served, body)
        job = await run_in_threadpool(_submit_text, served, body, args)
    except ApiError as e:
        await _send_error(ws, e)
        return
    except WebSocketDisconnect:
        return
    session = _Session(ws, job, served.text_idle_timeout)
    reader = asyncio.create_task(session.read())
    tracked = _Tracked(served, job)
    rate = served.model.sample_rate
    try:
        started = {"type": "started", "sample_rate": rate, "response_format": body.response_format}
        session.gone = not await _sent(ws, json.dumps(started))
        if body.response_format == "wav" and not session.gone:
            session.gone = not await _sent(ws, wav_header(rate, None))
        async for chunk in tracked.chunks():
            if session.gone:
                break
            if chunk.words is not None:
                session.gone = not await _sent(ws, json.dumps(words_message(chunk.words)))
            elif len(chunk.samples):
                session.gone = not await _sent(ws, pcm16(chunk.samples))
    except Exception as e:  # the job failed: its text was refused ("input is empty"), the engine, a bug
        session.error = job_error(e)
    finally:
        if not job.done:
            job.cancel()
    # the reader records a disconnect, a bad message or a timeout before it cancels the job: any
    # other cancel is the server's shutdown
    if session.error is None and not session.gone and tracked.stop_reason == "cancelled":
        session.error = ApiError(503, "the request was cancelled: the server is shutting down",
                                 type="server_error", code="cancelled")
    reader.cancel()
    if session.gone:
        return
    if session.error is not None:
        await _send_error(ws, session.error)
        return
    tokens = await run_in_threadpool(lambda: len(served.model.tokenizer.encode("".join(session.text))))
    used = {"input_tokens": tokens, "output_frames": tracked.frames}
    if body.word_timestamps:
        used["words"] = tracked.words
    try:
        await ws.send_json({"type": "done", "stop_reason": tracked.stop_reason, "usage": used})
        await ws.close(CLOSE_NORMAL)
    except (WebSocketDisconnect, RuntimeError, OSError):
        pass
