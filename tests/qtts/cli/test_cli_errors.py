"""How qtts-cli ends: bad input and engine failures in one line, Ctrl-C with 130, a bug with its
traceback; and the sampling flags reaching synthesize() under qwen-tts's names."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import qtts
from qtts import cli
from qtts.cli import speak
from qtts.errors import QttsError

GGML_LINE = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 3221225472"


@pytest.fixture(scope="module")
def cv(gguf_dir: Path) -> str:
    return str(gguf_dir / "tiny_custom_voice-f32.gguf")


def _argv(cv: str, out: Path) -> list[str]:
    return ["speak", "-m", cv, "--speaker", "ryan", "--greedy", "--max-new-tokens", "8", "-q", "-p", "Hello.",
            "-o", str(out)]


def _raise(error: BaseException) -> object:
    def synthesize(self: qtts.Model, *args: object, **kw: object) -> None:
        raise error
    return synthesize


@pytest.mark.parametrize("ggml_log", [(), (GGML_LINE,)])
def test_engine_failure_is_one_line(cv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str], ggml_log: tuple[str, ...]) -> None:
    monkeypatch.setattr(qtts.Model, "synthesize", _raise(QttsError("cannot allocate the KV cache", ggml_log)))
    assert cli.main(_argv(cv, tmp_path / "x.wav")) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["qtts-cli: error: cannot allocate the KV cache", *(f"  ggml: {x}" for x in ggml_log)]
    assert not (tmp_path / "x.wav").exists()


def test_bad_input_is_one_line_and_ctrl_c_exits_130(cv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    for error, status, message in ((ValueError("language 'xx' is unknown"), 1, "error: language 'xx' is unknown"),
                                   (TypeError("seed must be an integer"), 1, "error: seed must be an integer"),
                                   (KeyboardInterrupt(), 130, "interrupted")):
        monkeypatch.setattr(qtts.Model, "synthesize", _raise(error))
        assert cli.main(_argv(cv, tmp_path / "x.wav")) == status
        assert capsys.readouterr().err == f"qtts-cli: {message}\n"


@pytest.mark.parametrize("bug", [AttributeError, RuntimeError])
def test_a_bug_raises_out_of_main(cv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  bug: type[Exception]) -> None:
    monkeypatch.setattr(qtts.Model, "synthesize", _raise(bug("a bug in qtts")))
    with pytest.raises(bug, match="a bug in qtts"):
        cli.main(_argv(cv, tmp_path / "x.wav"))


def test_a_bug_shows_its_traceback(cv: str, tmp_path: Path) -> None:
    code = ("import sys, qtts\n"
            "def synthesize(self, *args, **kw):\n"
            "    raise RuntimeError('a bug in qtts')\n"
            "qtts.Model.synthesize = synthesize\n"
            "from qtts.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    r = subprocess.run([sys.executable, "-c", code, *_argv(cv, tmp_path / "x.wav")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 1 and "Traceback (most recent call last)" in r.stderr, r.stderr
    assert r.stderr.rstrip().endswith("RuntimeError: a bug in qtts") and "qtts-cli: error" not in r.stderr


def test_sampling_flags_keep_qwen_tts_names() -> None:
    args = cli.build_parser().parse_args(["speak", "-m", "m.gguf", "-p", "hi", "--temperature", "0.7",
                                          "--top-k", "20", "--top-p", "0.8", "--repetition-penalty", "1.1",
                                          "--max-new-tokens", "100", "--greedy", "-s", "3",
                                          "--frame-budget", "40"])
    assert speak.sampling(args) == dict(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1,
                                        max_new_tokens=100, do_sample=False, subtalker_dosample=False)
    assert (args.seed, args.frame_budget) == (3, 40)
    assert speak.sampling(cli.build_parser().parse_args(["speak", "-m", "m.gguf"])) == {}
