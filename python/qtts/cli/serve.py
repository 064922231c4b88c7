"""`qtts-cli serve`: the OpenAI-compatible speech server (qtts.server) over one model, with
uvicorn; needs the `qtts[server]` extra (docs/serving.md, "Server")."""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
import threading
from pathlib import Path
from typing import Any

from ..runtime.options import SERVE
from .args import checked
from .common import add_load_arguments, load_model

FORCE_AFTER_S = 10  # after --shutdown-timeout, uvicorn cancels what still runs (nothing, normally)


def _int_in(name: str, lo: int, hi: int) -> Any:
    from ..runtime.config import check_int

    return checked(int, lambda v: check_int(name, v, lo, hi))


def _grace(value: float) -> float:
    if not 0 <= value <= 3600:
        raise ValueError(f"shutdown-timeout must be in [0, 3600] seconds, got {value}")
    return value


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       description="Serve a model over HTTP with OpenAI's /v1/audio/speech (and /v1/models, "
                                   "/v1/audio/voices, /health, /metrics). Binds to loopback unless --host says "
                                   "otherwise. Needs: pip install 'qtts[server]'.")
    p.add_argument("-m", "--model", required=True, help="a qtts .gguf file or a Hugging Face repo id")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=_int_in("port", 0, 65535), default=8000, help="TCP port (default: 8000)")
    p.add_argument("--api-key", default=os.environ.get("QTTS_API_KEY"),
                   help="require Authorization: Bearer KEY on every route but /health (default: $QTTS_API_KEY)")
    p.add_argument("--max-batch", type=_int_in("max-batch", 1, 256), default=None,
                   help="requests generated together (default: 8 on the CPU, 64 on a GPU or other device)")
    p.add_argument("--max-queue", type=_int_in("max-queue", 0, 4096), default=None,
                   help="requests waiting beyond --max-batch before the server answers 429 (default: 4 times "
                        "--max-batch)")
    p.add_argument("--pipelined-vocoder", action=argparse.BooleanOptionalAction, default=None,
                   help="vocode a step's chunks while the next step generates, on a session of the server's own "
                        "(default: on a GPU or other device, off on the CPU, whose cores both stages share)")
    p.add_argument("--voices", metavar="DIR", help="folder of saved voices (POST /v1/audio/voices); kept across "
                                                   "restarts (default: in memory only)")
    p.add_argument("--model-name", help="the model id clients send and /v1/models lists (default: the file name)")
    p.add_argument("--shutdown-timeout", type=checked(float, _grace), default=30.0, metavar="SECONDS",
                   help="on SIGINT/SIGTERM, let requests in flight finish for this long, then cancel them "
                        "(default: 30)")
    add_load_arguments(p, SERVE)
    p.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    p.set_defaults(func=run)


def _model_id(model: Any, args: argparse.Namespace) -> str:
    if args.model_name:
        return str(args.model_name)
    return Path(args.model).stem if Path(args.model).suffix == ".gguf" else str(args.model)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server import create_app
    except ImportError as e:
        raise ImportError(f"qtts-cli serve needs the server extra ({e}): pip install 'qtts[server]'") from None
    from ..runtime.scheduler import QUEUE_PER_SLOT, Scheduler, default_limits

    if args.voices is not None and Path(args.voices).exists() and not Path(args.voices).is_dir():
        raise NotADirectoryError(f"--voices {args.voices}: not a folder")
    if args.api_key is not None and not args.api_key.strip():
        raise ValueError("--api-key (or $QTTS_API_KEY) is empty")
    if not _is_loopback(args.host) and args.api_key is None:
        print(f"qtts-cli serve: warning: listening on {args.host} without --api-key: anyone who can reach "
              "this address can use the server", file=sys.stderr)
    model = load_model(args)
    max_batch = default_limits(model)[0] if args.max_batch is None else args.max_batch
    max_queue = QUEUE_PER_SLOT * max_batch if args.max_queue is None else args.max_queue
    scheduler = Scheduler(model, max_batch=max_batch, max_queue=max_queue, pipelined_vocoder=args.pipelined_vocoder)
    if not args.quiet:
        print(f"qtts-cli serve: {model.device}, max batch {max_batch}, max queue {max_queue}, vocoder "
              f"{'pipelined' if scheduler.pipelined_vocoder else 'between steps'}", file=sys.stderr)
    app = create_app(model, scheduler, model_id=_model_id(model, args), api_key=args.api_key,
                     voices_dir=args.voices)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning" if args.quiet else "info",
                            timeout_graceful_shutdown=args.shutdown_timeout + FORCE_AFTER_S)
    _serve(config, scheduler, args.shutdown_timeout)
    scheduler.close(cancel=True)
    return 0


def _serve(config: Any, scheduler: Any, grace_s: float) -> None:
    """uvicorn's server, whose shutdown cancels the jobs still running after `grace_s`: their
    responses then end by themselves (a stream's body closes, a waiting request gets 503) before
    uvicorn would cancel the request tasks."""
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, *args: Any, **kwargs: Any) -> None:
            def cancel_jobs() -> None:  # close() joins the worker: not on the event loop
                threading.Thread(target=scheduler.close, kwargs={"cancel": True}, daemon=True).start()

            timer = asyncio.get_running_loop().call_later(grace_s, cancel_jobs)
            try:
                await super().shutdown(*args, **kwargs)
            finally:
                timer.cancel()

    try:
        Server(config).run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it shut down on (as uvicorn.run, exit 0)
        pass
