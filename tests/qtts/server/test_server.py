"""The OpenAI-compatible server, run as a user would (`qtts-cli serve` on a loopback port) and
driven with the official `openai` client: results equal qtts's own single-sequence path for the
same seed (tiny CustomVoice model, F32, few frames)."""
from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, start_server

KEY = "test-key"
MODEL = "tiny_custom_voice-f32"
FRAMES = 12  # max_new_tokens: at most 11 frames a request
SAMPLES_PER_FRAME = 1920
LONG = "This sentence is long enough to keep a slot busy for a while. " * 40  # 2520 characters


@pytest.fixture(scope="module")
def cv_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def local(cv_path: Path) -> qtts.Model:
    return qtts.load(cv_path, n_threads=1)


@pytest.fixture(scope="module")
def server(cv_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    log = tmp_path_factory.mktemp("server") / "serve.log"
    s = start_server(cv_path, log, "--api-key", KEY, "--max-batch", "2", "--max-queue", "6")
    yield s
    assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and " 500 " not in text, text


@pytest.fixture(scope="module")
def client(server: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def _extra(seed: int, **kw: object) -> dict[str, object]:
    return {"seed": seed, "max_new_tokens": FRAMES, **kw}


def _expected(local: qtts.Model, seed: int, text: str = "Hello from the server.") -> bytes:
    audio = local.synthesize(text, speaker="ryan", seed=seed, max_new_tokens=FRAMES)
    return pcm16(audio.samples)


def _speech(client: openai.OpenAI, seed: int, fmt: str = "pcm", **kw: object) -> bytes:
    r = client.audio.speech.create(model=MODEL, voice="ryan", input="Hello from the server.", response_format=fmt,
                                   extra_body=_extra(seed), **kw)
    return r.content


def _metric(server: LiveServer, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
    (value,) = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


def test_non_streaming_wav_equals_synthesize(client: openai.OpenAI, local: qtts.Model) -> None:
    data = _speech(client, 3, "wav")
    info = sf.info(io.BytesIO(data))
    assert (info.samplerate, info.channels, info.format, info.subtype) == (24000, 1, "WAV", "PCM_16")
    samples, _ = sf.read(io.BytesIO(data), dtype="int16")
    expected = _expected(local, 3)
    assert 0 < len(samples) <= (FRAMES - 1) * SAMPLES_PER_FRAME
    assert samples.tobytes() == expected


def test_streaming_pcm_equals_non_streaming(client: openai.OpenAI, local: qtts.Model) -> None:
    whole = _speech(client, 5, "pcm")
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="ryan", input="Hello from the server.", response_format="pcm", stream_format="audio",
            extra_body=_extra(5)) as r:
        assert r.headers["content-type"] == "audio/pcm"
        streamed = b"".join(r.iter_bytes())
    assert streamed == whole == _expected(local, 5)


def test_streaming_wav_has_a_streaming_header(client: openai.OpenAI, local: qtts.Model) -> None:
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="ryan", input="Hello from the server.", response_format="wav", stream_format="audio",
            extra_body=_extra(5)) as r:
        data = b"".join(r.iter_bytes())
    assert data[:4] == b"RIFF" and data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"
    assert data[44:] == _expected(local, 5)


def test_sse_deltas_and_usage(client: openai.OpenAI, local: qtts.Model) -> None:
    with client.audio.speech.with_streaming_response.create(
            model=MODEL, voice="ryan", input="Hello from the server.", response_format="pcm", stream_format="sse",
            extra_body=_extra(9)) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in r.iter_lines() if line.startswith("data: ")]
    *deltas, done = events
    assert deltas and all(e["type"] == "speech.audio.delta" for e in deltas)
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert audio == _expected(local, 9)
    assert done["type"] == "speech.audio.done"
    usage = done["usage"]
    assert usage["output_tokens"] == len(audio) // 2 // SAMPLES_PER_FRAME
    assert usage["input_tokens"] == len(local.tokenizer.encode("Hello from the server."))
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_eight_concurrent_clients_equal_their_serial_results(client: openai.OpenAI, local: qtts.Model) -> None:
    seeds = list(range(100, 108))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda s: _speech(client, s), seeds))
    for seed, data in zip(seeds, got, strict=True):
        assert data == _expected(local, seed), seed
    assert len(set(got)) > 1  # different seeds, different audio


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus", "aac"])
def test_compressed_formats(client: openai.OpenAI, local: qtts.Model, fmt: str) -> None:
    data = _speech(client, 3, fmt)
    n = len(_expected(local, 3)) // 2
    if fmt == "aac":  # ADTS frames: a 12-bit sync word
        assert data[0] == 0xFF and data[1] & 0xF0 == 0xF0 and len(data) > 100
        return
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == 24000 and samples.ndim == 1
    assert abs(len(samples) - n) <= 2048  # encoder padding (mp3, opus) aside, the whole clip
    if fmt == "flac":  # lossless at 16 bits
        assert samples.tobytes() == _expected(local, 3)


def test_speed_changes_duration(client: openai.OpenAI, local: qtts.Model) -> None:
    n = len(_expected(local, 3)) // 2
    for speed, ratio in ((2.0, 0.5), (0.5, 2.0)):
        fast = _speech(client, 3, "pcm", speed=speed)
        assert len(fast) // 2 == pytest.approx(n * ratio, rel=0.05, abs=1200), speed


def test_api_key_required_but_not_for_health(server: LiveServer) -> None:
    body = {"model": MODEL, "input": "Hi.", "voice": "ryan"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = httpx.post(f"{server.url}/v1/audio/speech", json=body, headers=headers, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(f"{server.url}/v1/models", headers=headers, timeout=30).status_code == 401
    bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.audio.speech.create(model=MODEL, voice="ryan", input="Hi.")
    assert httpx.get(f"{server.url}/health", timeout=30).json()["status"] == "ok"


BAD = [
    (b'{"model": "x", ', None, 400),                                              # not JSON
    (b'[1, 2]', None, 400),                                                       # not an object
    ({"input": "Hi.", "voice": "ryan"}, "model", 400),                            # missing
    ({"model": MODEL, "input": "", "voice": "ryan"}, "input", 400),
    ({"model": MODEL, "input": "   ", "voice": "ryan"}, "input", 400),
    ({"model": MODEL, "input": "x" * 4097, "voice": "ryan"}, "input", 400),       # over the limit
    (b'{"model": "%s", "input": "\\ud800", "voice": "ryan"}' % MODEL.encode(), "input", 400),  # lone surrogate
    ({"model": MODEL, "input": "Hi.", "voice": "nobody"}, "voice", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "instructions": "x" * 4097}, "instructions", 400),
    ({"model": MODEL, "input": "Hi."}, "voice", 400),
    ({"model": "nope", "input": "Hi.", "voice": "ryan"}, "model", 404),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "response_format": "ogg"}, "response_format", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "speed": 5.0}, "speed", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "stream_format": "chunks"}, "stream_format", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "temperature": -1}, "temperature", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "top_p": 2}, "top_p", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "top_k": "many"}, "top_k", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "max_new_tokens": 1}, "max_new_tokens", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "seed": -3}, "seed", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "language": "klingon"}, "language", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "ref_audio": "AAAA"}, "ref_audio", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "do_sample": "yes"}, "do_sample", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "temprature": 0.5}, "temprature", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "word_timestamps": "yes"}, "word_timestamps", 400),
    ({"model": MODEL, "input": "Hi.", "voice": "ryan", "word_timestamps": True}, "word_timestamps", 400),  # no aligner
]


@pytest.mark.parametrize("body, param, status", BAD)
def test_bad_requests_are_4xx_naming_the_field(server: LiveServer, body: object, param: str | None,
                                               status: int) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server.url}/v1/audio/speech", content=content, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    assert err["param"] == param, err
    if param is not None:
        assert param in err["message"] or param == "model", err


def test_body_over_the_limit_is_413(server: LiveServer) -> None:
    body = b'{"model": "' + b"x" * (30 << 20) + b'"}'
    r = httpx.post(f"{server.url}/v1/audio/speech", content=body, timeout=60,
                   headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"


def test_chunked_body_over_the_limit_is_413(server: LiveServer) -> None:
    """A body sent chunked declares no Content-Length: the same 413 once it passes the limit,
    and a chunked body under it is served."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    def chunks(body: bytes) -> Iterator[bytes]:
        for i in range(0, len(body), 1 << 20):
            yield body[i:i + (1 << 20)]

    big = b'{"model": "' + b"x" * (30 << 20) + b'"}'
    r = httpx.post(f"{server.url}/v1/audio/speech", content=chunks(big), headers=headers, timeout=60)
    assert "content-length" not in r.request.headers and r.request.headers["transfer-encoding"] == "chunked"
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large", r.text
    small = json.dumps({"model": MODEL, "input": "Hello from the server.", "voice": "ryan", "response_format": "pcm",
                        **_extra(3)}).encode()
    r = httpx.post(f"{server.url}/v1/audio/speech", content=chunks(small), headers=headers, timeout=60)
    assert r.status_code == 200 and r.content == _speech(openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY), 3)


GOOD = {"model": MODEL, "input": "Hi.", "voice": "ryan"}


@pytest.mark.parametrize("send", [
    dict(content=json.dumps(GOOD), headers={"Content-Type": "text/plain"}),
    dict(data=GOOD),  # form-urlencoded: what `curl -d` sends without -H
    dict(files={"input": (None, "Hi.")}, data={"model": MODEL, "voice": "ryan"}),  # multipart
    dict(content=json.dumps(GOOD).encode()),  # no Content-Type at all
    dict(content=b"", headers={"Content-Type": "text/plain"}),
])
def test_a_body_that_is_not_json_is_415(server: LiveServer, send: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {KEY}", **send.pop("headers", {})}
    r = httpx.post(f"{server.url}/v1/audio/speech", headers=headers, timeout=30, **send)
    assert r.status_code == 415, r.text
    err = r.json()["error"]
    assert err["code"] == "unsupported_media_type"
    assert err["message"].startswith("Content-Type must be application/json")
    assert (r.request.headers.get("content-type") or "has none") in err["message"]


@pytest.mark.parametrize("content, message, param", [
    (b"", "the request body is empty; required fields: model, input", "model"),
    (b"{}", "model and input are required", "model"),
    (b'{"model": "%s"}' % MODEL.encode(), "input is required", "input"),
])
def test_missing_fields_are_named(server: LiveServer, content: bytes, message: str, param: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    r = httpx.post(f"{server.url}/v1/audio/speech", content=content, headers=headers, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"] == message and r.json()["error"]["param"] == param


def test_openai_client_without_voice(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="voice is required") as e:
        client.audio.speech.create(model=MODEL, input="Hi.", voice=openai.NOT_GIVEN)
    assert e.value.body["param"] == "voice"


def test_openai_client_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="unknown voice"):
        client.audio.speech.create(model=MODEL, voice="nobody", input="Hi.")


def _busy(server: LiveServer) -> int:
    h = httpx.get(f"{server.url}/health", timeout=30).json()
    return int(h["running"] + h["queued"])


def _wait_idle(server: LiveServer, timeout: float) -> float:
    t0 = time.monotonic()
    while _busy(server):
        assert time.monotonic() - t0 < timeout, "the slots were not freed"
        time.sleep(0.05)
    return time.monotonic() - t0


def test_full_queue_429_and_disconnect_frees_the_slots(server: LiveServer) -> None:
    """8 long streams fill --max-batch 2 + --max-queue 6; a ninth request gets 429; the clients
    hang up and every slot is free well before one of those streams could have finished."""
    cancelled = _metric(server, "qtts_cancelled_total")
    frames = _metric(server, "qtts_frames_total")
    body = {"model": MODEL, "input": LONG, "voice": "ryan", "response_format": "pcm", "stream_format": "audio",
            "max_new_tokens": 2000, "seed": 1}
    headers = {"Authorization": f"Bearer {KEY}"}
    http = httpx.Client(timeout=60)
    streams = [http.stream("POST", f"{server.url}/v1/audio/speech", json=body, headers=headers) for _ in range(8)]
    responses = [s.__enter__() for s in streams]
    try:
        assert all(r.status_code == 200 for r in responses)
        audio = responses[0].iter_bytes()  # kept: a dropped iterator closes its connection
        assert next(audio)
        assert _busy(server) == 8
        r = httpx.post(f"{server.url}/v1/audio/speech", json=body, headers=headers, timeout=30)
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"]
    finally:
        http.close()  # drops the connections mid-stream
    waited = _wait_idle(server, 120.0)  # a hang guard: the frame count below is the check
    assert _metric(server, "qtts_cancelled_total") == cancelled + 8
    # a request of LONG at 2000 frames a sentence runs for many seconds on the tiny model
    assert _metric(server, "qtts_frames_total") - frames < 2000, waited
    assert len(_speech(openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0), 1)) > 0


def test_metrics_and_models(server: LiveServer, client: openai.OpenAI) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
    for name in ("qtts_http_requests_total", "qtts_frames_total", "qtts_queued_requests", "qtts_batch_size",
                 "qtts_time_to_first_audio_seconds_bucket", "qtts_running_requests"):
        assert name in text, name
    assert 'route="/v1/audio/speech",status="200"' in text
    assert _metric(server, "qtts_time_to_first_audio_seconds_count") >= 1
    voices = httpx.get(f"{server.url}/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert [v["id"] for v in voices.json()["data"] if v["type"] == "builtin"] == ["dylan", "ryan", "vivian"]


def test_one_pcm_conversion_everywhere(server: LiveServer, client: openai.OpenAI, local: qtts.Model,
                                       cv_path: Path, tmp_path: Path) -> None:
    """The same seed gives the same 16-bit samples from every output: the CLI's file and --raw,
    Audio.save, a batch file, and the server's wav and pcm (runtime/audio/audio.py, to_int16)."""
    import subprocess
    import sys

    text, seed = "Hello from the server.", 21
    audio = local.synthesize(text, speaker="ryan", seed=seed, max_new_tokens=FRAMES)
    expected = pcm16(audio.samples)
    assert np.abs(audio.samples).max() > 1 / 32767  # not silence: the rounding is exercised
    cli = [sys.executable, "-m", "qtts.cli", "speak", "-m", str(cv_path), "--speaker", "ryan", "-p", text, "--seed",
           str(seed), "--max-new-tokens", str(FRAMES), "-t", "1", "-q"]
    (tmp_path / "m.jsonl").write_text(json.dumps({"id": "x", "text": text, "speaker": "ryan", "seed": seed,
                                                  "max_new_tokens": FRAMES}) + "\n")
    runs = [subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL) for cmd in (
        [*cli, "-o", str(tmp_path / "cli.wav")], [*cli, "--raw"], [*cli, "-o", "-"],
        [sys.executable, "-m", "qtts.cli", "batch", str(tmp_path / "m.jsonl"), "-m", str(cv_path), "--output-dir",
         str(tmp_path / "batch"), "-t", "1", "-q"])]
    for r in runs:
        assert r.returncode == 0, r.stderr.decode()

    def wav(data: bytes | Path) -> bytes:
        samples, rate = sf.read(io.BytesIO(data) if isinstance(data, bytes) else data, dtype="int16")
        assert rate == 24000 and sf.info(io.BytesIO(data) if isinstance(data, bytes) else data).subtype == "PCM_16"
        return samples.tobytes()

    got = {
        "Audio.save": wav(audio.save(tmp_path / "save.wav")),
        "Audio.save flac": sf.read(audio.save(tmp_path / "save.flac"), dtype="int16")[0].tobytes(),
        "cli -o file": wav(tmp_path / "cli.wav"),
        "cli --raw": runs[1].stdout,
        "cli -o -": wav(runs[2].stdout),
        "batch": wav(tmp_path / "batch" / "x.wav"),
        "server pcm": _speech(client, seed, "pcm"),
        "server wav": wav(_speech(client, seed, "wav")),
        "server flac": sf.read(io.BytesIO(_speech(client, seed, "flac")), dtype="int16")[0].tobytes(),
    }
    assert {k: v == expected for k, v in got.items()} == {k: True for k in got}


def test_pipelined_vocoder_server(cv_path: Path, local: qtts.Model, tmp_path: Path) -> None:
    """--pipelined-vocoder (the default off the CPU, forced here): concurrent streamed requests
    still give exactly their serial results, and the start-up line says how the vocoder runs."""
    log = tmp_path / "serve.log"
    s = start_server(cv_path, log, "--max-batch", "4", "--pipelined-vocoder")
    try:
        c = openai.OpenAI(base_url=f"{s.url}/v1", api_key="unused", max_retries=0)

        def streamed(seed: int) -> bytes:
            with c.audio.speech.with_streaming_response.create(
                    model=MODEL, voice="ryan", input="Hello from the server.", response_format="pcm",
                    stream_format="audio", extra_body=_extra(seed)) as r:
                return b"".join(r.iter_bytes())

        seeds = list(range(200, 206))
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(streamed, seeds))
        for seed, data in zip(seeds, got, strict=True):
            assert data == _expected(local, seed), seed
    finally:
        assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert "vocoder pipelined" in text and "Traceback" not in text, text
