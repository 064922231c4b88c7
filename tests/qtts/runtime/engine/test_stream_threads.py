"""A stream owns the model's lock, not a thread: any thread may advance it (thread pools, and
Starlette, which advances a sync generator on whichever worker thread is free), every other
caller waits, and the one wait that could never end raises (docs/architecture.md, "Layers")."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

import qtts
from qtts.runtime.audio.audio import pcm16

TEXT = "Hello world, this is a tiny test."
KW = dict(speaker="ryan", max_new_tokens=20)


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> qtts.Model:
    return qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf", n_threads=2)


def _streamed(cv: qtts.Model, seed: int) -> bytes:
    return b"".join(pcm16(c.samples) for c in cv.stream(TEXT, seed=seed, **KW))


def _eager(cv: qtts.Model, seed: int) -> bytes:
    return pcm16(cv.synthesize(TEXT, seed=seed, **KW).samples)


def test_any_pool_thread_advances_a_stream_and_others_wait(cv: qtts.Model, lock_waiters: Callable[[int], None]) -> None:
    expected_stream, expected_eager = _streamed(cv, 1), _eager(cv, 2)
    t1, t2 = ThreadPoolExecutor(1), ThreadPoolExecutor(1)  # two distinct threads, as a pool hands them out
    try:
        it = cv.stream(TEXT, seed=1, **KW)
        parts = [t1.submit(next, it).result(timeout=60), t2.submit(next, it).result(timeout=60)]
        eager = t1.submit(_eager, cv, 2)  # the thread that began the stream waits, and does not raise
        lock_waiters(1)
        assert not eager.done()
        parts += t2.submit(list, it).result(timeout=60)
        assert eager.result(timeout=60) == expected_eager
        assert b"".join(pcm16(c.samples) for c in parts) == expected_stream
    finally:
        t1.shutdown()
        t2.shutdown()


def test_a_new_thread_waits_for_a_finished_threads_stream(cv: qtts.Model, lock_waiters: Callable[[int], None]) -> None:
    """Thread ids are reused once a thread ends: the lock must not mistake the newcomer for the
    stream's first reader."""
    it = cv.stream(TEXT, seed=3, **KW)
    first = threading.Thread(target=next, args=(it,))
    first.start()
    first.join()
    got: list[bytes] = []
    others = [threading.Thread(target=lambda: got.append(_eager(cv, 4))) for _ in range(3)]
    for t in others:
        t.start()
    lock_waiters(3)
    assert not got and all(t.is_alive() for t in others)
    it.close()
    for t in others:
        t.join(60)
    assert got == [_eager(cv, 4)] * 3


SCRIPT = """
import sys, qtts
m = qtts.load(sys.argv[1], n_threads=2)
it = m.stream("Hello world.", speaker="ryan", max_new_tokens=20, seed=1)
next(it)
try:
    m.synthesize("Hello.", speaker="ryan", max_new_tokens=3)
except RuntimeError as e:
    print("raised:", e)
it.close()
print("after close:", len(m.synthesize("Hello.", speaker="ryan", max_new_tokens=3).codes))
next(m.stream("Hello world.", speaker="ryan", max_new_tokens=20, seed=1))  # dropped: closed, unlocked
print("after drop:", len(m.synthesize("Hello.", speaker="ryan", max_new_tokens=3).codes))
"""


def test_waiting_on_a_stream_no_other_thread_can_finish_raises(gguf_dir: Path) -> None:
    """A script that keeps a stream open and calls the model again would wait forever: with no
    other thread alive (the pipelined vocoder's own thread does not count), it raises instead.
    Run in a fresh interpreter so that no other test's threads are alive."""
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(gguf_dir / "tiny_custom_voice-f32.gguf")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("raised: this qtts.Model is busy with an unfinished stream and no other thread"), lines
    assert "stream.close()" in lines[0]
    assert lines[1:] == ["after close: 2", "after drop: 2"]


def test_nested_call_from_a_progress_callback_raises(cv: qtts.Model) -> None:
    def progress(_: object) -> None:
        cv.synthesize(TEXT, speaker="ryan", max_new_tokens=3)

    with pytest.raises(RuntimeError, match="nested"):
        cv.synthesize(TEXT, seed=1, progress=progress, **KW)
    assert len(cv.synthesize(TEXT, speaker="ryan", max_new_tokens=3).codes) == 2  # released


def test_fastapi_streaming_response_of_model_stream(cv: qtts.Model) -> None:
    """`StreamingResponse(model.stream(...))` under concurrent requests, with plain endpoints
    using the model meanwhile: every body is the stream's own bytes, no request fails."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import Response, StreamingResponse

    app = FastAPI()

    @app.get("/stream")
    def stream(seed: int) -> StreamingResponse:
        def body() -> Iterator[bytes]:
            for chunk in cv.stream(TEXT, seed=seed, **KW):
                yield pcm16(chunk.samples)

        return StreamingResponse(body(), media_type="audio/pcm")

    @app.get("/eager")
    def eager(seed: int) -> Response:
        return Response(_eager(cv, seed), media_type="audio/pcm")

    seeds = [10, 11, 12, 13]
    expected = {("stream", s): _streamed(cv, s) for s in seeds} | {("eager", s): _eager(cv, s) for s in seeds[:2]}
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        deadline = time.monotonic() + 120  # a hang guard: starting takes well under a second
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started, "uvicorn did not start"

        def get(key: tuple[str, int]) -> tuple[int, bytes]:
            r = httpx.get(f"{url}/{key[0]}", params={"seed": key[1]}, timeout=120)
            return r.status_code, r.content

        with ThreadPoolExecutor(len(expected)) as pool:
            got = dict(zip(expected, pool.map(get, expected), strict=True))
        assert got == {k: (200, v) for k, v in expected.items()}
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
