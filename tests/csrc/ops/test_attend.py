"""The fused cached-attention op (csrc/ops/attend.h) against numpy in float64 on every SIMD path,
and its promises: the new keys and values land in each lane's window and nothing else of the
caches changes; the result is bit-identical on every path, for every thread count, and for a
lane alone or among others (the batched code predictor's lanes are the single path's steps).

Shapes: the talker's step (one query over a long window), the predictor's first step (two
queries, causal, empty cache), prompt chunks (one block of queries and several), lanes with
padding between windows, head widths
that are not a multiple of the op's 16-value chunks, and one KV head per query head.
"""
from __future__ import annotations

import numpy as np
import pytest

from qtts._native import core
from tests.fixtures.simd import PATHS

ops = core.ops


def case(rng: np.random.Generator, n: int, n_past: int, n_head: int, nkv: int, hd: int, lanes: int = 1,
         stride: int = 0, spare: int = 3) -> dict:
    n_ctx = (lanes - 1) * stride + n_past + n + spare
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return {"q": f(n * lanes, n_head, hd), "k": f(n * lanes, nkv, hd), "v": f(n * lanes, nkv, hd),
            "k_cache": f(n_ctx, nkv, hd), "v_cache": f(n_ctx, nkv, hd), "n_past": n_past, "lanes": lanes,
            "lane_stride": stride}


def reference(c: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v = (c[x].astype(np.float64) for x in ("q", "k", "v"))
    kc, vc = c["k_cache"].copy(), c["v_cache"].copy()
    lanes, n_past, stride = c["lanes"], c["n_past"], c["lane_stride"]
    n = q.shape[0] // lanes
    n_head, hd = q.shape[1], q.shape[2]
    group = n_head // kc.shape[1]
    out = np.zeros((q.shape[0], n_head * hd))
    for lane in range(lanes):
        base = lane * stride
        rows = slice(lane * n, (lane + 1) * n)
        kc[base + n_past: base + n_past + n] = c["k"][rows]
        vc[base + n_past: base + n_past + n] = c["v"][rows]
        keys = kc[base: base + n_past + n].astype(np.float64)
        values = vc[base: base + n_past + n].astype(np.float64)
        for i in range(n):
            m = n_past + i + 1
            for h in range(n_head):
                s = keys[:m, h // group] @ q[lane * n + i, h] / np.sqrt(hd)
                p = np.exp(s - s.max())
                out[lane * n + i, h * hd:(h + 1) * hd] = (p / p.sum()) @ values[:m, h // group]
    return out, kc, vc


CASES = {
    "talker step": dict(n=1, n_past=57, n_head=16, nkv=8, hd=128),
    "predictor first step": dict(n=2, n_past=0, n_head=16, nkv=8, hd=128),
    "prompt chunk": dict(n=7, n_past=9, n_head=4, nkv=2, hd=32),
    "query blocks": dict(n=19, n_past=5, n_head=4, nkv=2, hd=32),
    "narrow heads": dict(n=1, n_past=20, n_head=6, nkv=3, hd=20),
    "one kv head per head": dict(n=3, n_past=4, n_head=2, nkv=2, hd=40),
    "lanes": dict(n=1, n_past=5, n_head=4, nkv=2, hd=48, lanes=3, stride=9),
}


@pytest.mark.parametrize("name", CASES)
def test_attend_matches_numpy_and_writes_the_cache(name: str, path: str) -> None:
    c = case(np.random.default_rng(len(name)), **CASES[name])
    out, kc, vc = ops.attend(**c, n_threads=2)
    want, want_k, want_v = reference(c)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-6)
    # the new rows are copies and every other cache row is untouched
    np.testing.assert_array_equal(kc, want_k)
    np.testing.assert_array_equal(vc, want_v)


@pytest.mark.parametrize("name", CASES)
def test_attend_is_the_same_on_every_path_and_thread_count(name: str) -> None:
    c = case(np.random.default_rng(100 + len(name)), **CASES[name])
    results = {}
    try:
        for p in PATHS:
            ops.set_simd_path(p)
            for threads in (1, 2, 3, 5):
                results[p, threads] = ops.attend(**c, n_threads=threads)[0]
    finally:
        ops.set_simd_path(PATHS[-1])
    first = results["scalar", 1]
    for key, out in results.items():
        np.testing.assert_array_equal(out, first, err_msg=f"path {key[0]}, {key[1]} threads")


def test_a_lane_alone_equals_the_lane_among_others() -> None:
    n, n_past, stride, lanes = 2, 6, 11, 4
    c = case(np.random.default_rng(7), n=n, n_past=n_past, n_head=8, nkv=4, hd=64, lanes=lanes, stride=stride)
    together, kc, vc = ops.attend(**c, n_threads=2)
    for lane in range(lanes):
        rows = slice(lane * n, (lane + 1) * n)
        window = slice(lane * stride, lane * stride + n_past + n)
        alone, ka, va = ops.attend(c["q"][rows], c["k"][rows], c["v"][rows], c["k_cache"][window],
                                   c["v_cache"][window], n_past=n_past, n_threads=1)
        np.testing.assert_array_equal(alone, together[rows])
        np.testing.assert_array_equal(ka, kc[window])
        np.testing.assert_array_equal(va, vc[window])


@pytest.mark.parametrize("change, match", [
    (dict(q=np.zeros((2, 5, 16), np.float32)), "q has 5 heads, not a multiple of the caches' 2"),
    (dict(k=np.zeros((3, 2, 16), np.float32)), "k: dimension 0 is 3, expected 2"),
    (dict(v_cache=np.zeros((9, 2, 16), np.float32)), "v_cache: dimension 0 is 9, expected 10"),
    (dict(lanes=3), "lanes must be at least 1 and divide q's 2 positions, got 3"),
    (dict(n_past=9), "n_past 9, lanes 1 and lane_stride 0 do not fit caches of 10 positions"),
    (dict(lanes=2, lane_stride=3), "n_past 4, lanes 2 and lane_stride 3 do not fit"),
])
def test_attend_rejects_bad_shapes(change: dict, match: str) -> None:
    c = case(np.random.default_rng(0), n=2, n_past=4, n_head=4, nkv=2, hd=16, spare=4)
    c.update(change)
    with pytest.raises(ValueError, match=match):
        ops.attend(**c)
