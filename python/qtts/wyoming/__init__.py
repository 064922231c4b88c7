"""A Wyoming protocol server (`qtts-cli wyoming`; needs `qtts[wyoming]`), the way Home Assistant
talks to local text-to-speech: server.py listens and drains, handler.py answers one connection,
protocol.py reads its events with bounded memory, voices.py says which voices it offers
(docs/integrations.md, "Home Assistant")."""
from __future__ import annotations

from .server import WyomingServer

__all__ = ["WyomingServer"]
