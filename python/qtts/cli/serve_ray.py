"""`qtts-cli serve --ray`: the server as a Ray Serve application (qtts.server.ray_serve) on a
local Ray instance or a cluster (--address), until SIGINT or SIGTERM; then everything it started
stops: the application, Serve if it started it, and the local Ray instance with all its processes
(docs/ray-serve.md)."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from ..errors import QttsError
from ..runtime.settings.options import BatchOptions, LoadOptions, RayServeOptions, ServeOptions
from .args import UsageError
from .common import model_path

APP = "qtts"


class _Stop(Exception):
    """SIGINT or SIGTERM: stop serving."""


def _stop(signum: int, frame: FrameType | None) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal forces the exit
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    raise _Stop


def run(args: argparse.Namespace, opts: ServeOptions, batch: BatchOptions, scale: RayServeOptions) -> int:
    try:
        import ray
        from ray import serve

        from ..server import ray_serve
    except ImportError as e:
        raise ImportError(f"qtts-cli serve --ray needs Ray Serve ({e}): pip install 'qtts[serve]'") from None
    from ..bulk.local import split_threads
    from ..runtime.engine.engine import Engine
    from ..runtime.model.model import check_gguf_path

    if opts.port == 0:
        raise UsageError("--ray needs a --port other than 0: Serve's proxies bind the port given, on every node")
    path = model_path(args)
    check_gguf_path(Path(path))
    Engine.metadata(path)  # a bad file is one clear error here, not a replica failing over and over
    threads = split_threads(LoadOptions.from_args(args).n_threads, scale.most_replicas)
    aligner = None if args.aligner is None else model_path(args, args.aligner)  # a repo id converted once, here
    load = LoadOptions.from_args(args, n_threads=threads, aligner=aligner)
    model_id = opts.model_name or (Path(args.model).stem if Path(args.model).suffix == ".gguf" else str(args.model))
    app = ray_serve.serve_app(path, load=load, serve=opts, batch=batch, scale=scale, model_id=model_id)
    if scale.most_replicas > 1 and opts.voices is None and not args.quiet:
        print("qtts-cli serve: warning: without --voices a voice saved through one replica exists in that replica "
              "alone; give a folder every replica reads", file=sys.stderr)

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    started_ray = started_serve = False
    try:
        if not ray.is_initialized():
            # the proxies of a local instance inherit this; a cluster's nodes are started with it (serving.md)
            os.environ.setdefault(ray_serve.PROXY_CALLBACK, ray_serve.PROXY_CALLBACK_PATH)
            ray.init(address=scale.address, num_cpus=None if scale.address else threads * scale.most_replicas,
                     include_dashboard=False, log_to_driver=False, runtime_env=ray_serve.NORMAL_PRIORITY,
                     logging_level=logging.ERROR if args.quiet else logging.WARNING)
            started_ray = True  # a local instance stops at shutdown; a cluster is only left
            for sig in previous:  # Ray's core installs its own SIGTERM handler, which would kill the driver
                signal.signal(sig, _stop)
        logging.getLogger("ray.serve").setLevel(logging.ERROR if args.quiet else logging.WARNING)
        started_serve = not _serve_running(serve)
        serve.start(http_options={"host": opts.host, "port": opts.port})
        try:
            serve.run(app, name=APP, route_prefix="/")
        except RuntimeError as e:  # a replica that cannot start: its error is in the replica's log
            raise QttsError(f"the Serve application did not start: {e} (the replicas' logs are in Ray's "
                            "session folder, logs/serve)") from None
        if not args.quiet:
            count = f"{scale.replicas}" if scale.autoscale is None else "{}..{}".format(*scale.autoscale)
            print(f"qtts-cli serve: {count} replica(s) of {model_id}, {threads} thread(s) each (their logs: Ray's "
                  "session folder, logs/serve)", file=sys.stderr)
        print(f"qtts-cli serve: Ray Serve running on http://{opts.host}:{opts.port}", file=sys.stderr, flush=True)
        threading.Event().wait()  # until a signal raises _Stop here
    except _Stop:
        pass
    finally:
        try:
            if ray.is_initialized():
                if started_serve:
                    serve.shutdown()  # lets requests in flight finish for up to --shutdown-timeout
                else:
                    serve.delete(APP)
        finally:
            if started_ray:
                ray.shutdown()  # the local instance's processes stop; a cluster's driver disconnects
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0


def _serve_running(serve: Any) -> bool:
    try:
        serve.status()
    except Exception:  # no Serve controller on the cluster: serve.status() raises (the kind varies by version)
        return False
    return True
