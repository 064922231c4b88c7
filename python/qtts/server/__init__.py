"""An OpenAI-compatible speech server over one model (`qtts-cli serve`; needs `qtts[server]`).

`create_app(model, scheduler, ...)` builds the ASGI app (app.py); schemas.py holds the request
and response bodies, formats.py the audio encoders, voices.py the saved-voice store, metrics.py
the Prometheus metrics and errors.py the OpenAI-style error bodies (docs/serving.md, "Server").
"""
from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
