"""Downscaling drains (docs/ray-serve.md, "Autoscaling"): the application of `qtts.serve_app`
with 2 replicas is redeployed with 1 while a WebSocket text-in session runs on each; the replica
Serve removes finishes its session (audio, `done`, close 1000) before it stops, and the one left
serves on. Ray and Serve run in this test's process (the composing user's way); nothing waits
on the machine's speed: the sessions are held open until the removal has begun, and then a
few seconds more, idle."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from qtts.runtime.settings.options import BatchOptions, LoadOptions, RayServeOptions, ServeOptions
from tests.fixtures.ray_serve import free_port

MODEL = "tiny_custom_voice-f32"
APP = "qtts"
TIMEOUT_S = 300.0
# How long the sessions stay open once the removal has begun: past what a replica removed without
# draining would live (Serve checks its requests every 2 s), within the server's 20 s text idle limit.
HOLD_S = 6.0


@pytest.fixture(scope="module")
def serve_url() -> Iterator[str]:
    import ray
    from ray import serve

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def _app(model: Path, replicas: int) -> Any:
    import qtts

    return qtts.serve_app(model, load=LoadOptions(n_threads=1, huge_pages=False),
                          serve=ServeOptions(shutdown_timeout=TIMEOUT_S), batch=BatchOptions(max_batch=2),
                          scale=RayServeOptions(replicas=replicas))


def _states() -> dict[str, int]:
    from ray import serve

    deployment = next(iter(serve.status().applications[APP].deployments.values()))
    return {str(getattr(k, "value", k)): v for k, v in deployment.replica_states.items() if v}


def _open(url: str, seed: int) -> tuple[ClientConnection, str]:
    """A session that has spoken its first words and waits for more text."""
    ws = connect(url.replace("http", "ws", 1) + "/v1/audio/speech/stream", open_timeout=TIMEOUT_S)
    ws.send(json.dumps({"type": "start", "model": MODEL, "voice": "ryan", "seed": seed, "max_new_tokens": 30}))
    ws.send(json.dumps({"type": "text", "delta": "Hello there, the first words. "}))
    while isinstance(message := ws.recv(timeout=TIMEOUT_S), str):  # until its first audio
        assert json.loads(message)["type"] != "error", message
    return ws, ws.response.headers["qtts-replica"]


def _finish(ws: ClientConnection) -> tuple[int | None, list[Any]]:
    ws.send(json.dumps({"type": "text", "delta": "And the last ones."}))
    ws.send(json.dumps({"type": "done"}))
    messages = list(ws)
    return ws.close_code, messages


def test_a_removed_replica_finishes_its_sessions_before_it_stops(gguf_dir: Path, serve_url: str) -> None:
    from ray import serve

    model = gguf_dir / f"{MODEL}.gguf"
    serve.run(_app(model, 2), name=APP, route_prefix="/")
    sessions: dict[str, ClientConnection] = {}
    extra: list[ClientConnection] = []
    for seed in range(40):  # Serve picks between idle replicas at random: 40 tries miss one with p = 2**-39
        ws, replica = _open(serve_url, seed)
        if replica in sessions:
            extra.append(ws)
        else:
            sessions[replica] = ws
        if len(sessions) == 2:
            break
    for ws in extra:
        _finish(ws)
    assert len(sessions) == 2, f"only replica {list(sessions)} took a session"

    redeploy = threading.Thread(target=serve.run, args=(_app(model, 1),), kwargs=dict(name=APP, route_prefix="/"))
    redeploy.start()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and _states().get("STOPPING", 0) == 0:  # a replica is being removed
        time.sleep(0.2)
    assert _states().get("STOPPING") == 1, _states()
    time.sleep(HOLD_S)

    for replica, ws in sessions.items():  # the removed one still holds its session: it ends whole
        code, messages = _finish(ws)
        assert code == 1000, (replica, code)
        assert any(isinstance(m, bytes) for m in messages), replica
        assert json.loads(messages[-1])["type"] == "done", (replica, messages[-1])
    redeploy.join(TIMEOUT_S)
    assert not redeploy.is_alive()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and _states() != {"RUNNING": 1}:
        time.sleep(0.2)
    assert _states() == {"RUNNING": 1}
    r = httpx.post(f"{serve_url}/v1/audio/speech", timeout=TIMEOUT_S, json={
        "model": MODEL, "voice": "ryan", "input": "After the removal.", "response_format": "pcm", "max_new_tokens": 10})
    assert r.status_code == 200 and len(r.content) > 0
