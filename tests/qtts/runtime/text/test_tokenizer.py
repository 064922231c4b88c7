"""qtts.runtime.text.tokenizer against the reference Qwen2TokenizerFast on the tiny fixture checkpoints."""
from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest

from qtts.runtime.text.tokenizer import (
    Tokenizer,
    TokenizerData,
    TokenType,
    assistant_text,
    instruct_text,
    ref_text,
    tokenizer_metadata,
)

NAMES = ["wide_tokenizer", "tiny_base"]

CORPUS = [
    "Hello world! The quick brown fox.", "我叫通义千问，是阿里云的开源大模型。", "こんにちは世界。カタカナ",
    "안녕하세요 세계.", "Привет, мир! Это тест.", "Ça va? Größe, naïve café, ¿Qué tal? Ελληνικά",
    "1234567", "3.14", "pi=3.14159, 1,000,000 $19.99 50%", "!!!???...", "--- ***///###", "a/b/c",
    "😀🎉👍🏽 👨‍👩‍👧 ❤️ 🏳️‍🌈", "  two  spaces", "tabs\tand\t\tmore", "a\n\nb", "a\r\nb\r\n",
    "trailing   ", "   ", "\n", " \n \n", "McDonald iPhone JavaScript GPT-4o O'Neil",
    "I'm you're WE'LL IT'S she'd", "e\u0301 cafe\u0301 caf\u00e9 \u212b",
    "<|im_start|>user\nhi<|im_end|>\n", "x<tts_pad><tts_text_bos>y<tts_text_eod>", "<|im_end",
    "",
]
TEXTS = ["Hello.", "你好，世界！", "Mixed 中文 and English, 42 times.", " leading space", "end\n"]


def _reference(d: Path):
    """The wrapper's own load path (qwen3_tts_model.py:108-118): AutoProcessor with
    fix_mistral_regex=True. wide_tokenizer has no config.json, so AutoProcessor cannot map it
    to the processor class; load Qwen3TTSProcessor directly there (same tokenizer code)."""
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSProcessor
    from transformers import AutoConfig, AutoProcessor

    AutoConfig.register("qwen3_tts", Qwen3TTSConfig, exist_ok=True)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor, exist_ok=True)
    if (d / "config.json").exists():
        return AutoProcessor.from_pretrained(str(d), fix_mistral_regex=True)
    return Qwen3TTSProcessor.from_pretrained(str(d), fix_mistral_regex=True)


@pytest.fixture(scope="session", params=NAMES)
def case(request, fixture_root):
    from transformers import AutoTokenizer

    d = fixture_root / request.param
    auto = AutoTokenizer.from_pretrained(str(d))
    assert type(auto).__name__ == "Qwen2TokenizerFast"
    return d, _reference(d), auto, Tokenizer.from_data(tokenizer_metadata(d))


def _samples() -> list[str]:
    return CORPUS + [f(t) for t in TEXTS + CORPUS[:6] for f in (assistant_text, ref_text, instruct_text)]


def test_ids_match_reference(case):
    _, proc, auto, tok = case
    bad = []
    for s in _samples():
        want = proc(text=s, return_tensors="pt", padding=True)["input_ids"][0].tolist()
        if tok.encode(s) != want or auto(s)["input_ids"] != want:
            bad.append((s, tok.encode(s), want))
    assert not bad


def test_decode_roundtrip(case):
    _, proc, _, tok = case
    for s in _samples():
        ids = tok.encode(s)
        assert tok.decode(ids) == unicodedata.normalize("NFC", s)
        assert tok.decode(ids) == proc.decode(ids)


def test_templates(case):
    _, proc, _, tok = case
    for t in TEXTS:
        assert tok.assistant_ids(t) == tok.encode(assistant_text(t))
        assert tok.assistant_ids(t)[:3] == [tok.token_to_id("<|im_start|>"),
                                            tok.token_to_id("assistant"), tok.token_to_id("Ċ")]
        assert tok.instruct_ids(t) == proc.tokenizer(instruct_text(t))["input_ids"]
        assert tok.prompt_text_ids(t) == proc.tokenizer(assistant_text(t))["input_ids"][3:-5]
        assert tok.ref_prompt_ids(t) == proc.tokenizer(ref_text(t))["input_ids"][3:-2]


def test_metadata(case):
    d, proc, _, tok = case
    ref = proc.tokenizer
    md = tokenizer_metadata(d)
    assert len(md.tokens) == len(md.token_types) == len(ref) == tok.vocab_size
    assert md.tokens == ref.convert_ids_to_tokens(list(range(len(ref))))
    special = {i for i, t in ref.added_tokens_decoder.items() if t.special}
    assert special == {ref.convert_tokens_to_ids(t) for t in ref.all_special_tokens}
    assert md.token_types == [TokenType.CONTROL if i in special else TokenType.NORMAL
                              for i in range(len(ref))]
    lines = (d / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#version") and len(md.merges) == len(lines) - 1
    assert md.merges[0] == lines[1]
    assert tok.token_to_id("<tts_pad>") == ref.convert_tokens_to_ids("<tts_pad>")
    with pytest.raises(KeyError, match="nope"):
        tok.token_to_id("<nope>")


def test_tokenizer_json_only(case, tmp_path):
    d, proc, _, _ = case
    proc.tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert tokenizer_metadata(tmp_path) == tokenizer_metadata(d)


def _copy_tok(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(src / f, dst / f)
    return dst


def _edit_config(d: Path, fn) -> None:
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    fn(cfg["added_tokens_decoder"])
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def _user_token(content: str) -> dict:
    return {"content": content, "special": False, "lstrip": False, "rstrip": False,
            "normalized": False, "single_word": False}


def test_user_defined_matches_reference(fixture_root, tmp_path):
    # Released Qwen vocabularies have special=False added tokens (<think>, <tool_call> ...).
    from transformers import AutoTokenizer

    d = _copy_tok(fixture_root / "wide_tokenizer", tmp_path / "t")
    n = len(json.loads((d / "vocab.json").read_text())) + 6
    _edit_config(d, lambda dec: dec.update({str(n): _user_token("<think>"),
                                            str(n + 1): _user_token("</think>")}))
    ref, tok = AutoTokenizer.from_pretrained(str(d)), Tokenizer.from_dir(d)
    assert tokenizer_metadata(d).token_types[n:] == [TokenType.USER_DEFINED] * 2
    for s in ("a<think>b</think> c", " <think>\n\nx</think>\n", "<think><|im_end|>"):
        assert tok.encode(s) == ref(s)["input_ids"]
        assert n in tok.encode(s) and tok.decode(tok.encode(s)) == s


def test_gap(fixture_root, tmp_path):
    # The reference ignores configured ids and renumbers added tokens densely after a gap;
    # we keep the file's ids (they index the embedding table), so no reference comparison.
    d = _copy_tok(fixture_root / "tiny_base", tmp_path / "t")
    n = len(json.loads((d / "vocab.json").read_text()))
    gap, special, user = n + 9, n + 10, n + 12

    def edit(dec):
        dec[str(special)] = dec.pop(str(max(map(int, dec))))  # move the last special up
        dec[str(user)] = _user_token("<think>")
    _edit_config(d, edit)
    md = tokenizer_metadata(d)
    assert (md.tokens[gap], md.token_types[gap]) == (f"[PAD{gap}]", TokenType.UNUSED)
    assert md.token_types[special] == TokenType.CONTROL
    assert md.token_types[user] == TokenType.USER_DEFINED
    tok = Tokenizer.from_data(md)
    assert tok.vocab_size == user + 1
    text = f"a<think>b{md.tokens[special]}"
    ids = tok.encode(text)
    assert ids[1] == user and ids[-1] == special and tok.decode(ids) == text


def test_metadata_errors(fixture_root, tmp_path):
    src = fixture_root / "tiny_base"
    for i, f in enumerate(("vocab.json", "merges.txt", "tokenizer_config.json")):
        d = _copy_tok(src, tmp_path / f"missing{i}")
        (d / f).unlink()
        with pytest.raises(ValueError, match=f.replace(".", r"\.")):
            tokenizer_metadata(d)
        d = _copy_tok(src, tmp_path / f"bad{i}")
        (d / f).write_text("{" if f.endswith(".json") else "#version: 0.2\na b c\n")
        with pytest.raises(ValueError, match=f.replace(".", r"\.")):
            tokenizer_metadata(d)
    d = _copy_tok(src, tmp_path / "lstrip")
    _edit_config(d, lambda dec: next(iter(dec.values())).update(lstrip=True))
    with pytest.raises(ValueError, match="unsupported"):
        tokenizer_metadata(d)
    with pytest.raises(ValueError, match="not of the form"):
        Tokenizer.from_data(TokenizerData(["a", "b"], [1, 1], ["ab"]))


def test_prompt_validation(case):
    _, proc, _, tok = case
    for bad in ("", "   ", "\n\t "):
        with pytest.raises(ValueError, match="empty"):
            tok.prompt_text_ids(bad)
        with pytest.raises(ValueError, match="empty"):
            tok.ref_prompt_ids(bad)
    # Trailing whitespace cannot merge: the suffix starts with the special <|im_end|>.
    assert tok.prompt_text_ids("Hi \n") == proc.tokenizer(assistant_text("Hi \n"))["input_ids"][3:-5]
    # A leading newline merges with the template's "\n" exactly when "\n\n" is one token.
    ref = proc.tokenizer(assistant_text("\nHello"))["input_ids"]
    if len(proc.tokenizer("\n\n")["input_ids"]) == 1:
        assert ref[2] != tok.token_to_id("Ċ")  # the reference would cut the wrong tokens
        with pytest.raises(ValueError, match="merges with the template"):
            tok.prompt_text_ids("\nHello")
        with pytest.raises(ValueError, match="merges with the template"):
            tok.ref_prompt_ids("\n\nHello")
    else:
        assert tok.prompt_text_ids("\nHello") == ref[3:-5]
        assert tok.prompt_text_ids("\nHello")[0] == tok.token_to_id("Ċ")
