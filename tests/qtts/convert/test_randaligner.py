"""qtts.convert.randaligner: the full-size random aligner's tensor table against the reference's
own classes (built on torch's meta device from the released configuration), and a small random
checkpoint through the converter and the aligner."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

import qtts
from qtts.convert.checkpoint import convert
from qtts.convert.randaligner import CONFIG, tensor_table, write_random_aligner


def test_table_is_the_reference_layout(reference_aligner_dir: Path) -> None:
    import torch
    from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    fields = {k: v for k, v in CONFIG.items() if k not in ("architectures", "model_type")}
    with torch.device("meta"):
        model = Qwen3ASRForConditionalGeneration(Qwen3ASRConfig(**copy.deepcopy(fields)))
    want = {name: list(t.shape) for name, t in model.state_dict().items()}
    got = {name: shape for name, (shape, _) in tensor_table(CONFIG).items()}
    assert got == want
    assert sum(int(np.prod(s)) for s in got.values()) == 917_728_896  # the released file's 0.92 B values


def test_small_random_aligner_converts_and_aligns(tmp_path: Path) -> None:
    cfg = copy.deepcopy(CONFIG)
    a, x = cfg["thinker_config"]["audio_config"], cfg["thinker_config"]["text_config"]
    a.update(encoder_layers=1, d_model=64, encoder_ffn_dim=128, encoder_attention_heads=2, output_dim=64,
             downsample_hidden_size=16)
    x.update(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, head_dim=32)
    hf = write_random_aligner(tmp_path / "hf", seed=1, config=cfg)
    assert write_random_aligner(tmp_path / "again", seed=1, config=cfg).joinpath("model.safetensors").read_bytes() \
        == (hf / "model.safetensors").read_bytes()
    gguf = convert(hf, tmp_path / "a.gguf", "q8_0")
    with qtts.load_aligner(gguf, n_threads=1) as aligner:
        assert aligner.ids == {"audio_start": 151669, "audio_end": 151670, "audio_pad": 151676, "timestamp": 151705}
        t = np.arange(32000) / 16000
        words = aligner.align((0.3 * np.sin(2 * np.pi * 200 * t).astype(np.float32), 16000), "one two three")
    assert [w.text for w in words] == ["one", "two", "three"]
