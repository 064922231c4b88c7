"""Deterministic generators of deliberately corrupt GGUF files, derived from a good tiny qtts GGUF.

Each function reads `src`, writes one defect into `dst` and returns `dst`. Byte-level defects
(truncation, magic, garbage, patched header fields) edit the file directly; structural defects
(keys, tensors, shapes, types) round-trip the file through gguf's reader and writer so that
everything except the one defect stays valid and the loader must find it by validation.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as GT
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants

Value = tuple[Any, GGUFValueType, GGUFValueType | None]  # (value, type, array element type)
DROP: Any = object()  # with_kv(value=DROP): remove the key


@dataclass
class Parts:
    """A GGUF file held in memory: metadata (with types) and tensors (raw data, ggml type)."""

    kv: dict[str, Value]
    tensors: dict[str, tuple[np.ndarray, GT]]
    _reader: GGUFReader  # keeps the memory map behind the tensor data alive until written


def read(src: Path) -> Parts:
    r = GGUFReader(str(src), "r")
    kv: dict[str, Value] = {}
    for key, f in r.fields.items():
        if key.startswith("GGUF."):  # pseudo-fields for the header (version, counts): not metadata
            continue
        main = f.types[0]
        if main == GGUFValueType.ARRAY:
            sub = f.types[-1]
            # strings as raw bytes: token strings need not round-trip through str
            items = [bytes(f.parts[i]) if sub == GGUFValueType.STRING else f.parts[i].tolist()[0] for i in f.data]
            kv[key] = (items, main, sub)
        elif main == GGUFValueType.STRING:
            kv[key] = (bytes(f.parts[f.data[0]]), main, None)
        else:
            kv[key] = (f.parts[f.data[0]].tolist()[0], main, None)
    # quantized and BF16 data come back as uint8 rows; F32 as float32 in numpy (reversed ggml) order
    tensors = {t.name: (t.data, t.tensor_type) for t in r.tensors}
    return Parts(kv, tensors, r)


def write(p: Parts, dst: Path) -> Path:
    w = GGUFWriter(str(dst), arch="unused")
    w.kv_data[0].clear()  # drop the architecture the constructor adds: p.kv decides (it may lack one)
    for key, (val, vtype, sub) in p.kv.items():
        w.add_key_value(key, val, vtype, sub)
    if "general.alignment" in p.kv:  # the writer pads with its own setting, not with the key
        w.data_alignment = int(p.kv["general.alignment"][0])
    for name, (data, gtype) in p.tensors.items():
        # raw_dtype keeps the ggml type; for uint8 data the shape is read as bytes per row
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=gtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


# --- byte-level defects -----------------------------------------------------------------------

def truncated(src: Path, dst: Path, keep_fraction: float) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[: int(len(data) * keep_fraction)])
    return dst


def tensor_data_out_of_bounds(src: Path, dst: Path) -> Path:
    """A complete, valid header, cut right where the tensor data starts."""
    offset = GGUFReader(str(src), "r").data_offset
    dst.write_bytes(src.read_bytes()[:offset])
    return dst


def bad_magic(src: Path, dst: Path) -> Path:
    dst.write_bytes(b"GGML" + src.read_bytes()[4:])
    return dst


def header_garbage(src: Path, dst: Path, seed: int, keep: int = 4) -> Path:
    """The first `keep` good bytes (4: magic; 8: + version; 24: + tensor and key counts), then
    4 KiB of seeded random bytes where gguf expects the rest of the header."""
    rng = random.Random(seed)
    dst.write_bytes(src.read_bytes()[:keep] + bytes(rng.getrandbits(8) for _ in range(4096)))
    return dst


def patch_tensor_type(src: Path, dst: Path, name: str, type_id: int) -> Path:
    """Overwrite a tensor's ggml type id in its header record (ids gguf's writer would refuse)."""
    t = next(t for t in GGUFReader(str(src), "r").tensors if t.name == name)
    # record: u64 name length, name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset
    pos = t.field.offset + 8 + len(name.encode()) + 4 + 8 * len(t.shape)
    data = bytearray(src.read_bytes())
    data[pos: pos + 4] = struct.pack("<I", type_id)
    dst.write_bytes(bytes(data))
    return dst


# --- structural defects -----------------------------------------------------------------------

def with_kv(src: Path, dst: Path, key: str, value: Any = DROP, vtype: GGUFValueType | None = None,
            sub: GGUFValueType | None = None) -> Path:
    """Set (or, without a value, drop) one metadata key; vtype defaults to the key's current type."""
    p = read(src)
    if value is DROP:
        del p.kv[key]
    else:
        old = p.kv.get(key)
        p.kv[key] = (value, vtype or (old[1] if old else GGUFValueType.STRING), sub or (old[2] if old else None))
    return write(p, dst)


def drop_tensor(src: Path, dst: Path, name: str) -> Path:
    p = read(src)
    del p.tensors[name]
    return write(p, dst)


def reshape_tensor(src: Path, dst: Path, name: str, np_shape: tuple[int, ...]) -> Path:
    """Same F32 bytes under another shape (numpy order, i.e. reversed ggml order)."""
    p = read(src)
    data, gtype = p.tensors[name]
    assert gtype == GT.F32, "reshape only F32 tensors: quantized rows are blocks"
    p.tensors[name] = (np.ascontiguousarray(data).reshape(np_shape), gtype)
    return write(p, dst)


def retype_tensor(src: Path, dst: Path, name: str, gtype: GT) -> Path:
    """The same F32 values stored as another ggml type (shape kept, data re-encoded, valid GGUF)."""
    p = read(src)
    data, old = p.tensors[name]
    assert old == GT.F32, "retype an F32 source tensor"
    # gguf's quantize knows F16 and the block types; F64 it leaves to numpy
    new = np.asarray(data, dtype=np.float64) if gtype == GT.F64 else quants.quantize(np.asarray(data), gtype)
    p.tensors[name] = (new, gtype)
    return write(p, dst)


def retype_tensor_f64(src: Path, dst: Path, name: str) -> Path:
    """F64 is a valid GGUF type but no qtts weight may use it."""
    return retype_tensor(src, dst, name, GT.F64)


def retype_tensor_f16(src: Path, dst: Path, name: str) -> Path:
    """F16 is multipliable by ggml, yet the talker's activations overflow it: must be rejected."""
    return retype_tensor(src, dst, name, GT.F16)


def add_extra_tensor(src: Path, dst: Path, name: str = "talker.blk.0.attn_bogus.weight") -> Path:
    p = read(src)
    p.tensors[name] = (np.zeros((4, 8), dtype=np.float32), GT.F32)
    return write(p, dst)


def nan_tensor(src: Path, dst: Path, name: str) -> Path:
    """A valid file whose F32 tensor `name` holds NaN: only running the network can tell."""
    p = read(src)
    data, gtype = p.tensors[name]
    p.tensors[name] = (np.full_like(np.asarray(data), np.nan), gtype)
    return write(p, dst)
