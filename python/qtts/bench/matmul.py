"""`qtts-cli bench matmul`: the quantized matmul against ggml's mul_mat on the 0.6B shapes.

For each weight type, shape, thread count and column count M (a batch of M sequences steps M
columns), the native kernel and ggml's run back to back, alternating, each over enough copies of
the weights that they stream from memory as a model's do (not from the cache), in transparent huge
pages where the OS has them, as a model's streamed weights are (--no-huge-pages: 4 KiB pages). Reported: time per
matmul, weight bytes read per second, and that as a share of the machine's memory bandwidth,
measured first as a numpy copy of a 1 GiB array (bytes read + written per second, one thread).
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

# (K, N) of the 0.6B talker and code predictor: attention q and o (2048 wide), k/v, the MLP, and
# the 2048-entry code predictor heads (the same shape as q)
SHAPES = ((1024, 2048), (2048, 1024), (1024, 1024), (1024, 3072), (3072, 1024))
STREAM_BYTES = 96 << 20  # weights per timed graph: three times this machine class's L3


@dataclass
class MatmulResult:
    type: str
    k: int
    n: int
    threads: int
    columns: int
    native_us: float
    ggml_us: float
    native_gbs: float
    ggml_gbs: float
    speedup: float


def copy_bandwidth_gbs(repeat: int = 3) -> float:
    """Bytes read + written per second by a numpy copy of 1 GiB, the best of `repeat`."""
    import numpy as np

    a = np.ones(1 << 28, dtype=np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best / 1e9


def measure(type_name: str, k: int, n: int, threads: int, columns: int, repeat: int, seed: int,
            huge_pages: bool = True) -> MatmulResult:
    import numpy as np

    from ..runtime.engine.engine import quantize_rows, set_matmul_path, time_matmul

    rng = np.random.default_rng(seed)
    w = quantize_rows(rng.standard_normal((n, k)).astype(np.float32), type_name)
    x = rng.standard_normal((columns, k)).astype(np.float32)
    copies = max(1, STREAM_BYTES // w.nbytes)
    best = {"native": float("inf"), "ggml": float("inf")}
    try:
        for _ in range(2):  # alternate, so that both see the same load
            for path in best:
                set_matmul_path(path)
                t = time_matmul(w, type_name, x, n_threads=threads, repeats=repeat, copies=copies,
                                huge_pages=huge_pages)
                best[path] = min(best[path], float(np.median(t)) / copies)
    finally:
        set_matmul_path("native")
    return MatmulResult(type_name, k, n, threads, columns, best["native"] * 1e6, best["ggml"] * 1e6,
                        w.nbytes / best["native"] / 1e9, w.nbytes / best["ggml"] / 1e9, best["ggml"] / best["native"])


def run_matmul(a: argparse.Namespace) -> dict[str, Any]:
    bandwidth = copy_bandwidth_gbs()
    load = os.getloadavg()[0]
    rows = [measure(t, k, n, th, m, a.repeat, a.seed, not a.no_huge_pages) for t in a.types for th in a.threads
            for (k, n) in SHAPES for m in a.columns]
    return {"benchmark": "matmul", "huge_pages": not a.no_huge_pages, "copy_bandwidth_gbs": bandwidth, "load_avg": load,
            "load_avg_end": os.getloadavg()[0], "results": [asdict(r) for r in rows]}


def format_matmul(r: dict[str, Any]) -> str:
    bw = r["copy_bandwidth_gbs"]
    pages = "huge pages where available" if r.get("huge_pages", True) else "4 KiB pages"
    head = (f"memory bandwidth (numpy copy of 1 GiB, read + write): {bw:.1f} GB/s; weights in {pages}; load "
            f"{r['load_avg']:.2f} -> {r['load_avg_end']:.2f}\n"
            f"{'type':<6}{'K x N':>11}{'thr':>4}{'M':>4}{'native us':>11}{'ggml us':>10}{'native GB/s':>12}"
            f"{'ggml GB/s':>10}{'native %bw':>11}{'x ggml':>8}{'+col %':>8}")
    rows = [head]
    first: dict[tuple[str, int, int, int], float] = {}
    for x in r["results"]:
        key = (x["type"], x["k"], x["n"], x["threads"])
        first.setdefault(key, x["native_us"] if x["columns"] == 1 else float("nan"))
        # the cost of each column beyond the first, as a share of a one-column call
        extra = (x["native_us"] / first[key] - 1) / (x["columns"] - 1) * 100 if x["columns"] > 1 else 0.0
        rows.append(f"{x['type']:<6}{x['k']:>5} x{x['n']:>5}{x['threads']:>4}{x['columns']:>4}{x['native_us']:>11.0f}"
                    f"{x['ggml_us']:>10.0f}{x['native_gbs']:>12.1f}{x['ggml_gbs']:>10.1f}"
                    f"{100 * x['native_gbs'] / bw:>11.0f}{x['speedup']:>8.2f}{extra:>8.0f}")
    return "\n".join(rows)
