"""The option declarations (runtime/settings/options.py): every consumer derives from them. The public
methods keep explicit keyword arguments, held here to the declared names and defaults; each
command takes the flags its options name; the bulk runners and Ray carry the load options whole;
and a new option reaches the command line, the bulk runners, Ray's actors and the loaded model
through its declaration alone."""
from __future__ import annotations

import argparse
import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import qtts
from qtts import cli
from qtts.bulk import manifest
from qtts.bulk.local import ModelSpec
from qtts.bulk.rayrun import RayRunner
from qtts.runtime.model.model import Model, load
from qtts.runtime.scheduling.scheduler import Scheduler
from qtts.runtime.settings import options
from qtts.runtime.settings.options import (
    ALIGN,
    BATCH,
    BENCH,
    SERVE,
    SPEAK,
    VOICE,
    WYOMING,
    BatchOptions,
    LoadOptions,
    RayServeOptions,
    RequestOptions,
    ServeOptions,
    StreamOptions,
    WyomingOptions,
    defaults_of,
    integer,
    option,
    specs_of,
)
from qtts.server import schemas

COMMANDS = {SPEAK: ["speak"], SERVE: ["serve"], BATCH: ["batch"], VOICE: ["voice", "create"], BENCH: ["bench", "speed"],
            WYOMING: ["wyoming"], ALIGN: ["align"]}


def _keywords(fn: Callable[..., Any]) -> dict[str, Any]:
    return {k: p.default for k, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize(("fn", "group", "exceptions"), [
    (load, LoadOptions, {}),
    (Model.__init__, LoadOptions, {}),
    (Model.synthesize, RequestOptions, {}),
    (Model.stream, RequestOptions, {}),
    (Model.stream, StreamOptions, {}),
    (Model.stream_text, RequestOptions, {"non_streaming_mode": False}),  # the text goes in with the frames
    (Model.stream_text, StreamOptions, {}),
    (Scheduler.submit, RequestOptions, {}),
    (Scheduler.__init__, StreamOptions, {}),
])
def test_public_keywords_are_the_declared_options(fn: Callable[..., Any], group: type, exceptions: dict) -> None:
    kw = _keywords(fn)
    for name, default in defaults_of(group).items():
        assert name in kw, f"{fn.__qualname__} lacks the option {name}"
        assert kw[name] == exceptions.get(name, default), f"{fn.__qualname__}'s {name} default differs"


def test_generate_codes_keywords_are_declared_options() -> None:
    declared = defaults_of(RequestOptions)
    for name, default in _keywords(Model.generate_codes).items():
        assert declared[name] == default


def _parser_flags(argv: list[str]) -> dict[str, argparse.Action]:
    parser = cli.build_parser()
    sub = parser
    for word in argv:
        sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    return {a.dest: a for a in sub._actions}


@pytest.mark.parametrize("group", [LoadOptions, RequestOptions, ServeOptions, BatchOptions, WyomingOptions,
                                   RayServeOptions])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_the_options_that_name_it(group: type, command: str) -> None:
    flags = _parser_flags(COMMANDS[command])
    for name, spec in specs_of(group).items():
        if command in spec.commands:
            assert name in flags, f"qtts-cli {command} lacks {spec.flag_names(name)}"
            assert flags[name].help == spec.help  # the declaration's flag, not a hand-written one


def test_voice_alias_takes_several_values_and_flags() -> None:
    """The option of several values (many=True): one or more words per flag, the flag again."""
    args = cli.build_parser().parse_args(["serve", "-m", "m.gguf", "--voice-alias", "alloy=ryan",
                                          "narrator=A calm, deep voice=low", "--voice-alias", "echo=aiden",
                                          "--lists-without-key"])
    opts = ServeOptions.from_args(args)
    assert opts.voice_alias == (("alloy", "ryan"), ("narrator", "A calm, deep voice=low"), ("echo", "aiden"))
    assert opts.lists_without_key and not ServeOptions.from_args(
        cli.build_parser().parse_args(["serve", "-m", "m.gguf"])).lists_without_key
    args = cli.build_parser().parse_args(["wyoming", "-m", "m.gguf", "--voice-alias", "nova=vivian", "--no-streaming",
                                          "--uri", "tcp://0.0.0.0:10300", "--max-batch", "4", "-t", "1"])
    assert ServeOptions.from_args(args).voice_alias == (("nova", "vivian"),)
    assert WyomingOptions.from_args(args) == WyomingOptions(uri="tcp://0.0.0.0:10300", streaming=False)
    assert BatchOptions.from_args(args).max_batch == 4 and LoadOptions.from_args(args).n_threads == 1


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--voice-alias", "alloy"], "expected ALIAS=VOICE, got 'alloy'"),
    (["serve", "--voice-alias", "=ryan"], "alias '' must be 1-64 letters"),
    (["serve", "--voice-alias", "alloy="], "alloy's voice must be 1-4096 characters"),
    (["wyoming", "--uri", "http://x:1"], "uri must be tcp://HOST:PORT or unix://PATH"),
    (["wyoming", "--uri", "tcp://host"], "uri must be tcp://HOST:PORT"),
])
def test_bad_server_flags_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([argv[0], "-m", "m.gguf", *argv[1:]])
    assert message in capsys.readouterr().err


def test_serve_takes_ops_and_voice_create_takes_precision() -> None:
    args = cli.build_parser().parse_args(["serve", "-m", "m.gguf", "--ops", "portable"])
    assert LoadOptions.from_args(args).ops == "portable"
    args = cli.build_parser().parse_args(["voice", "create", "-m", "m.gguf", "--ref-audio", "a.wav", "-o", "v",
                                          "--precision", "exact"])
    assert LoadOptions.from_args(args, huge_pages=False).precision == "exact"


@pytest.mark.parametrize(("group", "given", "error", "match"), [
    (LoadOptions, dict(ops="gpu"), ValueError, "ops must be one of auto, native, portable, got 'gpu'"),
    (LoadOptions, dict(precision=1), TypeError, "precision must be a str"),
    (LoadOptions, dict(n_threads=0), ValueError, "n_threads must be in"),
    (LoadOptions, dict(huge_pages="no"), TypeError, "huge_pages"),
    (RequestOptions, dict(speaker=3), TypeError, "speaker must be a str"),
    (RequestOptions, dict(seed=-1), ValueError, "seed"),
    (RequestOptions, dict(split_sentences="always"), ValueError, "split_sentences"),
    (RequestOptions, dict(frame_budget=0), ValueError, "frame_budget"),
    (StreamOptions, dict(first_chunk_frames=0), ValueError, "first_chunk_frames must be in"),
    (StreamOptions, dict(first_chunk_frames=4, max_chunk_frames=2), ValueError, "first_chunk_frames <= max"),
])
def test_each_option_is_checked_where_its_group_is_built(group: type, given: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        group(**given)


def test_the_manifest_and_the_server_take_the_options_declared_for_them() -> None:
    declared = [n for n, s in specs_of(RequestOptions).items() if s.manifest]
    assert list(manifest.fields()[2:2 + len(declared)]) == declared
    assert {f.name for f in dataclasses.fields(manifest.Item)} >= set(declared)
    served = {n for n, s in specs_of(RequestOptions).items() if s.server}
    assert served <= set(schemas.SpeechRequest.model_fields)
    assert served == set(schemas.option_fields())


def test_the_ray_runner_carries_every_load_option(tmp_path: Path) -> None:
    """The bug this declaration fixes: `batch --ray --precision exact` ran at auto."""
    args = cli.build_parser().parse_args(["batch", "m.jsonl", "-m", "m.gguf", "--output-dir", str(tmp_path), "--ray",
                                          "--precision", "exact", "--ops", "portable", "--no-huge-pages", "-t", "2"])
    spec = ModelSpec("m.gguf", LoadOptions.from_args(args))
    kwargs = RayRunner(spec, 2, 4).actor_kwargs()
    assert {k: kwargs[k] for k in ("precision", "ops", "huge_pages", "n_threads")} == \
        dict(precision="exact", ops="portable", huge_pages=False, n_threads=1)
    assert set(defaults_of(LoadOptions)) <= set(kwargs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WithDummy(LoadOptions):
    dummy_knob: int = option(3, "a knob only this test has", check=integer(0, 9),
                             commands=(SPEAK, SERVE, BATCH, VOICE), parse=int)


def test_a_new_load_option_needs_only_its_declaration(monkeypatch: pytest.MonkeyPatch, gguf_dir: Path,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(options, "LoadOptions", WithDummy)
    model = str(gguf_dir / "tiny_custom_voice-f32.gguf")
    argvs = {SPEAK: ["speak", "-m", model, "-p", "hi"], SERVE: ["serve", "-m", model],
             BATCH: ["batch", "m.jsonl", "-m", model, "--output-dir", str(tmp_path)],
             VOICE: ["voice", "create", "-m", model, "--ref-audio", "a.wav", "-o", "v"]}
    for argv in argvs.values():
        args = cli.build_parser().parse_args([*argv, "--dummy-knob", "5"])
        assert args.dummy_knob == 5
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args([*argv, "--dummy-knob", "12"])
        assert "argument --dummy-knob: dummy_knob must be in [0, 9]" in capsys.readouterr().err
    # the command line's model, the bulk runners' spec, Ray's actors: each gets it
    args = cli.build_parser().parse_args([*argvs[SERVE], "--dummy-knob", "5", "-t", "1"])
    from qtts.cli.common import load_model

    with load_model(args) as m:
        assert m.options.dummy_knob == 5
    from qtts.cli.batch import _runner

    args = cli.build_parser().parse_args([*argvs[BATCH], "--dummy-knob", "6", "--jobs", "2"])
    spec = _runner(args).spec
    assert spec.options.dummy_knob == 6
    kwargs = RayRunner(spec, 2, 4).actor_kwargs()
    assert kwargs["dummy_knob"] == 6
    import qtts.ray

    synth = qtts.ray.Synthesizer(**kwargs)
    assert synth._synth.model.options.dummy_knob == 6
    synth._synth.model.close()


def test_options_round_trip_through_the_bulk_spec(gguf_dir: Path) -> None:
    spec = ModelSpec(str(gguf_dir / "tiny_custom_voice-f32.gguf"),
                     LoadOptions(n_threads=1, ops="portable", precision="exact", huge_pages=False))
    with spec.load() as m:
        assert (m.ops, m.precision, m.options.huge_pages, m.n_threads) == ("portable", "exact", False, 1)
        a = m.synthesize("Hello there.", speaker="ryan", seed=3, max_new_tokens=8)
    with qtts.load(spec.model, n_threads=1, ops="portable", precision="exact", huge_pages=False) as m:
        b = m.synthesize("Hello there.", speaker="ryan", seed=3, max_new_tokens=8)
    np.testing.assert_array_equal(a.samples, b.samples)
