"""Bulk synthesis: a manifest of items to one audio file each, resumable, on one process, on
--jobs worker processes or on Ray (docs/bulk.md, "How it runs"; the command is
`qtts-cli batch`, the Ray entry point qtts.ray.Synthesizer)."""
from __future__ import annotations

from .manifest import FIELDS, Item, LineError, Manifest, parse_item, read_manifest
from .results import RESULTS, Result
from .run import Summary

__all__ = ["FIELDS", "Item", "LineError", "Manifest", "RESULTS", "Result", "Summary", "parse_item", "read_manifest"]
