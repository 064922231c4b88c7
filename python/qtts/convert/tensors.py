"""The tensors of a file being converted (a Qwen3-TTS checkpoint's, convert/checkpoint.py, or an
aligner's, convert/aligner.py): each one's GGUF entry, the type policy that picks its weight type,
and its bytes, streamed in row chunks."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf import GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES

from .safetensors_io import TensorRef, to_f32
from .weight_types import K_QUANT_TYPES

_FULL_TYPES = {"f32": QT.F32, "bf16": QT.BF16, "q8_0": QT.Q8_0}
_K_QUANTS = (QT.Q4_K, QT.Q5_K, QT.Q6_K)
_CHUNK_ELEMS = 1 << 24

Transform = Callable[[list[np.ndarray]], np.ndarray]


@dataclass
class Entry:
    name: str
    sources: list[TensorRef]
    shape: tuple[int, ...]          # numpy order after the transform
    role: str                       # "linear", "text_embd", "codec_embd" or "f32"
    transform: Transform | None = None
    qtype: QT = QT.F32


def choose_types(entries: list[Entry], out_type: str) -> None:
    """The per-tensor type policy: only talker/predictor matrices and tables change type."""
    if out_type in K_QUANT_TYPES:
        from .quantize import policy_type

        for e in entries:
            e.qtype = policy_type(e.name, e.shape, out_type)[0]
        return
    target = _FULL_TYPES[out_type]
    for e in entries:
        e.qtype = QT.F32
        if target == QT.F32 or len(e.shape) != 2:
            continue
        if target == QT.BF16 and e.role in ("linear", "text_embd", "codec_embd"):
            e.qtype = QT.BF16
        elif target == QT.Q8_0 and e.role in ("linear", "text_embd"):
            # rows that are not a whole number of blocks stay exact rather than fail
            e.qtype = QT.Q8_0 if e.shape[-1] % GGML_QUANT_SIZES[QT.Q8_0][0] == 0 else QT.BF16


def nbytes(e: Entry) -> int:
    block, size = GGML_QUANT_SIZES[e.qtype]
    return int(np.prod(e.shape[:-1], dtype=np.int64)) * (e.shape[-1] // block) * size


def encode(e: Entry, n_threads: int) -> Iterator[bytes]:
    """Yield the entry's bytes in row chunks (whole rows, as the K-quants need) so that peak
    memory stays near one chunk."""
    if e.transform is not None:
        chunks = [e.transform([r.f32() for r in e.sources])]
    else:
        src = e.sources[0]
        n_rows = int(np.prod(src.shape[:-1], dtype=np.int64)) if len(src.shape) > 1 else 1
        step = max(1, _CHUNK_ELEMS // max(1, src.shape[-1] if src.shape else 1))
        spans = [(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]
        if e.qtype == QT.BF16 and src.dtype == "BF16":
            for a, b in spans:
                yield src.read_rows(a, b).tobytes()
            return
        chunks = (to_f32(src.read_rows(a, b), src.dtype) for a, b in spans)
    for c in chunks:
        c = np.ascontiguousarray(c, dtype=np.float32)
        if e.qtype == QT.F32:
            yield c.tobytes()
        elif e.qtype in _K_QUANTS:
            from .._native import core  # the quantizer `qtts.quantize` uses: the same bytes

            yield core.quantize(c.reshape(-1, c.shape[-1]), e.qtype.name.lower(), n_threads)
        else:
            yield quants.quantize(c.reshape(-1, c.shape[-1]), e.qtype).tobytes()


def write_metadata(writer: GGUFWriter, meta: list[tuple[str, object, str]]) -> None:
    for key, value, kind in meta:
        if kind == "u32":
            writer.add_uint32(key, int(value))  # type: ignore[arg-type]
        elif kind == "f32":
            writer.add_float32(key, float(value))  # type: ignore[arg-type]
        elif kind == "bool":
            writer.add_bool(key, bool(value))
        elif kind == "str":
            writer.add_string(key, str(value))
        elif kind == "arr_i32":
            writer.add_key_value(key, [int(v) for v in value], VT.ARRAY, sub_type=VT.INT32)  # type: ignore[union-attr]
        elif kind == "arr_str":
            writer.add_key_value(key, [str(v) for v in value], VT.ARRAY, sub_type=VT.STRING)  # type: ignore[union-attr]
        else:
            raise AssertionError(kind)
