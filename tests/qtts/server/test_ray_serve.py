"""The server on Ray Serve (`qtts-cli serve --ray`), run as a user would: 2 replicas of the tiny
Base model on a local Ray instance of 2 CPUs behind Serve's proxy on loopback, driven with the
`openai` client, httpx and a WebSocket client. Audio equals Model.stream's for the same voice and
seed, which the single-process server's tests hold its own bytes to. The replica that answered is
read from each response's qtts-replica header; a replica is killed with SIGKILL as a crash would.
Every test waits with generous bounds and never on the machine's speed."""
from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.ray_serve import RayApp, command_line, start_ray_app

MODEL = "tiny_base-f32"
KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
FRAMES = 10
TEXT = "Hello from a replica."
LONG = "This sentence keeps a slot busy for a while. " * 8  # several pieces: a stream of seconds
TIMEOUT_S = 300.0  # any one request, however loaded the machine


@pytest.fixture(scope="module")
def base_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def local(base_path: Path) -> qtts.Model:
    return qtts.Model(base_path, n_threads=1, voice_cache=False)


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared-voices")


@pytest.fixture(scope="module")
def app(base_path: Path, voices_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayApp]:
    log = tmp_path_factory.mktemp("ray-serve") / "serve.log"
    # -t 2 shared by 2 replicas: one thread and one CPU each
    a = start_ray_app(base_path, log, "--replicas", "2", "-t", "2", "--max-batch", "2", "--max-queue", "8",
                      "--voices", str(voices_dir), "--api-key", KEY, "--shutdown-timeout", "5")
    yield a
    if a.process.poll() is None:
        a.stop()


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    t = np.arange(32000) / 16000
    wave = 0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) + 0.05 * np.sin(2 * np.pi * 1330 * t)
    p = tmp_path_factory.mktemp("clip") / "ref.wav"
    sf.write(p, wave.astype(np.float32), 16000)
    return p


def _replica(r: httpx.Response) -> str:
    return r.headers["qtts-replica"]


def _speech(app: RayApp, voice: str, seed: int, **extra: Any) -> httpx.Response:
    return httpx.post(f"{app.url}/v1/audio/speech", headers=AUTH, timeout=TIMEOUT_S, json={
        "model": MODEL, "voice": voice, "input": TEXT, "response_format": "pcm", "seed": seed,
        "max_new_tokens": FRAMES, **extra})


def _expected(local: qtts.Model, voice: qtts.Voice, seed: int, text: str = TEXT, frames: int = FRAMES) -> bytes:
    return pcm16(np.concatenate([c.samples for c in local.stream(text, voice=voice, seed=seed,
                                                                 max_new_tokens=frames)]))


def _until_both(app: RayApp, ask: Any, tries: int = 60) -> dict[str, list[httpx.Response]]:
    """Responses by replica until both replicas answered (Serve routes at random between idle
    replicas: 60 tries miss one with probability 2**-59)."""
    seen: dict[str, list[httpx.Response]] = {}
    for _ in range(tries):
        r = ask()
        seen.setdefault(_replica(r), []).append(r)
        if len(seen) == 2:
            break
    assert len(seen) == 2, f"only replica {list(seen)} answered {tries} requests"
    return seen


def test_a_voice_saved_through_one_replica_speaks_through_both(app: RayApp, local: qtts.Model, clip: Path,
                                                               voices_dir: Path) -> None:
    with open(clip, "rb") as f:
        r = httpx.post(f"{app.url}/v1/audio/voices", headers=AUTH, timeout=TIMEOUT_S, files={"audio": f},
                       data={"transcript": "A short reference clip.", "name": "shared"})
    assert r.status_code == 200, r.text
    voice = qtts.Voice.load(voices_dir / "shared.qvoice")
    expected = _expected(local, voice, 5)
    seen = _until_both(app, lambda: _speech(app, "shared", 5))
    assert _replica(r) in seen  # so the other replica read the voice the first one saved
    for responses in seen.values():
        assert all(x.status_code == 200 and x.content == expected for x in responses)
    # the name is taken for every replica
    for _ in range(4):
        with open(clip, "rb") as f:
            again = httpx.post(f"{app.url}/v1/audio/voices", headers=AUTH, timeout=TIMEOUT_S, files={"audio": f},
                               data={"transcript": "A short reference clip.", "name": "shared"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "voice_exists"
    listed = _until_both(app, lambda: httpx.get(f"{app.url}/v1/audio/voices", headers=AUTH, timeout=TIMEOUT_S))
    assert all("shared" in [v["id"] for v in x.json()["data"]] for rs in listed.values() for x in rs)


def test_openai_client_and_websocket_get_the_single_process_bytes(app: RayApp, local: qtts.Model,
                                                                  voices_dir: Path) -> None:
    voice = qtts.Voice.load(voices_dir / "shared.qvoice")
    client = openai.OpenAI(base_url=f"{app.url}/v1", api_key=KEY, max_retries=0, timeout=TIMEOUT_S)
    expected = _expected(local, voice, 7)
    got = client.audio.speech.create(model=MODEL, voice="shared", input=TEXT, response_format="pcm",
                                     extra_body={"seed": 7, "max_new_tokens": FRAMES})
    assert got.content == expected
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="shared", input=TEXT, response_format="pcm", stream_format="sse",
            extra_body={"seed": 7, "max_new_tokens": FRAMES}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == expected
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="shared", input=TEXT, response_format="wav", stream_format="audio",
            extra_body={"seed": 7, "max_new_tokens": FRAMES}) as r:
        assert b"".join(r.iter_bytes())[44:] == expected
    # the WebSocket route: streamed text equals the whole text's POST on a Base model
    url = app.url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    with connect(url, additional_headers=AUTH, open_timeout=TIMEOUT_S) as ws:
        ws.send(json.dumps({"type": "start", "model": MODEL, "voice": "shared", "seed": 7, "max_new_tokens": FRAMES}))
        for delta in ["Hello", " from a", " replica."]:
            ws.send(json.dumps({"type": "text", "delta": delta}))
        ws.send(json.dumps({"type": "done"}))
        audio = b"".join(m for m in ws if isinstance(m, bytes))
        assert ws.close_code == 1000 and ws.response.headers["qtts-replica"]
    assert audio == expected


def test_metrics_are_labelled_by_replica(app: RayApp) -> None:
    seen = _until_both(app, lambda: httpx.get(f"{app.url}/metrics", headers=AUTH, timeout=TIMEOUT_S))
    for replica, responses in seen.items():
        lines = responses[-1].text.splitlines()
        assert f'qtts_queued_requests{{replica="{replica}"}} 0.0' in lines
        counted = [line for line in lines if line.startswith("qtts_http_requests_total{")]
        assert counted and all(f'replica="{replica}"' in line for line in counted)


def test_replicas_and_proxy_run_at_the_commands_priority(app: RayApp) -> None:
    """Ray starts its workers at nice 15; a replica (threads that meet at every op) and the proxy
    relaying its streams would then lose their cores to anything at normal priority."""
    proxies = [p for p in app.descendants() if command_line(p).startswith("ray::ProxyActor")]
    assert len(app.replicas()) == 2 and proxies
    mine = os.getpriority(os.PRIO_PROCESS, app.process.pid)
    assert {os.getpriority(os.PRIO_PROCESS, p) for p in [*app.replicas(), *proxies]} == {mine}


def test_a_deleted_voice_is_gone_from_every_replica(app: RayApp, local: qtts.Model, clip: Path) -> None:
    with open(clip, "rb") as f:
        r = httpx.post(f"{app.url}/v1/audio/voices", headers=AUTH, timeout=TIMEOUT_S, files={"audio": f},
                       data={"x_vector_only": "true", "name": "brief"})
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{app.url}/v1/audio/voices/brief", headers=AUTH, timeout=TIMEOUT_S).status_code == 200
    seen = _until_both(app, lambda: _speech(app, "brief", 1))
    assert all(x.status_code == 400 and x.json()["error"]["code"] == "voice_not_found"
               for responses in seen.values() for x in responses)


def _stream(app: RayApp, i: int, kind: str | None, started: dict[int, str], out: dict[int, Any]) -> None:
    """One long request; what its client saw: (replica, status, kind, body), status "cut" for a
    body that ended early."""
    body = {"model": MODEL, "voice": "shared", "input": LONG, "response_format": "pcm", "seed": i,
            "max_new_tokens": 40, **({"stream_format": kind} if kind else {})}
    replica, status, data = None, None, bytearray()
    try:
        with httpx.stream("POST", f"{app.url}/v1/audio/speech", headers=AUTH, json=body, timeout=TIMEOUT_S) as r:
            replica, status = r.headers.get("qtts-replica"), r.status_code
            started[i] = replica or ""
            for chunk in r.iter_bytes():
                data += chunk
    except httpx.RemoteProtocolError:
        status = "cut" if status is not None else "dropped"
    out[i] = (replica, status, kind, bytes(data))


def _session(app: RayApp, i: int, started: dict[int, str], out: dict[int, Any]) -> None:
    url = app.url.replace("http", "ws", 1) + "/v1/audio/speech/stream"
    try:
        with connect(url, additional_headers=AUTH, open_timeout=TIMEOUT_S) as ws:
            replica = ws.response.headers.get("qtts-replica")
            started[100 + i] = replica or ""
            ws.send(json.dumps({"type": "start", "model": MODEL, "voice": "shared", "seed": i, "max_new_tokens": 40}))
            ws.send(json.dumps({"type": "text", "delta": LONG}))
            ws.send(json.dumps({"type": "done"}))
            messages: list[Any] = []
            try:
                messages.extend(ws)
            except ConnectionClosedError:
                pass
            out[100 + i] = (replica, ws.close_code, "ws", messages)
    except Exception as e:  # recorded: the test fails on it
        out[100 + i] = (None, repr(e), "ws", [])


def test_a_killed_replica_fails_its_requests_cleanly_and_is_replaced(app: RayApp) -> None:
    ids = set(_until_both(app, lambda: httpx.get(f"{app.url}/health", timeout=TIMEOUT_S)))
    started: dict[int, str] = {}
    out: dict[int, Any] = {}
    threads = [threading.Thread(target=_stream, args=(app, i, (None, "sse", "audio")[i % 3], started, out))
               for i in range(9)]
    threads += [threading.Thread(target=_session, args=(app, i, started, out)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and not ids <= set(started.values()):  # both replicas serve some
        time.sleep(0.05)
    (victim, *_) = app.replicas()
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join(TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a request hung after the kill"
    assert len(out) == len(threads)
    failed = {v[0] for v in out.values() if not _complete(v)}
    assert failed, "nothing ran on the killed replica"
    assert len(failed - {None}) <= 1, f"requests failed on more than one replica: {failed}"
    dead = next(iter(failed - {None}), None)
    for replica, status, kind, body in out.values():
        if replica is not None and replica != dead:  # the live replica: every request whole
            assert _complete((replica, status, kind, body)), (replica, status, kind)
        else:
            _assert_clean_failure(status, kind, body)
    # the replacement answers, the dead one never again
    deadline = time.monotonic() + TIMEOUT_S
    answered: set[str] = set()
    while time.monotonic() < deadline and not answered - ids:
        r = httpx.get(f"{app.url}/health", timeout=TIMEOUT_S)
        assert r.status_code == 200
        answered.add(_replica(r))
    assert answered - ids, "no replacement replica answered"
    assert dead not in answered and len(app.replicas()) == 2


def _complete(v: tuple[Any, ...]) -> bool:
    replica, status, kind, body = v
    if kind == "ws":
        return status == 1000 and bool(body) and json.loads(body[-1])["type"] == "done"
    if status != 200:
        return False
    if kind == "sse":
        return body.rstrip().splitlines()[-1].startswith(b'data: {"type": "speech.audio.done"')
    return len(body) > 0 and len(body) % 2 == 0


def _assert_clean_failure(status: Any, kind: str | None, body: Any) -> None:
    """What a request on the killed replica may see: never a bare 500 or a hang."""
    if kind == "ws":
        assert status == 1012  # service restart: reconnect
    elif status == 503:  # never answered: retry
        assert json.loads(body)["error"]["code"] == "replica_lost"
    elif kind == "sse":
        assert status == 200 and b'"code": "replica_lost"' in body.rstrip().splitlines()[-1]
    else:  # a pcm stream cut: the client sees the body end early
        assert status == "cut", (status, kind)


def test_sigterm_stops_every_replica_and_leaves_no_process(app: RayApp) -> None:
    assert len(app.replicas()) == 2
    rc, left = app.stop()
    assert rc == 0, app.log.read_text()
    assert not left, f"still running after the command exited: {left}"
    log = app.log.read_text()
    assert "Traceback" not in log, log


def test_autoscaling_from_one_to_two_replicas_and_back(gguf_dir: Path, tmp_path: Path) -> None:
    """A queued burst makes Serve's autoscaler add a replica and its end remove it, with the
    delays shortened for the test: replicas report their Scheduler's queue every half second."""
    cv = gguf_dir / "tiny_custom_voice-f32.gguf"
    a = start_ray_app(cv, tmp_path / "serve.log", "--autoscale", "1:2", "-t", "2", "--max-batch", "1",
                      "--max-queue", "16", "--target-queued", "0", "--upscale-delay-s", "1",
                      "--downscale-delay-s", "4", "--look-back-period-s", "2",
                      env={"RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5"})
    try:
        assert len(a.replicas()) == 1
        stop = threading.Event()
        statuses: list[int] = []

        def load() -> None:
            body = {"model": "tiny_custom_voice-f32", "voice": "ryan", "input": LONG, "response_format": "pcm",
                    "max_new_tokens": 40}
            while not stop.is_set():
                statuses.append(httpx.post(f"{a.url}/v1/audio/speech", json=body, timeout=TIMEOUT_S).status_code)

        clients = [threading.Thread(target=load) for _ in range(4)]  # 1 running, up to 3 queued
        for t in clients:
            t.start()
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and len(a.replicas()) < 2:
            time.sleep(0.2)
        grew = len(a.replicas())
        stop.set()
        for t in clients:
            t.join(TIMEOUT_S)
        assert grew == 2, f"no second replica within {TIMEOUT_S} s of a queued burst"
        assert statuses and set(statuses) == {200}, statuses
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline and len(a.replicas()) > 1:
            time.sleep(0.2)
        assert len(a.replicas()) == 1, "the idle deployment kept two replicas"
        after = httpx.post(f"{a.url}/v1/audio/speech", timeout=TIMEOUT_S, json={
            "model": "tiny_custom_voice-f32", "voice": "ryan", "input": TEXT, "max_new_tokens": FRAMES})
        assert after.status_code == 200
    finally:
        rc, left = a.stop()
    assert rc == 0 and not left, (rc, left)
