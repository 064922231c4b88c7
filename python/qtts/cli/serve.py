"""`qtts-cli serve`: the OpenAI-compatible speech server (qtts.server) over one model, with
uvicorn; needs the `qtts[server]` extra (docs/serving.md, "Server")."""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from ..runtime.settings import options
from ..runtime.settings.options import SERVE, BatchOptions
from .args import CliError, UsageError
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
    options.add_arguments(p.add_argument_group("Ray Serve (docs/ray-serve.md)"),
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
        from ..server.drain import Drain
        from ..server.http_limits import head_timeout_protocol
    except ImportError as e:
        raise ImportError(f"qtts-cli serve needs the server extra ({e}): pip install 'qtts[server]'") from None
    from ..runtime.scheduling.scheduler import QUEUE_PER_SLOT, Scheduler, default_limits

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
    drain = Drain()
    app = create_app(model, scheduler, model_id=_model_id(model, args), api_key=opts.api_key,
                     voices_dir=opts.voices, voice_alias=opts.voice_alias, lists_without_key=opts.lists_without_key,
                     body_timeout=opts.body_timeout, ws_start_timeout=opts.ws_start_timeout,
                     text_idle_timeout=opts.text_idle_timeout, drain=drain)
    # the request head's deadline is a protocol's (server/http_limits.py); uvicorn's own keep-alive
    # timeout (5 s) closes a connection idle between requests
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning" if args.quiet else "info",
                            http=head_timeout_protocol(opts.header_timeout),
                            timeout_graceful_shutdown=opts.shutdown_timeout + FORCE_AFTER_S)
    _serve(config, scheduler, drain, opts.shutdown_timeout)
    scheduler.close(cancel=True)
    if scheduler.failure is not None:
        raise CliError(f"the scheduler's worker failed ({scheduler.failure!r}): the server stopped")
    return 0


def _serve(config: Any, scheduler: Any, drain: Any, grace_s: float) -> None:
    """uvicorn's server, whose shutdown first drains the WebSocket sessions (server/drain.py:
    uvicorn would close them at once) and cancels the jobs still running after `grace_s`: their
    responses then end by themselves (a stream's body closes, a waiting request gets 503, a
    WebSocket 1001 with an error message) before uvicorn would cancel the request tasks. A
    scheduler whose worker died stops the server (docs/serving.md, "The worker's guard")."""
    import uvicorn

    class Server(uvicorn.Server):
        async def on_tick(self, counter: int) -> bool:
            if scheduler.failure is not None:
                self.should_exit = True
            return await super().on_tick(counter)

        async def shutdown(self, *args: Any, **kwargs: Any) -> None:
            def cancel_jobs() -> None:  # close() joins the worker: not on the event loop
                threading.Thread(target=scheduler.close, kwargs={"cancel": True}, daemon=True).start()

            timer = asyncio.get_running_loop().call_later(grace_s, cancel_jobs)
            try:
                for server in self.servers:  # no new connections (uvicorn's shutdown closes them too)
                    server.close()
                scheduler.close(timeout=0)  # no new requests; those taken go on
                drain.begin()
                try:
                    await asyncio.wait_for(drain.ended(), grace_s + FORCE_AFTER_S)
                except asyncio.TimeoutError:
                    pass  # uvicorn's shutdown closes what is left
                await super().shutdown(*args, **kwargs)
            finally:
                timer.cancel()

    # uvicorn raises the signal it shut down on again once done: SIGINT as KeyboardInterrupt, SIGTERM
    # through this handler, so that a shutdown on either exits 0 (as uvicorn.run does for SIGINT)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        Server(config).run()
    except (KeyboardInterrupt, _Terminated):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Terminated(Exception):
    """SIGTERM, raised again by uvicorn after its graceful shutdown."""


def _terminated(sig: int, frame: Any) -> None:
    raise _Terminated
