"""Atomic writers: Audio.save / save_audio and the shared temp-file helper. A failed or killed
write never leaves a torn file at the final path, failures say what went wrong and name the
path, and partial files of killed runs are cleaned up by the next write to the same output."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import qtts.runtime.audio.audio
from qtts.atomic import atomic_output, describe_os_error
from qtts.runtime.audio.audio import save_audio

RATE = 24000


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE), dtype=np.float32) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def _old_file(path: Path) -> bytes:
    save_audio(path, _tone(0.1), RATE)
    return path.read_bytes()


@pytest.mark.parametrize("ext", [".wav", ".flac", ".ogg"])
def test_save_round_trip_replaces_the_old_file(ext: str, tmp_path: Path) -> None:
    out = tmp_path / f"a{ext}"
    _old_file(out)
    assert save_audio(out, _tone(0.5), RATE) == out
    data, rate = sf.read(out)
    assert rate == RATE and len(data) == RATE // 2
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_missing_folder_is_named(tmp_path: Path) -> None:
    out = tmp_path / "no" / "such" / "a.wav"
    with pytest.raises(FileNotFoundError, match=f"cannot write {out}: no such folder: {out.parent}"):
        save_audio(out, _tone(0.1), RATE)
    with pytest.raises(IsADirectoryError, match=f"cannot write {tmp_path}/d.wav: it is a folder"):
        (tmp_path / "d.wav").mkdir()
        save_audio(tmp_path / "d.wav", _tone(0.1), RATE)
    assert [p.name for p in tmp_path.iterdir()] == ["d.wav"]


class _FullDisk:
    """A file that takes `room` bytes, then fails as a full disk does."""

    def __init__(self, path: str, mode: str, room: int) -> None:
        self._f = open(path, mode)  # noqa: SIM115
        self._room = room

    def write(self, data: bytes | memoryview) -> int:
        n = min(len(data), self._room)
        self._f.write(bytes(data)[:n])
        self._room -= n
        if n < len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return n

    def __enter__(self) -> "_FullDisk":
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def test_disk_full_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "a.wav"
    old = _old_file(out)
    monkeypatch.setattr(qtts.runtime.audio.audio, "open", lambda path, mode: _FullDisk(path, mode, 1000), raising=False)
    with pytest.raises(OSError, match=f"cannot write {out}: no space left on the device \\(disk full\\)") as e:
        save_audio(out, _tone(1.0), RATE)
    assert e.value.errno == errno.ENOSPC
    assert out.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["a.wav"]


_FSIZE_LIMITED = """
import resource, signal, sys
import numpy as np
from qtts.runtime.audio.audio import save_audio
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (50000, 50000))
try:
    save_audio(sys.argv[1], np.zeros(240000, np.float32), 24000)
except OSError as e:
    print(e.errno, e)
"""


def test_file_size_limit_is_a_clean_error(tmp_path: Path) -> None:
    """A real failing write (RLIMIT_FSIZE: EFBIG from the kernel, as a full disk gives ENOSPC)."""
    out = tmp_path / "a.wav"
    old = _old_file(out)
    res = subprocess.run([sys.executable, "-c", _FSIZE_LIMITED, str(out)], capture_output=True, text=True,
                         check=True)
    assert res.stdout.strip() == f"{errno.EFBIG} [Errno {errno.EFBIG}] cannot write {out}: file too large for " \
                                 "the file system or the process's file size limit"
    assert out.read_bytes() == old and [p.name for p in tmp_path.iterdir()] == ["a.wav"]


_STALLED = """
import sys, time
import numpy as np
import qtts.runtime.audio.audio

class Stalled:
    def __init__(self, path, mode):
        self.f = open(path, mode)
    def write(self, data):
        self.f.write(bytes(data)[:len(data) // 2])
        self.f.flush()
        print("writing", flush=True)
        time.sleep(600)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()

qtts.runtime.audio.audio.open = Stalled
qtts.runtime.audio.audio.save_audio(sys.argv[1], np.zeros(24000 * 60, np.float32), 24000)
"""


def test_sigkill_mid_write_never_tears_the_final_file(tmp_path: Path) -> None:
    out = tmp_path / "a.wav"
    old = _old_file(out)
    proc = subprocess.Popen([sys.executable, "-c", _STALLED, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "writing\n"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert out.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.wav", f"a.wav.{proc.pid}.partial"]
    save_audio(out, _tone(0.2), RATE)  # the next write removes what the killed one left
    assert [p.name for p in tmp_path.iterdir()] == ["a.wav"] and len(sf.read(out)[0]) == RATE // 5


def test_stale_partials_of_live_writers_are_kept(tmp_path: Path) -> None:
    out = tmp_path / "m.gguf"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead = tmp_path / f"m.gguf.{done.stdout.strip()}.partial"
    live = tmp_path / f"m.gguf.{os.getppid()}.partial"  # a process that is running
    legacy, other = tmp_path / "m.gguf.partial", tmp_path / "n.gguf.1.partial"
    for p in (dead, live, legacy, other):
        p.write_bytes(b"x")
    with atomic_output(out) as tmp:
        assert tmp == tmp_path / f"m.gguf.{os.getpid()}.partial"
        tmp.write_bytes(b"done")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.gguf", live.name, other.name])
    with pytest.raises(KeyError), atomic_output(out) as tmp:
        tmp.write_bytes(b"half")
        raise KeyError("stop")
    assert out.read_bytes() == b"done" and not tmp.exists()


@pytest.mark.parametrize("code, reason", [
    (errno.EACCES, "permission denied writing in /x"),
    (errno.ENOSPC, "no space left on the device (disk full)"),
    (errno.EROFS, "/x is on a read-only file system"),
    (errno.ENOENT, "no such folder: /x"),
])
def test_reasons(code: int, reason: str) -> None:
    assert describe_os_error(OSError(code, os.strerror(code)), Path("/x/a.wav")) == f"cannot write /x/a.wav: {reason}"
