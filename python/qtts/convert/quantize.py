"""Change the weight type of a qtts GGUF file: `qtts-cli quantize IN.gguf OUT.gguf TYPE`.

Only the talker and code-predictor matrices and embedding tables change type (in an aligner file,
docs/aligner.md: both transformers' matrices, the encoder's conv output projection, the timestamp
head and the token table); everything the native loader reads as F32 stays F32. _POLICY below
gives the type of each role per target.
Tables are read one row per token, so K-quant targets keep them as the q8_0 target does: the
text table at Q8_0, the codec tables at F32 (as `qtts-cli convert --type q8_0` writes them;
`--keep 'codec_embd=q8_0'` stores those at Q8_0 too). From the F32 conversion, every target's
output is byte for byte what `qtts-cli convert --type TYPE` writes from the same checkpoint (the
converter takes the K-quant targets' types from policy_type here).
Rows that are not whole blocks fall back: a K-quant (256 values) to Q8_0 when rows are whole
32-value blocks, else to BF16; Q8_0 (32) to BF16. F16 is never written: talker and
code-predictor activations overflow it.

`--keep REGEX=TYPE` (repeatable; the last matching one wins) overrides the policy for the
tensors whose name REGEX finds (re.search). F32 and BF16 data are re-encoded from float32;
tensors of any other type may only be copied unchanged, since quantizing quantized weights again
compounds the rounding.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf import GGUFWriter, ReaderTensor, quants
from gguf.constants import GGML_QUANT_SIZES

from .._native import core
from ..threads import resolve_threads
from .gguf_meta import read_fields
from .gguf_write import OutTensor, write_gguf
from .names import KV, TN
from .weight_types import FILE_TYPE, WEIGHT_TYPES

# The type of each tensor role per target (see role_of), before the block-size fallback:
#   linear        talker/predictor attention and FFN linears, text_proj.fc1/fc2, mtp_proj (the
#                 aligner's: its layers' linears, aenc.conv_out, aenc.proj1/2)
#   sensitive     attn_v, ffn_down and the output heads (codec_head, code_pred lm_head.*, the
#                 aligner's timestamp_head): the
#                 K-quant targets give them Q6_K, as llama.cpp's Q4_K_M does (there in half the
#                 layers; in all of them here: on random-weight 0.6B it lifts Q4_K's prefill
#                 logits cosine, and costs about 12% more bytes per frame)
#   text table    talker.text_embd, adec.token_embd
#   codec tables  talker.codec_embd, code_pred.codec_embd.*
#   f32           everything else: 1-D tensors (norms, biases), the codec decoder and encoder,
#                 the speaker encoder (conv panels, SnakeBeta, codebooks)
_POLICY: dict[str, tuple[QT, ...]] = {
    #                f32     bf16     q8_0     q4_k     q5_k     q6_k
    "linear":       (QT.F32, QT.BF16, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K),
    "sensitive":    (QT.F32, QT.BF16, QT.Q8_0, QT.Q6_K, QT.Q6_K, QT.Q6_K),
    "text table":   (QT.F32, QT.BF16, QT.Q8_0, QT.Q8_0, QT.Q8_0, QT.Q8_0),
    "codec tables": (QT.F32, QT.BF16, QT.F32,  QT.F32,  QT.F32,  QT.F32),
    "f32":          (QT.F32, QT.F32,  QT.F32,  QT.F32,  QT.F32,  QT.F32),
}
TYPES = dict(zip(WEIGHT_TYPES, _POLICY["linear"], strict=True))
_K_QUANTS = (QT.Q4_K, QT.Q5_K, QT.Q6_K)
_SENSITIVE = re.compile(r"\.(attn_v|ffn_down)\.weight$|^talker\.codec_head\.|^code_pred\.lm_head\."
                        r"|^adec\.timestamp_head\.")
_RE_ENCODABLE = (QT.F32, QT.BF16)
_CHUNK_ELEMS = 1 << 22
_REQUANT = ("re-quantizing an already quantized file loses precision; quantize from the F32 or BF16 "
            "conversion")


@dataclass(frozen=True)
class Planned:
    tensor: ReaderTensor
    qtype: QT
    note: str = ""  # why the type is not the policy's own (a fallback or a --keep)

    @property
    def source(self) -> QT:
        return self.tensor.tensor_type

    @property
    def rows(self) -> tuple[int, int]:
        """(number of rows, values per row) of the tensor."""
        n_per_row = int(self.tensor.shape[0])
        return int(self.tensor.n_elements) // n_per_row, n_per_row

    @property
    def nbytes(self) -> int:
        block, size = GGML_QUANT_SIZES[self.qtype]
        n_rows, n_per_row = self.rows
        return n_rows * (n_per_row // block) * size


def parse_type(name: str) -> QT:
    t = TYPES.get(name.lower())
    if t is None:
        raise ValueError(f"unknown type {name!r}; choose one of {', '.join(TYPES)}")
    return t


def role_of(name: str, n_dims: int) -> str:
    """The policy role of a tensor; everything outside the talker/predictor matrices is F32."""
    if not name.startswith((TN.TALKER + ".", TN.CODE_PRED + ".", TN.AENC + ".", TN.ADEC + ".")) or n_dims != 2:
        return "f32"
    if name in (TN.TALKER_TEXT_EMBD, TN.ADEC_TOKEN_EMBD):
        return "text table"
    if name == TN.TALKER_CODEC_EMBD or re.fullmatch(TN.CODE_PRED_CODEC_EMBD.replace("%d", r"\d+"), name):
        return "codec tables"
    if _SENSITIVE.search(name):
        return "sensitive"
    return "linear"


def policy_type(name: str, shape: Sequence[int], out_type: str) -> tuple[QT, str]:
    """The type the policy gives tensor `name` of `shape` (numpy order) at target `out_type`,
    after the block-size fallback, and a note when it is not the policy's own."""
    n_per_row = int(shape[-1])
    wanted = _POLICY[role_of(name, len(shape))][WEIGHT_TYPES.index(out_type.lower())]
    qtype = _fit(wanted, n_per_row)
    if qtype == wanted:
        return qtype, ""
    return qtype, (f"fallback: {wanted.name} needs rows of whole {GGML_QUANT_SIZES[wanted][0]}-value blocks, "
                   f"these have {n_per_row}")


def _fits(qtype: QT, n_per_row: int) -> bool:
    return n_per_row % GGML_QUANT_SIZES[qtype][0] == 0


def _fit(qtype: QT, n_per_row: int) -> QT:
    if _fits(qtype, n_per_row):
        return qtype
    if qtype in _K_QUANTS and _fits(QT.Q8_0, n_per_row):
        return QT.Q8_0
    return QT.BF16


def _parse_keep(specs: Sequence[str]) -> list[tuple[str, re.Pattern[str], QT]]:
    out = []
    for spec in specs:
        pattern, sep, type_name = spec.rpartition("=")
        if not sep or not pattern:
            raise ValueError(f"--keep {spec!r}: expected REGEX=TYPE")
        if type_name.lower() == "f16":
            raise ValueError(f"--keep {spec!r}: F16 is never written (talker and code-predictor activations "
                             "overflow it); use bf16")
        try:
            rx = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"--keep {spec!r}: bad regular expression: {e}") from None
        try:
            qtype = parse_type(type_name)
        except ValueError as e:
            raise ValueError(f"--keep {spec!r}: {e}") from None
        out.append((spec, rx, qtype))
    return out


def plan(tensors: Sequence[ReaderTensor], out_type: str, keep: Sequence[str] = ()) -> list[Planned]:
    """The type of every tensor; raises ValueError on anything that cannot be honoured."""
    parse_type(out_type)
    rules = _parse_keep(keep)
    used: set[str] = set()
    out = []
    for t in tensors:
        n_per_row = int(t.shape[0])
        role = role_of(t.name, len(t.shape))
        qtype, note = policy_type(t.name, tuple(int(d) for d in reversed(t.shape)), out_type)
        for spec, rx, kept in rules:
            if not rx.search(t.name):
                continue
            used.add(spec)
            if role == "f32" and kept != QT.F32:
                raise ValueError(f"--keep {spec!r}: {t.name} must stay F32 (the loader reads it as F32)")
            if not _fits(kept, n_per_row):
                raise ValueError(f"--keep {spec!r}: {t.name} has rows of {n_per_row} values, not whole "
                                 f"{kept.name} blocks of {GGML_QUANT_SIZES[kept][0]}")
            qtype, note = kept, f"--keep {spec!r}"
        if qtype != t.tensor_type and t.tensor_type not in _RE_ENCODABLE:
            raise ValueError(f"{t.name} is {t.tensor_type.name} and would become {qtype.name}: {_REQUANT}")
        out.append(Planned(t, qtype, note))
    unused = [spec for spec, _, _ in rules if spec not in used]
    if unused:
        raise ValueError(f"--keep {unused[0]!r} matches no tensor")
    return out


def _float_rows(raw: np.ndarray, source: QT) -> np.ndarray:
    if source == QT.F32:
        return np.ascontiguousarray(raw, dtype=np.float32)
    # BF16 is the high half of an IEEE float32
    return (np.ascontiguousarray(raw).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _encode(p: Planned, n_threads: int) -> Iterator[bytes]:
    """The tensor's new bytes, a bounded number of rows at a time."""
    n_rows, n_per_row = p.rows
    raw = np.asarray(p.tensor.data).reshape(n_rows, -1)  # memory-mapped; BF16/quantized as bytes
    step = max(1, _CHUNK_ELEMS // n_per_row)
    for a in range(0, n_rows, step):
        chunk = raw[a:a + step]
        if p.qtype == p.source:
            yield chunk.tobytes()
            continue
        rows = _float_rows(chunk, p.source)
        if p.qtype == QT.F32:
            yield rows.tobytes()
        elif p.qtype == QT.BF16:
            yield quants.quantize(rows, QT.BF16).tobytes()  # the converter's rounding
        else:
            yield core.quantize(rows, p.qtype.name.lower(), n_threads)


def _copy_metadata(fields: dict[str, Any], types: dict[str, list[VT]], writer: GGUFWriter, file_type: int) -> None:
    """Every key in its original order, general.file_type replaced; the writer has already
    added general.architecture and general.alignment, in the converter's positions."""
    for key, value in fields.items():
        if key in (KV.ARCHITECTURE, "general.alignment"):
            continue
        if key == KV.FILE_TYPE:
            writer.add_uint32(key, file_type)
            continue
        vtypes = types[key]
        writer.add_key_value(key, value, vtypes[0], sub_type=vtypes[-1] if vtypes[0] == VT.ARRAY else None)
    if KV.FILE_TYPE not in fields:
        writer.add_uint32(KV.FILE_TYPE, file_type)


def quantize(src: str | os.PathLike[str], dst: str | os.PathLike[str], type: str, *, keep: Sequence[str] = (),
             log: Callable[[str], None] | None = None, n_threads: int | None = None) -> Path:
    """Write `dst` from the qtts GGUF `src` with the talker/predictor weights at `type` (see the
    module docstring); atomic: on any failure no file remains. Returns the path written."""
    parse_type(type)
    reader, fields = read_fields(src)
    arch = fields.get(KV.ARCHITECTURE)
    if arch not in (KV.ARCH_NAME, KV.ALIGNER_ARCH_NAME):
        raise ValueError(f"{src}: not a qtts model (architecture {arch!r})")
    planned = plan(reader.tensors, type, keep)
    threads = resolve_threads(n_threads)
    types = {k: list(f.types) for k, f in reader.fields.items()}

    tensors = [OutTensor(p.tensor.name, tuple(int(d) for d in reversed(p.tensor.shape)), p.qtype, p.nbytes,
                         lambda p=p: _encode(p, threads),
                         f"{p.source.name} -> {p.qtype.name}" + (f" ({p.note})" if p.note else ""))
               for p in planned]
    return write_gguf(dst, lambda w: _copy_metadata(fields, types, w, FILE_TYPE[type.lower()]), tensors, log,
                      arch=str(arch))
