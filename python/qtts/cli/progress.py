"""qtts-cli's progress on stderr (tqdm), shown only on a terminal and never with -q."""
from __future__ import annotations

import argparse
import contextlib
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime.synthesis.speech import Progress, ProgressCallback


TENSOR_LINE = re.compile(r"\[(\d+)/(\d+)\] ")  # gguf_write's per-tensor log line


@contextlib.contextmanager
def tensor_log(args: argparse.Namespace) -> Iterator[Callable[[str], None] | None]:
    """The writers' log callback: every line with -v, a tqdm bar over the tensors on a terminal,
    nothing otherwise (the caller prints one summary line)."""
    if args.quiet:
        yield None
    elif args.verbose:
        yield lambda msg: print(msg, file=sys.stderr)
    elif not sys.stderr.isatty():
        yield lambda msg: None if TENSOR_LINE.match(msg) else print(msg, file=sys.stderr)
    else:
        from tqdm import tqdm

        bar = tqdm(unit="tensor", file=sys.stderr, desc="writing", dynamic_ncols=True)

        def log(msg: str) -> None:
            m = TENSOR_LINE.match(msg)
            if m is None:
                bar.write(msg, file=sys.stderr)
                return
            bar.total = int(m.group(2))
            bar.update(int(m.group(1)) - bar.n)

        try:
            yield log
        finally:
            bar.close()


@contextlib.contextmanager
def busy(desc: str, show: bool) -> Iterator[None]:
    """Elapsed time on a terminal for a step that reports nothing itself (the reference encoders)."""
    if not show:
        yield
        return
    from tqdm import tqdm

    bar = tqdm(file=sys.stderr, desc=desc, bar_format="{desc}: {elapsed}", leave=False)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.close()


@contextlib.contextmanager
def generation_bar(show: bool) -> Iterator[ProgressCallback | None]:
    """A synthesize(progress=...) callback drawing frames against the frame limit (so the ETA is a
    worst case; no limit, no ETA), seconds of audio and the speed in real time; None when not shown."""
    if not show:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(unit="frame", file=sys.stderr, desc="generating", dynamic_ncols=True, leave=False)

    def progress(p: Progress) -> None:
        bar.total = p.frame_limit or None
        bar.n = p.frames
        speed = p.audio_seconds / p.elapsed_s if p.elapsed_s > 0 else 0.0
        piece = f", sentence {p.piece + 1}/{p.pieces}" if p.pieces > 1 else ""
        bar.set_postfix_str(f"{p.audio_seconds:.1f} s audio, {speed:.2f}x real time{piece}")

    try:
        yield progress
    finally:
        bar.close()
