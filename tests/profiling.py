"""Run something with a model's session profile on (Session.set_profiling): what it returned and
the profile (docs/architecture.md, "Graph replay and the generation profile")."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def profiled(model: Any, run: Callable[[], T], ops: bool = True) -> tuple[T, dict[str, float]]:
    """`run()` with profiling on (ops=False: no per-op times), then the profile; profiling is off
    again whatever happens."""
    with model.engine.session() as s:
        s.set_profiling(True, ops)
    try:
        got = run()
        with model.engine.session() as s:
            prof = s.profile()
    finally:
        with model.engine.session() as s:
            s.set_profiling(False)
    return got, dict(prof)
