"""The aligner's word splitting and timestamp repair (runtime/text/words.py) against qwen-asr's
Qwen3ForceAlignProcessor, and the subtitle files (runtime/aligner/subtitles.py)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qtts.runtime.aligner.subtitles import format_of, to_json, to_srt, to_vtt, write_words
from qtts.runtime.text.words import Word, repair, split_words, words_from_classes

TEXTS = [
    "Hello, world! This is a test.",
    "I'm sure they'll say it's fine; can't we wait until 2026?",
    "  tabs\tand\nnewlines   and trailing  ",
    "我叫通义千问，是阿里云的开源大模型。",
    "Qwen3-TTS 说 hello 世界 and 再见!",
    "naïve café, Größe, ¿Qué tal? Привет, мир. Ελληνικά",
    "emoji 😀 👍🏽 — “quotes” ‘single’ … «guillemets» $19.99 50% #tag @user",
    "...!!! ??",
    "",
    "x",
    "𠀀𠀁 ext-B and 丽 compat",
]


@pytest.fixture(scope="module")
def processor(reference_aligner_dir: Path):
    from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForceAlignProcessor

    return Qwen3ForceAlignProcessor()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("language", ["English", "Chinese", "French"])
def test_split_matches_reference(processor, text: str, language: str) -> None:
    assert split_words(text, language) == processor.encode_timestamp(text, language)[0]


def test_repair_matches_reference(processor) -> None:
    rng = np.random.default_rng(0)
    for case in range(400):
        n = int(rng.integers(1, 40))
        if case % 3 == 0:  # mostly rising with a few wild values: the runs the repair fills
            ms = np.sort(rng.integers(0, 200, n)) * 80.0
            wild = rng.random(n) < 0.25
            ms[wild] = rng.integers(0, 200, int(wild.sum())) * 80.0
        else:
            ms = rng.integers(0, 12 if case % 3 == 1 else 5000, n) * 80.0  # ties and plateaus, or anything
        ms = ms.astype(np.float32)
        assert repair(ms.tolist()) == processor.fix_timestamp(ms), ms.tolist()


def test_repair_cases() -> None:
    assert repair([]) == []
    assert repair([0.0, 80.0, 160.0]) == [0, 80, 160]
    assert repair([0.0, 160.0, 80.0, 240.0]) == [0, 160, 160, 240]  # a short run: the nearer neighbour
    assert repair([0.0, 500.0, 400.0, 300.0, 200.0, 100.0, 600.0]) == [0, 500, 520, 540, 560, 580, 600]
    assert repair([900.0, 800.0, 0.0, 80.0, 160.0]) == [0, 0, 0, 80, 160]  # at an edge: the one neighbour
    assert repair([10.7, 10.2]) == [10, 10]  # truncated to whole ms


def test_words_from_classes() -> None:
    got = words_from_classes(["a", "b"], [1, 3, 2, 5], 80.0)
    assert got == [Word("a", 0.08, 0.24), Word("b", 0.24, 0.4)]  # the slot of class 2 repaired to 3
    with pytest.raises(ValueError, match="2 words need 4 timestamp classes, got 3"):
        words_from_classes(["a", "b"], [1, 2, 3], 80.0)


@pytest.mark.parametrize("language", ["Japanese", "korean"])
def test_japanese_and_korean_need_their_words(language: str) -> None:
    with pytest.raises(ValueError, match=f"{language.title()} need its own word splitter.*pass the words as a list"):
        split_words("こんにちは世界", language)
    # as the reference cleans its splitters' words: punctuation dropped, empty words gone
    assert split_words(["こんにちは", "、", "世界", "!"], language) == ["こんにちは", "世界"]


def test_bad_text_is_refused() -> None:
    with pytest.raises(TypeError, match="text must be a str or a list of words"):
        split_words(["a", 3], None)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="text must be a str or a list of words"):
        split_words(42, None)  # type: ignore[arg-type]


def test_subtitles(tmp_path: Path) -> None:
    words = [Word("Hello", 0.08, 0.56), Word("世界", 61.2, 3725.001)]
    assert to_srt(words) == ("1\n00:00:00,080 --> 00:00:00,560\nHello\n\n"
                             "2\n00:01:01,200 --> 01:02:05,001\n世界\n")
    assert to_vtt(words).startswith("WEBVTT\n\n00:00:00.080 --> 00:00:00.560\nHello\n")
    assert json.loads(to_json(words)) == {"words": [{"word": "Hello", "start": 0.08, "end": 0.56},
                                                    {"word": "世界", "start": 61.2, "end": 3725.001}]}
    for ext in ("srt", "vtt", "json"):
        out = write_words(tmp_path / f"w.{ext.upper()}", words)
        assert out.read_text(encoding="utf-8") == {"srt": to_srt, "vtt": to_vtt, "json": to_json}[ext](words)
    with pytest.raises(ValueError, match=r"\.srt, \.vtt or \.json, not txt"):
        format_of("words.txt")
