"""Audio chunks compared whole: the same chunk sizes, stop reasons, codes and samples."""
from __future__ import annotations

import numpy as np

import qtts


def assert_chunks_equal(got: list[qtts.AudioChunk], want: list[qtts.AudioChunk]) -> None:
    assert [len(c.codes) for c in got] == [len(c.codes) for c in want]
    assert [c.stop_reason for c in got] == [c.stop_reason for c in want]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.samples, b.samples)
