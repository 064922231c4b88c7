"""Read safetensors checkpoints tensor by tensor with numpy memory maps (no torch).

A 1.7B checkpoint is 3.9 GB of bf16; mapping it keeps the converter's peak memory near the
size of the tensor being converted instead of the whole file.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


@dataclass(frozen=True)
class TensorRef:
    file: Path
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def raw(self) -> np.ndarray:
        """The stored elements, memory-mapped (BF16 comes back as its uint16 bit pattern)."""
        n = int(np.prod(self.shape)) if self.shape else 1
        arr = np.memmap(self.file, dtype=_DTYPES[self.dtype], mode="r", offset=self.offset, shape=(n,))
        return arr.reshape(self.shape)

    def f32(self) -> np.ndarray:
        return to_f32(self.raw(), self.dtype)

    def read_rows(self, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of the tensor viewed as 2-D, read (not mapped) so that pages of
        tensors already converted do not stay resident."""
        cols = self.shape[-1] if self.shape else 1
        dt = np.dtype(_DTYPES[self.dtype])
        with open(self.file, "rb") as f:
            f.seek(self.offset + start * cols * dt.itemsize)
            data = np.fromfile(f, dtype=dt, count=(stop - start) * cols)
        return data.reshape(stop - start, cols)


def to_f32(arr: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (np.asarray(arr, dtype=np.uint32) << 16).view(np.float32)
    return np.asarray(arr, dtype=np.float32)


def read_header(path: Path) -> dict[str, TensorRef]:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise ValueError(f"{path}: truncated safetensors file (header claims {n} bytes)")
        try:
            meta = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: corrupt safetensors header: {e}") from None
    base = 8 + n
    out: dict[str, TensorRef] = {}
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        dtype = info.get("dtype")
        if dtype not in _DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype} (expected F32, F16 or BF16)")
        shape = tuple(int(x) for x in info["shape"])
        start, end = (int(x) for x in info["data_offsets"])
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
        if end - start != nbytes or base + end > size:
            raise ValueError(f"{path}: tensor {name!r} data is out of the file's bounds (truncated file?)")
        out[name] = TensorRef(Path(path), name, dtype, shape, base + start, nbytes)
    return out


def open_checkpoint(directory: Path) -> dict[str, TensorRef]:
    """All tensors of `model.safetensors`, or of the shards a `model.safetensors.index.json` lists."""
    single = directory / "model.safetensors"
    index = directory / "model.safetensors.index.json"
    if single.exists():
        return read_header(single)
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        out: dict[str, TensorRef] = {}
        for fname in files:
            out.update(read_header(directory / fname))
        return out
    raise ValueError(f"{directory}: no model.safetensors (or model.safetensors.index.json) found")
