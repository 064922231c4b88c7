"""`python -m qtts.bench KIND ARGS...`: one measurement in a fresh process (common.worker), its
result printed as one JSON line."""
from __future__ import annotations

import json
import sys
from typing import Any


def measure(kind: str, args: list[str]) -> dict[str, Any]:
    if kind == "speed":
        from .speed import speed_worker

        return speed_worker(args[0], int(args[1]), int(args[2]), int(args[3]), args[4], int(args[5]), args[6] == "1",
                            args[7] == "1", args[8], args[9])
    if kind == "reference":
        from .reference import reference_worker

        return reference_worker(args[0], int(args[1]), int(args[2]), int(args[3]))
    if kind == "quality":
        from .quality import quality_worker

        return quality_worker(args[2:], int(args[0]), int(args[1]))
    if kind == "serve":
        from .serve import serve_worker

        return serve_worker(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), float(args[5]),
                            float(args[6]), [int(b) for b in args[7].split(",")], args[8], args[9],
                            pipelined_vocoder={"auto": None, "on": True, "off": False}[args[10]])
    if kind == "streams":
        from .batch import streams_worker

        return streams_worker(args[0], int(args[1]), int(args[2]), int(args[3]), int(args[4]), args[5])
    if kind == "align":
        from .align import align_worker

        return align_worker(args[0], int(args[1]), float(args[2]), int(args[3]), args[4])
    if kind == "align_synth":
        from .align import synth_worker

        return synth_worker(args[0], int(args[1]), float(args[2]), int(args[3]))
    if kind == "align_stream":
        from .align import stream_worker

        return stream_worker(args[0], args[1], int(args[2]), float(args[3]), int(args[4]), args[5])
    if kind == "memory":
        from .memory import memory_worker

        return memory_worker(args[0], int(args[1]), args[2], args[3] or None, args[4])
    raise ValueError(f"unknown benchmark worker {kind!r}")


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1], sys.argv[2:])))
