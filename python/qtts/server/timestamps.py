"""Word timestamps on the speech routes (docs/server.md, "Word timestamps"): a request's
word_timestamps checked against the server and the request's other fields, and the shapes the
words go out in: qtts's {"word", "start", "end"} everywhere, and in the JSON body also
Kokoro-FastAPI's captioned-speech names, which its clients parse."""
from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from ..runtime.aligner.subtitles import word_list
from ..runtime.text.words import Word
from .errors import ApiError
from .schemas import SpeechRequest

EVENT = "speech.audio.timestamps"  # the SSE event of one piece's words


def check_timestamps(model: Any, body: SpeechRequest) -> None:
    """A request's word_timestamps: the server has an aligner, and the response can carry words."""
    if not body.word_timestamps:
        return
    if model.aligner is None:
        raise ApiError(400, "word_timestamps needs a forced aligner: start the server with --aligner MODEL "
                            "(e.g. Qwen/Qwen3-ForcedAligner-0.6B)", param="word_timestamps", code="invalid_value")
    if body.stream_format == "audio":
        raise ApiError(400, "word_timestamps goes with stream_format \"sse\" (an event per sentence) or none (a JSON "
                            "body): a raw audio stream has no place for words", param="stream_format",
                       code="invalid_value")
    if body.speed != 1.0:
        raise ApiError(400, "word_timestamps needs speed 1.0: the words are timed on the audio as generated",
                       param="speed", code="invalid_value")


def usage(input_tokens: int, frames: int, words: int | None) -> dict[str, int]:
    """A response's usage: the text's BPE tokens, the codec frames and, when timed, the words."""
    out = {"input_tokens": input_tokens, "output_tokens": frames, "total_tokens": input_tokens + frames}
    return out if words is None else {**out, "words": words}


def speech_json(audio: bytes, fmt: str, sample_rate: int, words: Sequence[Word],
                used: dict[str, int]) -> dict[str, Any]:
    """POST /v1/audio/speech's body with word_timestamps and no stream_format: the audio file in
    base64, the words in qtts's shape and, under `timestamps`, in Kokoro-FastAPI's
    (`captioned_speech`: word, start_time, end_time)."""
    return {"audio": base64.b64encode(audio).decode("ascii"), "audio_format": fmt, "sample_rate": sample_rate,
            "words": word_list(words),
            "timestamps": [{"word": w.text, "start_time": w.start, "end_time": w.end} for w in words],
            "usage": used}


def words_event(words: Sequence[Word]) -> dict[str, Any]:
    """One piece's words as an SSE event (after the piece's audio deltas)."""
    return {"type": EVENT, "words": word_list(words)}


def words_message(words: Sequence[Word]) -> dict[str, Any]:
    """One piece's words as a WebSocket message (after the piece's audio)."""
    return {"type": "words", "words": word_list(words)}
