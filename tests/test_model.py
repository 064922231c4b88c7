"""Loading converted models: metadata, devices, threads, and the text projection vs the reference."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import qtts
from qtts.threads import available_cpus, physical_cores, resolve_threads
from tests.fixtures.build import MODEL_NAMES

TEXTS = ["Hello world, this is a tiny test.", "我叫通义千问。", "Speak slowly in a warm, calm voice."]


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_text_projection_matches_reference(name: str, gguf_dir: Path, reference_models) -> None:
    import torch

    ref = reference_models(name)
    talker = ref.model.talker
    m = qtts.load(gguf_dir / f"{name}-f32.gguf", n_threads=1)
    for text in TEXTS:
        ids = m.tokenizer.assistant_ids(text)
        with torch.no_grad():
            want = talker.text_projection(talker.get_text_embeddings()(torch.tensor([ids])))[0].numpy()
        got = m.text_embedding(ids)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5
    for out_type in ("bf16", "q8_0"):
        mq = qtts.load(gguf_dir / f"{name}-{out_type}.gguf", n_threads=1)
        ids = m.tokenizer.assistant_ids(TEXTS[0])
        a, b = m.text_embedding(ids).ravel(), mq.text_embedding(ids).ravel()
        assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.999


def test_model_properties(gguf_dir: Path) -> None:
    m = qtts.load(gguf_dir / "tiny_custom_voice-f32.gguf")
    assert m.variant == "custom_voice" and m.size == "1b7"
    assert m.speakers == ["dylan", "ryan", "vivian"]
    assert "auto" in m.languages and "english" in m.languages
    assert not any("dialect" in lang for lang in m.languages)
    assert m.device == "CPU"
    # "<device>/<path>": on the CPU "auto" picks the native audio networks
    assert m.ops == "native"
    assert m.devices == {"talker": "CPU/native", "code_predictor": "CPU/native", "codec_decoder": "CPU/native",
                         "codec_encoder": "CPU/native"}
    assert m.generation_defaults["top_k"] == 50
    assert m.hparams["code_predictor"]["has_projection"] is True
    base = qtts.load(gguf_dir / "tiny_base-f32.gguf")
    assert base.devices["speaker_encoder"] == "CPU/native" and base.speakers == []
    portable = qtts.load(gguf_dir / "tiny_base-f32.gguf", ops="portable")
    assert portable.ops == "portable" and set(portable.devices.values()) == {"CPU/portable"}
    # the portable conv copies are extra weight memory, the size of the panels they come from
    assert portable.engine.weight_bytes - base.engine.weight_bytes == portable.engine.portable_weight_bytes > 0
    assert base.hparams["code_predictor"]["has_projection"] is False


def test_sessions_share_one_model(gguf_dir: Path) -> None:
    from qtts._native import core

    native = core.Model(str(gguf_dir / "tiny_voice_design-f32.gguf"), "cpu")
    s1, s2 = core.Session(native, 1), core.Session(native, 2)
    ids = [1, 2, 3, 4]
    np.testing.assert_allclose(s1.text_embed(ids), s2.text_embed(ids), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="outside the text vocabulary"):
        s1.text_embed([10**6])


def test_thread_defaults() -> None:
    assert 1 <= physical_cores() <= len(available_cpus())
    assert resolve_threads(None) == physical_cores()
    assert resolve_threads(10**4) == len(available_cpus())
    with pytest.raises(ValueError, match="n_threads"):
        resolve_threads(0)


def test_unknown_device(gguf_dir: Path) -> None:
    with pytest.raises(ValueError, match="unknown device 'nope'; available: auto, cpu"):
        qtts.load(gguf_dir / "tiny_voice_design-f32.gguf", device="nope")
