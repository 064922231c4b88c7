"""The custom CPU ops (conv-GEMM, SnakeBeta, ELU, time statistics) one at a time, against numpy in
float64 on every SIMD path this CPU has, and their determinism guarantees as csrc/ops states them:
results independent of the time range of the call and of the thread count; bit-identical between
the avx2 and avx512 paths (conv_gemm, snake_beta, elu_left) or between all paths (time_stats); the
scalar path within float rounding of the others.

Shapes hit the kernels' tails: panels narrower than 16 or not a multiple of 8 lanes, channel counts
that are not multiples of 8 or 16, odd time lengths (the 6- and 12-row tiles, the 48-row work
items), dilation > 1, kernels 1 and 7, and the transposed and strided convolutions as the vocoder
and the codec encoder build them.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from qtts._native import core
from qtts.convert.checkpoint import _conv_panels, _convt_panels
from tests.fixtures.simd import PATHS, U32

ops = core.ops
THREADS = (1, 2)



def on_paths(fn: Callable[[], np.ndarray]) -> dict[str, np.ndarray]:
    """fn() computed on each path this CPU has."""
    out = {}
    try:
        for p in PATHS:
            ops.set_simd_path(p)
            out[p] = fn()
    finally:
        ops.set_simd_path(PATHS[-1])
    return out


def assert_vector_paths_identical(results: dict[str, np.ndarray]) -> None:
    vector = [p for p in PATHS if p != "scalar"]
    for p in vector[1:]:
        np.testing.assert_array_equal(results[p], results[vector[0]], err_msg=f"{p} vs {vector[0]}")


def f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# conv_gemm

def conv_reference(xp: np.ndarray, w: np.ndarray, n: int, d: int, bias: np.ndarray | None,
                   res: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """y [n, N] in float64 for torch-layout weights w [N, Cin, K], and the bound sum |terms| of
    each output (the rounding error of a float32 sum of m terms is at most m u that)."""
    k = w.shape[2]
    windows = np.stack([xp[kk * d: kk * d + n] for kk in range(k)], axis=1).astype(np.float64)  # [n, K, Cin]
    wk = w.astype(np.float64)
    y = np.einsum("tkc,ock->to", windows, wk)
    bound = np.einsum("tkc,ock->to", np.abs(windows), np.abs(wk))
    for extra in (bias, res):
        if extra is not None:
            y = y + extra
            bound = bound + np.abs(extra)
    return y, bound


def assert_conv_close(y: np.ndarray, ref: np.ndarray, bound: np.ndarray, terms: int) -> None:
    tol = (terms + 2) * U32 * bound + 1e-30
    err = np.abs(y.astype(np.float64) - ref)
    assert (err <= tol).all(), f"max error {err.max():.3g}, worst error/tolerance {(err / tol).max():.3g}"


# (cin, cout, k, d, n): cout 4 is all scalar lanes, 20 one 16-lane tile and 4 scalar lanes, 24 a
# 16- and an 8-lane tile, 32 a pair of 16-lane panels, 48 a pair and a lone panel; n crosses the
# 6/12-row tiles and the 48-row work items.
CONV_CASES = [
    (3, 4, 7, 1, 13),
    (17, 20, 7, 3, 50),
    (5, 24, 1, 1, 7),
    (16, 32, 7, 9, 101),
    (9, 48, 3, 1, 97),
    (1, 16, 7, 1, 1),
    (33, 32, 1, 1, 145),
]


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("cin, cout, k, d, n", CONV_CASES)
def test_conv_gemm_matches_numpy(path: str, cin: int, cout: int, k: int, d: int, n: int, n_threads: int) -> None:
    rng = np.random.default_rng(cin * 1000 + cout + k)
    w = f32(rng, cout, cin, k, scale=cin ** -0.5)
    xp = f32(rng, n + (k - 1) * d, cin)
    bias, res = f32(rng, cout), f32(rng, n, cout)
    for b, r in ((None, None), (bias, None), (bias, res), (None, res)):
        y = ops.conv_gemm(xp, _conv_panels([w]), n, b, r, n_threads=n_threads)
        assert y.shape == (n, cout) and y.dtype == np.float32
        ref, bound = conv_reference(xp, w, n, d, b, r)
        assert_conv_close(y, ref, bound, k * cin)


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("cin, cout, r, n", [(32, 16, 4, 9), (12, 6, 2, 25), (16, 24, 3, 50)])
def test_conv_gemm_as_transposed_conv(path: str, cin: int, cout: int, r: int, n: int, n_threads: int) -> None:
    """The vocoder's causal ConvTranspose (kernel 2r, stride r): one GEMM over the previous frame
    and the n new ones, whose tap-major outputs are then added in halves."""
    rng = np.random.default_rng(r * 100 + n)
    w = f32(rng, cin, cout, 2 * r, scale=cin ** -0.5)  # the reference's ConvTranspose1d layout
    z = f32(rng, n + 1, cin)  # [left context frame; n frames]
    y = ops.conv_gemm(z, _convt_panels([w]), n + 1, n_threads=n_threads).reshape(n + 1, 2 * r, cout)
    out = (y[1:, :r] + y[:-1, r:]).reshape(n * r, cout)
    wd = w.astype(np.float64)
    zd = z.astype(np.float64)
    ref = np.zeros((n * r, cout))
    bound = np.zeros((n * r, cout))
    for t in range(n):
        for j in range(r):
            ref[t * r + j] = zd[t + 1] @ wd[:, :, j] + zd[t] @ wd[:, :, r + j]
            bound[t * r + j] = np.abs(zd[t + 1]) @ np.abs(wd[:, :, j]) + np.abs(zd[t]) @ np.abs(wd[:, :, r + j])
    assert_conv_close(out, ref, bound, 2 * cin)


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("cin, cout, k, s, n", [(8, 16, 8, 4, 13), (7, 24, 4, 2, 30), (32, 32, 10, 5, 49)])
def test_conv_gemm_strided(path: str, cin: int, cout: int, k: int, s: int, n: int, n_threads: int) -> None:
    """The codec encoder's strided convs: windows of k rows every s rows, read as one kernel-1
    GEMM over k*cin channels."""
    rng = np.random.default_rng(k * 100 + s)
    w = f32(rng, cout, cin, k, scale=(k * cin) ** -0.5)
    xp = f32(rng, (n - 1) * s + k + s - 1, cin)  # rows past the last window are not read
    bias = f32(rng, cout)
    y = ops.conv_gemm(xp, _conv_panels([w]), n, bias, stride=s, n_threads=n_threads)
    windows = np.stack([xp[t * s: t * s + k] for t in range(n)]).astype(np.float64)  # [n, k, cin]
    wd = w.astype(np.float64)
    ref = np.einsum("tkc,ock->to", windows, wd) + bias
    bound = np.einsum("tkc,ock->to", np.abs(windows), np.abs(wd)) + np.abs(bias)
    assert_conv_close(y, ref, bound, k * cin)


# ---------------------------------------------------------------------------------------------
# snake_beta

def snake_operands(rng: np.random.Generator, n: int, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = f32(rng, n, c, scale=3.0)
    x[0, : min(c, 4)] = [400.0, -1234.5, 0.0, 1e-7][: min(c, 4)]  # far reductions, sin(0), tiny
    exp_alpha = np.exp(rng.standard_normal(c) * 0.5).astype(np.float32)
    inv_beta = np.exp(-rng.standard_normal(c) * 0.5).astype(np.float32)
    return x, exp_alpha, inv_beta


SNAKE_CASES = [(1, 5, 0), (7, 13, 6), (8, 1, 0), (16, 31, 18), (24, 7, 0), (37, 50, 2)]  # (c, n, p)


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("c, n, p", SNAKE_CASES)
def test_snake_beta_matches_numpy(path: str, c: int, n: int, p: int, n_threads: int) -> None:
    rng = np.random.default_rng(c * 100 + n)
    x, ea, ib = snake_operands(rng, n, c)
    left = f32(rng, p, c) if p else None
    y = ops.snake_beta(x, ea, ib, left, n_threads=n_threads)
    assert y.shape == (p + n, c) and y.dtype == np.float32
    assert_snake_close(y, x, ea, ib, left)


def assert_snake_close(y: np.ndarray, x: np.ndarray, ea: np.ndarray, ib: np.ndarray, left: np.ndarray | None) -> None:
    """y = [left; x + ib * sin^2(x * ea)] within the kernels' error bound."""
    p = 0 if left is None else len(left)
    if left is not None:
        np.testing.assert_array_equal(y[:p], left)
    xd, z = x.astype(np.float64), x.astype(np.float64) * ea
    ref = xd + ib * np.sin(z) ** 2
    # sin^2 has relative error ~1e-7; z = x * alpha is rounded to float32 first (an error up to
    # |z| u in the argument, times |d sin^2/dz| <= 1)
    tol = 4 * U32 * (np.abs(xd) + ib * (1.0 + np.abs(z))) + 4e-7 * ib
    err = np.abs(y[p:] - ref)
    assert (err <= tol).all(), f"max error/tolerance {(err / tol).max():.3g}"


# ---------------------------------------------------------------------------------------------
# elu_left

ELU_CASES = [(1, 3, 0, 0), (8, 17, 6, 3), (13, 1, 1, 0), (24, 40, 0, 5), (37, 9, 2, 1)]  # (c, n, p, pad)


def elu_input(rng: np.random.Generator, n: int, c: int) -> np.ndarray:
    x = f32(rng, n, c, scale=3.0)
    special = [-100.0, -87.5, -1e-8, 0.0, 1e-8, 50.0, -0.3466, 0.3466]  # clamp, tiny, k = 0 boundary
    x.flat[: min(x.size, len(special))] = special[: min(x.size, len(special))]
    return x


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("c, n, p, pad", ELU_CASES)
def test_elu_left_matches_numpy(path: str, c: int, n: int, p: int, pad: int, n_threads: int) -> None:
    rng = np.random.default_rng(c * 100 + n)
    x = elu_input(rng, n, c)
    left = f32(rng, p, c) if p else None
    y = ops.elu_left(x, left, pad, n_threads=n_threads)
    assert y.shape == (p + n + pad, c) and y.dtype == np.float32
    assert_elu_close(y, x, left)


def assert_elu_close(y: np.ndarray, x: np.ndarray, left: np.ndarray | None) -> None:
    """y = [left; ELU(x); zeros] within the kernels' error bound."""
    p, n = 0 if left is None else len(left), len(x)
    if left is not None:
        np.testing.assert_array_equal(y[:p], left)
    np.testing.assert_array_equal(y[p + n:], 0.0)
    xd = x.astype(np.float64)
    ref = np.where(xd > 0, xd, np.expm1(xd))
    np.testing.assert_allclose(y[p: p + n], ref, rtol=8 * U32, atol=0)


# ---------------------------------------------------------------------------------------------
# time_stats

def stats_reference(x: np.ndarray, logits: np.ndarray | None) -> np.ndarray:
    xd = x.astype(np.float64)
    if logits is None:
        a = np.full_like(xd, 1.0 / len(xd))
    else:
        e = np.exp(logits.astype(np.float64) - logits.max(axis=0))
        a = e / e.sum(axis=0)
    mean = (a * xd).sum(axis=0)
    var = (a * xd * xd).sum(axis=0) - mean * mean
    return np.stack([mean, np.sqrt(np.maximum(var, 1e-12))])


STATS_CASES = [(1, 1), (5, 2), (33, 37), (16, 200)]  # (c, t)


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("c, t", STATS_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_time_stats_matches_numpy(path: str, c: int, t: int, weighted: bool, n_threads: int) -> None:
    rng = np.random.default_rng(c * 100 + t)
    x = f32(rng, t, c, scale=2.0) + 1.5
    logits = f32(rng, t, c, scale=3.0) if weighted else None
    y = ops.time_stats(x, logits, n_threads=n_threads)
    assert y.shape == (2, c) and y.dtype == np.float32
    assert_stats_close(y, x, logits)


def assert_stats_close(y: np.ndarray, x: np.ndarray, logits: np.ndarray | None) -> None:
    """y = [mean; std] over time within the double sums' error bound."""
    ref = stats_reference(x, logits)
    if len(x) == 1:  # one frame: the mean is the frame, the variance zero and clamped to 1e-12
        np.testing.assert_array_equal(y[0], x[0])
        np.testing.assert_allclose(y[1], 1e-6, rtol=U32)
        return
    # the sums are in double: the float32 result rounding, and a weight error of up to
    # |logit - max| u (its exponent's argument is a float32 difference), amplified in the
    # standard deviation by E[x^2] / std
    scale2 = (x.astype(np.float64) ** 2).max(axis=0)
    tol = 4 * U32 * np.abs(ref) + 64 * U32 * scale2 / ref[1]
    err = np.abs(y - ref)
    assert (err <= tol).all(), f"max error/tolerance {(err / tol).max():.3g}"


# ---------------------------------------------------------------------------------------------
# determinism

def test_results_do_not_depend_on_the_thread_count(path: str) -> None:
    rng = np.random.default_rng(7)
    w = _conv_panels([f32(rng, 48, 20, 7)])
    xp, res, x = f32(rng, 101 + 6 * 3, 20), f32(rng, 101, 48), f32(rng, 61, 37)
    ea, ib = np.ones(37, np.float32), np.full(37, 0.5, np.float32)
    logits = f32(rng, 61, 37)
    for name, fn in {
        "conv_gemm": lambda k: ops.conv_gemm(xp, w, 101, None, res, n_threads=k),
        "snake_beta": lambda k: ops.snake_beta(x, ea, ib, x[:6], n_threads=k),
        "elu_left": lambda k: ops.elu_left(x, x[:6], 3, n_threads=k),
        "time_stats": lambda k: ops.time_stats(x, logits, n_threads=k),
    }.items():
        one = fn(1)
        for k in (2, 3, 5):
            np.testing.assert_array_equal(fn(k), one, err_msg=f"{name}, {k} threads")


@pytest.mark.parametrize("cout", [20, 32, 48])
def test_conv_gemm_does_not_depend_on_the_time_range(path: str, cout: int) -> None:
    """A stream decoded piece by piece (each piece with its left context) equals one call, bit for bit."""
    rng = np.random.default_rng(cout)
    k, d, cin, n = 7, 3, 12, 113
    w = _conv_panels([f32(rng, cout, cin, k)])
    xp, bias, res = f32(rng, n + (k - 1) * d, cin), f32(rng, cout), f32(rng, n, cout)
    whole = ops.conv_gemm(xp, w, n, bias, res, n_threads=2)
    cuts = [0, 1, 8, 50, 61, n]
    pieces = [ops.conv_gemm(xp[a: b + (k - 1) * d], w, b - a, bias, res[a:b], n_threads=2)
              for a, b in zip(cuts, cuts[1:], strict=False)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("cout, k, d, rows", [(20, 7, 9, (1, 8, 2, 13, 1)), (32, 7, 3, (50, 1, 61)),
                                              (48, 3, 1, (4, 4, 4, 4, 4, 4, 4, 4, 4)), (24, 1, 1, (3, 100))])
def test_conv_gemm_segmented_equals_each_segment_alone(path: str, cout: int, k: int, d: int, rows: tuple[int, ...],
                                                       n_threads: int) -> None:
    """Several streams' convs in one segmented call (the batched vocoder's, docs/serving.md): each
    segment's rows bit-identical to its own call, none computed across a boundary; segments shorter
    than the context, and than one tile, next to ones over a 48-row work item."""
    rng = np.random.default_rng(cout + len(rows))
    cin, p = 12, (k - 1) * d
    w = _conv_panels([f32(rng, cout, cin, k)])
    parts = [f32(rng, p + m, cin) for m in rows]
    bias, res = f32(rng, cout), f32(rng, sum(rows), cout)
    y = ops.conv_gemm(np.concatenate(parts), w, sum(rows), bias, res, segments=list(rows), n_threads=n_threads)
    cuts = np.cumsum((0, *rows))
    alone = [ops.conv_gemm(x, w, m, bias, res[a:b], n_threads=n_threads)
             for x, m, a, b in zip(parts, rows, cuts, cuts[1:], strict=False)]
    np.testing.assert_array_equal(y, np.concatenate(alone))


def test_rowwise_ops_do_not_depend_on_the_time_range(path: str) -> None:
    rng = np.random.default_rng(3)
    x = f32(rng, 45, 29, scale=3.0)
    ea, ib = np.exp(f32(rng, 29) * 0.5), np.exp(f32(rng, 29) * 0.5)
    cuts = [0, 1, 13, 14, 45]
    for name, fn in {"snake_beta": lambda v: ops.snake_beta(v, ea, ib), "elu_left": lambda v: ops.elu_left(v)}.items():
        pieces = [fn(x[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]
        np.testing.assert_array_equal(np.concatenate(pieces), fn(x), err_msg=name)


def test_vector_paths_are_bit_identical() -> None:
    rng = np.random.default_rng(11)
    x = f32(rng, 57, 45, scale=3.0)
    ea, ib = np.exp(f32(rng, 45) * 0.5), np.exp(f32(rng, 45) * 0.5)
    for cout in (20, 24, 32, 48):
        w = _conv_panels([f32(rng, cout, 45, 7)])
        xp, res = f32(rng, 101 + 12, 45), f32(rng, 101, cout)

        def conv(xp: np.ndarray = xp, w: np.ndarray = w, res: np.ndarray = res) -> np.ndarray:  # this cout's arrays
            return ops.conv_gemm(xp, w, 101, res[0], res, n_threads=2)

        assert_vector_paths_identical(on_paths(conv))
    assert_vector_paths_identical(on_paths(lambda: ops.snake_beta(x, ea, ib, x[:3])))
    assert_vector_paths_identical(on_paths(lambda: ops.elu_left(x, None, 2)))


def test_time_stats_is_the_same_on_every_path() -> None:
    rng = np.random.default_rng(5)
    x, logits = f32(rng, 77, 41), f32(rng, 77, 41)
    results = on_paths(lambda: ops.time_stats(x, logits, n_threads=2))
    for p in PATHS:
        np.testing.assert_array_equal(results[p], results[PATHS[0]], err_msg=p)


# ---------------------------------------------------------------------------------------------
# the switch and the runners' argument checks

def test_simd_paths_and_the_switch() -> None:
    assert PATHS[0] == "scalar" and set(PATHS) <= {"scalar", "avx2", "avx512", "amx", "neon"}
    assert PATHS == [p for p in ("scalar", "avx2", "avx512", "amx", "neon") if p in PATHS]
    assert ops.get_simd_path() == PATHS[-1]  # the best by default
    try:
        for p in PATHS:
            ops.set_simd_path(p)
            assert ops.get_simd_path() == p
    finally:
        ops.set_simd_path(PATHS[-1])
    with pytest.raises(ValueError, match="unknown SIMD path 'sse9'"):
        ops.set_simd_path("sse9")
    for missing in sorted({"avx2", "avx512", "amx", "neon"} - set(PATHS)):
        with pytest.raises(ValueError, match=f"'{missing}' is not available"):
            ops.set_simd_path(missing)
    assert ops.get_simd_path() == PATHS[-1]


Z = np.zeros


@pytest.mark.parametrize("call, match", [
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 7, 4)), 4), "w must be a 4-D array"),
    (lambda: ops.conv_gemm(Z((10, 5)), Z((1, 7, 4, 8)), 4), r"xp: dimension 1 is 5, expected 4"),
    (lambda: ops.conv_gemm(Z((11, 4)), Z((1, 7, 4, 8)), 4), "xp has 11 rows"),
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 7, 4, 8)), 0), "n must be at least 1"),
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 7, 4, 8)), 4, Z(9)), "bias: dimension 0 is 9"),
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 7, 4, 8)), 4, None, Z((5, 8))), "residual: dimension 0 is 5"),
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 4, 4, 8)), 3, stride=0), "stride must be at least 1"),
    (lambda: ops.conv_gemm(Z((9, 4)), Z((1, 4, 4, 8)), 3, stride=3), r"at least \(n-1\)\*stride \+ K = 10"),
    (lambda: ops.conv_gemm(Z((10, 4)), Z((1, 7, 4, 8)), 4, n_threads=0), "n_threads must be at least 1"),
    (lambda: ops.conv_gemm(Z((0, 4)), Z((1, 1, 4, 8)), 1), "xp has an empty dimension"),
    (lambda: ops.conv_gemm(Z((16, 4)), Z((1, 7, 4, 8)), 4, segments=[3, 2]), "segments must be 1 or more row counts "
                                                                             "summing to n = 4"),
    (lambda: ops.conv_gemm(Z((16, 4)), Z((1, 7, 4, 8)), 4, segments=[4, 0]), "every row count must be at least 1"),
    (lambda: ops.conv_gemm(Z((15, 4)), Z((1, 7, 4, 8)), 4, segments=[2, 2]), "xp has 15 rows"),
    (lambda: ops.snake_beta(Z((3, 4)), Z(5), Z(4)), "exp_alpha: dimension 0 is 5"),
    (lambda: ops.snake_beta(Z((3, 4)), Z(4), Z(4), Z((2, 3))), "left: dimension 1 is 3"),
    (lambda: ops.snake_beta(Z(4), Z(4), Z(4)), "x must be a 2-D array"),
    (lambda: ops.elu_left(Z((3, 4)), None, -1), "pad must be at least 0"),
    (lambda: ops.elu_left(Z((3, 4)), Z((2, 5))), "left: dimension 1 is 5"),
    (lambda: ops.time_stats(Z((3, 4)), Z((3, 5))), "logits: dimension 1 is 5"),
    (lambda: ops.time_stats(Z((3, 4)), n_threads=-2), "n_threads must be at least 1"),
])
def test_runners_name_the_bad_argument(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
