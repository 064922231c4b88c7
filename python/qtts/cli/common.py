"""What several commands share: where a model runs, loading it by path or repo id, and checking
files before the work starts, so that a bad path fails in a moment rather than after a model load."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ..runtime.settings import options
from .args import CliError
from .progress import tensor_log


def add_load_arguments(p: argparse._ActionsContainer, command: str) -> None:
    """The load options `command` takes as flags (runtime/settings/options.py, LoadOptions)."""
    options.add_arguments(p, options.LoadOptions, command)


def make_scheduler(model: Any, batching: options.BatchOptions) -> Any:
    """A server's Scheduler over `model`, its limits by the device where not given (serve, wyoming)."""
    from ..runtime.scheduling.scheduler import QUEUE_PER_SLOT, Scheduler, default_limits

    max_batch = default_limits(model)[0] if batching.max_batch is None else batching.max_batch
    max_queue = QUEUE_PER_SLOT * max_batch if batching.max_queue is None else batching.max_queue
    return Scheduler(model, max_batch=max_batch, max_queue=max_queue, pipelined_vocoder=batching.pipelined_vocoder)


def load_model(args: argparse.Namespace, **given: Any) -> Any:
    """qtts.load with the command's load options (`given` over its flags), where a repo id's
    one-time conversion (the model's, --aligner's) reports like `convert` does."""
    from ..runtime.model.model import open_model

    if "aligner" not in given and getattr(args, "aligner", None) is not None:
        given["aligner"] = model_path(args, args.aligner)
    return open_model(model_path(args), options.LoadOptions.from_args(args, **given))


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
