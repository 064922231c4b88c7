"""Atomic output files: written under a temporary name in the target folder, renamed over the
final path only when complete, removed on any failure.

The temporary name is `<name>.<pid>.partial`: it says which output it belongs to, so the next run
on the same output removes what a killed run (SIGKILL, power loss) left, and two runs writing
the same output at once never share a file.
"""
from __future__ import annotations

import errno
import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_SUFFIX = ".partial"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(out: Path) -> list[Path]:
    """Delete the partial files of `out` whose writing process is gone; returns them."""
    removed = []
    pattern = glob.escape(str(out)) + ".*" + _SUFFIX
    for name in [*glob.glob(pattern), str(out) + _SUFFIX]:  # the second: the old fixed name
        p = Path(name)
        pid = p.name[len(out.name) + 1:-len(_SUFFIX)]
        if pid and (not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid))):
            continue
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def describe_os_error(e: OSError, path: Path) -> str:
    """What went wrong writing `path`, in words a user can act on."""
    if e.errno == errno.ENOENT and path.parent.is_dir():
        return f"cannot write {path}: {e.strerror}"
    reasons = {
        errno.ENOENT: f"no such folder: {path.parent}",
        errno.ENOTDIR: f"not a folder: {path.parent}",
        errno.EACCES: f"permission denied writing in {path.parent}",
        errno.EPERM: f"permission denied writing in {path.parent}",
        errno.EROFS: f"{path.parent} is on a read-only file system",
        errno.ENOSPC: "no space left on the device (disk full)",
        errno.EDQUOT: "disk quota exceeded",
        errno.EFBIG: "file too large for the file system or the process's file size limit",
    }
    return f"cannot write {path}: {reasons.get(e.errno or 0, e.strerror or str(e))}"


@contextmanager
def atomic_output(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the temporary path to write; on normal exit it replaces `out`."""
    final = Path(out)
    remove_stale(final)
    tmp = final.with_name(f"{final.name}.{os.getpid()}{_SUFFIX}")
    try:
        yield tmp
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
