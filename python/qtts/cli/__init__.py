"""`qtts-cli`: speak text, clone voices, convert checkpoints and inspect model files.

`speak` is the default command, so `qtts-cli -m model.gguf -p "Hello" -o hello.wav` works too.
Base models clone a voice from a reference clip, either on the fly
(`speak --ref-audio ref.wav --ref-text "its transcript"`, or `--x-vector-only` without one) or
once into a voice file (`voice create ... -o me.qvoice`) that `speak --voice me.qvoice` reuses.

Each command lives in its own module (speak, voice, batch, serve, wyoming, align, files, bench) with its parser
and its run function; this module wires them together and turns errors into exit statuses.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..errors import QttsError
from . import align, batch, files, serve, speak, voice, wyoming
from .args import CliError, Parser, UsageError

COMMANDS = ("speak", "voice", "batch", "serve", "wyoming", "align", "convert", "quantize", "info", "speakers",
            "languages", "bench")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__
    from . import bench  # argparse wiring only; the benchmarks import their dependencies lazily

    p = Parser(prog="qtts-cli", description="Qwen3-TTS on ggml. `speak` is the default command: "
                                "qtts-cli -m MODEL -p TEXT -o out.wav")
    p.add_argument("--version", action="version", version=f"qtts {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    speak.add_parser(sub)
    voice.add_parser(sub)
    batch.add_parser(sub)
    serve.add_parser(sub)
    wyoming.add_parser(sub)
    align.add_parser(sub)
    files.add_parsers(sub)
    bench.add_parser(sub)
    return p


def _with_default_command(argv: list[str]) -> list[str]:
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        return ["speak", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(build_parser().parse_args(_with_default_command(argv)), "qtts-cli")


def main_quantize(argv: Sequence[str] | None = None) -> int:
    """`qtts-quantize IN OUT TYPE`: the same as `qtts-cli quantize`."""
    p = Parser(prog="qtts-quantize", description=files.QUANTIZE_DESCRIPTION)
    files.add_quantize_arguments(p)
    return run(p.parse_args(sys.argv[1:] if argv is None else argv), "qtts-quantize")


def _log_to_stderr(prog: str) -> None:
    """qtts's log (ggml's lines among it) on stderr from warnings up, once. ggml's error lines are
    left out: the error that follows them prints them under its own line (run)."""
    log = logging.getLogger("qtts")
    if any(getattr(h, "qtts_cli", False) for h in log.handlers):
        return
    h = logging.StreamHandler(sys.stderr)
    h.setLevel(logging.WARNING)
    h.setFormatter(logging.Formatter(f"{prog}: %(message)s"))
    h.addFilter(lambda r: r.levelno < logging.ERROR or not r.getMessage().startswith("ggml: "))
    h.qtts_cli = True  # type: ignore[attr-defined]
    log.addHandler(h)


def run(args: argparse.Namespace, prog: str) -> int:
    """Run a parsed command. The two error families of qtts (see qtts.errors) end in one line,
    `PROG: error: ...`: bad input (a usage error found after argparse: exit 2; a bad value, file
    or missing dependency: exit 1) and an engine failure (exit 1, followed by ggml's error lines).
    Ctrl-C exits 130. Any other exception is a bug in qtts and keeps its traceback."""
    _log_to_stderr(prog)
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the player went away: stop quietly
        _silence_stdout()
        return 0
    except QttsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        for line in e.ggml_log:
            print(f"  ggml: {line}", file=sys.stderr)
        return 1
    # ImportError: a missing optional dependency or a mismatched libggml, each raised with a
    # message saying what to install
    except (CliError, ValueError, TypeError, OSError, ImportError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    try:  # keep the interpreter's final flush from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
