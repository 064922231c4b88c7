"""Describe a qtts GGUF file: `qtts.inspect(path)` and `qtts-cli info`."""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..runtime.aligner.aligner_engine import AlignerEngine, file_architecture
from ..runtime.engine.context import supported_languages
from ..runtime.engine.engine import Engine, available_devices
from ..runtime.model.model import check_gguf_path
from .names import KV


@dataclass
class ModelInfo:
    path: str
    name: str
    architecture: str
    variant: str
    size: str
    format_version: int
    file_size: int
    tensor_count: int
    parameter_count: int
    tensors_by_type: dict[str, int]
    speakers: list[str]
    languages: list[str]
    generation_defaults: dict[str, Any]
    hparams: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the devices this installation offers: where device="auto" would run it
    devices: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False)

    def format(self) -> str:
        gb = self.file_size / 1e9
        lines = [
            f"file            {self.path} ({gb:.3f} GB)",
            f"model           {self.name}: {self.architecture} {self.variant} {self.size} "
            f"(format v{self.format_version})",
            f"parameters      {self.parameter_count / 1e6:.1f} M in {self.tensor_count} tensors",
            "tensor types    " + ", ".join(f"{t} {n}" for t, n in sorted(self.tensors_by_type.items())),
            "languages       " + ", ".join(self.languages),
        ]
        if self.architecture == KV.ARCH_NAME:
            lines += [
                "speakers        " + (", ".join(self.speakers) if self.speakers else "-"),
                "generation      " + ", ".join(f"{k}={_short(v)}" for k, v in self.generation_defaults.items()),
            ]
        lines.append("devices         " + _devices(self.devices))
        for comp, hp in self.hparams.items():
            keys = ("block_count", "embedding_length", "head_count", "head_count_kv", "feed_forward_length",
                    "timestamp_classes", "timestamp_ms")
            shown = ", ".join(f"{k}={hp[k]}" for k in keys if k in hp)
            lines.append(f"{comp:<16}{shown}")
        return "\n".join(lines)


def _devices(devices: list[dict[str, str]]) -> str:
    """The devices ggml offers and what "auto" makes of them (docs/gpu.md)."""
    listed = ", ".join(f"{d['name']} ({d['description']})" for d in devices) or "-"
    gpu = next((d["name"] for d in devices if d["type"] in ("gpu", "igpu")), None)
    auto = (f"every network on {gpu}/portable, precision fast (--precision exact: F32)" if gpu
            else "the CPU, native ops, F32")
    return f"{listed}; auto runs {auto}"


def _short(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def inspect(path: str | os.PathLike[str]) -> ModelInfo:
    """Validate a model file (a text-to-speech model or a forced aligner) with the native loader
    and summarise it (nothing is computed)."""
    p = Path(path)
    check_gguf_path(p)
    if file_architecture(str(p)) == KV.ALIGNER_ARCH_NAME:
        return _inspect_aligner(p)
    native = Engine.metadata(str(p))  # the native metadata: gguf-py takes seconds over a 151k vocabulary
    tensors = native.tensor_info()
    types = Counter(ty.upper() for _, ty, _ in tensors)
    return ModelInfo(
        path=str(p), name=native.name, architecture=KV.ARCH_NAME,
        variant=native.variant, size=native.size, format_version=KV.FORMAT,
        file_size=p.stat().st_size, tensor_count=len(tensors), parameter_count=sum(n for _, _, n in tensors),
        tensors_by_type=dict(types), speakers=[s[0] for s in native.speakers],
        languages=supported_languages(native.languages), generation_defaults=native.generation_defaults,
        hparams=native.hparams, devices=available_devices(),
    )


def _inspect_aligner(p: Path) -> ModelInfo:
    native = AlignerEngine.metadata(str(p))
    tensors = native.tensor_info()
    params = sum(n for _, _, n in tensors)
    hparams = native.hparams
    # the timestamp classes and what they span, where a TTS model shows its generation defaults
    dec = hparams["decoder"]
    dec["timestamp_ms"] = native.segment_ms
    return ModelInfo(
        path=str(p), name=native.name, architecture=KV.ALIGNER_ARCH_NAME, variant="forced_aligner",
        size=f"{params / 1e9:.1f}B", format_version=KV.ALIGNER_FORMAT, file_size=p.stat().st_size,
        tensor_count=len(tensors), parameter_count=params,
        tensors_by_type=dict(Counter(ty.upper() for _, ty, _ in tensors)), speakers=[],
        languages=[s.lower() for s in native.languages], generation_defaults={}, hparams=hparams,
        devices=available_devices(),
    )
