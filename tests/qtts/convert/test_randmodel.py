"""qtts.convert.randmodel: full-size random-weight checkpoints written with numpy from committed tables.

The tables (python/qtts/convert/data/releases/*.json) are regenerated here from the reference's own
classes (tests/fixtures/releases.py, meta device) and must equal the committed files; the
per-tensor init rules are checked against the test tooling's init (reference init, then
refmodels.reinit_fan_in / randomize_constant_tensors / calibrate_codec_output) by comparing
each tensor's mean and standard deviation.

Regenerate the tables after a reference or config change with
    python -m tests.test_randmodel
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qtts.convert import randmodel
from qtts.convert.safetensors_io import read_header

TABLE_DIR = Path(randmodel.__file__).resolve().parent / "data" / "releases"


def _need_reference() -> None:
    from tests.conftest import _need_reference as need

    need()


def reference_table(release: str) -> dict[str, Any]:
    """What tests/fixtures/releases.write_release writes for `release`: configs and the
    safetensors headers (names in state_dict order, shapes, dtypes)."""
    from tests.fixtures.releases import write_release

    with tempfile.TemporaryDirectory() as tmp:
        tok = Path(tmp) / "tok"
        tok.mkdir()
        for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):  # contents are not part of the table
            (tok / f).write_text("")
        ck = Path(tmp) / "ck"
        write_release(release, ck, tok)  # sparse files: no data is written

        def load(p: Path) -> Any:
            return json.loads(p.read_text(encoding="utf-8"))

        def shapes(p: Path) -> dict[str, list[Any]]:
            return {name: [list(ref.shape), ref.dtype] for name, ref in read_header(p).items()}

        return {"config": load(ck / "config.json"), "generation_config": load(ck / "generation_config.json"),
                "speech_tokenizer_config": load(ck / "speech_tokenizer" / "config.json"),
                "model": shapes(ck / "model.safetensors"),
                "speech_tokenizer": shapes(ck / "speech_tokenizer" / "model.safetensors")}


def write_tables(out: Path = TABLE_DIR) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for release in randmodel.RELEASES:
        text = json.dumps(reference_table(release), separators=(",", ":"), ensure_ascii=False)
        (out / f"{release}.json").write_text(text + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------
# (1) committed tables == the reference classes
# ------------------------------------------------------------------------------------------

@pytest.mark.reference
def test_tables_match_reference() -> None:
    _need_reference()
    from tests.fixtures.releases import RELEASES

    assert set(randmodel.RELEASES) == set(RELEASES)
    for release in randmodel.RELEASES:
        committed = json.loads((TABLE_DIR / f"{release}.json").read_text(encoding="utf-8"))
        fresh = reference_table(release)
        assert committed == fresh, f"{release}: stale table; regenerate with python -m tests.test_randmodel"
        # dict equality ignores order, and the safetensors layout follows it
        for key in ("model", "speech_tokenizer"):
            assert list(committed[key]) == list(fresh[key])


# ------------------------------------------------------------------------------------------
# init rules == the tooling's init, tensor by tensor (mean and std)
# ------------------------------------------------------------------------------------------

def _reference_modules() -> tuple[Any, Any]:
    """The 1.7B-Base talker (shrunk: 1 layer each, small text vocabulary, so it fits in memory)
    and the full-size codec, initialised as tests/fixtures/build.py does."""
    import torch

    from tests.fixtures import refmodels as rc
    from tests.fixtures.releases import release_config

    d = release_config("1.7B-Base")
    d["talker_config"].update(num_hidden_layers=1, text_vocab_size=64)
    d["talker_config"]["code_predictor_config"].update(num_hidden_layers=1)
    torch.manual_seed(0)
    tts = rc.Qwen3TTSForConditionalGeneration(
        rc.Qwen3TTSConfig(**{k: v for k, v in d.items() if k not in ("architectures", "model_type")})).eval()
    rc.reinit_fan_in(tts.speaker_encoder, seed=1)
    rc.randomize_constant_tensors(tts, seed=2)
    cfg = rc.real_12hz_tokenizer_config_dict()
    codec = rc.Qwen3TTSTokenizerV2Model(rc.Qwen3TTSTokenizerV2Config(
        **{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})).eval()
    rc.reinit_fan_in(codec, seed=3)
    rc.randomize_constant_tensors(codec, seed=4)
    rc.calibrate_codec_output(codec, target_std=0.2)
    return tts, codec


def _check_moments(name: str, t: np.ndarray, init: randmodel.Init) -> None:
    if init.kind == "constant":
        np.testing.assert_array_equal(t, init.a, err_msg=name)
        return
    if init.kind == "normal":
        mean, std = init.a, init.b
    else:
        mean, std = (init.a + init.b) / 2, (init.b - init.a) / math.sqrt(12)
    n = t.size
    assert abs(float(t.mean()) - mean) < 5 * std / math.sqrt(n) + 1e-7, (name, float(t.mean()), mean)
    tol = 0.3 if name.startswith("decoder.decoder.6.conv.") else 5 / math.sqrt(n) + 0.02
    assert abs(float(t.std()) / std - 1) < tol, (name, float(t.std()), std)


@pytest.mark.reference
def test_init_rules_match_tooling() -> None:
    _need_reference()
    tts, codec = _reference_modules()
    table = json.loads((TABLE_DIR / "1.7B-Base.json").read_text(encoding="utf-8"))
    for section, module in (("model", tts), ("speech_tokenizer", codec)):
        for name, t in module.state_dict().items():
            init = randmodel.tensor_init(table, section, name)
            if t.numel() >= 64 or init.kind == "constant":
                _check_moments(name, t.float().numpy(), init)


# ------------------------------------------------------------------------------------------
# (2) a full-size 0.6B-Base random checkpoint converts, loads and generates
# ------------------------------------------------------------------------------------------

def test_random_0b6_base_generates(tmp_path: Path) -> None:
    import qtts
    from qtts.convert.checkpoint import convert

    t0 = time.perf_counter()
    ck = randmodel.write_random_checkpoint("0.6B-Base", tmp_path / "ck", seed=0)
    t_write = time.perf_counter() - t0
    gguf = convert(ck, tmp_path / "m.gguf", "q8_0")
    t_convert = time.perf_counter() - t0 - t_write

    model = qtts.Model(gguf, n_threads=2)
    t = np.arange(24000, dtype=np.float32) / 24000
    wav = (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
    voice = model.create_voice((wav, 24000), x_vector_only_mode=True)
    r = model.generate_codes("Hello from a random model.", voice=voice, max_new_tokens=4, do_sample=False,
                             subtalker_dosample=False)
    codes = np.asarray(r.codes)
    assert codes.ndim == 2 and codes.shape[1] == 16 and 1 <= codes.shape[0] <= 4
    assert codes.min() >= 0 and codes.max() < 2048
    audio = np.asarray(model.decode(codes))
    assert audio.size == 1920 * len(codes) and np.isfinite(audio).all()
    assert 0.02 < float(audio.std()) < 0.9  # neither silent nor saturating the final clamp
    print(f"write {t_write:.1f} s, convert {t_convert:.1f} s, "
          f"load+voice+generate+decode {time.perf_counter() - t0 - t_write - t_convert:.1f} s", file=sys.stderr)

    # Each tensor is a function of (seed, name) alone: recomputing it gives the file's bytes.
    for section, name in (("model", "talker.model.layers.3.mlp.up_proj.weight"), ("model", "talker.model.norm.weight"),
                          ("speech_tokenizer", "decoder.pre_conv.conv.weight")):
        path = ck / ("model.safetensors" if section == "model" else "speech_tokenizer/model.safetensors")
        stored = _head(path, name)
        assert stored == randmodel.random_tensor("0.6B-Base", section, name, seed=0).tobytes()[:len(stored)]
        assert stored != randmodel.random_tensor("0.6B-Base", section, name, seed=1).tobytes()[:len(stored)]


def _head(path: Path, name: str) -> bytes:
    """The first MB of a tensor's stored bytes."""
    ref = read_header(path)[name]
    with open(path, "rb") as f:
        f.seek(ref.offset)
        return f.read(min(ref.nbytes, 1 << 20))


@pytest.mark.parametrize("section, name, mean, std", [
    ("model", "talker.model.layers.0.mlp.down_proj.weight", 0.0, 0.02),
    ("model", "talker.model.layers.0.input_layernorm.weight", 1.0, 0.1),
    ("model", "speaker_encoder.mfa.conv.weight", 0.0, 1 / math.sqrt(1536)),
    ("speech_tokenizer", "decoder.decoder.1.block.1.conv.weight", 0.0, 1 / math.sqrt(1536 * 2)),
    ("speech_tokenizer", "encoder.quantizer.acoustic_residual_vector_quantizer.layers.3.codebook.embed_sum", 0.0, 1.0),
], ids=["talker-linear", "rms-norm", "speaker-conv", "vocoder-conv-transpose", "codebook"])
def test_random_tensor_statistics(section: str, name: str, mean: float, std: float) -> None:
    x = randmodel.random_tensor("0.6B-Base", section, name, seed=3)
    x = (x.astype(np.uint32) << 16).view(np.float32) if x.dtype == np.uint16 else x
    assert np.isfinite(x).all()
    assert abs(float(x.mean()) - mean) < 0.02 * std + 5 * std / math.sqrt(x.size)
    assert abs(float(x.std()) / std - 1) < 0.02 + 5 / math.sqrt(x.size)


def test_tokenizer_has_the_released_special_ids(tmp_path: Path) -> None:
    from qtts.runtime.text.tokenizer import Tokenizer

    table = randmodel.release_table("0.6B-CustomVoice")
    randmodel._write_tokenizer(tmp_path, table["config"])
    tok = Tokenizer.from_dir(tmp_path)
    cfg = table["config"]
    assert tok.encode("<|im_start|>assistant\n") == [cfg["im_start_token_id"], cfg["assistant_token_id"], 198]
    for key, text in (("im_end_token_id", "<|im_end|>"), ("tts_pad_token_id", "<tts_pad>"),
                      ("tts_bos_token_id", "<tts_text_bos>"), ("tts_eos_token_id", "<tts_text_eod>")):
        assert tok.token_to_id(text) == cfg[key]
    assert tok.vocab_size <= cfg["talker_config"]["text_vocab_size"]
    assert len(tok.prompt_text_ids("Hello world, this is a speed test.")) > 0


def test_unknown_release_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown release"):
        randmodel.write_random_checkpoint("0.6B-Turbo", tmp_path)
    assert not any(tmp_path.iterdir())


if __name__ == "__main__":
    write_tables()
