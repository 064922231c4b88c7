"""The codec decoder (codes -> waveform) against the reference's, stage by stage and end to end,
and the streaming decoder against the offline one (F32 tiny fixtures)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtts._native import core
from qtts.runtime.engine.engine import Engine
from tests.fixtures.device import device_precision, ops_device

HOP = 1920
N_Q = 16


# Every test of the decoder runs on both paths (docs/kernels.md, "Portable graphs").
@pytest.fixture(scope="module", params=["native", "portable"])
def session(gguf_dir: Path, request: pytest.FixtureRequest):
    with Engine(str(gguf_dir / "tiny_base-f32.gguf"), ops_device(request.param), 2, request.param,
                precision=device_precision()).session() as s:
        yield s


@pytest.fixture(scope="module")
def reference(reference_models):
    return reference_models("tiny_base").model.speech_tokenizer


def _codes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, (n, N_Q))


def _reference_stages(decoder, codes: np.ndarray) -> dict[str, np.ndarray]:
    """Every stage's output of one forward of the reference decoder, as [time, channels]."""
    import torch

    got: dict[str, np.ndarray] = {}

    def keep(name: str):
        def hook(_module, _inputs, out):
            out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out
            out = out[0].detach().numpy()
            got[name] = out if name == "cd.tfm" else out.T
        return hook

    modules = {"cd.pre_conv": decoder.pre_conv, "cd.tfm": decoder.pre_transformer,
               "cd.voc_in": decoder.decoder[0]}
    modules.update({f"cd.up{i}": up[1] for i, up in enumerate(decoder.upsample)})
    for b in range(4):  # the third residual unit's output is the block's
        for j in range(3):
            modules[f"cd.blk{b}.res{j}"] = decoder.decoder[b + 1].block[2 + j]
    handles = [m.register_forward_hook(keep(name)) for name, m in modules.items()]
    try:
        with torch.no_grad():
            c = torch.from_numpy(codes.T[None].astype(np.int64))
            got["cd.rvq"] = decoder.quantizer.decode(c)[0].numpy().T
            got["cd.wav"] = decoder(c)[0].numpy().T
    finally:
        for h in handles:
            h.remove()
    return got


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("seed", [1, 2])
def test_stages_match_reference(session, reference, seed: int) -> None:
    codes = _codes(40, seed)
    ref = _reference_stages(reference.model.decoder, codes)
    got = session.decode_stages(codes, list(ref))
    for name, want in ref.items():
        assert got[name].shape == want.shape, name
        assert _cosine(got[name], want) >= 0.99999, name


@pytest.mark.parametrize("n", [7, 40, 333])
def test_waveform_matches_reference(session, reference, n: int) -> None:
    import torch

    waves = []
    for seed in (10 + n, 20 + n):
        codes = _codes(n, seed)
        want, sr = reference.decode({"audio_codes": torch.from_numpy(codes)})
        got = session.decode(codes)
        assert sr == 24000 and got.dtype == np.float32 and got.shape == (n * HOP,) == want[0].shape
        # the tiny decoder amplifies float32 rounding: the reference itself is 4e-5 off float64
        np.testing.assert_allclose(got, want[0], rtol=0, atol=1e-4)
        waves.append(got)
    # a meaningful fixture: audible output that depends on the codes
    assert min(w.std() for w in waves) > 0.05
    assert np.abs(waves[0] - waves[1]).mean() > 0.05


def _push_all(session, codes: np.ndarray, sizes: list[int]) -> np.ndarray:
    session.decode_stream_reset()
    out, i = [], 0
    for k in sizes:
        piece = session.decode_stream_push(codes[i:i + k])
        assert piece.dtype == np.float32 and piece.shape == (len(codes[i:i + k]) * HOP,)
        out.append(piece)
        i += k
    assert i >= len(codes)
    return np.concatenate(out)


def test_stream_equals_offline_for_any_split(session) -> None:
    # past 600 frames: three reference chunks, two warm-up seams
    codes = _codes(620, 5)
    offline = session.decode(codes)
    rng = np.random.default_rng(6)
    splits = [[1, 1, 2, 5, 13, 299, 1, 1, 24, 273] + [100] * 3, [int(k) for k in rng.integers(1, 90, 60)]]
    for sizes in splits:
        np.testing.assert_array_equal(_push_all(session, codes, sizes), offline)


def test_fast_precision_stream_equals_offline_for_any_split(gguf_dir: Path) -> None:
    """The BF16 convs keep each row's arithmetic independent of the rows beside it, so at the fast
    precision too a stream pushed in any split, across the reference's 300-frame chunks, is the
    offline decode bit for bit."""
    engine = Engine(str(gguf_dir / "tiny_base-f32.gguf"), "cpu", 2, "native", precision="fast")  # the CPU's BF16
    assert engine.precision == ("fast" if core.ops.has_bf16_tiles() else "exact")
    with engine.session() as s:
        codes = _codes(620, 5)
        offline = s.decode(codes)
        sizes = [int(k) for k in np.random.default_rng(8).integers(1, 90, 60)]
        np.testing.assert_array_equal(_push_all(s, codes, sizes), offline)


def test_stream_is_causal(session) -> None:
    codes = _codes(200, 7)
    other = codes.copy()
    other[150:] = _codes(50, 8)
    session.decode_stream_reset()
    first = session.decode_stream_push(codes[:150])
    session.decode_stream_push(codes[150:])
    session.decode_stream_reset()
    again = session.decode_stream_push(other[:150])
    np.testing.assert_array_equal(first, again)
    # changing future codes never changes earlier samples, offline either
    a, b = session.decode(codes), session.decode(other)
    np.testing.assert_array_equal(a[:150 * HOP], b[:150 * HOP])
    assert not np.array_equal(a[150 * HOP:], b[150 * HOP:])


@pytest.mark.parametrize("ops", ["auto", "native", "portable"])
def test_model_decode(gguf_dir: Path, reference, ops: str) -> None:
    import torch

    import qtts

    device = "cpu" if ops == "auto" else ops_device(ops)
    m = qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=1, ops=ops, device=device,
                   precision=device_precision())
    assert m.ops == ("native" if ops == "auto" else ops)  # auto: native on the CPU
    assert m.devices["codec_decoder"] == f"{m.device}/{m.ops}"
    codes = _codes(9, 11)
    want, _ = reference.decode({"audio_codes": torch.from_numpy(codes)})
    np.testing.assert_allclose(m.decode(codes), want[0], rtol=0, atol=1e-4)


@pytest.mark.parametrize("codes, match", [
    (np.zeros((4, 15), np.int64), r"shape \[n, 16\]"),
    (np.zeros(16, np.int64), r"shape \[n, 16\]"),
    (np.zeros((0, 16), np.int64), "at least one frame"),
    (np.full((2, 16), 2048), r"code 2048 at frame 0, codebook 0 is outside \[0, 2048\)"),
    (np.array([[0] * 15 + [-1]]), r"code -1 at frame 0, codebook 15"),
    (np.zeros((2, 16), np.float32), "integer array"),
    (np.full((1, 16), 1 << 40), "outside"),
])
def test_validation(session, codes: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        session.decode(codes)
    if len(codes):
        session.decode_stream_reset()
        with pytest.raises(ValueError, match=match):
            session.decode_stream_push(codes)


def test_empty_push_is_allowed(session) -> None:
    session.decode_stream_reset()
    assert session.decode_stream_push(np.zeros((0, N_Q), np.int64)).shape == (0,)


def test_fast_precision_stays_near_the_reference(gguf_dir: Path, reference) -> None:
    """At the fast precision the BF16 convs (on the tiny model the upsampling's, voc_in and the
    first block's transposed conv, the convs over 32 or more channels) move the waveform, and only a little
    (docs/kernels.md, "BF16 convs"); on a CPU without AMX tiles fast computes F32. The tiny random
    decoder amplifies rounding (float32's 6e-8 shows as 4e-5 above), so BF16's 2^-9 on two convs
    shows as a few percent of the signal: measured 5% rms here, the waveforms' correlation 0.999."""
    import torch

    import qtts

    codes = _codes(40, 12)
    want, _ = reference.decode({"audio_codes": torch.from_numpy(codes)})
    exact = qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, precision="exact", device="cpu").decode(codes)
    m = qtts.Model(gguf_dir / "tiny_base-f32.gguf", n_threads=2, precision="fast", device="cpu")
    got = m.decode(codes)
    if m.precision == "exact":
        np.testing.assert_array_equal(got, exact)
        return
    err = np.sqrt(np.mean((got - want[0]) ** 2) / np.mean(want[0] ** 2))
    assert 1e-3 < err < 0.1, err
    assert np.corrcoef(got, want[0])[0, 1] > 0.99
    np.testing.assert_allclose(exact, want[0], rtol=0, atol=1e-4)
