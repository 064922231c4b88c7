"""POST /v1/audio/speech: a request becomes a scheduler job, whose chunks go out as one file, as
bytes while they are generated (stream_format "audio") or as server-sent events ("sse").
A client that goes away cancels its job (docs/serving.md, "Server")."""
from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ..aliases import VoiceAliases
from ..errors import QttsError
from ..runtime.audio.audio import AudioChunk, pcm16
from ..runtime.scheduling.scheduler import Job, QueueFull, Scheduler, SchedulerClosed
from ..runtime.text.words import Word
from .aliases import resolve_voice
from .drain import Drain
from .errors import ApiError, bad_argument, clone_error, error_body
from .formats import MEDIA_TYPES, STREAMED, change_speed, check_format, encode, wav_header
from .schemas import SpeechRequest
from .timestamps import check_timestamps, speech_json, usage, words_event
from .voices import VoiceStore

log = logging.getLogger("qtts.server")
# Accepted in `model` besides the served model's id, so that clients written for OpenAI work.
OPENAI_MODEL_NAMES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
MAX_UPLOAD_BYTES = 16 << 20  # a reference clip is at most 60 s; this leaves room for any format
# Names a model error may start with or mention ("model" is too common a word in them to count).
_KNOWN = (set(SpeechRequest.model_fields) - {"model"}) | {"text", "speaker", "instruct"}


@dataclass
class Served:
    """What the endpoints share: the model, its scheduler, the saved voices, the voice aliases, the
    shutdown's drain, the WebSocket route's timeouts (seconds, None: none) and the metrics hook."""
    model: Any
    scheduler: Scheduler
    voices: VoiceStore
    model_id: str
    aliases: VoiceAliases  # OpenAI's voice names and the operator's (qtts/aliases.py)
    drain: Drain
    ws_start_timeout: float | None = None
    text_idle_timeout: float | None = None
    on_first_audio: Callable[[float], None] = field(default=lambda s: None)


def job_error(e: Exception) -> ApiError:
    """A job's failure as the client hears it (docs/serving.md, "The worker's guard"): its bad
    input a 400 naming the field, an engine failure a 500, anything else a 500 that is also
    logged with its traceback (a bug in qtts)."""
    if isinstance(e, QttsError):
        return ApiError(500, f"the engine failed: {e}", type="server_error", code="engine_error")
    if isinstance(e, (TypeError, ValueError)):
        return bad_argument(e, _KNOWN)
    log.error("a request failed", exc_info=e)
    return ApiError(500, f"internal error: {e!r}", type="server_error", code="internal_error")


@contextmanager
def upload_file(data: bytes) -> Iterator[str]:
    """A temporary file holding an uploaded clip, so that the reference reader reads at most the
    60 s it uses, in blocks. Errors about it do not name the temporary file."""
    fd, path = tempfile.mkstemp(prefix="qtts-upload-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
    except (TypeError, ValueError) as e:
        message = str(e).replace(f"reference audio {path!r}", "the reference audio").replace(path, "the upload")
        raise type(e)(message) from None
    finally:
        os.unlink(path)


def _job_args(served: Served, body: SpeechRequest) -> dict[str, Any]:
    """The request's voice and settings as Model.stream's keyword arguments."""
    body = body.model_copy(update={"voice": resolve_voice(served.aliases, body.voice, served.voices)})
    model = served.model
    variant = model.variant
    # long input: sentence pieces streamed one after another, as Model.stream does by default
    check_timestamps(model, body)
    args: dict[str, Any] = {"language": body.language, "seed": body.seed, "split_sentences": "auto",
                            "word_timestamps": body.word_timestamps, **body.sampling()}
    cloning = body.ref_audio is not None or body.ref_text is not None or body.x_vector_only_mode
    if variant != "base" and cloning:
        field_name = ("ref_audio" if body.ref_audio is not None else "ref_text" if body.ref_text is not None
                      else "x_vector_only_mode")
        raise ApiError(400, f"{field_name} is for base models (voice cloning); this model is {variant}",
                       param=field_name, code="invalid_value")
    if variant == "custom_voice":
        if not body.voice:
            raise ApiError(400, f"voice is required; built-in speakers: {', '.join(model.speakers)}", param="voice")
        if body.voice.lower() not in model.speakers:
            raise ApiError(400, f"unknown voice {body.voice!r}; built-in speakers: {', '.join(model.speakers)}",
                           param="voice", code="voice_not_found")
        args.update(speaker=body.voice.lower(), instruct=body.instructions)
    elif variant == "voice_design":
        description = body.instructions or body.voice
        if not description:
            raise ApiError(400, "a VoiceDesign model needs the voice description in instructions",
                           param="instructions")
        args["instruct"] = description
    else:
        if body.instructions:
            raise ApiError(400, "base models take no instructions", param="instructions", code="invalid_value")
        if body.ref_audio is None:
            if body.ref_text is not None or body.x_vector_only_mode:
                raise ApiError(400, "ref_text and x_vector_only_mode go with ref_audio", param="ref_audio")
            if not body.voice:
                raise ApiError(400, "voice is required: the id of a saved voice (saved voices: "
                                    f"{', '.join(served.voices.ids()) or 'none'}; POST /v1/audio/voices creates one), "
                                    "or clone one inline with ref_audio", param="voice")
            voice = served.voices.get(body.voice)
            if voice is None:
                raise ApiError(400, f"unknown voice {body.voice!r}; saved voices: "
                                    f"{', '.join(served.voices.ids()) or 'none'} (POST /v1/audio/voices creates one; "
                                    "or pass ref_audio)", param="voice", code="voice_not_found")
            args["voice"] = voice
    return args


def _decode_base64(text: str, param: str) -> bytes:
    if len(text) > MAX_UPLOAD_BYTES * 4 // 3 + 4:
        raise ApiError(413, f"{param} is over {MAX_UPLOAD_BYTES >> 20} MiB", param=param, code="too_large")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ApiError(400, f"{param} is not valid base64 ({e})", param=param, code="invalid_value") from None


def clone_upload(served: Served, body: SpeechRequest, args: dict[str, Any]) -> None:
    """A request's uploaded reference clip cloned into args["voice"], here, so that the clip's
    file is gone before the job runs; its failures as HTTP errors naming the field."""
    if body.ref_audio is None:
        return
    try:
        with upload_file(_decode_base64(body.ref_audio, "ref_audio")) as path:
            args["voice"] = served.model.create_voice(path, body.ref_text, x_vector_only_mode=body.x_vector_only_mode)
    except QttsError as e:
        raise ApiError(500, f"the engine failed: {e}", type="server_error", code="engine_error") from None
    except (TypeError, ValueError) as e:
        raise clone_error(e, "ref_audio", "ref_text") from None


def _submit(served: Served, body: SpeechRequest, args: dict[str, Any]) -> Job:
    """Submit in a worker thread (validation and voice cloning take the model's time), mapping
    the scheduler's refusals to HTTP statuses."""
    clone_upload(served, body, args)
    with submit_errors():
        return served.scheduler.submit(body.input, **args)


@contextmanager
def submit_errors() -> Iterator[None]:
    """A submission's refusals and failures as HTTP errors: a full queue 429, a closing server
    503, an engine failure 500, a bad argument 400 naming it (both speech routes)."""
    try:
        yield
    except QueueFull as e:
        raise ApiError(429, str(e), type="rate_limit_error", code="queue_full", headers={"Retry-After": "1"}) from None
    except SchedulerClosed as e:
        raise ApiError(503, str(e), type="server_error", code="shutting_down") from None
    except Exception as e:
        raise job_error(e) from None


async def _watch(receive: Receive, job: Job) -> None:
    """Cancel the job when the client disconnects (the body has been read: the next message is
    the disconnect)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not job.done:
                job.cancel()
            return


class _Tracked:
    """The job's chunks, counting frames and words and timing the first audio."""

    def __init__(self, served: Served, job: Job) -> None:
        self.served, self.job = served, job
        self.frames = 0
        self.words = 0
        self.stop_reason: str | None = None
        self._t0 = time.perf_counter()
        self._heard = False

    async def chunks(self) -> AsyncIterator[AudioChunk]:
        async for chunk in self.job:
            self.frames += len(chunk.codes)
            self.words += len(chunk.words or ())
            self.stop_reason = chunk.stop_reason or self.stop_reason
            if not self._heard and len(chunk.samples):
                self._heard = True
                self.served.on_first_audio(time.perf_counter() - self._t0)
            yield chunk


# What a response is made of: audio bytes, or a piece's words (word_timestamps) as they come.
Part = bytes | list[Word]


async def _audio_bytes(tracked: _Tracked, fmt: str, speed: float, sample_rate: int) -> AsyncIterator[Part]:
    """The response body in pieces: pcm and wav at speed 1.0 as generated, the rest whole; each
    piece's words where they come (after its audio, or before the whole file)."""
    if fmt in STREAMED and speed == 1.0:
        if fmt == "wav":
            yield wav_header(sample_rate, None)
        async for chunk in tracked.chunks():
            if chunk.words is not None:
                yield chunk.words
            elif len(chunk.samples):
                yield pcm16(chunk.samples)
        return
    parts = []
    async for chunk in tracked.chunks():
        if chunk.words is not None:
            yield chunk.words
        parts.append(chunk.samples)
    if tracked.stop_reason != "cancelled":
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        yield await run_in_threadpool(_encode, samples, sample_rate, fmt, speed)


def _encode(samples: np.ndarray, sample_rate: int, fmt: str, speed: float) -> bytes:
    return encode(change_speed(samples, sample_rate, speed), sample_rate, fmt)


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


async def _sse_events(tracked: _Tracked, audio: AsyncIterator[Part], input_tokens: int,
                      timed: bool) -> AsyncIterator[bytes]:
    try:
        async for data in audio:
            if isinstance(data, list):
                yield _sse(words_event(data))
                continue
            yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
    except Exception as e:
        err = job_error(e)
        yield _sse({"type": "error", **error_body(err.message, err.type, err.param, err.code)})
        return
    if tracked.stop_reason == "cancelled":  # by shutdown (a client that left reads nothing more)
        yield _sse({"type": "error", **error_body("the request was cancelled: the server is shutting down",
                                                  "server_error", None, "cancelled")})
        return
    yield _sse({"type": "speech.audio.done", "usage": usage(input_tokens, tracked.frames,
                                                            tracked.words if timed else None)})


class JobResponse(Response):
    """Streams a job's bytes; the job is cancelled when the client leaves or the response task
    is cancelled (shutdown), and an engine failure mid-stream ends the body early."""

    def __init__(self, job: Job, body: AsyncIterator[Any], media_type: str, watcher: asyncio.Task[None]) -> None:
        self.status_code = 200
        self.raw_headers = [(b"content-type", media_type.encode("latin-1")), (b"cache-control", b"no-store")]
        self.background = None
        self.job, self.body_iter, self.watcher = job, body, watcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for data in self.body_iter:
                await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away: the job is cancelled below
        except Exception as e:  # the status has gone out: the body ends early
            log.error("speech stream ended early: %s", job_error(e).message)
        finally:
            self.watcher.cancel()
            if not self.job.done:
                self.job.cancel()
            await self.body_iter.aclose()  # type: ignore[attr-defined]


async def speech(served: Served, body: SpeechRequest, receive: Receive) -> Response:
    if body.model not in (served.model_id, *OPENAI_MODEL_NAMES):
        raise ApiError(404, f"model {body.model!r} is not served here; this server has {served.model_id!r}",
                       param="model", code="model_not_found")
    check_format(body.response_format)
    args = _job_args(served, body)
    job = await run_in_threadpool(_submit, served, body, args)
    watcher = asyncio.create_task(_watch(receive, job))
    tracked = _Tracked(served, job)
    rate = served.model.sample_rate
    audio = _audio_bytes(tracked, body.response_format, body.speed, rate)
    if body.stream_format is None:
        try:
            parts = [piece async for piece in audio]
        except Exception as e:
            raise job_error(e) from None
        finally:
            watcher.cancel()
            if not job.done:
                job.cancel()
        if tracked.stop_reason == "cancelled":
            raise ApiError(503, "the request was cancelled (the server is shutting down or the client left)",
                           type="server_error", code="cancelled")
        data = b"".join(p for p in parts if isinstance(p, bytes))
        if not body.word_timestamps:
            return Response(data, media_type=MEDIA_TYPES[body.response_format])
        words = [w for p in parts if isinstance(p, list) for w in p]
        tokens = await run_in_threadpool(lambda: len(served.model.tokenizer.encode(body.input)))
        return JSONResponse(speech_json(data, body.response_format, rate, words,
                                        usage(tokens, tracked.frames, len(words))))
    if body.stream_format == "sse":
        tokens = len(served.model.tokenizer.encode(body.input))
        return JobResponse(job, _sse_events(tracked, audio, tokens, body.word_timestamps), "text/event-stream",
                           watcher)
    return JobResponse(job, audio, MEDIA_TYPES[body.response_format], watcher)  # bytes only: no words here

