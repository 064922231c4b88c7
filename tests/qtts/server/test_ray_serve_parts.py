"""The parts of the Ray Serve application that need no Ray: the voice store two replicas share,
the autoscaling policy's arithmetic, the proxies' middleware for a replica that died, and the
options of `serve --ray` (tests/qtts/server/test_ray_serve.py runs them all on a live Ray)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from qtts import cli
from qtts.runtime.audio.voice import Voice
from qtts.runtime.settings.options import RayServeOptions
from qtts.server.errors import ApiError
from qtts.server.ray_serve import LOAD_METRIC, SLOTS_METRIC, QueuePolicy, ReplicaLost, build
from qtts.server.shared_voices import SharedVoiceStore


def _voice(seed: int) -> Voice:
    x = np.random.default_rng(seed).standard_normal(8).astype(np.float32)
    return Voice(x_vector=x, ref_codes=None, ref_text=None, model_fingerprint="f" * 16)


def test_two_stores_over_one_folder_see_each_others_voices(tmp_path: Path) -> None:
    a, b = SharedVoiceStore(tmp_path), SharedVoiceStore(tmp_path)
    assert a.add(_voice(1), "one") == "one"
    assert np.array_equal(b.get("one").x_vector, _voice(1).x_vector) and b.ids() == ["one"]
    with pytest.raises(ApiError) as e:
        b.add(_voice(2), "one")
    assert e.value.status == 409
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.qvoice"]  # no draft left behind
    b.delete("one")  # then written again under the same name: the other store reads the new file
    a.add(_voice(3), "one")
    assert np.array_equal(b.get("one").x_vector, _voice(3).x_vector)
    a.delete("one")
    assert b.get("one") is None and b.ids() == []
    with pytest.raises(ApiError) as e:
        b.delete("one")
    assert e.value.status == 404
    (tmp_path / "broken.qvoice").write_bytes(b"not a voice")
    assert a.ids() == [] and a.get("broken") is None
    generated = a.add(_voice(4), None)
    assert b.describe(generated)["mode"] == "x_vector_only"


def _ctx(requests: dict[str, float], slots: dict[str, float], current: int = 2, target: int = 2) -> Any:
    metrics = {LOAD_METRIC: requests, SLOTS_METRIC: slots} if requests else {}
    return SimpleNamespace(current_num_replicas=current, target_num_replicas=target, aggregated_metrics=metrics)


@pytest.mark.parametrize(("requests", "want"), [
    ({"a": 0.0, "b": 0.0}, 0),  # idle: Serve's bounds keep MIN
    ({"a": 8.0, "b": 2.0}, 1),  # 10 requests fit one replica of 8 running + 2 waiting
    ({"a": 10.0, "b": 1.0}, 2),
    ({"a": 30.0, "b": 30.0}, 6),
])
def test_the_policy_asks_for_the_replicas_the_requests_need(requests: dict[str, float], want: int) -> None:
    assert QueuePolicy(target_queued=2)(_ctx(requests, {k: 8.0 for k in requests})) == (want, {})


def test_the_policy_keeps_its_decision_without_reports() -> None:
    assert QueuePolicy(target_queued=2)(_ctx({}, {}, current=1, target=3)) == (3, {})


def _run(app: Any, scope_type: str = "http") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(ReplicaLost(app)({"type": scope_type, "path": "/v1/audio/speech"}, receive, send))
    return sent


def test_a_request_its_replica_never_answered_gets_a_retryable_503() -> None:
    async def lost(scope: Any, receive: Any, send: Any) -> None:
        return None

    start, body = _run(lost)
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    assert json.loads(body["body"])["error"]["code"] == "replica_lost"


def test_an_sse_stream_whose_replica_died_ends_with_an_error_event() -> None:
    async def cut(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})

    *_, event, end = _run(cut)
    assert json.loads(event["body"][len(b"data: "):])["error"]["code"] == "replica_lost"
    assert end == {"type": "http.response.body", "body": b""}


def test_an_audio_stream_is_cut_and_a_websocket_closed_with_1012() -> None:
    async def pcm(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"audio/pcm")]})
        await send({"type": "http.response.body", "body": b"\0\0", "more_body": True})

    assert [m["type"] for m in _run(pcm)] == ["http.response.start", "http.response.body"]  # no end: cut

    async def ws(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "websocket.accept"})

    assert _run(ws, "websocket")[-1] == {"type": "websocket.close", "code": 1012, "reason": "replica lost; reconnect"}

    async def whole(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    assert len(_run(whole)) == 2  # a response that ended is left alone


@pytest.mark.parametrize(("argv", "error"), [
    (["--replicas", "2"], "need --ray"),
    (["--ray", "--replicas", "2", "--autoscale", "1:3"], "give replicas or autoscale, not both"),
    (["--ray", "--port", "0"], "--port other than 0"),
])
def test_serve_ray_flags_are_checked(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "-m", "missing.gguf", *argv]) in (1, 2)
    assert error in capsys.readouterr().err


def test_autoscale_parses_min_max_and_refuses_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["serve", "-m", "m.gguf", "--ray", "--autoscale", "1:4"])
    assert RayServeOptions.from_args(args).autoscale == (1, 4) and RayServeOptions.from_args(args).most_replicas == 4
    for bad in ("4", "3:1", "0:0", "a:b"):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["serve", "-m", "m.gguf", "--autoscale", bad])
        assert "--autoscale" in capsys.readouterr().err


def test_the_config_file_builder_refuses_unknown_args() -> None:
    with pytest.raises(TypeError, match="unknown args threads"):
        build({"model": "m.gguf", "threads": 2})
    with pytest.raises(TypeError, match="needs model"):
        build({"replicas": 2})
