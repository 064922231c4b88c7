"""Request bodies with OpenAI's field names, plus qwen-tts's through `extra_body`
(docs/serving.md, "Server"). Types and ranges the API itself fixes are checked here; the
generation settings are checked by GenerationConfig and the model, as for every other caller.
The settings' fields are derived from their declarations (runtime/settings/config.py): each setting
declared `server` is an optional field of its declared type; so are the request options declared
`server` (runtime/settings/options.py), which keep their qwen-tts names."""
from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model

from ..runtime.settings import config
from ..runtime.settings.options import RequestOptions, defaults_of, specs_of

# OpenAI's limit for input; also the bound of the other texts that become prompt tokens
# (instructions, a description in voice, ref_text). Longer input is split into sentences anyway.
MAX_INPUT_CHARS = 4096
# input's text, and the type each part of it that a WebSocket sends is checked against
# (check_input_part): a str of valid Unicode (pydantic refuses a lone surrogate), at most
# MAX_INPUT_CHARS characters. One type, so both routes refuse the same text in the same words.
InputText = Annotated[str, Field(max_length=MAX_INPUT_CHARS)]

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
StreamFormat = Literal["audio", "sse"]


class RequestFields(BaseModel):
    """POST /v1/audio/speech without the generation settings. Unknown fields are refused (a
    misspelt setting would otherwise be silently ignored)."""
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1)
    input: Annotated[InputText, Field(min_length=1)]
    voice: str | None = Field(None, max_length=MAX_INPUT_CHARS)  # a VoiceDesign description may come here
    instructions: str | None = Field(None, max_length=MAX_INPUT_CHARS)
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: StreamFormat | None = None
    # qwen-tts names, through the OpenAI client's extra_body (and the request options, below)
    ref_audio: str | None = Field(None, description="base64 of a reference clip (WAV, FLAC or OGG)")

    def sampling(self) -> dict[str, Any]:
        """The generation settings given (Model.stream's keyword arguments under their own names)."""
        return {k: v for k in config.SETTING_SPECS if k in type(self).model_fields
                if (v := getattr(self, k)) is not None}


_INPUT_PART = TypeAdapter(InputText, config=ConfigDict(strict=True))


def check_input_part(value: Any) -> str:
    """A part of input (a WebSocket text delta) checked as POST's input is: ValidationError as
    pydantic raises it for input, its location empty."""
    return str(_INPUT_PART.validate_python(value))


def option_fields() -> dict[str, Any]:
    """The request options the server takes under their own names, typed and bounded as
    declared: texts at most MAX_INPUT_CHARS characters, integers in their declared range."""
    hints = typing.get_type_hints(RequestOptions)
    out: dict[str, Any] = {}
    for name, spec in specs_of(RequestOptions).items():
        if not spec.server:
            continue
        kind, bounds = hints[name], getattr(spec.check, "range", None)
        limits: dict[str, Any] = dict(ge=bounds[0], le=bounds[1]) if bounds else {}
        if kind is str or str in typing.get_args(kind):
            limits["max_length"] = MAX_INPUT_CHARS
        out[name] = (kind, Field(defaults_of(RequestOptions)[name], description=spec.help, **limits))
    return out


def request_model() -> type[RequestFields]:
    """The request body: RequestFields plus the request options the server takes and one optional
    field per setting it takes, read from their declarations when called."""
    settings: dict[str, Any] = {name: (spec.kind | None, None) for name, spec in config.SETTING_SPECS.items()
                                if spec.server}
    return create_model("SpeechRequest", __base__=RequestFields, __module__=__name__, **option_fields(),
                        **settings)


# POST /v1/audio/speech (imported by the server's routes and annotated on their handlers).
SpeechRequest = request_model()


def model_list(model_id: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model_id, "object": "model", "created": created, "owned_by": "qtts"}]}
