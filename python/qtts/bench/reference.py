"""`bench speed --compare-reference`: the official qwen-tts on the same checkpoint, in its own process."""
from __future__ import annotations

import time
from typing import Any

from .common import TEXT, clip


def reference_worker(hf_dir: str, threads: int, frames: int, seed: int) -> dict[str, Any]:
    """The official qwen-tts on the same checkpoint: fp32, x-vector voice, same frame count."""
    import torch

    from .._reference import install
    from ..runtime.audio.audio import peak_rss_mb

    install()  # placeholders for the reference's optional audio imports
    from qwen_tts import Qwen3TTSModel

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    ref = Qwen3TTSModel.from_pretrained(hf_dir, dtype=torch.float32, device_map="cpu")
    r: dict[str, Any] = {}
    t0 = time.perf_counter()
    ref.model.extract_speaker_embedding(clip(30.0), 24000)
    r["speaker_encode_30s_ms"] = (time.perf_counter() - t0) * 1e3
    items = ref.create_voice_clone_prompt(ref_audio=(clip(10.0), 24000), x_vector_only_mode=True)
    prompt = ref._prompt_items_to_voice_clone_prompt(items)
    ids = ref._tokenize_texts([ref._build_assistant_text(TEXT)])
    with torch.inference_mode():
        t0 = time.perf_counter()
        codes, _ = ref.model.generate(input_ids=ids, ref_ids=[None], voice_clone_prompt=prompt, languages=["auto"],
                                      non_streaming_mode=False, min_new_tokens=frames, max_new_tokens=frames + 1)
        gen_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref.model.speech_tokenizer.decode([{"audio_codes": codes[0]}])
        voc_s = time.perf_counter() - t0
    n = int(codes[0].shape[0])
    r.update(frames=n, generation_ms_per_frame=gen_s * 1e3 / n, vocoder_ms_per_frame=voc_s * 1e3 / n,
             rtf=(gen_s + voc_s) / (n * 0.08), peak_rss_mb=peak_rss_mb())
    return r
