"""A VoiceDesign model on the server: the voice description comes from `instructions` (or from
`voice` without them); the audio equals Model.synthesize with that instruct and seed."""
from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import openai
import pytest

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, start_server

MODEL = "tiny_voice_design-f32"
FRAMES = 10
TEXT = "Designed voices speak too."
DESCRIPTION = "A calm, low voice."


@pytest.fixture(scope="module")
def design_path(gguf_dir: Path) -> Path:
    return gguf_dir / f"{MODEL}.gguf"


@pytest.fixture(scope="module")
def server(design_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    s = start_server(design_path, tmp_path_factory.mktemp("server") / "serve.log")
    yield s
    assert s.stop() == 0


def test_description_from_instructions_or_voice(server: LiveServer, design_path: Path) -> None:
    local = qtts.Model(design_path, n_threads=1)
    expected = pcm16(local.synthesize(TEXT, instruct=DESCRIPTION, seed=2, max_new_tokens=FRAMES).samples)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    extra = {"seed": 2, "max_new_tokens": FRAMES}
    got = client.audio.speech.create(model=MODEL, voice="alloy", instructions=DESCRIPTION, input=TEXT,
                                     response_format="pcm", extra_body=extra).content
    assert got == expected
    got = client.audio.speech.create(model=MODEL, voice=DESCRIPTION, input=TEXT, response_format="pcm",
                                     extra_body=extra).content
    assert got == expected
    listed = httpx.get(f"{server.url}/v1/audio/voices", timeout=30).json()["data"]
    assert {v["type"] for v in listed} == {"alias"}  # OpenAI's names, each a description (qtts/aliases.py)
    r = httpx.post(f"{server.url}/v1/audio/speech", json={"model": MODEL, "input": TEXT}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "instructions"
    r = httpx.post(f"{server.url}/v1/audio/voices", files={"audio": ("a.wav", b"RIFF", "audio/wav")},
                   data={"x_vector_only": "true"}, timeout=30)
    assert r.status_code == 400 and "base model" in r.json()["error"]["message"]


def test_shutdown_cancels_what_outlasts_the_timeout(design_path: Path, tmp_path: Path) -> None:
    """SIGINT with a long SSE stream in flight and --shutdown-timeout 1: the stream ends with
    an error event saying it was cancelled (60 sentences: far from their end), the server
    exits 0, logging no error."""
    s = start_server(design_path, tmp_path / "serve.log", "--shutdown-timeout", "1")
    body = {"model": MODEL, "input": "A sentence that goes on for quite a while, again. " * 60,
            "instructions": DESCRIPTION, "response_format": "pcm", "stream_format": "sse", "seed": 1,
            "max_new_tokens": 4000}
    with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=body, timeout=60) as r:
        lines = (line for line in r.iter_lines() if line.startswith("data: "))
        events = [json.loads(next(lines)[len("data: "):])]
        s.process.send_signal(signal.SIGINT)
        events += [json.loads(line[len("data: "):]) for line in lines]
    assert s.process.wait(120) == 0  # not stop(): a second SIGINT forces uvicorn out
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "error" and events[-1]["error"]["code"] == "cancelled"
    log = s.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log
