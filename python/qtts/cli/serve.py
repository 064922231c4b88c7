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

from ..runtime import options
from ..runtime.options import SERVE, BatchOptions
from .args import UsageError
from .common import add_load_arguments, load_model

FORCE_AFTER_S = 10  # after --shutdown-timeout, uvicorn cancels what still runs (nothing, normally)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API",
                       description="Serve a model over HTTP with OpenAI's /v1/audio/speech (and /v1/models, "
                                   "/v1/audio/voices, /health, /metrics). Binds to loopback unless --host says "
                                   "otherwise. Needs: pip install 'qtts[server]'.")
    p.add_argument("-m", "--model", required=True, help="a qtts .gguf file or a Hugging Face repo id")
    options.add_arguments(p, options.ServeOptions, SERVE, defaults={"api_key": os.environ.get("QTTS_API_KEY")})
    options.add_arguments(p, BatchOptions, SERVE)
    add_load_arguments(p, SERVE)
    options.add_arguments(p.add_argument_group("Ray Serve (docs/serving.md, \"Serving on Ray\")"),
                          options.RayServeOptions, SERVE)
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
    opts, batching = options.ServeOptions.from_args(args), BatchOptions.from_args(args)
    try:
        import uvicorn

        from ..server import create_app
    except ImportError as e:
        raise ImportError(f"qtts-cli serve needs the server extra ({e}): pip install 'qtts[server]'") from None
    from ..runtime.scheduler import QUEUE_PER_SLOT, Scheduler, default_limits

    if opts.voices is not None and Path(opts.voices).exists() and not Path(opts.voices).is_dir():
        raise NotADirectoryError(f"--voices {opts.voices}: not a folder")
    if opts.api_key is not None and not opts.api_key.strip():
        raise ValueError("--api-key (or $QTTS_API_KEY) is empty")
    if not _is_loopback(opts.host) and opts.api_key is None:
        print(f"qtts-cli serve: warning: listening on {opts.host} without --api-key: anyone who can reach "
              "this address can use the server", file=sys.stderr)
    scale = options.RayServeOptions.from_args(args)
    if scale.ray:
        from .serve_ray import run as run_on_ray

        return run_on_ray(args, opts, batching, scale)
    if scale != options.RayServeOptions():
        raise UsageError("--address, --replicas, --autoscale and the autoscaling flags need --ray")
    model = load_model(args)
    max_batch = default_limits(model)[0] if batching.max_batch is None else batching.max_batch
    max_queue = QUEUE_PER_SLOT * max_batch if batching.max_queue is None else batching.max_queue
    scheduler = Scheduler(model, max_batch=max_batch, max_queue=max_queue, pipelined_vocoder=batching.pipelined_vocoder)
    if not args.quiet:
        print(f"qtts-cli serve: {model.device}, max batch {max_batch}, max queue {max_queue}, vocoder "
              f"{'pipelined' if scheduler.pipelined_vocoder else 'between steps'}", file=sys.stderr)
    app = create_app(model, scheduler, model_id=_model_id(model, args), api_key=opts.api_key,
                     voices_dir=opts.voices, voice_alias=opts.voice_alias, lists_without_key=opts.lists_without_key)
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning" if args.quiet else "info",
                            timeout_graceful_shutdown=opts.shutdown_timeout + FORCE_AFTER_S)
    _serve(config, scheduler, opts.shutdown_timeout)
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
