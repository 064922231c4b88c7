"""What several commands share: where a model runs, loading it by path or repo id, and checking
files before the work starts, so that a bad path fails in a moment rather than after a model load."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..runtime.model import PRECISIONS
from .args import CliError
from .progress import tensor_log


def add_precision_argument(p: argparse._ActionsContainer) -> None:
    p.add_argument("--precision", default="auto", choices=PRECISIONS,
                   help="the arithmetic: exact (F32) or fast (a GPU's TF32/BF16 products where ggml picks them; "
                        "on a CPU with AMX the vocoder's convs in BF16); default: auto, fast except for an F32 "
                        "file on the CPU (docs/gpu.md)")


def add_device_arguments(p: argparse._ActionsContainer) -> None:
    """--device, --precision and --no-huge-pages, as speak, serve and batch take them."""
    p.add_argument("--device", default="auto", help="auto, cpu, or a ggml device name (default: auto)")
    add_precision_argument(p)
    p.add_argument("--no-huge-pages", action="store_true",
                   help="keep the streamed weights mapped from the file (shared with other processes) instead of "
                        "reading them into huge pages")


def load_model(args: argparse.Namespace, **kw: Any) -> Any:
    """qtts.load, where a repo id's one-time conversion reports like `convert` does."""
    from .. import load

    return load(model_path(args), **kw)


def model_path(args: argparse.Namespace, model: str | None = None) -> str:
    """-m (or another flag's `model`) as a local GGUF path: a repo id is downloaded and converted
    once (reported like `convert`)."""
    from ..convert.registry import cache_dir, fetch, is_repo_id

    model = args.model if model is None else model
    if is_repo_id(model):
        with tensor_log(argparse.Namespace(quiet=getattr(args, "quiet", False), verbose=False)) as log:
            model = fetch(model, cache_dir(), log=log)  # at the registry's default type
    return str(model)


def check_writable(p: Path) -> None:
    path = str(p)
    if p.is_dir():
        raise CliError(f"{path} is a directory")
    parent = p.parent
    if not parent.is_dir():
        raise CliError(f"{path}: output directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CliError(f"{path}: not writable")


def check_input_file(path: str, flag: str) -> None:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{flag} {path}: no such file")
    if p.is_dir():
        raise CliError(f"{flag} {path}: is a directory")
