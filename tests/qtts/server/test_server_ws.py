"""The streamed-text WebSocket route (docs/server.md, "Streamed text over a WebSocket"), driven
with the `websockets` client against a live `qtts-cli serve` on loopback (tiny Base model, F32):
its audio equals the POST route's for the same seed and voice however the text is cut, and its
errors, limits and disconnects behave as the POST route's."""
from __future__ import annotations

import io
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.fixtures.server import LiveServer, start_server

KEY = "ws-key"
MODEL = "tiny_base-f32"
FRAMES = 12
TEXT = "Hello from the socket, word by word. It is still speaking!"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(gguf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    log = tmp_path_factory.mktemp("server") / "serve.log"
    s = start_server(gguf_dir / f"{MODEL}.gguf", log, "--api-key", KEY, "--max-batch", "2", "--max-queue", "1")
    yield s
    assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and " 500 " not in text, text


@pytest.fixture(scope="module")
def voice(server: LiveServer) -> str:
    t = np.arange(24000) / 24000
    wave = (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, wave, 24000, format="WAV")
    r = httpx.post(f"{server.url}/v1/audio/voices", headers=AUTH, timeout=120,
                   files={"audio": ("ref.wav", buf.getvalue(), "audio/wav")}, data={"transcript": "A short clip."})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


def _ws(server: LiveServer, headers: dict[str, str] | None = None) -> ClientConnection:
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    return connect(url, additional_headers=AUTH if headers is None else headers, open_timeout=30)


def _start(voice: str, seed: int = 5, **kw: Any) -> dict[str, Any]:
    return {"type": "start", "model": MODEL, "voice": voice, "seed": seed, "max_new_tokens": FRAMES, **kw}


def _session(server: LiveServer, start: dict[str, Any], deltas: list[str]) -> tuple[bytes, list[dict[str, Any]]]:
    """The audio bytes and JSON messages of one session that ends cleanly."""
    audio, events = b"", []
    with _ws(server) as ws:
        ws.send(json.dumps(start))
        for d in deltas:
            ws.send(json.dumps({"type": "text", "delta": d}))
        ws.send(json.dumps({"type": "done"}))
        while True:
            try:
                message = ws.recv(timeout=120)
            except ConnectionClosed as e:
                assert e.rcvd is not None and e.rcvd.code == 1000, e
                break
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message))
    return audio, events


def _error(ws: ClientConnection) -> tuple[dict[str, Any], int]:
    """The error message the server sends, and its close code."""
    events = []
    while True:
        try:
            message = ws.recv(timeout=60)
        except ConnectionClosed as e:
            assert e.rcvd is not None
            errors = [m for m in events if m["type"] == "error"]
            assert len(errors) == 1, events
            return errors[0]["error"], e.rcvd.code
        if isinstance(message, str):
            events.append(json.loads(message))


def _post_pcm(server: LiveServer, voice: str, text: str, seed: int = 5) -> bytes:
    r = httpx.post(f"{server.url}/v1/audio/speech", headers=AUTH, timeout=120,
                   json={"model": MODEL, "voice": voice, "input": text, "response_format": "pcm", "seed": seed,
                         "max_new_tokens": FRAMES})
    assert r.status_code == 200, r.text
    return r.content


def _words(text: str) -> list[str]:
    words = text.split(" ")
    return [words[0]] + [" " + w for w in words[1:]]


@pytest.mark.parametrize("how", ["chars", "words", "one"])
def test_audio_equals_post_route(server: LiveServer, voice: str, how: str) -> None:
    deltas = {"chars": list(TEXT), "words": _words(TEXT), "one": [TEXT]}[how]
    audio, events = _session(server, _start(voice), deltas)
    assert audio == _post_pcm(server, voice, TEXT) and len(audio) > 0
    assert events[0] == {"type": "started", "sample_rate": 24000, "response_format": "pcm"}
    done = events[-1]
    assert done["type"] == "done" and done["stop_reason"] in ("eos", "max_new_tokens")
    assert done["usage"]["output_frames"] * 1920 * 2 == len(audio)
    assert done["usage"]["input_tokens"] > 5


def test_wav_and_sampling_settings(server: LiveServer, voice: str) -> None:
    audio, events = _session(server, _start(voice, seed=9, response_format="wav", temperature=0.7, top_k=20),
                             _words(TEXT))
    r = httpx.post(f"{server.url}/v1/audio/speech", headers=AUTH, timeout=120,
                   json={"model": MODEL, "voice": voice, "input": TEXT, "response_format": "pcm", "seed": 9,
                         "max_new_tokens": FRAMES, "temperature": 0.7, "top_k": 20})
    assert audio[:4] == b"RIFF" and audio[44:] == r.content
    assert events[-1]["type"] == "done"


def _running(server: LiveServer) -> int:
    return int(httpx.get(f"{server.url}/health", timeout=30).json()["running"])


def test_disconnect_cancels(server: LiveServer, voice: str) -> None:
    with _ws(server) as ws:
        ws.send(json.dumps(_start(voice, max_new_tokens=2000)))
        for d in _words("A reply that goes on and on, and the client leaves before it ends "):
            ws.send(json.dumps({"type": "text", "delta": d}))
        while not isinstance(ws.recv(timeout=60), bytes):  # audio is coming: the job runs
            pass
        assert _running(server) == 1
    deadline = time.monotonic() + 120  # a hang guard
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running(server) == 0


@pytest.mark.parametrize(("messages", "param", "code", "close"), [
    (["not json"], None, "invalid_json", 1007),
    ([b"\x00\x01"], None, "unsupported_media_type", 1003),
    ([{"type": "text", "delta": "Hi "}], "type", "invalid_value", 1008),  # a delta before start
    (["START", {"type": "shout"}], "type", "invalid_value", 1008),
    (["START", {"type": "text", "delta": 5}], "delta", "invalid_value", 1008),
    (["START", {"type": "text", "delta": "Hi", "extra": 1}], "extra", "invalid_value", 1008),
    (["START", {"type": "done"}], "input", "invalid_value", 1008),  # no text at all: "input is empty"
    (["LONG", {"type": "text", "delta": "Hello there, friend."}, {"type": "done"}, {"type": "text", "delta": "x"}],
     "type", "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "temperature": "hot"}], "temperature", "invalid_value",
     1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "response_format": "mp3"}], "response_format",
     "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "speed": 1.5}], "speed", "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "input": "Hi"}], "input", "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "colour": "red"}], "colour", "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "nobody"}], "voice", "voice_not_found", 1008),
    ([{"type": "start", "model": "other", "voice": "VOICE"}], "model", "model_not_found", 1008),
    ([{"type": "start", "voice": "VOICE"}], "model", "invalid_value", 1008),
    ([{"type": "start", "model": MODEL, "voice": "VOICE", "word_timestamps": True}], "word_timestamps",  # no --aligner
     "invalid_value", 1008),
])
def test_bad_messages(server: LiveServer, voice: str, messages: list[Any], param: str | None, code: str,
                      close: int) -> None:
    with _ws(server) as ws:
        for m in messages:
            if m in ("START", "LONG"):
                m = _start(voice, max_new_tokens=FRAMES if m == "START" else 2000)
            elif isinstance(m, dict) and m.get("voice") == "VOICE":
                m = {**m, "voice": voice}
            ws.send(m if isinstance(m, (str, bytes)) else json.dumps(m))
        error, got = _error(ws)
    assert (error["param"], error["code"], got) == (param, code, close), error
    assert error["type"] == "invalid_request_error" and error["message"]
    assert _running(server) == 0


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["missing", "wrong"])
def test_api_key(server: LiveServer, voice: str, headers: dict[str, str]) -> None:
    with _ws(server, headers) as ws:  # refused before it reads a message
        error, close = _error(ws)
    assert (error["code"], close) == ("invalid_api_key", 1008)


def test_max_input_length(server: LiveServer, voice: str) -> None:
    with _ws(server) as ws:
        ws.send(json.dumps(_start(voice)))
        for _ in range(5):
            ws.send(json.dumps({"type": "text", "delta": "word " * 200}))  # 5000 characters in all
        error, close = _error(ws)
    assert (error["param"], close) == ("input", 1009) and "4096" in error["message"]


def test_queue_full(server: LiveServer, voice: str) -> None:
    """--max-batch 2 --max-queue 1: three sessions without a word yet wait in the queue (they
    hold no slot), a fourth is refused; a POST as well."""
    with ExitStack() as stack:
        held = [stack.enter_context(_ws(server)) for _ in range(3)]
        for ws in held:
            ws.send(json.dumps(_start(voice)))
            assert json.loads(ws.recv(timeout=60))["type"] == "started"
        with _ws(server) as ws:
            ws.send(json.dumps(_start(voice)))
            error, close = _error(ws)
        assert (error["code"], error["type"], close) == ("queue_full", "rate_limit_error", 1013)
        r = httpx.post(f"{server.url}/v1/audio/speech", headers=AUTH, timeout=60,
                       json={"model": MODEL, "voice": voice, "input": "Hi.", "response_format": "pcm"})
        assert r.status_code == 429
    deadline = time.monotonic() + 120  # a hang guard
    while httpx.get(f"{server.url}/health", timeout=30).json()["queued"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _post_pcm(server, voice, "Hi.")  # the queue is free again
