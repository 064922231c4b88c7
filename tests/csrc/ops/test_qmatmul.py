"""The quantized matmul (csrc/ops/qmatmul.h) on every SIMD path this CPU has, for Q8_0, Q4_K and
Q6_K weights quantized by ggml and dequantized by gguf-py:

* against numpy in float64 over the activations quantized as the op does (per column, blocks of
  32 or 256 values, scale max|x| / 127, round to nearest even): equal to float rounding;
* against the float product: within the activation rounding's bound, sum |w| * d / 2;
* against ggml's mul_mat (the "ggml" matmul path): within both quantizations' bounds;
* column independence and thread-count determinism, bit for bit: column j of an M-column call
  equals the same column alone, for 1 and 3 threads;
* packed Q8_0 weights (x86 with AVX-512 VNNI): bit for bit the unpacked weights' result on the
  scalar and avx512 paths, the scalar kernel's on avx2, for whole and partial 16-block groups;
* packed Q4_K and Q6_K weights (x86 with AMX, rows in blocks of 16): against numpy; columns
  independent across the switch from vpdpbusd to tiles at 4 columns; the avx512 path (vpdpbusd
  only) bit for bit the amx path; the plain C++ kernel's result below avx512;
* matmul() routes host weights to it on the native path where a vectorized kernel exists for the
  type and to ggml's mul_mat otherwise and on the ggml path;
* bad arguments get a ValueError naming them.

Shapes: N = 37 rows (not a multiple of the row tiles or of the thread count), Q8_0 rows of 45
blocks (the AVX-512 kernel takes 16 at a time), M across the 4-column tiles and the 32-column groups.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from qtts._native import core
from tests.fixtures.simd import PATHS, U32

ops = core.ops
TYPES = {"q8_0": (QT.Q8_0, 32, 45 * 32), "q4_k": (QT.Q4_K, 256, 3 * 256), "q6_k": (QT.Q6_K, 256, 3 * 256)}
N = 37
COLUMNS = (1, 2, 3, 5, 8, 17, 40)



class Case:
    """Weights of one type (n rows): ggml's bytes and gguf-py's dequantization; activations."""

    def __init__(self, type_name: str, seed: int = 0, n: int = N) -> None:
        qtype, self.block, self.k = TYPES[type_name]
        self.type = type_name
        rng = np.random.default_rng(seed)
        w = rng.standard_normal((n, self.k)).astype(np.float32)
        w[3] *= 0.0  # an all-zero row
        self.w = np.frombuffer(core.quantize(w, type_name, 1), dtype=np.uint8).reshape(n, -1)
        self.wd = quants.dequantize(self.w, qtype).reshape(n, self.k).astype(np.float64)
        self.x = (rng.standard_normal((max(COLUMNS), self.k)) * 2.0).astype(np.float32)
        self.x[1, : self.block] = 0.0  # an all-zero activation block

    def quantized_x(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The first m columns as the op quantizes them (float64 values) and each value's scale."""
        xb = self.x[:m].reshape(m, -1, self.block)
        d = np.abs(xb).max(-1, keepdims=True) / np.float32(127)
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
        q = np.clip(np.rint(xb * inv), -127, 127)
        scale = np.broadcast_to(d, xb.shape).reshape(m, self.k).astype(np.float64)
        return (q * d).reshape(m, self.k).astype(np.float64), scale

    def rounding(self, xq: np.ndarray, per_block: int = 1) -> np.ndarray:
        """A bound on float rounding: a few roundings per block term (scales, products, gguf-py's
        dequantization) and `per_block` per block in the sum over blocks (the packed K-quant
        kernels add each block's 8 or 16 sub-block terms in float)."""
        return (self.k // self.block * per_block + 8) * U32 * (np.abs(xq) @ np.abs(self.wd).T)

    def activation_bound(self, scale: np.ndarray) -> np.ndarray:
        """|W (x - xq)| <= sum |w| * d / 2 for round-to-nearest with step d."""
        return (scale / 2) @ np.abs(self.wd).T


CASES: dict[tuple[str, int], Case] = {}


def case(type_name: str, n: int = N) -> Case:
    if (type_name, n) not in CASES:
        CASES[type_name, n] = Case(type_name, n=n)
    return CASES[type_name, n]


@pytest.mark.parametrize("m", COLUMNS)
@pytest.mark.parametrize("type_name", TYPES)
def test_matches_numpy(path: str, type_name: str, m: int) -> None:
    c = case(type_name)
    y = ops.qmatmul(c.w, type_name, c.x[:m], n_threads=3)
    assert y.shape == (m, N) and y.dtype == np.float32
    assert_matches_numpy(c, y, m)


def assert_matches_numpy(c: Case, y: np.ndarray, m: int, per_block: int = 1) -> None:
    """y = the first m columns of c.x times c's weights, as the op quantizes them."""
    xq, scale = c.quantized_x(m)
    ref = xq @ c.wd.T
    tol = c.rounding(xq, per_block)
    assert np.all(np.abs(y - ref) <= tol), np.max(np.abs(y - ref) / tol)
    exact = c.x[:m].astype(np.float64) @ c.wd.T
    assert np.all(np.abs(y - exact) <= c.activation_bound(scale) + tol)
    assert np.all(y[:, 3] == 0.0)


@pytest.mark.parametrize("type_name", TYPES)
def test_columns_do_not_depend_on_the_batch_or_threads(path: str, type_name: str) -> None:
    c = case(type_name)
    whole = ops.qmatmul(c.w, type_name, c.x, n_threads=3)  # 40 columns: 32 + 8
    eight = ops.qmatmul(c.w, type_name, c.x[:8], n_threads=2)
    for j in range(8):
        alone = ops.qmatmul(c.w, type_name, c.x[j: j + 1], n_threads=1)
        np.testing.assert_array_equal(eight[j], alone[0], err_msg=f"column {j} of 8")
        np.testing.assert_array_equal(whole[j], alone[0], err_msg=f"column {j} of 40")
    for j in (33, 39):
        np.testing.assert_array_equal(whole[j], ops.qmatmul(c.w, type_name, c.x[j: j + 1])[0], err_msg=f"column {j}")


def matmul_on(path: str, fn: Callable[[], np.ndarray]) -> np.ndarray:
    ops.set_matmul_path(path)
    try:
        return fn()
    finally:
        ops.set_matmul_path("native")


@pytest.mark.parametrize("type_name", TYPES)
def test_close_to_ggml_mul_mat(path: str, type_name: str) -> None:
    c = case(type_name)
    ours = ops.qmatmul(c.w, type_name, c.x[:5], n_threads=2)
    theirs = matmul_on("ggml", lambda: ops.matmul(c.w, type_name, c.x[:5], n_threads=2))
    xq, scale = c.quantized_x(5)
    # ggml's activation scales round to at most 1/128 finer or coarser than ours
    bound = 2.05 * c.activation_bound(scale) + 2 * c.rounding(xq)
    assert np.all(np.abs(ours - theirs) <= bound)


@pytest.mark.parametrize("type_name", TYPES)
def test_matmul_takes_the_native_kernel_by_default(type_name: str) -> None:
    c = case(type_name)
    assert ops.get_matmul_path() == "native"
    ours = ops.qmatmul(c.w, type_name, c.x[:3])
    theirs = matmul_on("ggml", lambda: ops.matmul(c.w, type_name, c.x[:3]))
    native = ops.matmul(c.w, type_name, c.x[:3])
    assert not np.array_equal(ours, theirs)
    # on a CPU with no vectorized kernel for the type (the K-quants below AVX-512 VNNI) the
    # native path keeps ggml's mul_mat, which is faster than the scalar kernel
    np.testing.assert_array_equal(native, ours if ops.qmatmul_vectorized(type_name) else theirs)


def test_which_types_have_a_vectorized_kernel() -> None:
    assert ops.qmatmul_vectorized("q8_0") == any(p in PATHS for p in ("avx2", "neon"))
    for type_name in ("q4_k", "q6_k"):
        assert ops.qmatmul_vectorized(type_name) == ("avx512" in PATHS and ops.q8_0_packs())


def test_the_matmul_path_switch() -> None:
    assert ops.get_matmul_path() == "native"
    assert matmul_on("ggml", ops.get_matmul_path) == "ggml"
    assert ops.get_matmul_path() == "native"
    with pytest.raises(ValueError, match="unknown matmul path 'fast'"):
        ops.set_matmul_path("fast")


W8 = np.zeros((4, 34), dtype=np.uint8)


@pytest.mark.parametrize("k", [32, 64, 512, 45 * 32, 2048])
def test_packed_q8_0_gives_the_unpacked_results(path: str, k: int) -> None:
    rng = np.random.default_rng(k)
    w = np.frombuffer(core.quantize(rng.standard_normal((N, k)).astype(np.float32), "q8_0", 1), dtype=np.uint8)
    w = w.reshape(N, -1)
    x = rng.standard_normal((9, k)).astype(np.float32)
    if not ops.q8_0_packs():
        with pytest.raises(ValueError, match="packed: q8_0 weights cannot be packed"):
            ops.qmatmul(w, "q8_0", x, packed=True)
        return
    packed = ops.qmatmul(w, "q8_0", x, n_threads=3, packed=True)
    np.testing.assert_array_equal(packed[4:5], ops.qmatmul(w, "q8_0", x[4:5], packed=True))
    if path == "avx2":  # packed weights take the plain C++ kernel below the avx512 path
        ops.set_simd_path("scalar")
    np.testing.assert_array_equal(packed, ops.qmatmul(w, "q8_0", x, n_threads=2))


PACKED_ROWS = 48  # K-quants pack in blocks of 16 rows


@pytest.mark.parametrize("type_name", ["q4_k", "q6_k"])
def test_packed_k_quants(path: str, type_name: str) -> None:
    c = case(type_name, PACKED_ROWS)
    if "amx" not in PATHS:
        with pytest.raises(ValueError, match=f"packed: {type_name} weights cannot be packed"):
            ops.qmatmul(c.w, type_name, c.x[:1], packed=True)
        return
    whole = ops.qmatmul(c.w, type_name, c.x, n_threads=3, packed=True)  # 40 columns: 16 + 16 + 8
    assert_matches_numpy(c, whole, len(c.x), per_block=16)
    for m in (1, 2, 3, 4, 5, 17):  # below 4 columns vpdpbusd, from 4 on tiles (amx)
        np.testing.assert_array_equal(ops.qmatmul(c.w, type_name, c.x[:m], n_threads=2, packed=True), whole[:m])
    if path == "avx512":  # vpdpbusd for every column count: the amx path's results
        ops.set_simd_path("amx")
        np.testing.assert_array_equal(ops.qmatmul(c.w, type_name, c.x, n_threads=3, packed=True), whole)
    elif path != "amx":  # rows unpacked for the plain C++ kernel
        np.testing.assert_array_equal(ops.qmatmul(c.w, type_name, c.x, n_threads=2), whole)


def test_k_quants_pack_in_whole_blocks_of_16_rows() -> None:
    c = case("q4_k")  # 37 rows
    with pytest.raises(ValueError, match="packed: q4_k weights cannot be packed"):
        ops.qmatmul(c.w, "q4_k", c.x[:1], packed=True)


@pytest.mark.parametrize("call, match", [
    (lambda: ops.qmatmul(W8, "q5_k", np.zeros((1, 32))), "unknown weight type 'q5_k'"),
    (lambda: ops.qmatmul(W8, "q8_0", np.zeros((1, 48))), "48 values per row are not whole q8_0 blocks of 32"),
    (lambda: ops.qmatmul(W8, "q8_0", np.zeros((1, 64))), r"w must be \[N, 68\] bytes"),
    (lambda: ops.qmatmul(W8, "q4_k", np.zeros((1, 32))), "not whole q4_k blocks of 256"),
    (lambda: ops.qmatmul(W8[:, :33], "q8_0", np.zeros((1, 32))), r"w must be \[N, 34\] bytes"),
    (lambda: ops.qmatmul(W8, "q8_0", np.zeros(32)), "x must be a 2-D array"),
    (lambda: ops.qmatmul(W8, "q8_0", np.zeros((0, 32))), "x has an empty dimension"),
    (lambda: ops.matmul(W8, "q8_0", np.zeros((1, 32)), n_threads=0), "n_threads must be at least 1"),
    (lambda: ops.time_matmul(W8, "q8_0", np.zeros((1, 32)), repeats=0), "repeats must be at least 1"),
])
def test_bad_arguments_are_named(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()
