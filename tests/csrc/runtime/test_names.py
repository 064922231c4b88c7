"""csrc/runtime/names.h and python/qtts/names.py define the same GGUF keys and tensor names."""
from __future__ import annotations

import re
from pathlib import Path

from qtts.convert.names import KV, TN

HEADER = Path(__file__).resolve().parents[3] / "csrc" / "runtime" / "names.h"


def _header_names(namespace: str) -> dict[str, str]:
    src = HEADER.read_text()
    start = src.index(f"namespace qtts::{namespace} {{")
    end = src.index(f"}}  // namespace qtts::{namespace}")
    return dict(re.findall(r'constexpr const char \* (\w+) = "([^"]*)";', src[start:end]))


def _python_names(cls: type) -> dict[str, str]:
    return {k: v for k, v in vars(cls).items() if k.isupper() and isinstance(v, str)}


def test_keys_agree() -> None:
    cpp = _header_names("kv")
    assert len(cpp) > 80
    assert cpp == _python_names(KV)


def test_tensor_names_agree() -> None:
    cpp = _header_names("tn")
    assert len(cpp) > 100
    assert cpp == _python_names(TN)


def test_names_fit_ggml() -> None:
    # GGML_MAX_NAME is 64 including the terminator; the widest arguments are two-digit indices
    # and the longest network prefix.
    for pattern in _python_names(TN).values():
        name = pattern.replace("%s", "codec_dec.pre_tfm").replace("%d", "99")
        assert len(name) < 64, name


def test_format_version_agrees() -> None:
    src = HEADER.read_text()
    assert int(re.search(r"constexpr unsigned FORMAT = (\d+);", src).group(1)) == KV.FORMAT
