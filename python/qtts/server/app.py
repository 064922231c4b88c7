"""The ASGI app: routes, the API key check, request metrics and the scheduler's shutdown
(docs/serving.md, "Server")."""
from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, File, Form, Request, UploadFile, WebSocket
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..aliases import VoiceAliases
from ..errors import QttsError
from ..runtime.scheduling.scheduler import Scheduler
from .aliases import voice_list
from .drain import Drain
from .errors import ApiError, clone_error, error_response, install
from .metrics import CONTENT_TYPE, Metrics, route_of
from .schemas import MAX_INPUT_CHARS, SpeechRequest, model_list
from .speech import MAX_UPLOAD_BYTES, Served, speech, upload_file
from .speech_ws import speech_stream
from .voices import VoiceStore, check_id

SHUTDOWN_CANCEL_TIMEOUT_S = 10.0
# A request body holds at most a base64 reference clip (MAX_UPLOAD_BYTES * 4/3) and the input.
MAX_BODY_BYTES = MAX_UPLOAD_BYTES * 3 // 2


class _CountRequests:
    """Counts every response by route template and status (pure ASGI, so streaming responses
    are counted when they start, not buffered), and reads a request's body before the app does:
    one over the limit gets 413, one that has not arrived within `body_timeout` seconds 408
    (docs/server.md, "Timeouts and limits")."""

    def __init__(self, app: ASGIApp, metrics: Metrics, body_timeout: float | None) -> None:
        self.app, self.metrics, self.body_timeout = app, metrics, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.metrics.count(route_of(scope), int(message["status"]))
            await send(message)

        too_large = ApiError(413, f"the request body is over {MAX_BODY_BYTES >> 20} MiB", code="too_large")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            await error_response(too_large)(scope, receive, counted)  # before anything is read
            return
        # Read here, up to the limit: a chunked body declares no length (an error raised inside
        # the app's body parsing would become a 400), and a slow one must not hold the request.
        try:
            buffered = await asyncio.wait_for(_read_body(receive), self.body_timeout)
        except asyncio.TimeoutError:
            late = ApiError(408, f"the request body did not arrive within {self.body_timeout:g} s (--body-timeout)",
                            code="timeout", headers={"Connection": "close"})
            await error_response(late)(scope, receive, counted)
            return
        if buffered is None:
            await error_response(too_large)(scope, receive, counted)
            return

        async def replay() -> Message:
            return buffered.pop(0) if buffered else await receive()

        await self.app(scope, replay, counted)


async def _read_body(receive: Receive) -> list[Message] | None:
    """A request's body messages (up to the disconnect, if it comes first); None past MAX_BODY_BYTES."""
    buffered: list[Message] = []
    received = 0
    while True:
        message = await receive()
        buffered.append(message)
        if message["type"] != "http.request":
            return buffered
        received += len(message.get("body", b""))
        if received > MAX_BODY_BYTES:
            return None
        if not message.get("more_body", False):
            return buffered


def create_app(model: Any, scheduler: Scheduler, *, model_id: str | None = None, api_key: str | None = None,
               voices_dir: str | Path | None = None, voice_alias: Sequence[tuple[str, str]] = (),
               lists_without_key: bool = False, voices: VoiceStore | None = None,
               metrics_labels: Mapping[str, str] | None = None, body_timeout: float | None = None,
               ws_start_timeout: float | None = None, text_idle_timeout: float | None = None,
               drain: Drain | None = None) -> FastAPI:
    """The server of one loaded model and its scheduler. The app closes the scheduler when it
    shuts down (in-flight jobs still running then are cancelled). With `api_key`, every route
    but GET /health needs `Authorization: Bearer <api_key>`, but the three lists (models, audio
    models, voices) with `lists_without_key`. `voice_alias`: (alias, voice) pairs over the
    variant's defaults (qtts/aliases.py). `voices` replaces the store of `voices_dir` (Ray
    Serve's replicas share theirs); `metrics_labels` label every metric. The timeouts are in
    seconds (None: none; docs/server.md, "Timeouts and limits"); `drain` is how the server's
    shutdown tells the WebSocket sessions (drain.py)."""
    if voices is None:
        voices = VoiceStore(Path(voices_dir) if voices_dir is not None else None)
    served = Served(model, scheduler, voices, model_id or model.path.stem,
                    VoiceAliases(model.variant, model.speakers, voice_alias), drain or Drain(), ws_start_timeout,
                    text_idle_timeout)
    metrics = Metrics(scheduler, metrics_labels)
    served.on_first_audio = metrics.ttfa.observe
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # uvicorn has let in-flight responses finish (or cancelled them at its graceful timeout)
        await run_in_threadpool(lambda: scheduler.close(cancel=True, timeout=SHUTDOWN_CANCEL_TIMEOUT_S))

    async def authorized(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise ApiError(401, "missing or incorrect API key: send Authorization: Bearer <key>",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    app = FastAPI(title="qtts", summary="OpenAI-compatible text to speech with Qwen3-TTS on ggml",
                  lifespan=lifespan)
    install(app)
    app.add_middleware(_CountRequests, metrics=metrics, body_timeout=body_timeout)
    auth = [Depends(authorized)]
    lists = [] if lists_without_key else auth  # clients that list without the key (docs/integrations.md)

    @app.get("/health")
    async def health() -> JSONResponse:
        s = scheduler.stats
        state = {"model": served.model_id, "variant": model.variant, "running": s.running, "queued": s.queued}
        if scheduler.failure is not None:  # the worker stopped: nothing will be served (the CLI exits)
            return JSONResponse({"status": "failed", "error": repr(scheduler.failure), **state}, status_code=503)
        return JSONResponse({"status": "ok", **state})

    @app.get("/metrics", dependencies=auth)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", dependencies=lists)
    async def models() -> dict[str, Any]:
        return model_list(served.model_id, created)

    @app.get("/v1/audio/models", dependencies=lists)
    async def audio_models() -> dict[str, Any]:  # Open WebUI's list of TTS models
        return {**model_list(served.model_id, created), "models": [{"id": served.model_id, "name": served.model_id}]}

    @app.post("/v1/audio/speech", dependencies=auth)
    async def create_speech(body: SpeechRequest, request: Request) -> Response:
        return await speech(served, body, request.receive)

    @app.websocket("/v1/audio/speech/stream")
    async def stream_speech(websocket: WebSocket) -> None:
        await speech_stream(served, websocket, api_key)  # checks the key itself: its errors are messages

    @app.get("/v1/audio/voices", dependencies=lists)
    async def list_voices() -> dict[str, Any]:
        return voice_list(model.speakers, served.voices, served.aliases)

    @app.post("/v1/audio/voices", dependencies=auth)
    async def create_voice(audio: UploadFile = File(...),
                           transcript: str | None = Form(None, max_length=MAX_INPUT_CHARS),
                           name: str | None = Form(None), x_vector_only: bool = Form(False)) -> dict[str, Any]:
        if model.variant != "base":
            raise ApiError(400, f"voice cloning needs a base model; this one is {model.variant}", param="audio",
                           code="invalid_value")
        voice_id = check_id(name) if name is not None else None
        if voice_id is not None and voice_id in model.speakers:
            raise ApiError(409, f"{voice_id!r} is a built-in speaker", param="name", code="voice_exists")
        data = await audio.read(MAX_UPLOAD_BYTES + 1)
        if len(data) > MAX_UPLOAD_BYTES:
            raise ApiError(413, f"audio is over {MAX_UPLOAD_BYTES >> 20} MiB", param="audio", code="too_large")

        def clone() -> Any:
            with upload_file(data) as path:
                return model.create_voice(path, transcript, x_vector_only_mode=x_vector_only)

        try:
            voice = await run_in_threadpool(clone)
        except QttsError as e:
            raise ApiError(500, f"the engine failed: {e}", type="server_error", code="engine_error") from None
        except (TypeError, ValueError) as e:
            raise clone_error(e, "audio", "transcript") from None
        voice_id = await run_in_threadpool(served.voices.add, voice, voice_id)
        return served.voices.describe(voice_id)

    @app.delete("/v1/audio/voices/{voice_id}", dependencies=auth)
    async def delete_voice(voice_id: str) -> JSONResponse:
        await run_in_threadpool(served.voices.delete, voice_id)
        return JSONResponse({"id": voice_id, "object": "voice", "deleted": True})

    return app
