"""The clients users plug qtts into (docs/integrations.md), each against a live `qtts-cli serve`
on loopback: LiveKit Agents' `openai.TTS` plugin and Pipecat's `OpenAITTSService` run as
installed, Open WebUI's requests are made as its code makes them (its package pins older openai,
fastapi and python-multipart than the test extra's and pulls some 110 more packages: not
installable beside them).

These clients send no seed, so the served model is the tiny CustomVoice checkpoint with greedy
generation defaults (its generation_config: no sampling, at most FRAMES - 1 frames): each
request's audio is then the library's for the same text and voice, byte for byte where the
client takes PCM, and decodable to the same length where it takes mp3."""
from __future__ import annotations

import asyncio
import io
import json
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import numpy as np
import pytest
import soundfile as sf

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, start_server

KEY = "integration-key"
MODEL = "tiny_custom_voice-greedy"
FRAMES = 13  # max_new_tokens in the model's generation_config: 12 frames a request
TEXT = "Hello from an agent."
LIVEKIT_MARKER = 240  # LiveKit ends a segment whose last frame went out with 10 ms of silence
MP3_PADDING = 2304  # an mp3 decoder's extra samples: the encoder's delay and last frame's padding, at most


@pytest.fixture(scope="module")
def greedy_path(fixture_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from qtts.convert.checkpoint import convert

    src = tmp_path_factory.mktemp("greedy") / "tiny_custom_voice"
    shutil.copytree(fixture_root / "tiny_custom_voice", src)
    config = json.loads((src / "generation_config.json").read_text())
    config.update(do_sample=False, subtalker_dosample=False, max_new_tokens=FRAMES)
    (src / "generation_config.json").write_text(json.dumps(config))
    out = src.parent / f"{MODEL}.gguf"
    convert(src, out, "f32")
    return out


@pytest.fixture(scope="module")
def local(greedy_path: Path) -> qtts.Model:
    return qtts.load(greedy_path, n_threads=1)


@pytest.fixture(scope="module")
def server(greedy_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    log = tmp_path_factory.mktemp("server") / "serve.log"
    s = start_server(greedy_path, log, "--api-key", KEY, "--lists-without-key", "--voice-alias", "echo=dylan",
                     "--max-batch", "2")
    yield s
    assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and " 500 " not in text, text


def _expected(local: qtts.Model, speaker: str, text: str = TEXT) -> bytes:
    return pcm16(np.concatenate([c.samples for c in local.stream(text, speaker=speaker)]))


def test_the_served_model_is_greedy(local: qtts.Model) -> None:
    assert local.generation_defaults["do_sample"] is False and local.generation_defaults["max_new_tokens"] == FRAMES
    assert _expected(local, "ryan") == _expected(local, "ryan") and len(_expected(local, "ryan")) == 12 * 1920 * 2


# -- LiveKit Agents (livekit-plugins-openai) ---------------------------------------------------
async def _livekit(server: LiveServer, model: str, fmt: str | None, voice: str = "ryan") -> tuple[np.ndarray, int]:
    from livekit.plugins import openai as lk

    kwargs: dict[str, Any] = {} if fmt is None else {"response_format": fmt}
    tts = lk.TTS(model=model, voice=voice, base_url=f"{server.url}/v1", api_key=KEY, **kwargs)
    frames, rate = [], 0
    try:
        async with tts.synthesize(TEXT) as stream:
            async for event in stream:
                frames.append(np.frombuffer(event.frame.data, dtype=np.int16).copy())
                rate = event.frame.sample_rate
    finally:
        await tts.aclose()
    return np.concatenate(frames), rate


@pytest.mark.parametrize("model", [MODEL, "tts-1"])  # SSE (speech.audio.delta events), raw audio
def test_livekit_pcm_equals_the_library(server: LiveServer, local: qtts.Model, model: str) -> None:
    samples, rate = asyncio.run(_livekit(server, model, "pcm"))
    expected = _expected(local, "ryan")
    n = len(expected) // 2
    assert rate == 24000 and samples[:n].tobytes() == expected
    assert len(samples) - n <= LIVEKIT_MARKER and not samples[n:].any()  # its end-of-segment marker


@pytest.mark.parametrize("model", [MODEL, "tts-1"])
def test_livekit_default_mp3_decodes_to_the_whole_clip(server: LiveServer, local: qtts.Model, model: str) -> None:
    samples, rate = asyncio.run(_livekit(server, model, None, voice="alloy"))  # mp3, its default
    n = len(_expected(local, "vivian")) // 2  # alloy on this model: vivian (qtts/aliases.py)
    assert rate == 24000 and n <= len(samples) <= n + MP3_PADDING + LIVEKIT_MARKER


# -- Pipecat (pipecat-ai) ----------------------------------------------------------------------
async def _pipecat(server: LiveServer, voice: str) -> tuple[bytes, list[str]]:
    """Pipecat's OpenAITTSService in a pipeline, as an app runs it: the audio frames and errors
    that reach the end."""
    from pipecat.frames.frames import EndFrame, ErrorFrame, TTSAudioRawFrame, TTSSpeakFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameProcessor
    from pipecat.services.openai.tts import OpenAITTSService
    from pipecat.workers.runner import WorkerRunner

    audio, errors = bytearray(), []

    class Sink(FrameProcessor):
        async def process_frame(self, frame: Any, direction: Any) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TTSAudioRawFrame):
                assert frame.sample_rate == 24000 and frame.num_channels == 1
                audio.extend(frame.audio)
            elif isinstance(frame, ErrorFrame):
                errors.append(frame.error)
            await self.push_frame(frame, direction)

    tts = OpenAITTSService(api_key=KEY, base_url=f"{server.url}/v1",
                           settings=OpenAITTSService.Settings(voice=voice, model=MODEL))
    # an error goes upstream, the audio downstream: a sink on either side of the service
    worker = PipelineWorker(Pipeline([Sink(), tts, Sink()]), params=PipelineParams(audio_out_sample_rate=24000))
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await worker.queue_frames([TTSSpeakFrame(TEXT), EndFrame()])
    await runner.run()
    return bytes(audio), errors


@pytest.mark.parametrize(("voice", "speaker"), [("alloy", "vivian"), ("onyx", "ryan"), ("echo", "dylan")])
def test_pipecat_speaks_in_openai_voice_names(server: LiveServer, local: qtts.Model, voice: str,
                                              speaker: str) -> None:
    """alloy and onyx by their defaults (onyx's uncle_fu is not in this model: the first male
    speaker it has), echo by the server's --voice-alias echo=dylan."""
    audio, errors = asyncio.run(_pipecat(server, voice))
    assert not errors and audio == _expected(local, speaker)


def test_pipecat_refuses_other_names_before_sending(server: LiveServer) -> None:
    """Why the aliases are needed: a speaker's own name never reaches the server."""
    before = _speech_requests(server)
    audio, errors = asyncio.run(_pipecat(server, "ryan"))
    assert audio == b"" and "OpenAI TTS voice 'ryan' is not supported" in errors[0]
    assert _speech_requests(server) == before


def _speech_requests(server: LiveServer) -> float:
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=30).text
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("qtts_http_requests_total{") and 'route="/v1/audio/speech"' in line)


# -- Open WebUI (its routers/audio requests, 0.12) -----------------------------------------------
async def _open_webui(server: LiveServer, voice: str) -> tuple[list[dict[str, Any]], dict[str, str], bytes, str]:
    """Admin > Settings > Audio with engine OpenAI, base URL {server}/v1, the key and the model:
    the models and voices it lists (GETs without the key) and one reply it speaks."""
    base = f"{server.url}/v1"
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/audio/models") as r:
            r.raise_for_status()
            models = (await r.json()).get("models", [])
        async with session.get(f"{base}/audio/voices") as r:
            r.raise_for_status()
            voices = {v["id"]: v["name"] for v in (await r.json()).get("voices", [])}
        body = {"input": TEXT, "voice": voice, "model": MODEL}  # the chat's text, the user's voice, the model
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"}
        async with session.post(f"{base}/audio/speech", json=body, headers=headers) as r:
            r.raise_for_status()
            return models, voices, await r.read(), r.headers.get("Content-Type", "audio/mpeg")


@pytest.mark.parametrize(("voice", "speaker"), [("ryan", "ryan"), ("nova", "vivian")])
def test_open_webui_lists_and_speaks(server: LiveServer, local: qtts.Model, voice: str, speaker: str) -> None:
    models, voices, data, content_type = asyncio.run(_open_webui(server, voice))
    assert [m["id"] for m in models] == [MODEL]
    assert {"dylan", "ryan", "vivian", "alloy", "nova", "echo"} <= set(voices) and voices["ryan"] == "Ryan"
    assert voices["echo"] == "echo (dylan)"
    assert content_type == "audio/mpeg"
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    n = len(_expected(local, speaker)) // 2
    assert rate == 24000 and n <= len(samples) <= n + MP3_PADDING
