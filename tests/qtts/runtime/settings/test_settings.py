"""Each generation setting is declared once (a GenerationConfig field with its metadata): the
command line, the server's request body, the manifest fields, read_defaults and native_params
follow the declarations, and one parser reads a frame budget wherever it comes from
(docs/architecture.md, "Adding a sampling parameter")."""
from __future__ import annotations

import argparse
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from qtts import cli
from qtts.bulk import manifest
from qtts.cli import speak
from qtts.runtime.engine import engine
from qtts.runtime.settings import config
from qtts.runtime.settings.config import GenerationConfig, frame_budget_of, parse_frame_budget, setting, settings_of
from qtts.server import schemas  # before any test patches the settings: SpeechRequest is built on import

# A model's generation defaults as read_defaults gives them (the released models' values)
DEFAULTS = config.model_defaults()


@dataclass(frozen=True, kw_only=True)
class WithMinP(GenerationConfig):
    """GenerationConfig with one more setting, declared the way config.py declares its own."""
    min_p: float = setting(float, "talker.min_p", 0.0, lo=0.0, hi=1.0, in_model=False, cli=True,
                           help="drop the codes less likely than P times the most likely one (0: off)")
    mirostat: bool = setting(bool, "mirostat", False, in_model=False, cli=True, server=False,
                             help="a switch of the whole generation")


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.build_parser().parse_args([command, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


def _parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def _distinct_values() -> dict[str, Any]:
    """A value for every setting that differs from its default and is exact in float32."""
    values: dict[str, Any] = {}
    for name, spec in config.SETTING_SPECS.items():
        if spec.kind is bool:
            values[name] = not spec.default
        elif spec.kind is int:
            values[name] = int(spec.lo) + 3 + len(values)
        else:
            values[name] = 0.25 if spec.default != 0.25 else 0.5
    return values


@pytest.mark.parametrize("talker_samples", [True, False])
def test_every_setting_reaches_native_params(talker_samples: bool) -> None:
    values = _distinct_values()
    # one network samples (its temperature must then be positive), the other is greedy
    values.update(do_sample=talker_samples, subtalker_dosample=not talker_samples, temperature=0.75,
                  subtalker_temperature=1.25)
    piece = GenerationConfig.resolve(DEFAULTS, values, seed=9, frame_budget=40).for_piece(0, "Hi.")
    native = engine.native_params(piece)
    for name, spec in config.SETTING_SPECS.items():
        got: Any = native
        for part in spec.native.split("."):
            got = getattr(got, part)
        assert got == pytest.approx(values[name]), name
    assert (native.seed, native.frame_budget) == (9, 40)


def test_read_defaults_has_every_model_setting(fixture_root: Path, gguf_dir: Path) -> None:
    # generation_config.json -> converter -> GGUF -> the native reader -> read_defaults
    from qtts.convert.hfconfig import read_checkpoint

    written = read_checkpoint(fixture_root / "tiny_custom_voice").generation
    defaults = engine.Engine.metadata(str(gguf_dir / "tiny_custom_voice-f32.gguf")).generation_defaults
    assert list(defaults) == [n for n, s in config.SETTING_SPECS.items() if s.in_model] == list(DEFAULTS)
    assert set(written) == set(DEFAULTS)
    for name, value in defaults.items():
        assert value == pytest.approx(written[name]), name


def test_every_setting_reaches_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    flagged = [n for n, s in config.SETTING_SPECS.items() if s.cli]
    assert flagged == ["temperature", "top_k", "top_p", "repetition_penalty", "max_new_tokens"]
    values = {n: v for n, v in _distinct_values().items() if n in flagged}
    argv = [a for n, v in values.items() for a in (config.flag_of(n), str(v))]
    for command in ("speak", "batch"):
        extra = ["-p", "hi"] if command == "speak" else ["items.jsonl", "--output-dir", "out"]
        args = _parse(command, "-m", "m.gguf", *extra, *argv, "--greedy")
        assert speak.sampling(args) == {**values, "do_sample": False, "subtalker_dosample": False}
        text = _help(command, capsys)
        for name in flagged:
            assert config.flag_of(name) in text
    # the rest are the Python API's (and the server's) only: --greedy covers the two do_sample flags
    assert sorted(set(config.SETTINGS) - set(flagged)) == [
        "do_sample", "min_new_tokens", "subtalker_dosample", "subtalker_temperature", "subtalker_top_k",
        "subtalker_top_p"]


def test_a_new_setting_needs_only_its_declaration(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # config.py is the one file a new setting touches on the Python side: declared there (here: a
    # subclass with the field), the CLI, the server's schema, the manifest and native_params take it
    monkeypatch.setattr(config, "SETTING_SPECS", settings_of(WithMinP))
    for command in ("speak", "batch"):
        text = _help(command, capsys)
        assert "--min-p MIN_P" in text and "--mirostat, --no-mirostat" in text
    args = _parse("speak", "-m", "m.gguf", "-p", "hi", "--min-p", "0.05", "--mirostat")
    assert speak.sampling(args) == {"min_p": 0.05, "mirostat": True}
    with pytest.raises(SystemExit):
        _parse("speak", "-m", "m.gguf", "-p", "hi", "--min-p", "2")
    assert "--min-p: min_p must be a finite number in [0, 1], got 2.0" in capsys.readouterr().err

    from fastapi import FastAPI

    request = schemas.request_model()
    assert request.model_json_schema()["properties"]["min_p"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert request(model="m", input="hi", min_p=0.1, top_k=3).sampling() == {"top_k": 3, "min_p": 0.1}
    assert "mirostat" not in request.model_fields  # declared server=False
    app = FastAPI()
    app.post("/v1/audio/speech")(_endpoint(request))
    assert "min_p" in app.openapi()["components"]["schemas"]["SpeechRequest"]["properties"]

    assert {"min_p", "mirostat"} <= set(manifest.fields())
    item = manifest.parse_item({"id": "a", "text": "x", "min_p": 0.5}, 1)
    assert item.sampling == {"min_p": 0.5} and item.row()["min_p"] == 0.5
    with pytest.raises(ValueError, match="min_p"):
        manifest.parse_item({"id": "a", "text": "x", "min_p": -1.0}, 1)

    resolved = WithMinP.resolve(DEFAULTS, {"min_p": 0.5}, seed=1)
    assert (resolved.min_p, WithMinP.resolve(DEFAULTS, {}, seed=1).min_p) == (0.5, 0.0)

    class FakeCore:  # the binding as it would be once its SamplingParams has min_p
        @staticmethod
        def GenerateParams(**kw: Any) -> types.SimpleNamespace:  # noqa: N802 (the binding's name)
            return types.SimpleNamespace(talker=types.SimpleNamespace(), subtalker=types.SimpleNamespace(), **kw)

    monkeypatch.setattr(engine, "core", FakeCore)
    native = engine.native_params(resolved.for_piece(0, "x"))
    assert (native.talker.min_p, native.mirostat, native.talker.top_k, native.subtalker.top_k) == (0.5, False, 50, 50)


def _endpoint(request: type) -> Any:
    def create_speech(body: Any) -> dict[str, Any]:
        return body.sampling()  # type: ignore[no-any-return]
    create_speech.__annotations__["body"] = request  # the annotation FastAPI reads the body's schema from
    return create_speech


def test_server_takes_the_settings_declared_for_it() -> None:
    SpeechRequest = schemas.SpeechRequest  # noqa: N806 (the class's own name)
    settings = set(SpeechRequest.model_fields) - set(schemas.RequestFields.model_fields) - set(schemas.option_fields())
    assert settings == {n for n, s in config.SETTING_SPECS.items() if s.server}
    assert "min_new_tokens" not in settings and "top_k" in settings
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="min_new_tokens"):
        SpeechRequest(model="m", input="hi", min_new_tokens=3)


@pytest.mark.parametrize(("given", "want"), [
    ("auto", "auto"), (" AUTO ", "auto"), (None, None), ("none", None), ("None", None), (" NONE\n", None),
    (5, 5), (np.int64(5), 5), ("5", 5), (" 40 ", 40), ("+7", 7), (2**31 - 1, 2**31 - 1)])
def test_one_frame_budget_parser(given: Any, want: Any) -> None:
    assert parse_frame_budget(given) == want
    assert GenerationConfig.resolve(DEFAULTS, {}, 0, frame_budget=given).frame_budget == want
    assert manifest.parse_item({"id": "a", "text": "x", "frame_budget": given}, 1).frame_budget == \
        ("auto" if given is None else want)  # a null field takes the default, as every null field
    if isinstance(given, str):
        assert _parse("speak", "-m", "m.gguf", "--frame-budget", given).frame_budget == want


@pytest.mark.parametrize(("given", "error"), [
    ("never", ValueError), ("", ValueError), ("5.0", ValueError), (0, ValueError), ("0", ValueError),
    (-3, ValueError), (2**31, ValueError), (2.5, TypeError), (5.0, TypeError), (True, TypeError)])
def test_bad_frame_budget_is_refused_everywhere(given: Any, error: type,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(error, match="frame_budget"):
        GenerationConfig.resolve(DEFAULTS, {}, 0, frame_budget=given)
    with pytest.raises(error, match="frame_budget"):
        manifest.parse_item({"id": "a", "text": "x", "frame_budget": given}, 1)
    if isinstance(given, str):
        with pytest.raises(SystemExit):
            _parse("speak", "-m", "m.gguf", "--frame-budget", given)
        assert "argument --frame-budget: frame_budget must be" in capsys.readouterr().err


def test_auto_frame_budget_is_a_generous_guard() -> None:
    # "auto" must never cut speech short: 10 s of slack over a slow reading (10 characters a
    # second at 12.5 frames a second), more room for characters spoken longer (CJK, digits read
    # out as words), and it grows with the text
    for n in (0, 1, 40, 400, 4000):
        latin = frame_budget_of("a" * n, "auto")
        assert latin is not None and latin >= 125 + n * 12.5 / 10
        assert frame_budget_of("中" * n, "auto") >= latin and frame_budget_of("7" * n, "auto") >= latin
        if n:
            assert frame_budget_of("中" * n, "auto") > latin
            assert frame_budget_of("a" * (n + 1), "auto") >= latin
    assert frame_budget_of("a" * 4000, "auto") > frame_budget_of("a" * 400, "auto")
    assert frame_budget_of("anything", None) is None and frame_budget_of("anything", 7) == 7
