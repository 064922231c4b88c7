"""A seeded protocol fuzzer for the streamed-text WebSocket route (docs/server.md, "Streamed text
over a WebSocket"; issue 38): random message sequences and mutations of valid ones (messages
dropped, repeated, swapped, fields set to odd values, unknown or missing fields, binary frames,
broken or deeply nested JSON, lone surrogates, texts over the limit, clients that go silent or
leave), a few sessions at a time against a live `qtts-cli serve` with short timeouts. Every
session must end with a documented close code and, unless it ended normally, one error message
of the documented shape that blames the client; afterwards nothing runs or waits, /health is
200, the log holds no traceback and no 500, and a normal request is byte-identical to the same
request sent before the fuzzing. Bounded: SESSIONS sessions, each ended by the server's
timeouts at the latest."""
from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from tests.fixtures.server import LiveServer, WsEnd, start_server, ws_connect, ws_read
from tests.fixtures.unicode import INVALID, VALID

SEED = 38
SESSIONS = 64
AT_ONCE = 4
KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MODEL = "tiny_custom_voice-f32"
WAIT_S = 120.0  # the most one message may take to come (what fails waits this long, at most)
# docs/server.md: 1000 done, 1003 binary, 1007 not JSON, 1008 a bad message or a timeout, 1009 too
# long, 1013 the queue full; 1001 (shutdown) and 1011 (engine failure) must not happen here
CLOSE_CODES = {1000, 1003, 1007, 1008, 1009, 1013}
CLIENT_ERRORS = {"invalid_request_error", "rate_limit_error"}

WORDS = ["Hello", " there,", " this", " is", " a", " test.", " ", "", "\n", " Another sentence!", "é", "中文。"]
TEXTS = [*WORDS, *VALID.values(), *INVALID.values(), "word " * 900, "x" * 4097]
ODD: list[Any] = [None, True, False, 0, -1, 1.5, 2**64, 1e308, float("nan"), float("inf"), "", " ", "x" * 5000, [],
                  {}, [[[]]], {"a": [1]}, "ryan", "pcm", "wav", "mp3", "start", "text", "done", *INVALID.values()]
START_FIELDS = ["model", "voice", "seed", "max_new_tokens", "response_format", "speed", "language", "instructions",
                "temperature", "top_k", "top_p", "do_sample", "input", "stream_format", "ref_audio",
                "x_vector_only_mode"]


def _start(rng: random.Random) -> dict[str, Any]:
    m: dict[str, Any] = {"type": "start", "model": MODEL, "voice": "ryan", "seed": rng.randrange(1000),
                         "max_new_tokens": rng.choice([1, 3, 5])}
    if rng.random() < 0.3:
        m["response_format"] = rng.choice(["pcm", "wav"])
    if rng.random() < 0.3:
        m["temperature"] = rng.choice([0.5, 0.9])
    return m


def _valid(rng: random.Random) -> list[Any]:
    return [_start(rng), *({"type": "text", "delta": rng.choice(WORDS)} for _ in range(rng.randrange(1, 6))),
            {"type": "done"}]


def _garbage(rng: random.Random) -> Any:
    return rng.choice([
        b"\x00\xff binary", "not json", '{"type": "text", "delta": "cut', "null", "[]", "42", '"text"',
        "[" * 20000 + "]" * 20000, json.dumps({"type": rng.choice(ODD)}, allow_nan=True),
        {"type": "text", "delta": rng.choice(TEXTS)}, {"type": "text", "delta": rng.choice(ODD)},
        {"type": "done", "extra": 1}, {"type": "text"}, {"delta": "no type"}, _start(rng),
        {"type": "start", rng.choice(START_FIELDS): rng.choice(ODD)}, {"type": rng.choice(["stop", "ping", ""])},
    ])


def _mutate(rng: random.Random, messages: list[Any]) -> list[Any]:
    messages = list(messages)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(messages)) if messages else 0
        how = rng.randrange(7)
        if how == 0 and messages:
            del messages[i]
        elif how == 1 and messages:
            messages.insert(i, messages[i])
        elif how == 2 and len(messages) > 1:
            j = rng.randrange(len(messages))
            messages[i], messages[j] = messages[j], messages[i]
        elif how == 3 and messages and isinstance(messages[i], dict):
            field = rng.choice([*messages[i], *START_FIELDS, "delta", "type", "extra"])
            messages[i] = {**messages[i], field: rng.choice(ODD)}
        elif how == 4 and messages and isinstance(messages[i], dict) and messages[i]:
            messages[i] = {k: v for k, v in messages[i].items() if k != rng.choice(list(messages[i]))}
        elif how == 5:
            messages.insert(i, _garbage(rng))
        else:
            messages[i:i + 1] = [{"type": "text", "delta": rng.choice(TEXTS)}]
    return messages


@dataclass
class Case:
    index: int
    messages: list[Any]
    leave_after: int | None  # the client closes after this many messages, without reading

    def frames(self) -> list[str | bytes]:
        return [m if isinstance(m, (str, bytes)) else json.dumps(m, allow_nan=True) for m in self.messages]


def cases(seed: int, n: int) -> list[Case]:
    rng = random.Random(seed)
    out = []
    for index in range(n):
        kind = rng.random()
        if kind < 0.2:
            messages = [_garbage(rng) for _ in range(rng.randrange(0, 5))]
        elif kind < 0.3:
            messages = _valid(rng)
        else:
            messages = _mutate(rng, _valid(rng))
        leave = rng.randrange(len(messages) + 1) if rng.random() < 0.15 else None
        out.append(Case(index, messages, leave))
    return out


def _run(server: LiveServer, case: Case) -> WsEnd | None:
    with ws_connect(server, AUTH) as ws:
        for n, frame in enumerate(case.frames()):
            if case.leave_after == n:
                return None
            try:
                ws.send(frame)
            except ConnectionClosed:  # the server ended the session early: what it sent is read below
                break
        if case.leave_after is not None:
            return None
        return ws_read(ws, WAIT_S)


def _check(case: Case, end: WsEnd) -> None:
    where = f"case {case.index} (seed {SEED}): {case.messages!r:.600}"
    assert end.code in CLOSE_CODES, f"{where}: closed with {end.code}; {end.events}"
    assert all(e.get("type") in ("started", "done", "error") for e in end.events), where
    if end.code == 1000:
        assert end.events[0]["type"] == "started" and end.events[-1]["type"] == "done", f"{where}: {end.events}"
        header = 44 if end.events[0]["response_format"] == "wav" else 0
        assert len(end.audio) == header + end.events[-1]["usage"]["output_frames"] * 1920 * 2, where
        return
    error = end.error
    assert error is not None, f"{where}: closed {end.code} without an error message; {end.events}"
    assert set(error) == {"message", "type", "param", "code"} and error["message"], f"{where}: {error}"
    assert error["type"] in CLIENT_ERRORS, f"{where}: {error}"


@pytest.fixture(scope="module")
def server(gguf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    s = start_server(gguf_dir / f"{MODEL}.gguf", tmp_path_factory.mktemp("fuzz") / "serve.log", "--api-key", KEY,
                     "--max-batch", "2", "--max-queue", "3", "--text-idle-timeout", "2", "--ws-start-timeout", "2")
    yield s
    assert s.stop() == 0, s.log.read_text()


def _normal(server: LiveServer) -> tuple[bytes, bytes]:
    r = httpx.post(f"{server.url}/v1/audio/speech", headers=AUTH, timeout=WAIT_S,
                   json={"model": MODEL, "voice": "ryan", "input": "Hello from the fuzzer.", "response_format": "pcm",
                         "seed": 9, "max_new_tokens": 6})
    assert r.status_code == 200, r.text
    with ws_connect(server, AUTH) as ws:
        for m in [{**_start(random.Random(0)), "seed": 9}, {"type": "text", "delta": "Hello from the fuzzer."},
                  {"type": "done"}]:
            ws.send(json.dumps(m))
        end = ws_read(ws, WAIT_S)
    assert end.code == 1000, end
    return r.content, end.audio


def test_fuzz_the_websocket_protocol(server: LiveServer) -> None:
    before = _normal(server)  # the server as fresh
    todo = cases(SEED, SESSIONS)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        ends = list(pool.map(lambda case: _run(server, case), todo))
    for case, end in zip(todo, ends, strict=True):
        if end is not None:
            _check(case, end)
    deadline = time.monotonic() + WAIT_S
    while True:
        health = httpx.get(f"{server.url}/health", timeout=WAIT_S)
        assert health.status_code == 200, health.text  # the worker lives
        if (health.json()["running"], health.json()["queued"]) == (0, 0):
            break
        assert time.monotonic() < deadline, health.text
        time.sleep(0.05)
    assert _normal(server) == before
    log = server.log.read_text()
    assert "Traceback" not in log and " 500 " not in log and "ERROR" not in log, log


def test_cases_are_seeded_and_varied() -> None:
    """The same seed gives the same sessions; they cover each kind of mistake."""
    assert [c.frames() for c in cases(SEED, SESSIONS)] == [c.frames() for c in cases(SEED, SESSIONS)]
    frames = [f for c in cases(SEED, SESSIONS) for f in c.frames()]
    assert any(isinstance(f, bytes) for f in frames)
    assert any(isinstance(f, str) and "\\ud8" in f for f in frames)
    assert any(c.leave_after is not None for c in cases(SEED, SESSIONS))
