"""GGUF fuzzer: seeded mutants of tiny model files, each loaded and (when it loads) synthesized.

    python -m tests.fuzz_gguf --fuzz 5000 [--seed S] [--save-dir DIR] [--timeout S]

Mutant i of seed S depends on (S, i) only, so a failure is reproduced by its number. The
mutants run in a persistent worker subprocess (memory capped with RLIMIT_AS) that reads their
paths from stdin and answers one line each. An accepted outcome is success or a ValueError /
OSError; a worker killed by a signal, a hang, or any other exception (UnicodeDecodeError
included) is a failure, and the mutant is kept in the save folder.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

WORKER_MEMORY = 4 << 30
SOURCES = ("tiny_custom_voice-f32", "tiny_base-f32", "tiny_voice_design-q8_0")

# --- the GGUF layout: where every field of a file's header sits ------------------------------

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass
class Layout:
    """Byte offsets of the header fields (each a list of (offset, detail))."""

    data_offset: int = 0
    str_len: list[tuple[int, str]] = field(default_factory=list)   # u64 length, the key it belongs to
    str_bytes: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, length, key)
    kv_type: list[tuple[int, str]] = field(default_factory=list)
    arr_type: list[tuple[int, str]] = field(default_factory=list)
    arr_len: list[tuple[int, str]] = field(default_factory=list)
    numbers: list[tuple[int, int, str]] = field(default_factory=list)  # (offset, gguf type, key)
    n_dims: list[int] = field(default_factory=list)
    dims: list[int] = field(default_factory=list)
    tensor_type: list[int] = field(default_factory=list)
    tensor_offset: list[int] = field(default_factory=list)


def parse(data: bytes) -> Layout:
    lay = Layout()
    pos = 24
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)

    def string(key: str) -> tuple[str, int]:
        nonlocal pos
        n = struct.unpack_from("<Q", data, pos)[0]
        lay.str_len.append((pos, key))
        lay.str_bytes.append((pos + 8, n, key))
        s = data[pos + 8: pos + 8 + n].decode("utf-8", "replace")
        pos += 8 + n
        return s, n

    def value(t: int, key: str) -> None:
        nonlocal pos
        if t == STRING:
            string(key)
        elif t in SCALAR:
            lay.numbers.append((pos, t, key))
            pos += struct.calcsize(SCALAR[t])
        else:
            raise ValueError(f"type {t}")

    for _ in range(n_kv):
        key, _ = string("")
        lay.str_len[-1] = (lay.str_len[-1][0], key)
        lay.str_bytes[-1] = (*lay.str_bytes[-1][:2], key)
        lay.kv_type.append((pos, key))
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        if t == ARRAY:
            lay.arr_type.append((pos, key))
            sub, n = struct.unpack_from("<IQ", data, pos)
            lay.arr_len.append((pos + 4, key))
            pos += 12
            for _ in range(n):
                value(sub, key)
        else:
            value(t, key)
    for _ in range(n_tensors):
        string("tensor name")
        lay.n_dims.append(pos)
        nd = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        lay.dims.extend(pos + 8 * i for i in range(nd))
        pos += 8 * nd
        lay.tensor_type.append(pos)
        lay.tensor_offset.append(pos + 4)
        pos += 12
    lay.data_offset = pos
    return lay


# --- mutations ----------------------------------------------------------------------------------

U32 = (0, 1, 2, 3, 7, 8, 255, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
U64 = (0, 1, 2, 1 << 32, 1 << 40, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
FLOATS = (0.0, -0.0, -1.0, 1.0, 2.0, 0.5, 1e-45, 1e-30, 1e30, 3.4e38, math.nan, math.inf, -math.inf, -1e-6)
BAD_UTF8 = (b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80")


def _put(buf: bytearray, pos: int, fmt: str, v: object) -> None:
    if 0 <= pos and pos + struct.calcsize(fmt) <= len(buf):
        struct.pack_into(fmt, buf, pos, v)


def _int_for(rng: random.Random, fmt: str, old: int) -> int:
    bits = struct.calcsize(fmt) * 8
    signed = fmt[-1].islower()
    cand = [old + 1, old - 1, old * 2, old // 2, -old, rng.getrandbits(bits), *U32, *U64, -1, -(1 << 31)]
    v = rng.choice(cand) % (1 << bits)  # wrapped into the field's width
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _number(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    # hyper-parameters first: the file's own keys, not the tokenizer tables
    pool = [n for n in lay.numbers if not n[2].startswith("tokenizer.")] if rng.random() < 0.9 else lay.numbers
    pos, t, key = rng.choice(pool)
    fmt = SCALAR[t]
    if fmt == "<?":
        buf[pos] = rng.randrange(2, 256)
        return f"bool {key}={buf[pos]}"
    old = struct.unpack_from(fmt, buf, pos)[0]
    if fmt in ("<f", "<d"):
        v = rng.choice([*FLOATS, old * 10, -old, old / 1e6])
        _put(buf, pos, fmt, v)
        return f"number {key}={v}"
    v = _int_for(rng, fmt, int(old))
    _put(buf, pos, fmt, v)
    return f"number {key}={v}"


def _bitflip(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    end = lay.data_offset if rng.random() < 0.8 else len(buf)
    spots = [rng.randrange(end) for _ in range(rng.randint(1, 4))]
    for p in spots:
        buf[p] ^= 1 << rng.randrange(8)
    return f"bitflip at {spots}"


def _overwrite(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    end = lay.data_offset if rng.random() < 0.8 else len(buf)
    p, n = rng.randrange(end), rng.randint(1, 16)
    buf[p: p + n] = bytes(rng.getrandbits(8) for _ in range(n))[: len(buf) - p]
    return f"overwrite {n} bytes at {p}"


def _truncate(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    end = lay.data_offset if rng.random() < 0.6 else len(buf)
    n = rng.randrange(end)
    del buf[n:]
    return f"truncate to {n}"


def _header(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    what = rng.choice(["version", "n_tensors", "n_kv"])
    if what == "version":
        v = rng.choice([0, 1, 2, 4, 0xFFFFFFFF, 0x03000000])
        _put(buf, 4, "<I", v)
    else:
        pos = 8 if what == "n_tensors" else 16
        old = struct.unpack_from("<Q", buf, pos)[0]
        v = rng.choice([*U64, old + 1, old - 1 if old else 0])
        _put(buf, pos, "<Q", v)
    return f"header {what}={v}"


def _length(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    arrays = rng.random() < 0.5 and lay.arr_len
    pos, key = rng.choice(lay.arr_len if arrays else lay.str_len)
    old = struct.unpack_from("<Q", buf, pos)[0]
    v = rng.choice([*U64, old + 1, max(old - 1, 0), old * 2])
    _put(buf, pos, "<Q", v)
    return f"{'array' if arrays else 'string'} length of {key!r}={v}"


def _types(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    pos, key = rng.choice(lay.kv_type + lay.arr_type)
    v = rng.choice([*range(14), 99, 0xFFFFFFFF])
    _put(buf, pos, "<I", v)
    return f"type of {key!r}={v}"


def _utf8(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    pool = [s for s in lay.str_bytes if s[1] > 0]
    if rng.random() < 0.7:
        pool = [s for s in pool if not s[2].startswith("tokenizer.")] or pool
    pos, n, key = rng.choice(pool)
    bad = rng.choice(BAD_UTF8)[:n]
    at = pos + rng.randrange(n - len(bad) + 1)
    buf[at: at + len(bad)] = bad
    return f"invalid UTF-8 in {key!r}"


def _tensor_info(buf: bytearray, lay: Layout, rng: random.Random) -> str:
    what = rng.choice(["n_dims", "dim", "type", "offset"])
    if what == "n_dims":
        pos = rng.choice(lay.n_dims)
        v = rng.choice([0, 1, 2, 3, 4, 5, 0xFFFFFFFF])
        _put(buf, pos, "<I", v)
    elif what == "dim":
        pos = rng.choice(lay.dims)
        old = struct.unpack_from("<Q", buf, pos)[0]
        v = rng.choice([0, 1, 2, old + 1, old - 1, old * 2, 32, 1 << 31, 1 << 40, (1 << 63) - 1, (1 << 64) - 1])
        _put(buf, pos, "<Q", v)
    elif what == "type":
        pos = rng.choice(lay.tensor_type)
        v = rng.choice([*range(42), 99, 0xFFFFFFFF])
        _put(buf, pos, "<I", v)
    else:
        pos = rng.choice(lay.tensor_offset)
        old = struct.unpack_from("<Q", buf, pos)[0]
        v = rng.choice([0, old + 1, old + 32, old - 32 if old >= 32 else 0, 1 << 40, (1 << 64) - 32])
        _put(buf, pos, "<Q", v)
    return f"tensor {what}={v}"


MUTATORS: dict[str, Callable[[bytearray, Layout, random.Random], str]] = {
    "bitflip": _bitflip, "overwrite": _overwrite, "truncate": _truncate, "header": _header,
    "length": _length, "type": _types, "number": _number, "utf8": _utf8, "tensor": _tensor_info,
}
WEIGHTS = {"bitflip": 2, "overwrite": 1, "truncate": 1, "header": 1, "length": 2, "type": 1, "number": 6,
           "utf8": 2, "tensor": 2}


def mutant(sources: Sequence[tuple[bytes, Layout]], seed: int, index: int) -> tuple[bytes, int, str]:
    """Mutant `index` of `seed`: (bytes, source number, what was done)."""
    rng = random.Random(f"{seed}:{index}")
    src = rng.randrange(len(sources))
    data, lay = sources[src]
    buf = bytearray(data)
    names = list(WEIGHTS)
    done = []
    for _ in range(1 if rng.random() < 0.75 else rng.randint(2, 3)):
        name = rng.choices(names, [WEIGHTS[n] for n in names])[0]
        done.append(MUTATORS[name](buf, lay, rng))
        if name == "truncate":  # the layout's offsets end with the file
            break
    return bytes(buf), src, "; ".join(done)


# --- the worker ---------------------------------------------------------------------------------

def _exercise(path: str) -> str:
    """Load and, if that works, synthesize a few frames and decode (an aligner file: align a
    clip); the outcome as one word."""
    import numpy as np

    import qtts
    from qtts.runtime.aligner.aligner_engine import ARCHITECTURE, file_architecture

    if file_architecture(path) == ARCHITECTURE:
        return _exercise_aligner(path)
    try:
        model = qtts.Model(path, n_threads=1, device="cpu", voice_cache=False)
    except (ValueError, OSError) as e:
        if isinstance(e, UnicodeError):
            raise
        return "rejected"
    try:
        # greedy, then sampled with the file's own generation defaults
        for kw in (dict(max_new_tokens=5, do_sample=False, subtalker_dosample=False, seed=0),
                   dict(max_new_tokens=3, seed=0)):
            if model.variant == "base":
                noise = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.1
                model.synthesize("Hello there.", ref_audio=(noise, 24000), ref_text="Hi.", **kw)
            elif model.variant == "voice_design":
                model.synthesize("Hello there.", instruct="A calm voice.", **kw)
            else:
                model.synthesize("Hello there.", speaker=model.speakers[0] if model.speakers else None, **kw)
        codes = np.zeros((3, model.num_code_groups), dtype=np.int32)
        model.decode(codes)
    except (ValueError, OSError) as e:
        if isinstance(e, UnicodeError):
            raise
        return "failed-cleanly"
    return "ok"


def _exercise_aligner(path: str) -> str:
    import numpy as np

    import qtts

    try:
        aligner = qtts.load_aligner(path, n_threads=1, device="cpu")
    except (ValueError, OSError) as e:
        if isinstance(e, UnicodeError):
            raise
        return "rejected"
    try:
        t = np.arange(24000) / 16000
        aligner.align((0.3 * np.sin(2 * np.pi * 220 * t).astype(np.float32), 16000), "Hello there, 世界.")
    except (ValueError, OSError) as e:
        if isinstance(e, UnicodeError):
            raise
        return "failed-cleanly"
    return "ok"


def worker() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints must not mix with the answers
    for line in sys.stdin:
        try:
            answer = {"outcome": _exercise(line.rstrip("\n"))}
        except BaseException as e:  # noqa: BLE001  every other exception is a finding
            answer = {"outcome": "unexpected", "error": f"{type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(answer) + "\n")


WORKER = [sys.executable, "-m", "tests.fuzz_gguf", "--worker"]


class Worker:
    def __init__(self, log: Path, cmd: Sequence[str] = WORKER) -> None:
        self.log = log
        self._log = open(log, "wb")
        # no gdb backtrace on an abort: the assert line says enough, and gdb takes seconds
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GGML_NO_BACKTRACE": "1"}
        self.proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, env=env)

    def run(self, path: Path, timeout: float) -> dict[str, str]:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(f"{path}\n".encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if line:
            return json.loads(line)
        if not ready:
            self.proc.kill()
            self.proc.wait()
            return {"outcome": "hang", "error": f"no answer within {timeout} s"}
        rc = self.proc.wait()
        log = self.log.read_bytes().decode("utf-8", "replace").splitlines()
        asserts = [x for x in log if "GGML_ASSERT" in x or "Assertion" in x or "Fatal" in x]
        tail = " | ".join(asserts or log[-5:])[-800:]
        kind = "signal" if rc < 0 else "exit"
        return {"outcome": kind, "error": f"worker ended with status {rc}: {tail}"}

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


ACCEPTED = ("ok", "rejected", "failed-cleanly")


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))


def fuzz(sources: Sequence[Path], n: int, seed: int, save_dir: Path, timeout: float = 60.0,
         progress: bool = False, worker_cmd: Sequence[str] = WORKER) -> Report:
    """Run mutants 0..n-1 of `seed`; failures are saved in save_dir and listed in the report."""
    loaded = []
    for s in sources:
        data = s.read_bytes()
        loaded.append((data, parse(data)))
    report = Report()
    shm = Path("/dev/shm")
    work = Path(tempfile.mkdtemp(prefix="qtts-fuzz-", dir=shm if shm.is_dir() else None))
    w: Worker | None = None
    t0 = time.monotonic()
    try:
        for i in range(n):
            data, src, what = mutant(loaded, seed, i)
            path = work / f"mutant-{seed}-{i}.gguf"
            path.write_bytes(data)
            if w is None or w.proc.poll() is not None:
                w = Worker(work / f"worker-{i}.log", worker_cmd)
            r = w.run(path, timeout)
            report.counts[r["outcome"]] += 1
            if r["outcome"] not in ACCEPTED:
                save_dir.mkdir(parents=True, exist_ok=True)
                kept = save_dir / path.name
                shutil.move(str(path), kept)
                report.failures.append(f"{kept} (from {sources[src].name}: {what}): {r['outcome']}: {r.get('error')}")
                if r["outcome"] in ("hang", "signal", "exit"):
                    w.close()
                    w = None
            else:
                path.unlink()
            if progress and (i + 1) % 250 == 0:
                print(f"{i + 1}/{n} in {time.monotonic() - t0:.0f} s: {report.summary()}", file=sys.stderr)
    finally:
        if w is not None:
            w.close()
        shutil.rmtree(work, ignore_errors=True)
    return report


def default_sources(out: Path) -> list[Path]:
    """The tiny fixtures converted once into `out` (the types SOURCES names)."""
    from qtts.convert.checkpoint import convert
    from tests.fixtures.build import ensure_fixtures

    root = ensure_fixtures()
    paths = []
    for name in SOURCES:
        model, wtype = name.rsplit("-", 1)
        p = out / f"{name}.gguf"
        if not p.exists():
            convert(root / model, p, wtype)
        paths.append(p)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz_gguf", description=__doc__.split("\n")[0])
    ap.add_argument("--fuzz", type=int, default=1000, metavar="N", help="number of mutants (default 1000)")
    ap.add_argument("--seed", type=int, default=0, help="mutant i of seed S is always the same file")
    ap.add_argument("--save-dir", type=Path, default=Path("fuzz-failures"), help="where failing mutants are kept")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a mutant may take (a hang otherwise)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker()
        return 0
    with tempfile.TemporaryDirectory(prefix="qtts-fuzz-src-") as d:
        sources = default_sources(Path(d))
        t0 = time.monotonic()
        report = fuzz(sources, a.fuzz, a.seed, a.save_dir, a.timeout, progress=True)
    print(f"{a.fuzz} mutants (seed {a.seed}) in {time.monotonic() - t0:.0f} s: {report.summary()}")
    for f in report.failures:
        print("FAILURE", f)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
