"""The conv-GEMM over BF16 weights (csrc/ops/conv_gemm_bf16.cpp), the fast precision's vocoder
convs: against numpy in float64 over the operands rounded to BF16 (gguf's rounding, round to
nearest even), on every SIMD path this CPU has (AMX tiles on the amx path where the CPU has
AMX-BF16, plain C++ below it), and the determinism the batched vocoder needs: results independent
of the time range of the call, the segments beside it and the thread count, bit for bit.

Shapes hit the kernel's tails: a lone panel beside a pair, row counts that end inside the first or
the second half of a 32-row block, more rows than one 128-row work item, dilations > 1.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants

from qtts._native import core
from qtts.convert.checkpoint import _conv_panels
from tests.csrc.ops.test_ops import THREADS, assert_conv_close, f32

ops = core.ops
BF16 = GGMLQuantizationType.BF16


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to BF16, as float32."""
    return quants.dequantize(quants.quantize(np.ascontiguousarray(x, np.float32), BF16), BF16).reshape(x.shape)


def reference(xp: np.ndarray, w: np.ndarray, n: int, d: int, bias: np.ndarray | None,
              res: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """y [n, N] in float64 over the BF16-rounded xp and w [N, Cin, K] (bias and residual in F32), and
    each output's sum of |terms|."""
    k = w.shape[2]
    xr = bf16(xp).astype(np.float64)
    windows = np.stack([xr[kk * d: kk * d + n] for kk in range(k)], axis=1)
    wk = bf16(w).astype(np.float64)
    y = np.einsum("tkc,ock->to", windows, wk)
    bound = np.einsum("tkc,ock->to", np.abs(windows), np.abs(wk))
    for extra in (bias, res):
        if extra is not None:
            y, bound = y + extra, bound + np.abs(extra)
    return y, bound


# (cin, cout, k, d, n): cout 16 one panel, 48 a pair and a lone panel, 64 two pairs; n = 1, 17 (the
# second half of a block), 50, 145 (past a 128-row work item).
CASES = [
    (32, 16, 7, 9, 50),
    (64, 48, 3, 1, 97),
    (96, 32, 1, 1, 145),
    (32, 16, 7, 1, 1),
    (32, 64, 7, 3, 17),
]


@pytest.mark.parametrize("n_threads", THREADS)
@pytest.mark.parametrize("cin, cout, k, d, n", CASES)
def test_conv_gemm_bf16_matches_numpy(path: str, cin: int, cout: int, k: int, d: int, n: int,
                                      n_threads: int) -> None:
    rng = np.random.default_rng(cin * 1000 + cout + k)
    w = f32(rng, cout, cin, k, scale=cin ** -0.5)
    xp = f32(rng, n + (k - 1) * d, cin)
    bias, res = f32(rng, cout), f32(rng, n, cout)
    for b, r in ((None, None), (bias, None), (bias, res), (None, res)):
        y = ops.conv_gemm(xp, _conv_panels([w]), n, b, r, bf16=True, n_threads=n_threads)
        assert y.shape == (n, cout) and y.dtype == np.float32
        ref, bound = reference(xp, w, n, d, b, r)
        assert_conv_close(y, ref, bound, k * cin)


def test_conv_gemm_bf16_is_not_f32() -> None:
    """The BF16 products differ from the F32 ones by the operands' rounding (about 2^-9 relative),
    so a test of the fast path cannot pass on the F32 kernel by mistake."""
    rng = np.random.default_rng(5)
    w = _conv_panels([f32(rng, 32, 64, 7, scale=0.125)])
    xp = f32(rng, 40 + 6, 64)
    fast = ops.conv_gemm(xp, w, 40, bf16=True, n_threads=2)
    exact = ops.conv_gemm(xp, w, 40, n_threads=2)
    err = np.abs(fast - exact).max() / np.abs(exact).max()
    assert 1e-4 < err < 1e-2


def test_conv_gemm_bf16_does_not_depend_on_the_time_range_or_threads(path: str) -> None:
    """A stream decoded piece by piece equals one call, and every thread count the same, bit for bit."""
    rng = np.random.default_rng(7)
    k, d, cin, cout, n = 7, 3, 32, 48, 301
    w = _conv_panels([f32(rng, cout, cin, k, scale=cin ** -0.5)])
    xp, bias, res = f32(rng, n + (k - 1) * d, cin), f32(rng, cout), f32(rng, n, cout)
    whole = ops.conv_gemm(xp, w, n, bias, res, bf16=True, n_threads=2)
    cuts = [0, 1, 17, 50, 61, 200, n]
    pieces = [ops.conv_gemm(xp[a: b + (k - 1) * d], w, b - a, bias, res[a:b], bf16=True, n_threads=2)
              for a, b in zip(cuts, cuts[1:], strict=False)]
    np.testing.assert_array_equal(np.concatenate(pieces), whole)
    for t in (1, 3, 5):
        np.testing.assert_array_equal(ops.conv_gemm(xp, w, n, bias, res, bf16=True, n_threads=t), whole)


@pytest.mark.parametrize("k, d, rows", [(7, 9, (1, 8, 2, 13, 1)), (7, 1, (50, 1, 161)), (1, 1, (3, 100, 16))])
def test_conv_gemm_bf16_segmented_equals_each_segment_alone(path: str, k: int, d: int,
                                                            rows: tuple[int, ...]) -> None:
    """The batched vocoder's segmented call: each segment's rows bit-identical to its own call."""
    rng = np.random.default_rng(len(rows) + k)
    cin, cout, p = 64, 32, (k - 1) * d
    w = _conv_panels([f32(rng, cout, cin, k, scale=cin ** -0.5)])
    parts = [f32(rng, p + m, cin) for m in rows]
    bias = f32(rng, cout)
    y = ops.conv_gemm(np.concatenate(parts), w, sum(rows), bias, segments=list(rows), bf16=True, n_threads=2)
    alone = [ops.conv_gemm(x, w, m, bias, bf16=True, n_threads=2) for x, m in zip(parts, rows, strict=False)]
    np.testing.assert_array_equal(y, np.concatenate(alone))


@pytest.mark.parametrize("cin, cout, stride", [(48, 16, 1), (32, 20, 1), (32, 16, 2)])
def test_conv_gemm_bf16_refuses_other_shapes(cin: int, cout: int, stride: int) -> None:
    rng = np.random.default_rng(0)
    w = _conv_panels([f32(rng, cout, cin, 2)])
    with pytest.raises(ValueError, match="bf16 needs panels of 16 lanes over a multiple of 32 input channels"):
        ops.conv_gemm(f32(rng, 12, cin), w, 5, stride=stride, bf16=True)
