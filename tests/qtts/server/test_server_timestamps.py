"""Word timestamps on the server (docs/server.md, "Word timestamps"): `qtts-cli serve --aligner`
on a loopback port, driven with the openai client, httpx and websockets. The JSON body, the SSE
events and the WebSocket messages carry the words qtts's own API gives for the same seed (tiny
CustomVoice model and aligner, F32), each piece's after its audio, counted in usage; requests
the words cannot go with are 400s naming the field."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import soundfile as sf
from websockets.exceptions import ConnectionClosed

import qtts
from qtts.runtime.audio.audio import pcm16
from tests.fixtures.server import LiveServer, start_server, ws_connect

KEY = "words-key"
MODEL = "tiny_custom_voice-f32"
FRAMES = 12
# over 200 characters: two sentence pieces, the second's words offset past the first and the pause
TEXT = ("The first sentence of this request is long enough that the whole text is split into sentence pieces. "
        "The second sentence is spoken after a short pause, and its words are timed from the very start of "
        "the audio.")
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(gguf_dir: Path, aligner_gguf: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    log = tmp_path_factory.mktemp("server") / "serve.log"
    s = start_server(gguf_dir / f"{MODEL}.gguf", log, "--api-key", KEY, "--aligner", str(aligner_gguf["f32"]))
    yield s
    assert s.stop() == 0, log.read_text()
    text = log.read_text()
    assert "Traceback" not in text and " 500 " not in text, text


@pytest.fixture(scope="module")
def local(gguf_dir: Path, aligner_gguf: dict[str, Path]) -> qtts.Model:
    with qtts.load(gguf_dir / f"{MODEL}.gguf", n_threads=1, aligner=aligner_gguf["f32"]) as m:
        yield m


def _dicts(words: list[qtts.Word]) -> list[dict[str, Any]]:
    return [{"word": w.text, "start": w.start, "end": w.end} for w in words]


def _local_pieces(local: qtts.Model, seed: int) -> tuple[bytes, list[list[dict[str, Any]]]]:
    """qtts's own stream: its PCM and each piece's words."""
    chunks = list(local.stream(TEXT, speaker="ryan", seed=seed, max_new_tokens=FRAMES, word_timestamps=True))
    return b"".join(pcm16(c.samples) for c in chunks), [_dicts(c.words) for c in chunks if c.words is not None]


def test_json_body_has_the_audio_and_the_words(server: LiveServer, local: qtts.Model) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    extra = {"seed": 3, "max_new_tokens": FRAMES}
    plain = client.audio.speech.create(model=MODEL, voice="ryan", input=TEXT, response_format="wav", extra_body=extra)
    r = client.audio.speech.create(model=MODEL, voice="ryan", input=TEXT, response_format="wav",
                                   extra_body={**extra, "word_timestamps": True})
    assert r.response.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"audio", "audio_format", "sample_rate", "words", "timestamps", "usage"}
    assert base64.b64decode(body["audio"]) == plain.content and body["audio_format"] == "wav"
    want = local.synthesize(TEXT, speaker="ryan", seed=3, max_new_tokens=FRAMES, word_timestamps=True).words
    assert body["words"] == _dicts(want) and len(want) == 39
    assert body["timestamps"] == [{"word": w.text, "start_time": w.start, "end_time": w.end} for w in want]
    assert body["usage"]["words"] == len(want) and body["usage"]["output_tokens"] > 0
    data, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="int16")
    assert rate == body["sample_rate"] == 24000 and len(data) > 0


def test_sse_sends_each_pieces_words_after_its_audio(server: LiveServer, local: qtts.Model) -> None:
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", headers=AUTH, timeout=300,
                      json={"model": MODEL, "voice": "ryan", "input": TEXT, "response_format": "pcm",
                            "stream_format": "sse", "word_timestamps": True, "seed": 4,
                            "max_new_tokens": FRAMES}) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[-1] == "speech.audio.done" and types.count("speech.audio.timestamps") == 2
    assert types[-2] == "speech.audio.timestamps"  # the last piece's words after its audio
    first = types.index("speech.audio.timestamps")
    assert "speech.audio.delta" in types[:first] and "speech.audio.delta" in types[first + 1:-2]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    pcm, pieces = _local_pieces(local, 4)
    assert audio == pcm
    assert [e["words"] for e in events if e["type"] == "speech.audio.timestamps"] == pieces
    assert events[-1]["usage"]["words"] == sum(len(p) for p in pieces)


def test_websocket_sends_a_words_message_per_piece(server: LiveServer, local: qtts.Model) -> None:
    audio, messages = b"", []
    with ws_connect(server, AUTH) as ws:
        ws.send(json.dumps({"type": "start", "model": MODEL, "voice": "ryan", "seed": 6, "max_new_tokens": FRAMES,
                            "word_timestamps": True}))
        for word in TEXT.split(" "):
            ws.send(json.dumps({"type": "text", "delta": word + " "}))
        ws.send(json.dumps({"type": "done"}))
        while True:
            try:
                message = ws.recv(timeout=300)
            except ConnectionClosed as e:
                assert e.rcvd is not None and e.rcvd.code == 1000, e
                break
            if isinstance(message, bytes):
                audio += message
                messages.append("audio")
            else:
                messages.append(json.loads(message))
    words = [m["words"] for m in messages if isinstance(m, dict) and m["type"] == "words"]
    chunks = list(local.stream_text(iter([w + " " for w in TEXT.split(" ")]), speaker="ryan", seed=6,
                                    max_new_tokens=FRAMES, word_timestamps=True))
    assert audio == b"".join(pcm16(c.samples) for c in chunks)
    assert words == [_dicts(c.words) for c in chunks if c.words is not None] and len(words) == 2
    assert messages[-1]["type"] == "done" and messages[-1]["usage"]["words"] == sum(len(w) for w in words)
    assert messages[-2]["type"] == "words" and messages[1] == "audio"


@pytest.mark.parametrize(("extra", "param"), [
    ({"stream_format": "audio"}, "stream_format"),  # raw audio has no place for words
    ({"speed": 1.5}, "speed"),  # the words are timed on the audio as generated
    ({"language": "japanese"}, "word_timestamps"),  # no word splitter for Japanese
])
def test_what_words_cannot_go_with_is_400(server: LiveServer, extra: dict[str, Any], param: str) -> None:
    r = httpx.post(f"{server.url}/v1/audio/speech", headers=AUTH, timeout=60,
                   json={"model": MODEL, "voice": "ryan", "input": "Hi.", "word_timestamps": True, **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
