"""Reliability of a live `qtts-cli serve` against bad, silent and slow clients and a shutdown
(docs/server.md, "Timeouts and limits" and "Errors and shutdown"; issue 38), with real clients:
`websockets`, `httpx` and raw sockets on loopback (tiny CustomVoice model, F32). Waits have
generous bounds and timeouts are short values given by flag, so a busy machine passes."""
from __future__ import annotations

import json
import signal
import socket
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, WsEnd, start_server, ws_connect, ws_read
from tests.fixtures.unicode import INVALID, VALID

KEY = "rel-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {**AUTH, "Content-Type": "application/json"}  # bodies sent as json.dumps writes them: \ud800 escapes
MODEL = "tiny_custom_voice-f32"
FRAMES = 8
BYTES_PER_FRAME = 1920 * 2  # s16le
TEXT = "Hello there, this is a short reply."
WAIT_S = 60.0  # the most a test waits for what should take well under a second


@pytest.fixture(scope="module")
def cv_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def local(cv_path: Path) -> qtts.Model:
    return qtts.load(cv_path, n_threads=1)


def _stopped_cleanly(s: LiveServer) -> None:
    assert s.stop() == 0, s.log.read_text()
    log = s.log.read_text()
    assert "Traceback" not in log and " 500 " not in log, log


@pytest.fixture(scope="module")
def server(cv_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    """Patient timeouts: nothing here may end by one."""
    s = start_server(cv_path, tmp_path_factory.mktemp("server") / "serve.log", "--api-key", KEY, "--max-batch", "1",
                     "--max-queue", "2", "--text-idle-timeout", "600", "--ws-start-timeout", "600")
    yield s
    _stopped_cleanly(s)


@pytest.fixture(scope="module")
def impatient(cv_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    s = start_server(cv_path, tmp_path_factory.mktemp("impatient") / "serve.log", "--api-key", KEY, "--max-batch",
                     "1", "--max-queue", "1", "--text-idle-timeout", "2", "--ws-start-timeout", "2",
                     "--header-timeout", "2", "--body-timeout", "2")
    yield s
    _stopped_cleanly(s)


def _start(seed: int = 5, **kw: Any) -> str:
    return json.dumps({"type": "start", "model": MODEL, "voice": "ryan", "seed": seed, "max_new_tokens": FRAMES, **kw})


def _delta(text: str) -> str:
    return json.dumps({"type": "text", "delta": text})  # ensure_ascii: a surrogate goes as a \ud800 escape


DONE = json.dumps({"type": "done"})


def _ws(server: LiveServer) -> Any:
    return ws_connect(server, AUTH)


def _session(server: LiveServer, deltas: list[str], seed: int = 5) -> WsEnd:
    with _ws(server) as ws:
        ws.send(_start(seed))
        for d in deltas:
            ws.send(_delta(d))
        ws.send(DONE)
        return ws_read(ws)


def _post(server: LiveServer, text: str, seed: int = 5) -> httpx.Response:
    body = {"model": MODEL, "voice": "ryan", "input": text, "response_format": "pcm", "seed": seed,
            "max_new_tokens": FRAMES}
    return httpx.post(f"{server.url}/v1/audio/speech", headers=JSON, timeout=WAIT_S, content=json.dumps(body))


def _health(server: LiveServer) -> httpx.Response:
    return httpx.get(f"{server.url}/health", timeout=WAIT_S)


def _idle(server: LiveServer) -> None:
    """/health says ok and nothing running or waiting, within WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        r = _health(server)
        if r.status_code == 200 and (r.json()["running"], r.json()["queued"]) == (0, 0):
            return
        assert time.monotonic() < deadline, r.text
        time.sleep(0.05)


def _expected(local: qtts.Model, text: str, seed: int = 5, **kw: Any) -> bytes:
    return pcm16(np.concatenate([c.samples for c in local.stream(text, speaker="ryan", seed=seed,
                                                                 max_new_tokens=FRAMES, **kw)]))


# -- 1. one bad message must not stop the server -------------------------------------------------

def test_a_lone_surrogate_delta_fails_its_session_alone(server: LiveServer, local: qtts.Model) -> None:
    with _ws(server) as ws:
        ws.send(_start())
        ws.send(_delta("Hello \ud800 there."))
        end = ws_read(ws)
    assert end.code == 1008 and end.error is not None, end
    assert (end.error["param"], end.error["code"], end.error["type"]) == ("delta", "invalid_value",
                                                                          "invalid_request_error")
    assert "unicode" in end.error["message"].lower()
    _idle(server)
    r = _post(server, TEXT)
    assert r.status_code == 200 and r.content == _expected(local, TEXT), r.text
    assert _session(server, [TEXT]).audio == _expected(local, TEXT, non_streaming_mode=False)


@pytest.mark.parametrize("name", list(VALID))
def test_unicode_corpus_is_spoken(server: LiveServer, local: qtts.Model, name: str) -> None:
    """Valid but unusual text (tests/fixtures/unicode.py): POST gives Model.stream's audio, the
    WebSocket, fed a character at a time, stream(non_streaming_mode=False)'s."""
    text = VALID[name]
    r = _post(server, text, seed=3)
    assert r.status_code == 200 and r.content == _expected(local, text, seed=3), r.text
    end = _session(server, list(text), seed=3)
    assert end.code == 1000 and end.audio == _expected(local, text, seed=3, non_streaming_mode=False), end.events


@pytest.mark.parametrize("name", list(INVALID))
def test_unicode_corpus_is_refused(server: LiveServer, local: qtts.Model, name: str) -> None:
    """Text that is not valid Unicode gets the same check on both routes (one function): POST's
    input and instructions a 400, a WebSocket delta or start field a 1008, each naming the field."""
    text = INVALID[name]
    message = None
    for field in ("input", "instructions"):
        body = {"model": MODEL, "voice": "ryan", "input": "Fine.", "response_format": "pcm", field: text}
        r = httpx.post(f"{server.url}/v1/audio/speech", headers=JSON, timeout=WAIT_S, content=json.dumps(body))
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        message = message or r.json()["error"]["message"].removeprefix("input")
    with _ws(server) as ws:
        ws.send(_start())
        ws.send(_delta("Fine so far, "))
        ws.send(_delta(text))
        end = ws_read(ws)
    assert end.code == 1008 and end.error is not None and end.error["param"] == "delta", end
    assert end.error["message"].removeprefix("delta") == message  # the same check, the same words
    with _ws(server) as ws:
        ws.send(_start(instructions=text))
        end = ws_read(ws)
    assert end.code == 1008 and end.error is not None and end.error["param"] == "instructions", end
    _idle(server)
    assert _post(server, TEXT).content == _expected(local, TEXT)


# -- 2. silent text-in sessions must not hold slots ----------------------------------------------

def test_silent_text_sessions_end_and_free_their_place(impatient: LiveServer, local: qtts.Model) -> None:
    """--max-batch 1 --max-queue 1: one session holds the slot (its first words are final), one
    waits in the queue (no word yet); both go silent and are ended by --text-idle-timeout with an
    error naming it, and the server serves again."""
    with _ws(impatient) as holding, _ws(impatient) as waiting:
        holding.send(_start())
        holding.send(_delta("Hello there, my "))
        waiting.send(_start())
        ends = [ws_read(holding), ws_read(waiting)]
    for end in ends:
        assert end.events[0]["type"] == "started" and end.code == 1008, end
        assert end.error is not None and end.error["code"] == "timeout", end
        assert "--text-idle-timeout" in end.error["message"] and "2 s" in end.error["message"]
    _idle(impatient)
    r = _post(impatient, TEXT)
    assert r.status_code == 200 and r.content == _expected(local, TEXT), r.text


# -- 3. SIGTERM gives WebSocket streams the POST streams' grace ----------------------------------

def test_sigterm_lets_websocket_streams_finish(cv_path: Path, local: qtts.Model, tmp_path: Path) -> None:
    """Three sessions at SIGTERM: one with no start yet is closed at once (1001 and an error
    message); one that ends its text during --shutdown-timeout is heard to the end (done, 1000);
    one whose text never ends is cancelled when the grace runs out (an error message, 1001). The
    server then exits 0."""
    s = start_server(cv_path, tmp_path / "serve.log", "--max-batch", "2", "--shutdown-timeout", "10",
                     "--text-idle-timeout", "600", "--ws-start-timeout", "600")
    try:
        with ws_connect(s) as finishing, ws_connect(s) as endless, ws_connect(s) as unstarted:
            finishing.send(_start(seed=1))
            finishing.send(_delta("Hello there, this is "))
            endless.send(_start(seed=2))
            endless.send(_delta("Words that never end, "))
            for ws in (finishing, endless):
                assert json.loads(ws.recv(timeout=WAIT_S))["type"] == "started"
            deadline = time.monotonic() + WAIT_S
            while _health(s).json()["running"] < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            s.process.send_signal(signal.SIGTERM)
            end = ws_read(unstarted)
            assert end.code == 1001 and end.error is not None and end.error["code"] == "shutting_down", end
            finishing.send(_delta("a short reply."))
            finishing.send(DONE)
            end = ws_read(finishing)
            assert end.code == 1000 and end.events[-1]["type"] == "done", end
            assert end.audio == _expected(local, "Hello there, this is a short reply.", seed=1,
                                          non_streaming_mode=False)
            end = ws_read(endless)
            assert end.code == 1001 and end.error is not None and end.error["code"] == "cancelled", end
        assert s.process.wait(WAIT_S) == 0
    finally:
        if s.process.poll() is None:
            s.process.kill()
    log = s.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log


# -- 4. refusals say the actual state ------------------------------------------------------------

def test_refusals_report_the_state_health_reports(server: LiveServer) -> None:
    """--max-batch 1 --max-queue 2 with three sessions waiting for their first word: nothing runs
    and three wait, as /health says, and so do the 429 and the 1013."""
    with ExitStack() as stack:
        for ws in [stack.enter_context(_ws(server)) for _ in range(3)]:
            ws.send(_start())
            assert json.loads(ws.recv(timeout=WAIT_S))["type"] == "started"
        health = _health(server).json()
        assert (health["running"], health["queued"]) == (0, 3)
        state = "0 requests are running and 3 are waiting"
        r = _post(server, TEXT)
        assert r.status_code == 429 and state in r.json()["error"]["message"], r.text
        with _ws(server) as ws:
            ws.send(_start())
            end = ws_read(ws)
        assert end.code == 1013 and end.error is not None and state in end.error["message"], end
    _idle(server)


# -- 5. unfinished requests time out -------------------------------------------------------------

def _address(server: LiveServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _until_closed(sock: socket.socket, drip: list[bytes] | None = None) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and how long that took; `drip`:
    parts sent about 0.25 s apart until the server answers."""
    t0 = time.monotonic()
    got = b""
    parts = iter(drip or [])
    sock.settimeout(0.25)
    while True:
        part = None if got else next(parts, None)
        if part is not None:
            try:
                sock.sendall(part)
            except OSError:  # closed by the server: what it sent is read below
                parts = iter([])
        try:
            data = sock.recv(65536)
        except TimeoutError:
            assert time.monotonic() - t0 < WAIT_S, "the server kept the connection open"
            continue
        except ConnectionResetError:
            data = b""
        if not data:
            return got, time.monotonic() - t0
        got += data


def test_a_silent_connection_is_closed(impatient: LiveServer) -> None:
    with socket.create_connection(_address(impatient), timeout=WAIT_S) as sock:
        got, took = _until_closed(sock)
    assert got.startswith(b"HTTP/1.1 408 ") and b"--header-timeout" in got, got
    assert took < WAIT_S


def test_slow_headers_are_cut_off(impatient: LiveServer) -> None:
    """A request head sent one line at a time, for ever: closed after --header-timeout."""
    lines = [b"POST /v1/audio/speech HTTP/1.1\r\n"] + [b"X-Slow-%d: 1\r\n" % i for i in range(4 * int(WAIT_S))]
    with socket.create_connection(_address(impatient), timeout=WAIT_S) as sock:
        got, took = _until_closed(sock, lines)
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert took < WAIT_S


def test_a_slow_body_gets_408(impatient: LiveServer) -> None:
    body = json.dumps({"model": MODEL, "voice": "ryan", "input": TEXT}).encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(_address(impatient), timeout=WAIT_S) as sock:
        sock.sendall(head)
        got, took = _until_closed(sock, [body[i:i + 1] for i in range(len(body))])
    status, _, rest = got.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 408 "), got
    error = json.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "timeout" and "--body-timeout" in error["message"], error
    assert took < WAIT_S


def test_a_websocket_without_start_is_closed(impatient: LiveServer) -> None:
    with _ws(impatient) as ws:
        end = ws_read(ws)
    assert end.code == 1008 and end.error is not None and end.error["code"] == "timeout", end
    assert "--ws-start-timeout" in end.error["message"]


# -- 6. a client that reads nothing: its audio waits, bounded by the request's frames -------------

def test_unread_audio_is_bounded_by_the_request(server: LiveServer, local: qtts.Model) -> None:
    with _ws(server) as ws:
        ws.send(_start(seed=4))
        ws.send(_delta(TEXT))
        ws.send(DONE)
        _idle(server)  # the job ended while its client read nothing
        end = ws_read(ws)
    assert end.code == 1000 and end.events[-1]["type"] == "done"
    frames = end.events[-1]["usage"]["output_frames"]
    assert len(end.audio) == frames * BYTES_PER_FRAME and frames <= FRAMES
    assert end.audio == _expected(local, TEXT, seed=4, non_streaming_mode=False)


# -- the worker, if it dies anyway ----------------------------------------------------------------

def test_a_dead_worker_fails_health_and_stops_the_server(cv_path: Path, tmp_path: Path) -> None:
    """A worker that stops at its first request (tests/fixtures/dying_worker.py): that request
    gets a clean 500, /health is no longer 200 while the server lasts, and the server exits with
    a non-zero status instead of answering 503 for ever."""
    s = start_server(cv_path, tmp_path / "serve.log", module="tests.fixtures.dying_worker")
    try:
        r = _post(s, TEXT)
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error", r.text
        try:
            health = _health(s)
        except httpx.TransportError:
            pass  # already gone
        else:
            assert health.status_code == 503 and health.json()["status"] == "failed", health.text
        assert s.process.wait(WAIT_S) == 1
    finally:
        if s.process.poll() is None:
            s.process.kill()
    assert "the worker broke" in s.log.read_text()
