"""OpenAI-style error responses: {"error": {"message", "type", "param", "code"}}.

Every failure a client can cause ends here as a 4xx naming the field; QueueFull and
SchedulerClosed become 429 and 503 (docs/serving.md, "Server")."""
from __future__ import annotations

import re
from typing import Any

from fastapi import Request, params
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

# Model argument names as the API calls them (the rest keep their qwen-tts names).
API_FIELD = {"text": "input", "speaker": "voice", "instruct": "instructions"}
_FIRST_NAME = re.compile(r"^([a-z_]+)\b")
_WORD = re.compile(r"[a-z_]+")


class ApiError(Exception):
    """A client error with its status, message and the request field it concerns."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.headers = headers


def error_body(message: str, type: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(e: ApiError) -> JSONResponse:
    return JSONResponse(error_body(e.message, e.type, e.param, e.code), status_code=e.status, headers=e.headers)


def bad_argument(e: Exception, known: set[str]) -> ApiError:
    """A TypeError/ValueError of the model's argument checks as a 400; the field is the argument
    its message starts with (the checks name it first), else the first it mentions, in the API's
    spelling."""
    message = str(e)
    names = known | set(API_FIELD)
    m = _FIRST_NAME.match(message)
    name = m.group(1) if m and m.group(1) in names else next(
        (w for w in _WORD.findall(message) if w in names), None)  # "unsupported language 'x'"
    param = API_FIELD.get(name, name) if name is not None else None
    if name in API_FIELD and message.startswith(name):
        message = param + message[len(name):]  # "text is empty" -> "input is empty"
    return ApiError(400, message, param=param, code="invalid_value")


def clone_error(e: Exception, audio: str, text: str) -> ApiError:
    """A voice cloning check's TypeError/ValueError as a 400 naming the field at fault (`audio`
    and `text` are this route's names of the clip and its transcript): the clip's checks name it
    first ("reference audio ...", "the upload ..."), even where they advise on the transcript;
    the transcript's checks name ref_text."""
    message = str(e)
    about_audio = message.startswith(("reference audio", "the reference audio", "the upload"))
    param = text if not about_audio and "ref_text" in message else audio
    return ApiError(400, message, param=param, code="invalid_value")


def _location(loc: tuple[Any, ...]) -> str | None:
    names = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(names) or None


def _json_body(request: Request) -> bool:
    """Whether the request's route takes a JSON body (not a form or an upload)."""
    field = getattr(request.scope.get("route"), "body_field", None)
    return field is not None and not isinstance(field.field_info, params.Form)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _required(request: Request) -> list[str]:
    """The required fields of the route's JSON body, in declaration order."""
    model = request.scope["route"].body_field.field_info.annotation
    return [name for name, f in model.model_fields.items() if f.is_required()]


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors() or [{"msg": "invalid request", "loc": (), "type": ""}]
    first = errors[0]
    content_type = request.headers.get("content-type")
    if _json_body(request) and not _is_json(content_type) and any(tuple(e.get("loc", ()))[:1] == ("body",)
                                                                   for e in errors):
        # the body was never read as JSON: say why instead of what its bytes lack
        got = f"this request's is {content_type!r}" if content_type else "this request has none"
        return JSONResponse(error_body(f"Content-Type must be application/json; {got}", "invalid_request_error",
                                       None, "unsupported_media_type"), status_code=415)
    if first.get("type") == "json_invalid":
        return JSONResponse(error_body(f"the body is not valid JSON: {first.get('msg')}", "invalid_request_error",
                                       None, "invalid_json"), status_code=400)
    param = _location(tuple(first.get("loc", ())))
    msg = str(first.get("msg", "invalid value"))
    if first.get("type") == "missing":
        missing = [name for name in (_location(tuple(e.get("loc", ()))) for e in errors if e.get("type") == "missing")
                   if name is not None]
        if not missing:  # the whole body
            missing = _required(request) if _json_body(request) else []
            message = "the request body is empty" + (f"; required fields: {', '.join(missing)}" if missing else "")
        elif len(missing) == 1:
            message = f"{missing[0]} is required"
        else:
            message = f"{', '.join(missing[:-1])} and {missing[-1]} are required"
        param = missing[0] if missing else None
    elif first.get("type") == "extra_forbidden":
        message = f"unknown field {param}"
    elif first.get("type") == "model_attributes_type":
        message = "the body must be a JSON object"
    else:
        message = f"{param}: {msg}" if param else msg
    return JSONResponse(error_body(message, "invalid_request_error", param, "invalid_value"), status_code=400)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    return JSONResponse(error_body(str(exc.detail), "invalid_request_error", None, code),
                        status_code=exc.status_code, headers=getattr(exc, "headers", None))


def install(app: Any) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
