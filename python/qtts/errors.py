"""The two error families of qtts.

Bad input (an argument, a file, a metadata key, a tensor) raises ValueError or TypeError, or an
OSError for a file that cannot be read, with a message naming the culprit. A failure of the engine
on valid input (memory or a device buffer that cannot be allocated, a graph that fails to compute)
raises QttsError. Anything else is a bug in qtts.
"""
from __future__ import annotations


class QttsError(RuntimeError):
    """The engine failed on valid input. `ggml_log` holds the error lines ggml logged meanwhile."""

    def __init__(self, message: str, ggml_log: tuple[str, ...] | list[str] = ()) -> None:
        super().__init__(message)
        self.ggml_log = tuple(ggml_log)
