#!/usr/bin/env python3
"""The custom CPU ops and a tiny-model decode on aarch64, checked on an x86 machine: cross-compiles
tests/native (the core without Python) against the aarch64 libggml-python wheel, runs it under
qemu-user, and compares what it wrote with numpy (the op tests' own assertions, on every SIMD
path: scalar and neon) and with this machine's qtts (the decoded waveform within 1e-4).

Run before every change to csrc/ops (docs/kernels.md, "ARM"), from a checkout with qtts
built in place and the test dependencies installed:

    apt-get install g++-aarch64-linux-gnu qemu-user    # Debian/Ubuntu, once
    python scripts/check_arm.py

qemu runs the check twice: as an Armv8.0 CPU (Cortex-A53: plain NEON, the Q8_0 kernel without
the dot-product extension) and as its "max" CPU (with it). The tiny model also generates a few
greedy frames, which must equal this machine's codes. The aarch64 wheel and the build live in
build/arm/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "python"), str(ROOT)]

from qtts._native import core  # noqa: E402
from qtts.convert.checkpoint import _conv_panels, convert  # noqa: E402
from tests.csrc.ops import test_attend as A  # noqa: E402
from tests.csrc.ops import test_ops as T  # noqa: E402
from tests.csrc.ops import test_qmatmul as Q  # noqa: E402

GGML_WHEEL = "libggml-python==0.20.2.post1"  # the version pyproject.toml pins
SYSROOT = "/usr/aarch64-linux-gnu"
# qemu CPU models: Cortex-A53 is Armv8.0 (no dot product), "max" has every extension qemu knows
QEMU_CPUS = {"cortex-a53": "no dotprod", "max": "dotprod"}
DECODE_TOLERANCE = 1e-4  # the waveform against this machine's qtts (parity-checked in CI)


@dataclass
class Cases:
    """The manifest lines and, per case id, the check of its output."""

    dir: Path
    lines: list[str] = field(default_factory=list)
    checks: dict[str, Callable[[np.ndarray], None]] = field(default_factory=dict)
    # bit-identity promises (thread counts, a stream cut in pieces, a column alone or in a batch):
    # (name, what to pick from a path's outputs, the case id whose output it must equal)
    same: list[tuple[str, Callable[[dict[str, np.ndarray]], np.ndarray], str]] = field(default_factory=list)

    def save(self, name: str, a: np.ndarray | None) -> str:
        if a is None:
            return "-"
        np.save(self.dir / f"{name}.npy", np.ascontiguousarray(a))
        return f"{name}.npy"

    def add(self, op: str, case_id: str, args: list[object], check: Callable[[np.ndarray], None] | None) -> None:
        self.lines.append(" ".join([op, case_id, *map(str, args)]))
        if check is not None:
            self.checks[case_id] = check


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"{name} not found: apt-get install g++-aarch64-linux-gnu qemu-user cmake")
    return path


def unpack_wheel(build: Path) -> Path:
    """The aarch64 libggml package (lib64/ and include/), downloaded once."""
    root = build / "wheel" / "libggml"
    if (root / "lib64" / "libggml.so").exists():
        return root
    wheels = build / "wheel"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", GGML_WHEEL, "--platform", "manylinux_2_28_aarch64",
                    "--only-binary=:all:", "--no-deps", "-d", str(wheels)], check=True)
    (whl,) = wheels.glob("libggml_python-*aarch64*.whl")
    with zipfile.ZipFile(whl) as z:
        z.extractall(wheels)
    return root


def build_check(build: Path, ggml: Path, jobs: int) -> Path:
    cmake = tool("cmake")
    tool("aarch64-linux-gnu-g++")
    out = build / "cmake"
    subprocess.run([cmake, "-S", str(ROOT), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
                    f"-DCMAKE_TOOLCHAIN_FILE={ROOT / 'cmake' / 'aarch64-linux-gnu.cmake'}",
                    "-DQTTS_PYTHON_MODULE=OFF", "-DQTTS_NATIVE_CHECK=ON",
                    f"-Dggml_DIR={ggml / 'lib64' / 'cmake' / 'ggml'}"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([cmake, "--build", str(out), "-j", str(jobs), "--target", "qtts_native_check"], check=True,
                   stdout=subprocess.DEVNULL)
    return out / "qtts_native_check"


def op_cases(c: Cases) -> None:
    """The op tests' shapes and assertions (tests/csrc/ops/test_ops.py, tests/csrc/ops/test_qmatmul.py,
    tests/csrc/ops/test_attend.py)."""
    for cin, cout, k, d, n in T.CONV_CASES:
        rng = np.random.default_rng(cin * 1000 + cout + k)
        w = T.f32(rng, cout, cin, k, scale=cin ** -0.5)
        xp = T.f32(rng, n + (k - 1) * d, cin)
        bias, res = T.f32(rng, cout), T.f32(rng, n, cout)
        name = f"conv_{cin}_{cout}_{k}_{d}_{n}"
        wf, xf = c.save(name + "_w", _conv_panels([w])), c.save(name + "_xp", xp)
        for j, (b, r) in enumerate(((None, None), (bias, None), (bias, res), (None, res))):
            bf, rf = c.save(f"{name}_b{j}", b), c.save(f"{name}_r{j}", r)

            def check(y: np.ndarray, xp: np.ndarray = xp, w: np.ndarray = w, n: int = n, d: int = d,
                      b: np.ndarray | None = b, r: np.ndarray | None = r, terms: int = k * cin) -> None:
                assert y.shape == (n, w.shape[0])
                ref, bound = T.conv_reference(xp, w, n, d, b, r)
                T.assert_conv_close(y, ref, bound, terms)

            for threads in (1, 3):
                c.add("conv_gemm", f"{name}_{j}_t{threads}", [n, 1, threads, xf, wf, bf, rf], check)
            c.same.append((f"{name}_{j}", lambda o, i=f"{name}_{j}": o[f"{i}_t3"], f"{name}_{j}_t1"))

    # a stream decoded in pieces equals one call (test_conv_gemm_does_not_depend_on_the_time_range)
    for cout in (20, 32, 48):
        rng = np.random.default_rng(cout)
        k, d, cin, n = 7, 3, 12, 113
        wf = c.save(f"piece{cout}_w", _conv_panels([T.f32(rng, cout, cin, k)]))
        xp, bias, res = T.f32(rng, n + (k - 1) * d, cin), T.f32(rng, cout), T.f32(rng, n, cout)
        bf = c.save(f"piece{cout}_b", bias)
        c.add("conv_gemm", f"piece{cout}_whole", [n, 1, 2, c.save(f"piece{cout}_xp", xp), wf, bf,
                                                   c.save(f"piece{cout}_r", res)], None)
        cuts = [0, 1, 8, 50, 61, n]
        ids = []
        for a, e in zip(cuts, cuts[1:], strict=False):
            ids.append(f"piece{cout}_{a}")
            c.add("conv_gemm", ids[-1], [e - a, 1, 2, c.save(ids[-1] + "_xp", xp[a: e + (k - 1) * d]), wf, bf,
                                          c.save(ids[-1] + "_r", res[a:e])], None)
        c.same.append((f"piece{cout}", lambda o, ids=tuple(ids): np.concatenate([o[i] for i in ids]),
                       f"piece{cout}_whole"))

    for cc, n, p in T.SNAKE_CASES:
        rng = np.random.default_rng(cc * 100 + n)
        x, ea, ib = T.snake_operands(rng, n, cc)
        left = T.f32(rng, p, cc) if p else None
        name = f"snake_{cc}_{n}_{p}"
        c.add("snake_beta", name, [1, c.save(name + "_x", x), c.save(name + "_ea", ea), c.save(name + "_ib", ib),
                                   c.save(name + "_left", left)],
              lambda y, x=x, ea=ea, ib=ib, left=left: T.assert_snake_close(y, x, ea, ib, left))

    for cc, n, p, pad in T.ELU_CASES:
        rng = np.random.default_rng(cc * 100 + n)
        x = T.elu_input(rng, n, cc)
        left = T.f32(rng, p, cc) if p else None
        name = f"elu_{cc}_{n}_{p}_{pad}"

        def check_elu(y: np.ndarray, x: np.ndarray = x, left: np.ndarray | None = left,
                      rows: int = p + n + pad) -> None:
            assert y.shape == (rows, x.shape[1])
            T.assert_elu_close(y, x, left)

        c.add("elu_left", name, [1, pad, c.save(name + "_x", x), c.save(name + "_left", left)], check_elu)

    for cc, t in T.STATS_CASES:
        for weighted in (False, True):
            rng = np.random.default_rng(cc * 100 + t)
            x = T.f32(rng, t, cc, scale=2.0) + 1.5
            logits = T.f32(rng, t, cc, scale=3.0) if weighted else None
            name = f"stats_{cc}_{t}_{int(weighted)}"
            c.add("time_stats", name, [2, c.save(name + "_x", x), c.save(name + "_l", logits)],
                  lambda y, x=x, logits=logits: T.assert_stats_close(y, x, logits))

    for type_name in Q.TYPES:
        case = Q.case(type_name)
        wf = c.save(f"qmm_{type_name}_w", case.w)
        for m in Q.COLUMNS:
            name = f"qmm_{type_name}_{m}"
            c.add("qmatmul", name, [3, type_name, wf, c.save(name + "_x", case.x[:m])],
                  lambda y, case=case, m=m: Q.assert_matches_numpy(case, y, m))
        # columns alone equal the same columns in a batch of 40 (32 + 8), for 1 and 3 threads
        c.add("qmatmul", f"qmm_{type_name}_all", [3, type_name, wf, c.save(f"qmm_{type_name}_all_x", case.x)], None)
        for j in (0, 5, 33, 39):
            xf = c.save(f"qmm_{type_name}_col{j}_x", case.x[j: j + 1])
            c.add("qmatmul", f"qmm_{type_name}_col{j}", [1, type_name, wf, xf], None)
            c.same.append((f"qmm_{type_name}_col{j}", lambda o, t=type_name, j=j: o[f"qmm_{t}_all"][j: j + 1],
                           f"qmm_{type_name}_col{j}"))


    for name, shape in A.CASES.items():
        case = A.case(np.random.default_rng(len(name)), **shape)
        n_all, lanes = case["q"].shape[0], case["lanes"]
        n = n_all // lanes
        pos = np.array([case["n_past"] + r % n for r in range(n_all)], dtype=np.int32)
        tag = "attend_" + name.replace(" ", "_")
        files = [c.save(f"{tag}_{x}", case[x]) for x in ("q", "k", "v", "k_cache", "v_cache")]
        args = [case["n_past"] + n, lanes, case["lane_stride"], *files, c.save(tag + "_pos", pos)]

        def check_attend(y: np.ndarray, case: dict = case) -> None:
            np.testing.assert_allclose(y, A.reference(case)[0], rtol=0, atol=2e-6)

        for threads in (1, 3):
            c.add("attend", f"{tag}_t{threads}", [threads, *args], check_attend)
        c.same.append((tag, lambda o, i=tag: o[f"{i}_t3"], f"{tag}_t1"))


def model_cases(c: Cases, frames: int, gen_frames: int) -> dict[str, np.ndarray]:
    """The tiny CustomVoice model: its vocoder over fixed codes (F32 file) and greedy frames from a
    fixed prompt (Q8_0 file: the talker and code predictor through qmatmul). Returns this machine's
    results: the waveform, and the codes on the scalar path, whose Q8_0 kernel computes what the
    ARM kernels do (ops/qmatmul.h)."""
    from tests.fixtures.build import ensure_fixtures

    files = {t: c.dir / f"tiny_custom_voice-{t}.gguf" for t in ("f32", "q8_0")}
    for t, f in files.items():
        if not f.exists():
            convert(ensure_fixtures() / "tiny_custom_voice", f, t)
    rng = np.random.default_rng(1)
    model = core.Model(str(files["f32"]), "cpu", core.Ops.native)
    dec = model.hparams["codec_decoder"]
    codes = rng.integers(0, dec["codebook_size"], (frames, dec["num_quantizers"]), dtype=np.int32)
    c.add("decode", "decode", [1, files["f32"].name, c.save("codes", codes)], None)
    expected = {"decode": np.asarray(core.Session(model, 1).decode(codes))}

    model = core.Model(str(files["q8_0"]), "cpu", core.Ops.native)
    d = model.hparams["talker"]["embedding_length"]
    prompt, trailing = T.f32(rng, 7, d, scale=0.5), T.f32(rng, 3, d, scale=0.5)
    c.add("generate", "generate", [1, files["q8_0"].name, c.save("prompt", prompt), c.save("trailing", trailing),
                                   gen_frames], None)
    p = core.GenerateParams()
    p.repetition_penalty = 1.0
    p.max_new_tokens = p.min_new_tokens = gen_frames + 1
    core.ops.set_simd_path("scalar")
    try:
        expected["generate"] = core.Session(model, 1).generate(prompt, trailing, p)[0].astype(np.float32)
    finally:
        core.ops.set_simd_path(core.ops.simd_paths()[-1])
    return expected


def load_outputs(out: Path) -> dict[str, dict[str, np.ndarray]]:
    """{path: {case id: output}}."""
    result: dict[str, dict[str, np.ndarray]] = {}
    for f in out.glob("*.npy"):
        case_id, path = f.stem.rsplit(".", 1)
        result.setdefault(path, {})[case_id] = np.load(f)
    return result


def compare(c: Cases, outputs: dict[str, dict[str, np.ndarray]], x86: dict[str, np.ndarray]) -> list[str]:
    """Asserts every check; returns one summary line per path."""
    lines = []
    for path, got in outputs.items():
        missing = set(c.checks) - set(got)
        assert not missing, f"{path}: no output for {sorted(missing)[:3]}"
        for case_id, check in c.checks.items():
            try:
                check(got[case_id])
            except AssertionError as e:
                raise AssertionError(f"{path}, case {case_id}: {e}") from e
        for name, pick, other in c.same:
            np.testing.assert_array_equal(pick(got), got[other], err_msg=f"{path}: {name}")
        wave = x86["decode"]
        err = float(np.max(np.abs(got["decode"] - wave)))
        assert got["decode"].shape == wave.shape and err <= DECODE_TOLERANCE, f"{path}: decode differs by {err:.3g}"
        np.testing.assert_array_equal(got["generate"], x86["generate"], err_msg=f"{path}: greedy codes")
        lines.append(f"{path}: {len(c.checks)} op checks, {len(c.same)} bit-identity checks, "
                     f"decode of {len(wave)} samples within {err:.2g} of x86, "
                     f"{len(x86['generate'])} greedy frames equal to x86's")
    # the Q8_0 kernels promise the plain C++ kernel's result bit for bit (ops/qmatmul_arm_tile.h)
    for case_id in (i for i in outputs["scalar"] if i.startswith("qmm_q8_0")):
        np.testing.assert_array_equal(outputs["neon"][case_id], outputs["scalar"][case_id], err_msg=case_id)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "arm")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--frames", type=int, default=12, help="frames of codes the tiny model decodes")
    ap.add_argument("--gen-frames", type=int, default=4, help="greedy frames the tiny model generates")
    args = ap.parse_args()
    if not __debug__:
        sys.exit("run without -O: the op tests' checks are assert statements")
    t0 = time.perf_counter()
    qemu = tool("qemu-aarch64")
    build = args.build_dir.resolve()
    ggml = unpack_wheel(build)
    exe = build_check(build, ggml, args.jobs)
    t_build = time.perf_counter() - t0

    cases = Cases(build / "cases")
    shutil.rmtree(cases.dir / "out", ignore_errors=True)
    cases.dir.mkdir(parents=True, exist_ok=True)
    op_cases(cases)
    x86 = model_cases(cases, args.frames, args.gen_frames)
    (cases.dir / "manifest.txt").write_text("\n".join(cases.lines) + "\n")

    results = []
    for cpu, feature in QEMU_CPUS.items():
        out = cases.dir / "out" / cpu
        out.mkdir(parents=True)
        t1 = time.perf_counter()
        subprocess.run([qemu, "-cpu", cpu, "-L", SYSROOT, "-E", f"LD_LIBRARY_PATH={ggml / 'lib64'}", str(exe),
                        str(cases.dir), str(out)], check=True)
        info = (out / "paths.txt").read_text().split("\n")
        assert info[:3] == ["scalar", "neon", feature], f"{cpu}: {info}"
        outputs = load_outputs(out)
        for line in compare(cases, outputs, x86):
            print(f"{cpu} ({feature}), {line}")
        results.append(outputs)
        print(f"{cpu}: ran in {time.perf_counter() - t1:.1f} s under qemu")
    # the dot-product and the plain NEON Q8_0 kernels give the same bits (the scalar kernel's)
    for case_id, y in results[0]["neon"].items():
        if case_id.startswith("qmm_q8_0"):
            np.testing.assert_array_equal(results[1]["neon"][case_id], y, err_msg=f"dotprod vs plain, {case_id}")
    print(f"ARM check passed: {len(cases.lines)} cases; build {t_build:.0f} s, total {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
