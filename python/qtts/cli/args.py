"""qtts-cli's argument types: each parses a flag and applies the library's own check, so that a
bad value is an argparse usage error (exit status 2) naming the flag before any of it reaches C++."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn


class CliError(Exception):
    """A user error: printed as `qtts-cli: error: ...`, exit status 1."""


class UsageError(CliError):
    """Bad input named by its flag, found after argparse (text that is not UTF-8): exit status 2."""


class Parser(argparse.ArgumentParser):
    """Usage errors as one line naming the flag (exit status 2), with a pointer to --help
    instead of the whole usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def checked(kind: type, check: Callable[[Any], Any]) -> Callable[[str], Any]:
    """An argparse type: parse as int or float, then the library's own check, so that a bad value
    is a usage error (exit 2) naming the flag before any of it reaches C++."""
    def convert(value: str) -> Any:
        try:
            parsed = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {value!r}") from None
        try:
            return check(parsed)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = "integer" if kind is int else "number"
    return convert


def setting(name: str) -> Callable[[str], Any]:
    """A generation setting's flag: parsed as its declared type (runtime/settings/config.py), then checked."""
    from ..runtime.settings.config import SETTING_SPECS, check_value

    spec = SETTING_SPECS[name]
    return checked(int if spec.kind is int else float, lambda v: check_value(name, spec, v))


def seed(value: str) -> int:
    from ..runtime.settings.config import check_seed

    return checked(int, check_seed)(value)  # type: ignore[no-any-return]


def threads(value: str) -> int:
    from ..runtime.settings.config import check_int

    return checked(int, lambda v: check_int("threads", v, 1, 1024))(value)  # type: ignore[no-any-return]


def utf8(value: str) -> str:
    """Text from argv: Python hands invalid UTF-8 over as lone surrogates (surrogateescape)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise argparse.ArgumentTypeError(bad_utf8(value.encode("utf-8", "surrogateescape"), e.start)) from None
    return value


def bad_utf8(data: bytes, start: int) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})"
    return f"not valid Unicode (a lone surrogate at index {start})"


def decode_text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{where}: not valid UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def frame_budget(value: str) -> int | str | None:
    """--frame-budget: config.parse_frame_budget, the one reader of a frame budget."""
    from ..runtime.settings.config import parse_frame_budget

    try:
        return parse_frame_budget(value)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def vocoder_threads(value: str) -> int | None:
    """--vocoder-threads: "auto" (None) or a count, 0 for serial synthesis."""
    from ..runtime.settings.config import check_int

    if value == "auto":
        return None
    return checked(int, lambda v: check_int("vocoder-threads", v, 0, 1023))(value)  # type: ignore[no-any-return]
