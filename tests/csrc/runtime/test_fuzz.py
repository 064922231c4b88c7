"""GGUF fuzzing in the suite: a few hundred seeded mutants of the tiny models (tests/fuzz_gguf.py)
are loaded and, when they load, synthesized in a worker subprocess. Any mutant that kills the
worker by a signal, hangs, or raises anything but a ValueError / OSError fails the test; it is
kept and its path is in the failure message. `python -m tests.fuzz_gguf --fuzz N` runs more."""
from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import pytest

from tests import fuzz_gguf

N_MUTANTS = 500


@pytest.fixture(scope="module")
def sources(gguf_dir: Path) -> list[Path]:
    return [gguf_dir / f"{name}.gguf" for name in fuzz_gguf.SOURCES]


def test_layout_parse_finds_every_field(sources: list[Path]) -> None:
    from gguf import GGUFReader

    data = sources[0].read_bytes()
    lay = fuzz_gguf.parse(data)
    r = GGUFReader(str(sources[0]), "r")
    assert lay.data_offset <= r.data_offset < lay.data_offset + 64  # the data section starts aligned
    assert len(lay.kv_type) == len([k for k in r.fields if not k.startswith("GGUF.")])
    assert len(lay.tensor_type) == len(r.tensors)
    eps = next(pos for pos, t, key in lay.numbers if key == "qwen3-tts.talker.attention.layer_norm_epsilon")
    assert math.isclose(struct.unpack_from("<f", data, eps)[0], 1e-6, rel_tol=1e-6)


def test_mutants_are_reproducible(sources: list[Path]) -> None:
    loaded = [(p.read_bytes(), fuzz_gguf.parse(p.read_bytes())) for p in sources]
    a = [fuzz_gguf.mutant(loaded, 7, i) for i in range(20)]
    assert a == [fuzz_gguf.mutant(loaded, 7, i) for i in range(20)]
    assert len({m[0] for m in a}) == 20  # and different from each other


def test_fuzz_finds_no_crash(sources: list[Path], tmp_path: Path) -> None:
    report = fuzz_gguf.fuzz(sources, N_MUTANTS, seed=0, save_dir=tmp_path / "failures")
    assert sum(report.counts.values()) == N_MUTANTS
    assert report.counts["ok"] > 0 and report.counts["rejected"] > 0, report.summary()
    assert not report.failures, "\n".join(report.failures)


@pytest.mark.parametrize(("script", "outcome", "timeout"), [
    ("import os, sys; sys.stdin.readline(); os.abort()", "signal", 120),
    # the one case whose worker never answers: any timeout finds it, a short one finds it soon
    ("import sys, time; sys.stdin.readline(); time.sleep(600)", "hang", 2),
    ("import sys\nfor _ in sys.stdin: print('{\"outcome\": \"unexpected\", \"error\": \"KeyError\"}', flush=True)",
     "unexpected", 120),
])
def test_fuzz_reports_a_failure(sources: list[Path], tmp_path: Path, script: str, outcome: str, timeout: float) -> None:
    # the harness itself: a dead, silent or misbehaving worker fails the run and keeps the mutant;
    # the workers that do answer get a timeout no busy machine reaches before their answer
    report = fuzz_gguf.fuzz(sources, 2, seed=0, save_dir=tmp_path / "failures", timeout=timeout,
                            worker_cmd=[sys.executable, "-c", script])
    assert report.counts[outcome] == 2, report.summary()
    assert sorted(p.name for p in (tmp_path / "failures").iterdir()) == ["mutant-0-0.gguf", "mutant-0-1.gguf"]
    assert all(str(tmp_path / "failures" / "mutant-0-") in f for f in report.failures)
