"""Saved voices on the server (tiny Base model, F32): upload, list, use, survive a restart,
delete; cloning inline with ref_audio; graceful shutdown with a request in flight. Audio is
compared with Model.stream on the same voice and seed (the server's path)."""
from __future__ import annotations

import base64
import io
import signal
import threading
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, start_server

MODEL = "tiny_base-f32"
FRAMES = 10
TRANSCRIPT = "A short reference clip."


@pytest.fixture(scope="module")
def base_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def local(base_path: Path) -> qtts.Model:
    return qtts.Model(base_path, n_threads=1, voice_cache=False)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 s at 16 kHz (the server resamples it, as the reference reader does)."""
    t = np.arange(32000) / 16000
    wave = 0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t) + 0.05 * np.sin(2 * np.pi * 1330 * t)
    p = tmp_path_factory.mktemp("clip") / "ref.wav"
    sf.write(p, wave.astype(np.float32), 16000)
    return p


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("voices")


@pytest.fixture(scope="module")
def state(base_path: Path, voices_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, LiveServer]:
    """The running server (replaced by the restart test)."""
    (voices_dir / "broken.qvoice").write_bytes(b"not a voice file")  # skipped at start, never listed
    log = tmp_path_factory.mktemp("server") / "serve.log"
    # a shutdown waits for what is in flight however long a busy machine takes (the restart test)
    holder = {"server": start_server(base_path, log, "--voices", str(voices_dir), "--shutdown-timeout", "3600")}
    yield holder
    s = holder["server"]
    assert s.stop() == 0
    assert "Traceback" not in s.log.read_text()


def _url(state: dict[str, LiveServer]) -> str:
    return state["server"].url


def _upload(state: dict[str, LiveServer], clip: bytes, **form: str) -> httpx.Response:
    return httpx.post(f"{_url(state)}/v1/audio/voices", files={"audio": ("ref.wav", clip, "audio/wav")}, data=form,
                      timeout=120)


def _pcm(state: dict[str, LiveServer], voice: str, seed: int, **extra: object) -> bytes:
    client = openai.OpenAI(base_url=f"{_url(state)}/v1", api_key="unused", max_retries=0)
    r = client.audio.speech.create(model=MODEL, voice=voice, input="New words in that voice.", response_format="pcm",
                                   extra_body={"seed": seed, "max_new_tokens": FRAMES, **extra})
    return r.content


def _expected(local: qtts.Model, seed: int, **voice: object) -> bytes:
    chunks = local.stream("New words in that voice.", seed=seed, max_new_tokens=FRAMES, **voice)
    return pcm16(np.concatenate([c.samples for c in chunks]))


def test_upload_list_and_use(state: dict[str, LiveServer], clip: Path, voices_dir: Path, local: qtts.Model) -> None:
    data = clip.read_bytes()
    r = _upload(state, data, name="me-x", x_vector_only="true")
    assert r.status_code == 200, r.text
    assert r.json() == {"id": "me-x", "object": "voice", "type": "saved", "mode": "x_vector_only", "ref_text": None}
    r = _upload(state, data, name="me-icl", transcript=TRANSCRIPT)
    assert r.status_code == 200, r.text and r.json()["mode"] == "icl"
    unnamed = _upload(state, data, transcript=TRANSCRIPT).json()["id"]
    assert unnamed.startswith("voice-")
    listed = httpx.get(f"{_url(state)}/v1/audio/voices", timeout=30).json()["data"]
    assert {v["id"] for v in listed} == {"me-x", "me-icl", unnamed}
    assert next(v for v in listed if v["id"] == "me-icl")["ref_text"] == TRANSCRIPT
    for name in ("me-x", "me-icl"):
        voice = qtts.Voice.load(voices_dir / f"{name}.qvoice")  # the voice file format, on disk
        assert _pcm(state, name, 4) == _expected(local, 4, voice=voice)
    assert not list(voices_dir.glob("*.tmp"))


def test_inline_reference_audio(state: dict[str, LiveServer], clip: Path, local: qtts.Model) -> None:
    b64 = base64.b64encode(clip.read_bytes()).decode()
    got = _pcm(state, "any", 6, ref_audio=b64, x_vector_only_mode=True)
    assert got == _expected(local, 6, ref_audio=str(clip), x_vector_only_mode=True)
    got = _pcm(state, "any", 6, ref_audio=b64, ref_text=TRANSCRIPT)
    assert got == _expected(local, 6, ref_audio=str(clip), ref_text=TRANSCRIPT)


def test_voice_errors(state: dict[str, LiveServer], clip: Path) -> None:
    data = clip.read_bytes()
    short = io.BytesIO()
    sf.write(short, np.zeros(100, dtype=np.float32), 24000, format="WAV")
    cases = [
        (dict(name="no-transcript"), data, 400, "transcript"),
        (dict(name="junk", x_vector_only="true"), b"not audio at all", 400, "audio"),
        (dict(name="short", x_vector_only="true"), short.getvalue(), 400, "audio"),
        (dict(name="../up", x_vector_only="true"), data, 400, "name"),
        (dict(name="me-x", x_vector_only="true"), data, 409, "name"),
        (dict(name="flag", x_vector_only="maybe"), data, 400, "x_vector_only"),
    ]
    for form, audio, status, param in cases:
        r = _upload(state, audio, **form)
        assert r.status_code == status, (form, r.text)
        assert r.json()["error"]["param"] == param, (form, r.text)
    r = httpx.post(f"{_url(state)}/v1/audio/voices", data={"transcript": "x"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "audio"
    body = {"model": MODEL, "input": "Hi.", "voice": "nobody"}
    r = httpx.post(f"{_url(state)}/v1/audio/speech", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
    r = httpx.post(f"{_url(state)}/v1/audio/speech", json={**body, "voice": "me-x", "instructions": "Whisper."},
                   timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "instructions"
    r = httpx.post(f"{_url(state)}/v1/audio/speech", json={**body, "ref_audio": "@@@"}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "ref_audio"


def test_errors_name_the_field_at_fault(state: dict[str, LiveServer]) -> None:
    """A clip's fault names the clip's field even where the message mentions the transcript; a
    missing voice is named as missing (the openai client, and raw httpx for the upload)."""
    short, long = io.BytesIO(), io.BytesIO()
    sf.write(short, np.full(1200, 0.1, dtype=np.float32), 24000, format="WAV")  # 0.05 s
    sf.write(long, np.full(65 * 8000, 0.1, dtype=np.float32), 8000, format="WAV")  # 65 s
    client = openai.OpenAI(base_url=f"{_url(state)}/v1", api_key="unused", max_retries=0)
    for extra in ({"x_vector_only_mode": True}, {"ref_text": TRANSCRIPT}):
        with pytest.raises(openai.BadRequestError, match="too short") as e:
            client.audio.speech.create(model=MODEL, voice="any", input="Hi.",
                                       extra_body={"ref_audio": base64.b64encode(short.getvalue()).decode(), **extra})
        assert e.value.body["param"] == "ref_audio"
    r = _upload(state, long.getvalue(), name="long", transcript=TRANSCRIPT)
    assert r.status_code == 400 and "at most 60 s" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "audio"
    with pytest.raises(openai.BadRequestError, match="voice is required") as e:
        client.audio.speech.create(model=MODEL, input="Hi.", voice=openai.NOT_GIVEN)
    assert e.value.body["param"] == "voice" and "ref_audio" in e.value.body["message"]


def test_restart_keeps_voices_and_finishes_in_flight(state: dict[str, LiveServer], base_path: Path,
                                                     voices_dir: Path, local: qtts.Model,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    """SIGINT while a stream is in flight: the stream completes, the server exits 0, and a new
    server on the same folder has the saved voices."""
    old = state["server"]
    body = {"model": MODEL, "input": "New words in that voice.", "voice": "me-x", "response_format": "pcm",
            "stream_format": "audio", "seed": 8, "max_new_tokens": 200}
    voice = qtts.Voice.load(voices_dir / "me-x.qvoice")
    with httpx.stream("POST", f"{old.url}/v1/audio/speech", json=body, timeout=120) as r:
        parts = r.iter_bytes()
        got = [next(parts)]
        threading.Timer(0.0, old.process.send_signal, (signal.SIGINT,)).start()
        got += list(parts)
    assert old.process.wait(600) == 0  # a hang guard
    chunks = local.stream(body["input"], seed=8, max_new_tokens=200, voice=voice)
    assert b"".join(got) == pcm16(np.concatenate([c.samples for c in chunks]))
    log = tmp_path_factory.mktemp("server") / "serve.log"
    state["server"] = start_server(base_path, log, "--voices", str(voices_dir))
    listed = httpx.get(f"{_url(state)}/v1/audio/voices", timeout=30).json()["data"]
    assert {"me-x", "me-icl"} <= {v["id"] for v in listed}
    assert _pcm(state, "me-x", 4) == _expected(local, 4, voice=voice)


def test_delete(state: dict[str, LiveServer], voices_dir: Path) -> None:
    r = httpx.delete(f"{_url(state)}/v1/audio/voices/me-x", timeout=30)
    assert r.status_code == 200 and r.json() == {"id": "me-x", "object": "voice", "deleted": True}
    assert not (voices_dir / "me-x.qvoice").exists()
    assert "me-x" not in {v["id"] for v in httpx.get(f"{_url(state)}/v1/audio/voices", timeout=30).json()["data"]}
    r = httpx.delete(f"{_url(state)}/v1/audio/voices/me-x", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["code"] == "voice_not_found"
    with pytest.raises(openai.BadRequestError, match="unknown voice"):
        _pcm(state, "me-x", 1)
