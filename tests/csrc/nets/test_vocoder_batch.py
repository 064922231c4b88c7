"""The batched streaming vocoder (docs/serving.md, "Batched vocoder"): streams decoded together in
one graph give each stream the samples it gets alone, bit for bit, whatever the other streams'
lengths, positions, chunk sizes and arrival times (F32 tiny fixtures, both ops paths, and the
native path at the fast precision: its BF16 convs keep each row's arithmetic independent of the
rows beside it too). The expected values come from the single-stream decoder, which
test_codec_decoder pins to the reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtts.runtime.engine.engine import Engine
from tests.fixtures.device import ops_device

HOP = 1920
N_Q = 16


@pytest.fixture(scope="module", params=["native", "portable", "fast"])
def session(gguf_dir: Path, request: pytest.FixtureRequest):
    ops, precision = ("native", "fast") if request.param == "fast" else (request.param, "exact")
    device = "cpu" if request.param == "fast" else ops_device(ops)  # fast: the CPU's BF16 convs
    with Engine(str(gguf_dir / "tiny_base-f32.gguf"), device, 2, ops, precision=precision).session() as s:
        yield s


def _codes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, (n, N_Q))


def _alone(session, codes: np.ndarray, silent: int = 0) -> np.ndarray:
    session.decode_stream_reset(silent_frames=silent, stream=99)
    try:
        return session.decode_stream_push(codes, stream=99)
    finally:
        session.decode_stream_close(99)


def _run_plan(session, plan: dict[int, tuple[int, int, int, int]], seed: int) -> tuple[dict, dict]:
    """Each stream of `plan` (stream: frames, silent frames, the step it arrives at, frames per
    push) pushed step by step, the streams of a step in one decode_streams_push; their codes and
    the samples each push gave."""
    codes = {s: _codes(n, seed + s) for s, (n, _, _, _) in plan.items()}
    got: dict[int, list[np.ndarray]] = {s: [] for s in plan}
    at = dict.fromkeys(plan, 0)
    step = 0
    while any(at[s] < len(codes[s]) for s in plan):
        items = []
        for s, (n, silent, arrive, k) in plan.items():
            if step == arrive:
                session.decode_stream_reset(silent_frames=silent, stream=s)
            if step >= arrive and at[s] < n:
                items.append((s, codes[s][at[s]:at[s] + k]))
                at[s] = min(n, at[s] + k)
        for (s, c), wav in zip(items, session.decode_streams_push(items), strict=True):
            assert wav.dtype == np.float32 and wav.shape == (max(0, min(len(c), at[s] - plan[s][1])) * HOP,)
            got[s].append(wav)
        step += 1
    return codes, got


def test_streams_together_equal_alone(session) -> None:
    # stream 4 crosses the 300-frame chunk seam (a second segment warming up beside the first),
    # stream 3 starts with reference frames whose samples are not returned (an ICL voice), stream
    # 5 pushes more than one graph's frames at once
    plan = {1: (40, 0, 0, 1), 2: (23, 0, 0, 3), 3: (30, 12, 2, 2), 4: (330, 0, 0, 8), 5: (120, 0, 5, 60)}
    codes, got = _run_plan(session, plan, 10)
    for s, (_, silent, _, _) in plan.items():
        whole = np.concatenate(got[s])
        np.testing.assert_array_equal(whole, _alone(session, codes[s], silent), err_msg=f"stream {s}")
        if not silent:
            np.testing.assert_array_equal(whole, session.decode(codes[s]), err_msg=f"stream {s}")
        session.decode_stream_close(s)
    assert min(np.concatenate(g).std() for g in got.values()) > 0.05  # audible, not a trivial match


def test_many_streams_of_one_and_eight_frame_pushes(session) -> None:
    # 18 streams, more than one graph holds (16 lanes): one-frame pushes beside eight-frame ones,
    # so the conv contexts of the joined rows are longer than some streams' rows; two start with
    # ICL reference frames, two arrive late
    plan = {s: (11 + s % 4, 5 if s in (3, 10) else 0, 2 if s in (7, 16) else 0, 1 if s % 2 else 8)
            for s in range(1, 19)}
    codes, got = _run_plan(session, plan, 40)
    for s, (_, silent, _, _) in plan.items():
        np.testing.assert_array_equal(np.concatenate(got[s]), _alone(session, codes[s], silent), err_msg=f"stream {s}")
        session.decode_stream_close(s)


def test_empty_and_single_items(session) -> None:
    codes = _codes(6, 3)
    session.decode_stream_reset(stream=7)
    session.decode_stream_reset(stream=8)
    out = session.decode_streams_push([(7, codes[:0]), (8, codes[:2])])
    assert [len(w) for w in out] == [0, 2 * HOP]
    assert session.decode_streams_push([]) == []
    rest = session.decode_streams_push([(8, codes[2:])])[0]
    np.testing.assert_array_equal(np.concatenate([out[1], rest]), session.decode(codes))
    session.decode_stream_close(7)
    session.decode_stream_close(8)


@pytest.mark.parametrize("items, match", [
    ([(5, _codes(2, 1)), (5, _codes(2, 2))], "stream 5 is pushed twice"),
    ([(6, _codes(2, 1)), (123, _codes(2, 2))], "decode stream 123 was not started"),
    ([(5, _codes(2, 1)), (6, np.zeros((2, 15), np.int64))], r"shape \[n, 16\]"),
    ([(5, _codes(2, 1)), (6, np.full((1, 16), 2048))], r"code 2048 at frame 0, codebook 0"),
    ([(5, _codes(2, 1)), (6, np.zeros((1, 16), np.float32))], "integer array"),
    ([(5, _codes(2, 1)), 6], "item 1 is not a \\(stream, codes\\) pair"),
    ([(5, _codes(2, 1), 3)], "item 0 is not a \\(stream, codes\\) pair"),
    ([("5", _codes(2, 1))], "item 0's stream is not an int"),
    ([(5, [[0] * 16])], "item 0's codes are not an array"),
])
def test_bad_items_name_the_culprit_and_leave_the_streams(session, items: list, match: str) -> None:
    codes = _codes(4, 9)
    session.decode_stream_reset(stream=5)
    session.decode_stream_reset(stream=6)
    with pytest.raises(ValueError, match=match):
        session.decode_streams_push(items)
    # nothing was decoded: the streams start from their first frame still
    a, b = session.decode_streams_push([(5, codes), (6, codes)])
    np.testing.assert_array_equal(a, session.decode(codes))
    np.testing.assert_array_equal(b, a)
    session.decode_stream_close(5)
    session.decode_stream_close(6)


def _same_stream(pushed: np.ndarray, whole: np.ndarray, on_device: bool) -> None:
    """A stream's pushed pieces give the samples of one whole decode: bit for bit on the CPU; on
    another device within the waveform bound, since its reductions (softmax rows, products) sum in
    an order that depends on the push's width (docs/gpu.md, "The Vulkan lane": 1.1e-5 on lavapipe)."""
    if not on_device:
        np.testing.assert_array_equal(pushed, whole)
    else:
        np.testing.assert_allclose(pushed, whole, rtol=0, atol=1e-4)


def test_pushes_replay_one_graph_per_chunk_size(session, request: pytest.FixtureRequest) -> None:
    """On the portable path a stream's pushes of up to 8 frames replay one graph per size and state
    (CodecRunner::replay: the transformer attends its whole cache, written at input rows), with the
    samples of a decode at once, across the 300-frame chunk seam too; a stream opened after another
    closed takes its state, and so its graphs. The native path builds each push's graph."""
    native = session.native
    portable = request.node.callspec.params["session"] == "portable"
    on_device = portable and ops_device("portable") != "cpu"  # the session fixture's placement

    def pushed(codes: np.ndarray, sizes: list[int]) -> np.ndarray:
        assert sum(sizes) == len(codes)
        session.decode_stream_reset(stream=5)
        got, at = [], 0
        for k in sizes:
            got.append(session.decode_stream_push(codes[at:at + k], stream=5))
            at += k
        session.decode_stream_close(5)
        return np.concatenate(got)

    codes = _codes(31, 7)
    before = native.codec_replay_builds
    for run in range(2):
        built = native.codec_replay_builds
        _same_stream(pushed(codes, [1, 2, 4, 8, 8, 8]), session.decode(codes), on_device)
        # the first run builds a graph per size (fewer if an earlier test left this state's); the
        # second finds the closed stream's state, and every graph, kept
        assert native.codec_replay_builds - built <= (4 if run == 0 else 0)
    if portable:
        assert native.codec_replay_builds > 0 and native.codec_replay_builds - before <= 4
    else:  # the native path builds a push's graph each time (no compute buffers kept)
        assert native.codec_replay_builds == 0
    codes = _codes(340, 8)
    _same_stream(pushed(codes, [1, 2, 4] + [8] * 41 + [4, 1]), session.decode(codes), on_device)
