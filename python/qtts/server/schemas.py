"""Request bodies with OpenAI's field names, plus qwen-tts's through `extra_body`
(docs/serving.md, "Server"). Types and ranges the API itself fixes are checked here; the
generation settings are checked by GenerationConfig and the model, as for every other caller."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# OpenAI's limit for input; also the bound of the other texts that become prompt tokens
# (instructions, a description in voice, ref_text). Longer input is split into sentences anyway.
MAX_INPUT_CHARS = 4096
SEED_LIMIT = 2**64

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
StreamFormat = Literal["audio", "sse"]

# Fields forwarded to the scheduler under their own names (Model.stream's keyword arguments).
SAMPLING_FIELDS = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_dosample",
                   "subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "max_new_tokens")


class SpeechRequest(BaseModel):
    """POST /v1/audio/speech. Unknown fields are refused (a misspelt setting would otherwise be
    silently ignored)."""
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1)
    input: str = Field(min_length=1, max_length=MAX_INPUT_CHARS)
    voice: str | None = Field(None, max_length=MAX_INPUT_CHARS)  # a VoiceDesign description may come here
    instructions: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: StreamFormat | None = None
    # qwen-tts names, through the OpenAI client's extra_body
    language: str = "auto"
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_dosample: bool | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    max_new_tokens: int | None = None
    ref_audio: str | None = Field(None, description="base64 of a reference clip (WAV, FLAC or OGG)")
    ref_text: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    x_vector_only_mode: bool = False

    def sampling(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SAMPLING_FIELDS if getattr(self, k) is not None}


def model_list(model_id: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "qtts"}]}
