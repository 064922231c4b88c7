"""The talker's and code predictor's joined projections (docs/architecture.md, "Fused
projections"): where a layer's q, k, v (and gate, up) have one type, the loader joins them into one
product, with one q/k norm and one RoPE; a layer whose parts differ in type keeps its separate
products. The joined weights are placed end to end whatever the file's order in huge pages, and
where the weights stay mapped only when the file has them end to end; the results are the same
bits either way."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT

import qtts
from tests import corrupt
from tests.profiling import profiled

TEXT = "Hello world, this is a tiny test."


def _run(path: Path, ops: str, huge_pages: bool) -> tuple[list[np.ndarray], dict[str, float]]:
    """Greedy and sampled codes, a waveform, and the computed nodes per graph of the talker's step
    and of the code predictor's frame."""
    m = qtts.Model(path, n_threads=2, ops=ops, huge_pages=huge_pages, voice_cache=False)
    greedy = m.generate_codes(TEXT, speaker="ryan", max_new_tokens=12, do_sample=False,
                              subtalker_dosample=False).codes
    sampled = m.generate_codes(TEXT, speaker="ryan", max_new_tokens=12, seed=3).codes
    audio, prof = profiled(m, lambda: m.synthesize(TEXT, speaker="ryan", max_new_tokens=12, seed=1).samples)
    nodes = {ph: prof[f"{ph}/:nodes"] / prof[f"{ph}/:graphs"] for ph in ("talker", "predictor")}
    return [greedy, sampled, np.asarray(audio)], nodes


@pytest.mark.parametrize("qtype", ["f32", "q8_0"])
def test_joined_weights_in_huge_pages_and_mapped_give_the_same_bits(gguf_dir: Path, qtype: str) -> None:
    """The tiny files store a layer's tensors in name order (attn_k before attn_q): the parts are
    read end to end into huge pages (Q8_0 joined weights packed whole); weights that stay mapped
    keep their separate products rather than a private copy of the joined ones (GgufFile::
    keep_mapped_shared), with the same bits."""
    path = gguf_dir / f"tiny_custom_voice-{qtype}.gguf"
    huge, huge_nodes = _run(path, "native", True)
    mapped, mapped_nodes = _run(path, "native", False)
    for got, want in zip(mapped, huge, strict=True):
        assert got.size > 0
        np.testing.assert_array_equal(got, want)
    assert mapped_nodes["talker"] > huge_nodes["talker"] and mapped_nodes["predictor"] > huge_nodes["predictor"]


@pytest.mark.parametrize("ops", ["native", "portable"])
def test_a_layer_whose_parts_differ_in_type_keeps_separate_products(gguf_dir: Path, tmp_path: Path,
                                                                    ops: str) -> None:
    """The talker's layer 0 with attn_v in Q8_0 (as the K-quant targets store attn_v in Q6_K) keeps
    three q, k, v products, two norms and two RoPEs: 5 computed nodes more per step (4 on the
    portable path, where a joined layer's step copies its strided v before set_rows); the code
    predictor's layer 1 with ffn_up in BF16 keeps two MLP products: one node more per step, 15 per
    frame. The other layers stay joined."""
    src = gguf_dir / "tiny_custom_voice-f32.gguf"
    mixed = corrupt.retype_tensor(src, tmp_path / "v.gguf", "talker.blk.0.attn_v.weight", GT.Q8_0)
    mixed = corrupt.retype_tensor(mixed, tmp_path / "mixed.gguf", "code_pred.blk.1.ffn_up.weight", GT.BF16)
    joined = _run(src, ops, True)[1]
    outs, nodes = _run(mixed, ops, True)
    more = 5 if ops == "native" else 4
    assert nodes == {"talker": joined["talker"] + more, "predictor": joined["predictor"] + 15}
    assert outs[0].shape[0] > 0 and outs[2].size > 0
    if ops == "native":  # the separate products in huge pages and mapped: the same bits
        again = _run(mixed, ops, False)[0]
        for got, want in zip(again, outs, strict=True):
            np.testing.assert_array_equal(got, want)
