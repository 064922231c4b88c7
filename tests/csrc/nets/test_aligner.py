"""The forced aligner's networks against qwen-asr's, on the native and the portable path (F32 tiny
fixture): the audio encoder stage by stage and whole (one window, several, a clip shorter than one
conv chunk, whole chunks and a padded last one), and the decoder's logits at the timestamp slots
with the classes they pick, for English, Chinese and mixed text, short and long words."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtts._native import core
from tests.fixtures.aligner_reference import clip, encoder_output, inputs, slot_logits, windowed
from tests.fixtures.device import device_precision, ops_device

TOL = 1e-4
# seconds: one chunk cut short (70 frames), whole chunks (200 frames), a padded last chunk, and
# 12.3 s: two attention windows of 8 chunks, the second one partial
LENGTHS = [0.7, 2.0, 3.33, 12.3]
WORDS = {
    "english": ["Hello", "world", "this", "is", "a", "tiny", "test", "of", "word", "timestamps"],
    "chinese": list("我叫通义千问是阿里云的开源大模型"),
    "mixed": ["Qwen3", "TTS", "说", "hello", "世", "界", "and", "再", "见"],
    "long_words": ["internationalization", "incomprehensibilities", "a", "antidisestablishmentarianism"],
    "one_word": ["I"],
}


@pytest.fixture(scope="module", params=["native", "portable"])
def model(aligner_gguf: dict[str, Path], request: pytest.FixtureRequest):
    m = core.AlignerModel(str(aligner_gguf["f32"]), ops_device(request.param), core.Ops.__members__[request.param],
                          core.Precision.__members__[device_precision()])
    assert m.ops == request.param
    return m


@pytest.fixture(scope="module")
def session(model):
    return core.AlignerSession(model, 2)


@pytest.mark.parametrize("seconds", LENGTHS)
def test_encoder_matches_reference(model, session, reference_aligner, seconds: float) -> None:
    batch = inputs(reference_aligner, clip(seconds, 1), ["x"])
    with windowed(reference_aligner):
        want = encoder_output(reference_aligner, batch)
    got = session.encode(batch["input_features"][0].numpy())
    assert got.shape == want.shape == (model.tokens(batch["input_features"].shape[-1]), 32)
    assert np.abs(got - want).max() <= TOL


def test_one_window_needs_no_mask(reference_aligner) -> None:
    """Within one window (up to 8 s) the reference's own path and its windowed one agree: the
    parity of a clip that short holds against the reference as it ships."""
    batch = inputs(reference_aligner, clip(7.9, 2), ["x"])
    plain = encoder_output(reference_aligner, batch)
    with windowed(reference_aligner):
        masked = encoder_output(reference_aligner, batch)
    np.testing.assert_allclose(plain, masked, atol=1e-6)


def _stages(reference, features) -> dict[str, np.ndarray]:
    """The reference encoder's conv stack and input embedding for the features of one window."""
    import torch
    import torch.nn.functional as F

    tower = reference.model.thinker.audio_tower
    x = torch.from_numpy(features)
    frames = x.shape[1]
    chunk = 2 * tower.n_window
    parts = list(x.T.split(chunk, 0))
    padded = torch.nn.utils.rnn.pad_sequence(parts, batch_first=True).transpose(1, 2).unsqueeze(1)
    out = {}
    with torch.no_grad():
        h = padded
        for i, conv in enumerate((tower.conv2d1, tower.conv2d2, tower.conv2d3)):
            h = F.gelu(conv(h))
            out[f"aenc.conv{i}"] = h.permute(0, 2, 3, 1).numpy()  # [chunk, bins, time, channels]
        b, c, f, t = h.shape
        e = tower.conv_out(h.permute(0, 3, 1, 2).reshape(b, t, c * f)) + tower.positional_embedding(t)
        n_tokens = sum(int(((((len(p) + 1) // 2 + 1) // 2) + 1) // 2) for p in parts)
        out["aenc.embed"] = e.reshape(-1, e.shape[-1])[:n_tokens].numpy()
    assert frames > 0
    return out


@pytest.mark.parametrize("seconds", [0.7, 3.33])
def test_encoder_stages_match_reference(session, reference_aligner, seconds: float) -> None:
    features = inputs(reference_aligner, clip(seconds, 3), ["x"])["input_features"][0].numpy()
    want = _stages(reference_aligner, features)
    got = session.encode_stages(features, list(want))
    for name, ref in want.items():
        assert got[name].size == ref.size, name
        assert np.abs(got[name].reshape(ref.shape) - ref).max() <= TOL, name


@pytest.mark.parametrize("words", sorted(WORDS))
@pytest.mark.parametrize("seconds", [2.0, 12.3])
def test_slot_logits_and_classes_match_reference(session, reference_aligner, words: str, seconds: float) -> None:
    batch = inputs(reference_aligner, clip(seconds, 4), WORDS[words])
    with windowed(reference_aligner):
        audio = encoder_output(reference_aligner, batch)
        want = slot_logits(reference_aligner, batch)
    ids = batch["input_ids"][0].tolist()
    got = session.timestamp_logits(ids, audio)
    assert got.shape == want.shape == (2 * len(WORDS[words]), 5000)
    assert np.abs(got - want).max() <= TOL
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))


def test_long_prompt_spans_several_chunks(session, reference_aligner) -> None:
    """A prompt longer than the decoder's 256-position chunks: the KV cache carries the earlier
    chunks' keys, the slots of every chunk are read."""
    words = [f"w{i}" for i in range(120)]
    batch = inputs(reference_aligner, clip(3.0, 5), words)
    assert batch["input_ids"].shape[1] > 2 * 256
    with windowed(reference_aligner):
        audio = encoder_output(reference_aligner, batch)
        want = slot_logits(reference_aligner, batch)
    got = session.timestamp_logits(batch["input_ids"][0].tolist(), audio)
    assert np.abs(got - want).max() <= TOL
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    assert session.memory()["kv_cache"] > 0  # kept for the next call: below the steady size


def test_outsized_prompt_gives_its_buffers_back(session, reference_aligner) -> None:
    batch = inputs(reference_aligner, clip(2.0, 6), [f"w{i}" for i in range(400)])
    assert batch["input_ids"].shape[1] > 1024
    with windowed(reference_aligner):
        audio = encoder_output(reference_aligner, batch)
        want = slot_logits(reference_aligner, batch)
    got = session.timestamp_logits(batch["input_ids"][0].tolist(), audio)
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1))
    assert session.memory() == {"kv_cache": 0, "compute_buffers": 0}


def test_bad_inputs_are_refused(model, session) -> None:
    ids = model.ids
    with pytest.raises(ValueError, match="mel must have shape"):
        session.encode(np.zeros((80, 100), np.float32))
    with pytest.raises(ValueError, match="one run of 3 audio_pad ids"):
        session.timestamp_logits([ids["audio_start"], ids["audio_pad"], ids["audio_end"]],
                                 np.zeros((3, 32), np.float32))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        session.timestamp_logits([10**6], np.zeros((0, 32), np.float32))
    with pytest.raises(ValueError, match=r"audio must have shape \[n, 32\]"):
        session.timestamp_logits([ids["audio_pad"]], np.zeros((1, 16), np.float32))
