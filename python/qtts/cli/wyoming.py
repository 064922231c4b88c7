"""`qtts-cli wyoming`: the Wyoming protocol server (qtts.wyoming) over one model, for Home
Assistant; needs the `qtts[wyoming]` extra (docs/integrations.md, "Home Assistant")."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from ..runtime.settings import options
from ..runtime.settings.options import WYOMING, BatchOptions, RequestOptions, ServeOptions, WyomingOptions
from .common import add_load_arguments, load_model, make_scheduler
from .speak import add_sampling_arguments, sampling


def add_parser(sub: Any) -> None:
    p = sub.add_parser("wyoming", help="serve a model over the Wyoming protocol (Home Assistant)",
                       description="Serve a model to Home Assistant and other Wyoming clients: describe, synthesize "
                                   "and streaming synthesis, every connection batched on one model. Listens on "
                                   "loopback unless --uri says otherwise. Needs: pip install 'qtts[wyoming]'.")
    p.add_argument("-m", "--model", required=True, help="a qtts .gguf file or a Hugging Face repo id")
    options.add_arguments(p, WyomingOptions, WYOMING)
    options.add_arguments(p, ServeOptions, WYOMING)
    options.add_arguments(p, RequestOptions, WYOMING)
    options.add_arguments(p, BatchOptions, WYOMING)
    add_load_arguments(p, WYOMING)
    add_sampling_arguments(p, split=False)
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    opts, serving = WyomingOptions.from_args(args), ServeOptions.from_args(args)
    try:
        from ..wyoming import WyomingServer
        from ..wyoming.voices import Voices
    except ImportError as e:
        raise ImportError(f"qtts-cli wyoming needs the wyoming extra ({e}): pip install 'qtts[wyoming]'") from None
    from ..aliases import VoiceAliases

    folder = Path(serving.voices) if serving.voices is not None else None
    if folder is not None and not folder.is_dir():
        raise NotADirectoryError(f"--voices {serving.voices}: not a folder")
    model = load_model(args)
    if model.variant == "base" and folder is None:
        raise ValueError("a base model speaks in saved voices: give --voices DIR (voices saved by qtts-cli serve's "
                         "POST /v1/audio/voices, or qtts-cli voice create -o DIR/NAME.qvoice)")
    voices = Voices(model.variant, model.speakers, model.languages,
                    VoiceAliases(model.variant, model.speakers, serving.voice_alias), folder, opts.default_voice)
    scheduler = make_scheduler(model, BatchOptions.from_args(args))
    request = {"language": RequestOptions.from_args(args).language, "seed": args.seed,
               "frame_budget": args.frame_budget, **sampling(args)}
    server = WyomingServer(model, scheduler, voices, request, model_id=Path(args.model).stem,
                           streaming=opts.streaming, shutdown_timeout=serving.shutdown_timeout)

    _log_requests(args.quiet)

    def ready(where: str) -> None:
        if not args.quiet:
            print(f"qtts-cli wyoming: {model.device}, max batch {scheduler.max_batch}, max queue "
                  f"{scheduler.max_queue}, voices {', '.join(voices.names()) or 'none'}", file=sys.stderr)
        print(f"qtts-cli wyoming: listening on {where}", file=sys.stderr, flush=True)

    try:
        asyncio.run(server.serve(opts.uri, ready))
    finally:
        scheduler.close(cancel=True)
        model.close()
    return 0


def _log_requests(quiet: bool) -> None:
    """One line per request on stderr (its voice, how it ended, its frames) unless -q; warnings
    and errors go through qtts's own handler (cli/__init__.py)."""
    log = logging.getLogger("qtts.wyoming")
    log.setLevel(logging.WARNING if quiet else logging.INFO)
    h = logging.StreamHandler(sys.stderr)
    h.addFilter(lambda r: r.levelno < logging.WARNING)
    h.setFormatter(logging.Formatter("qtts-cli wyoming: %(message)s"))
    log.addHandler(h)
