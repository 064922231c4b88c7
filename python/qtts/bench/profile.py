"""`qtts-cli bench speed --profile`: where a stream's time goes, per phase and per op.

After the timed stream, the speed worker streams the same request again with the session's
profiling on (Session.set_profiling: graphs then run node by node, each node timed). The native
profile keys are "<phase>/<op>" (prefill, talker, predictor, vocoder, other) and
"<phase>/:build|:alloc|:compute|:graphs" for the plumbing around the compute calls. Per phase
this prints the op time per frame next to the unprofiled wall time of the timed run: their
difference is the overhead outside the ops (graph build, allocation, scheduling, thread wake-ups,
readbacks, host sampling). Prefill and the embeddings ("other") are per request, shown per frame.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# the timed run's unprofiled wall time per frame of each phase (speed_worker's keys)
WALL_KEYS = {"talker": "talker_ms_per_frame", "predictor": "predictor_ms_per_frame",
             "vocoder": "vocoder_ms_per_frame"}
PHASE_ORDER = ("prefill", "talker", "predictor", "vocoder", "other")
TOP_OPS = 8


def collect(model: Any, text: str, kwargs: dict[str, Any], frames: int, timed: dict[str, Any]) -> dict[str, Any]:
    """Stream `text` once more with profiling on; the summary per frame (see summarize)."""
    with model.engine.session() as s:
        s.set_profiling(True)
    try:
        for _ in model.stream(text, **kwargs):
            pass
        with model.engine.session() as s:
            raw = s.profile()
    finally:
        with model.engine.session() as s:
            s.set_profiling(False)
    return summarize(raw, frames, timed)


@contextlib.contextmanager
def plumbing(model: Any) -> Iterator[dict[str, dict[str, float]]]:
    """While inside: the session's profile without per-op times (graphs computed whole, so a
    device's wall clock is not disturbed); on leaving, the dict yielded is filled per phase with
    its build, alloc and compute ms and its graph, node and split counts."""
    got: dict[str, dict[str, float]] = {}
    with model.engine.session() as s:
        s.set_profiling(True, ops=False)
    try:
        yield got
        with model.engine.session() as s:
            raw = s.profile()
    finally:
        with model.engine.session() as s:
            s.set_profiling(False)
    for key, value in sorted(raw.items()):
        phase, _, what = key.partition("/")
        got.setdefault(phase, {})[what.lstrip(":")] = round(value, 3)


def summarize(raw: dict[str, float], frames: int, timed: dict[str, Any]) -> dict[str, Any]:
    """Per phase: ops (ms/frame by op name), plumbing (build, alloc, compute ms/frame and graphs per
    frame), op_ms_per_frame, and where the timed run has the phase, wall_ms_per_frame and
    overhead_ms_per_frame = wall - ops."""
    phases: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        phase, _, what = key.partition("/")
        p = phases.setdefault(phase, {"ops": {}, "plumbing": {}})
        if what.startswith(":"):
            p["plumbing"][what[1:]] = value / frames
        else:
            p["ops"][what] = value / frames
    for phase, p in phases.items():
        p["ops"] = dict(sorted(p["ops"].items(), key=lambda kv: -kv[1]))
        p["op_ms_per_frame"] = sum(p["ops"].values())
        wall = timed.get(WALL_KEYS.get(phase, ""))
        if isinstance(wall, (int, float)):
            p["wall_ms_per_frame"] = wall
            p["overhead_ms_per_frame"] = wall - p["op_ms_per_frame"]
    ordered = {k: phases[k] for k in PHASE_ORDER if k in phases}
    ordered.update({k: v for k, v in phases.items() if k not in ordered})
    return {"frames": frames, "phases": ordered}


def format_profile(qtype: str, prof: dict[str, Any]) -> str:
    """A phase table and each phase's largest ops, for one weight type."""
    head = (f"{qtype} profile, ms per frame ({prof['frames']} frames; wall: the unprofiled run; ops: node by node; "
            "overhead = wall - ops)")
    rows = [head, f"{'phase':<11}{'wall':>8}{'ops':>8}{'overhead':>10}{'build':>8}{'alloc':>8}{'compute':>9}"
                  f"{'graphs/f':>10}"]

    def cell(v: Any, width: int, digits: int = 2) -> str:
        return f"{v:>{width}.{digits}f}" if isinstance(v, (int, float)) else f"{'-':>{width}}"

    for phase, p in prof["phases"].items():
        pl = p["plumbing"]
        rows.append(f"{phase:<11}{cell(p.get('wall_ms_per_frame'), 8)}{cell(p['op_ms_per_frame'], 8)}"
                    f"{cell(p.get('overhead_ms_per_frame'), 10)}{cell(pl.get('build'), 8)}{cell(pl.get('alloc'), 8)}"
                    f"{cell(pl.get('compute'), 9)}{cell(pl.get('graphs'), 10, 1)}")
    for phase, p in prof["phases"].items():
        ops = list(p["ops"].items())[:TOP_OPS]
        if ops:
            rows.append(f"  {phase}: " + ", ".join(f"{op} {ms:.2f}" for op, ms in ops))
    return "\n".join(rows)
