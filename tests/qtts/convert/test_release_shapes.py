"""Every released checkpoint shape converts and passes the loader's shape checks.

The stand-ins have the released configs and tensor layout (built with the reference's classes on
torch's meta device) and all-zero sparse weights: this checks names, shapes, metadata and the
loader's expectations at full size, not values (the tiny checkpoints do that).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import qtts
from qtts.convert.checkpoint import convert
from tests.fixtures.releases import RELEASES, SPEAKERS, write_release

# Parameter counts of the released model.safetensors files (docs/model.md, "Configuration").
RELEASED_PARAMS = {"0.6B-Base": 914_643_008, "0.6B-CustomVoice": 905_788_672, "1.7B-Base": 1_928_677_440,
                   "1.7B-CustomVoice": 1_916_676_352, "1.7B-VoiceDesign": 1_916_676_352}


@pytest.mark.parametrize("name", list(RELEASES))
def test_release_shape_converts_and_loads(name: str, fixture_root: Path, tmp_path: Path) -> None:
    params = write_release(name, tmp_path / "ckpt", fixture_root / "tiny_base")
    assert params == RELEASED_PARAMS[name]
    out_type = "q8_0" if name == "0.6B-CustomVoice" else "bf16"
    out = convert(tmp_path / "ckpt", tmp_path / f"{name}.gguf", out_type)
    try:
        info = qtts.inspect(out)
        variant, size = RELEASES[name]
        width = 1024 if size == "0b6" else 2048
        assert (info.variant, info.size) == (variant, size)
        hp = info.hparams
        assert hp["talker"]["embedding_length"] == width and hp["talker"]["block_count"] == 28
        assert hp["code_predictor"]["embedding_length"] == 1024
        assert hp["code_predictor"]["has_projection"] == (width != 1024)
        assert ("speaker_encoder" in hp) == (variant == "base")
        if variant == "base":
            assert hp["speaker_encoder"]["embedding_length"] == width
        assert info.speakers == (list(SPEAKERS) if variant == "custom_voice" else [])
        assert "F16" not in info.tensors_by_type
        assert info.tensors_by_type.get("Q8_0" if out_type == "q8_0" else "BF16", 0) > 200
    finally:
        out.unlink()
