"""Writing a qtts GGUF file: atomically (a `<name>.<pid>.partial` file renamed at the end, removed
on any failure; those of killed runs are removed by the next run on the same output) and
streaming each tensor's bytes, with tensor data aligned to 64 bytes so mmapped weights start on
cache lines (the AVX-512 codec kernels load them whole)."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFWriter

from ..atomic import atomic_output
from .names import KV

ALIGNMENT = 64


@dataclass
class OutTensor:
    name: str
    shape: tuple[int, ...]             # numpy order
    qtype: QT
    nbytes: int
    chunks: Callable[[], Iterator[bytes]]
    label: str = ""                    # progress-line detail


def write_gguf(out_path: str | os.PathLike[str], add_metadata: Callable[[GGUFWriter], None],
               tensors: list[OutTensor], log: Callable[[str], None] | None = None, arch: str = KV.ARCH_NAME) -> Path:
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(out) as partial:
        writer = GGUFWriter(partial, arch)
        try:
            _write(writer, add_metadata, tensors, log)
        finally:
            writer.close()
    return out


def _write(writer: GGUFWriter, add_metadata: Callable[[GGUFWriter], None], tensors: list[OutTensor],
           log: Callable[[str], None] | None) -> None:
    writer.add_custom_alignment(ALIGNMENT)
    add_metadata(writer)
    for t in tensors:
        writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    fout = writer.fout[0]
    for i, t in enumerate(tensors):
        if log:
            log(f"[{i + 1}/{len(tensors)}] {t.name} {list(t.shape)} {t.label or t.qtype.name}")
        writer.write_padding(fout, fout.tell())
        n = 0
        for chunk in t.chunks():
            fout.write(chunk)
            n += len(chunk)
        if n != t.nbytes:
            raise RuntimeError(f"internal error: {t.name} wrote {n} bytes, planned {t.nbytes}")
        writer.write_padding(fout, n)
