"""The server as a Ray Serve application (`qtts-cli serve --ray`, `qtts.serve_app`): replicas of
the app of `create_app`, each with its own model and Scheduler, behind Serve's HTTP proxy, added
and removed by Serve's autoscaler from the Schedulers' own queues (docs/serving.md, "Serving on
Ray"). Needs `qtts[serve]`; Ray is imported only where a deployment is built or runs.

    serve run qtts.server.ray_serve:build model=/models/model.gguf replicas=2 voices=/shared/voices
"""
from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..runtime.scheduling.scheduler import DEVICE_MAX_BATCH, QUEUE_PER_SLOT, Scheduler, default_limits
from ..runtime.settings.options import BatchOptions, LoadOptions, Options, RayServeOptions, ServeOptions, specs_of
from .app import create_app
from .errors import error_body
from .shared_voices import SharedVoiceStore
from .voices import VoiceStore

log = logging.getLogger("qtts.server")
DEPLOYMENT = "qtts"
REPLICA_HEADER = b"qtts-replica"  # on every response: which replica answered
LOAD_METRIC = "qtts_requests"  # a replica's running + queued requests, for the autoscaling policy
SLOTS_METRIC = "qtts_max_batch"  # and the requests it runs at once
EXPORT_PERIOD_S = 5.0  # how often a replica copies its Scheduler's figures into Ray's metrics
WS_SERVICE_RESTART = 1012  # RFC 6455: the server is restarting; the client may reconnect
# The proxy's middleware, given to every node's Serve proxy through Ray's environment.
PROXY_CALLBACK = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
PROXY_CALLBACK_PATH = "qtts.server.ray_serve:proxy_middlewares"
GROUPS: tuple[type[Options], ...] = (LoadOptions, ServeOptions, BatchOptions, RayServeOptions)


def limits(model: Any, batch: BatchOptions) -> tuple[int, int]:
    """A replica's max_batch and max_queue: as given, else by the device its model runs on."""
    max_batch = default_limits(model)[0] if batch.max_batch is None else batch.max_batch
    return max_batch, QUEUE_PER_SLOT * max_batch if batch.max_queue is None else batch.max_queue


class Replica:
    """One replica: the model loaded once, its Scheduler and the app `qtts-cli serve` runs, each
    response marked with the replica's id. Serve calls `record_autoscaling_stats` for the
    autoscaling policy (`QueuePolicy`)."""

    def __init__(self, model: str, load: LoadOptions, serve: ServeOptions, batch: BatchOptions, model_id: str) -> None:
        from ray import serve as ray_serve

        from ..runtime.model.model import open_model

        self.replica_id = ray_serve.get_replica_context().replica_id.unique_id
        self.model = open_model(model, load)
        max_batch, max_queue = limits(self.model, batch)
        self.scheduler = Scheduler(self.model, max_batch=max_batch, max_queue=max_queue,
                                   pipelined_vocoder=batch.pipelined_vocoder)
        voices = SharedVoiceStore(Path(serve.voices)) if serve.voices is not None else VoiceStore(None)
        app = create_app(self.model, self.scheduler, model_id=model_id, api_key=serve.api_key, voices=voices,
                         metrics_labels={"replica": self.replica_id})
        self._asgi = _Tagged(app, self.replica_id)
        self._exporter = _RayMetrics(self.scheduler)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        return self._asgi

    def record_autoscaling_stats(self) -> dict[str, float]:
        s = self.scheduler.stats
        return {LOAD_METRIC: float(s.running + s.queued), SLOTS_METRIC: float(s.max_batch)}

    def __del__(self) -> None:
        exporter = getattr(self, "_exporter", None)
        if exporter is not None:
            exporter.stop()


class _Tagged:
    """The app, each HTTP response and WebSocket accept carrying the replica's id."""

    def __init__(self, app: ASGIApp, replica_id: str) -> None:
        self.app, self.header = app, (REPLICA_HEADER, replica_id.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def tagged(message: Message) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, tagged if scope["type"] in ("http", "websocket") else send)


class _RayMetrics:
    """The Scheduler's figures as Ray metrics, which Serve labels with the application, the
    deployment and the replica, and each node's Ray metrics port exports beside Serve's own."""

    def __init__(self, scheduler: Scheduler) -> None:
        from ray.serve.metrics import Counter, Gauge

        self.scheduler = scheduler
        self.gauges = {name: Gauge(f"qtts_{name}", doc) for name, doc in (
            ("running_requests", "Requests being generated"), ("queued_requests", "Requests waiting for a slot"),
            ("batch_size", "Sequences stepped together now"))}
        self.counters = {name: Counter(f"qtts_{name}", doc) for name, doc in (
            ("generations", "Requests admitted by the scheduler"), ("frames", "Codec frames generated"),
            ("cancelled", "Generations cancelled (client gone, shutdown)"))}
        self._last = {name: 0 for name in self.counters}
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="qtts-ray-metrics", daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(EXPORT_PERIOD_S):
            s = self.scheduler.stats
            for name, value in (("running_requests", s.running), ("queued_requests", s.queued),
                                ("batch_size", s.batch_size)):
                self.gauges[name].set(value)
            for name, value in (("generations", s.requests_total), ("frames", s.frames_total),
                                ("cancelled", s.cancelled_total)):
                if value > self._last[name]:
                    self.counters[name].inc(value - self._last[name])
                    self._last[name] = value

    def stop(self) -> None:
        self._stop.set()


class QueuePolicy:
    """Serve's autoscaling policy for qtts: as many replicas as the requests need when each
    replica holds its max_batch running and `target_queued` waiting, from the replicas' own
    Scheduler counts (averaged over the look-back window); Serve applies the bounds and the
    up/down delays."""

    def __init__(self, target_queued: int) -> None:
        self.target_queued = target_queued

    def __call__(self, ctx: Any) -> tuple[float, dict[str, Any]]:
        if not ctx.current_num_replicas:
            return ctx.target_num_replicas, {}
        metrics = ctx.aggregated_metrics or {}
        requests, slots = metrics.get(LOAD_METRIC, {}), metrics.get(SLOTS_METRIC, {})
        if not requests or not slots:  # no report yet: keep the decision
            return ctx.target_num_replicas, {}
        per_replica = sum(slots.values()) / len(slots) + self.target_queued
        return math.ceil(sum(requests.values()) / per_replica), {}


# Ray starts its workers at nice 15, made for batch tasks. A replica's threads meet at every op,
# so any process at normal priority that takes one of its cores stalls them all, and the
# proxies relay every stream's bytes: both run at the single server's priority (docs/ray-serve.md,
# "Priority"). Ray reads this variable from a worker's runtime environment when it starts one.
NORMAL_PRIORITY = {"env_vars": {"RAY_worker_niceness": "0"}}


def deployment_options(load: LoadOptions, serve: ServeOptions, batch: BatchOptions, scale: RayServeOptions,
                       threads: int) -> dict[str, Any]:
    """serve.deployment's settings: the replicas (fixed or autoscaled), each reserving its
    threads as CPUs (and a GPU when --device names one), the requests Serve lets a replica
    hold, the drain on downscaling."""
    max_batch = DEVICE_MAX_BATCH if batch.max_batch is None else batch.max_batch
    # what a replica's Scheduler holds at most (a CPU replica's defaults are lower; its own 429
    # then answers what it cannot queue)
    ongoing = max_batch + (QUEUE_PER_SLOT * max_batch if batch.max_queue is None else batch.max_queue)
    resources: dict[str, Any] = {"num_cpus": threads, "runtime_env": NORMAL_PRIORITY}
    if load.device.lower() not in ("auto", "cpu"):  # Ray then shows the replica its GPU alone (gpu.md)
        resources["num_gpus"] = 1
    opts: dict[str, Any] = dict(name=DEPLOYMENT, ray_actor_options=resources,
                                max_ongoing_requests=ongoing, max_queued_requests=ongoing,
                                graceful_shutdown_timeout_s=serve.shutdown_timeout)
    if scale.autoscale is None:
        opts["num_replicas"] = scale.replicas
        return opts
    low, high = scale.autoscale
    opts["autoscaling_config"] = {
        "min_replicas": low, "max_replicas": high, "upscale_delay_s": scale.upscale_delay_s,
        "downscale_delay_s": scale.downscale_delay_s, "look_back_period_s": scale.look_back_period_s,
        "policy": {"policy_function": f"{__name__}:QueuePolicy",
                   "policy_kwargs": {"target_queued": scale.target_queued}}}
    return opts


def serve_app(model: str | Path, *, load: LoadOptions | None = None, serve: ServeOptions | None = None,
              batch: BatchOptions | None = None, scale: RayServeOptions | None = None,
              model_id: str | None = None) -> Any:
    """The Serve application of `model` (a GGUF path every node can read): give it to
    `ray.serve.run(app, route_prefix="/")`. Each replica loads the model with `load` (n_threads:
    its threads, and the CPUs it reserves), serves with `serve`'s key, voices folder (on storage
    every replica reads) and shutdown timeout, batches by `batch`; `scale` says the replicas."""
    from ray import serve as ray_serve

    load, serve = load or LoadOptions(), serve or ServeOptions()
    batch, scale = batch or BatchOptions(), scale or RayServeOptions()
    threads = 1 if load.n_threads is None else load.n_threads
    deployment = ray_serve.deployment(ray_serve.ingress()(Replica),
                                      **deployment_options(load, serve, batch, scale, threads))
    return deployment.bind(str(model), LoadOptions.of({**load.kwargs(), "n_threads": threads}), serve, batch,
                           model_id or serve.model_name or Path(model).stem)


def build(args: Mapping[str, Any]) -> Any:
    """Serve's application builder (a config file's `import_path: qtts.server.ray_serve:build`):
    `args` holds `model` and any declared option by its name (n_threads, voices, api_key,
    max_batch, replicas, autoscale, ...)."""
    args = dict(args)
    if "model" not in args:
        raise TypeError("args needs model: a GGUF path every node can read")
    model = args.pop("model")
    known = {name for group in GROUPS for name in specs_of(group)} - {"ray", "address"}
    unknown = sorted(set(args) - known)
    if unknown:
        raise TypeError(f"unknown args {', '.join(unknown)}; the options are {', '.join(sorted(known))}")
    if isinstance(args.get("autoscale"), str):
        low, _, high = args["autoscale"].partition(":")
        args["autoscale"] = (int(low), int(high))
    load, serve, batch, scale = (group.of(args) for group in GROUPS)
    return serve_app(model, load=load, serve=serve, batch=batch, scale=scale)  # type: ignore[arg-type]


# -- the proxy's side ------------------------------------------------------------------------
class ReplicaLost:
    """Serve's proxy middleware: where a replica dies under a request, the client gets a clean
    end instead of a bare 500 or a dropped stream. A request it never answered gets 503 with
    Retry-After and the OpenAI error body (retry: Serve routes it to a live replica); an SSE
    stream ends with an error event; a WebSocket closes with 1012 (service restart). A pcm or
    wav stream is cut (no trailing chunk), so its client sees the body end early."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state = {"started": False, "ended": False, "sse": False}

        async def watched(message: Message) -> None:
            kind = message["type"]
            if kind in ("http.response.start", "websocket.accept"):
                state["started"] = True
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                state["sse"] = content_type.startswith(b"text/event-stream")
            elif (kind == "http.response.body" and not message.get("more_body", False)) or kind == "websocket.close":
                state["ended"] = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            if not state["ended"] and _from_a_replica(scope):
                await _end(scope, send, state)


def _from_a_replica(scope: Scope) -> bool:
    """Serve's own routes (/-/healthz, /-/routes) are the proxy's, not a replica's."""
    return not scope.get("path", "").startswith("/-/")


async def _end(scope: Scope, send: Send, state: dict[str, bool]) -> None:
    message = "the replica serving this request stopped before it finished; retry the request"
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": WS_SERVICE_RESTART, "reason": "replica lost; reconnect"})
    elif not state["started"]:
        body = json.dumps(error_body(message, "server_error", None, "replica_lost")).encode()
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]})
        await send({"type": "http.response.body", "body": body})
    elif state["sse"]:
        event = {"type": "error", **error_body(message, "server_error", None, "replica_lost")}
        await send({"type": "http.response.body", "body": f"data: {json.dumps(event)}\n\n".encode()})
        await send({"type": "http.response.body", "body": b""})


def proxy_middlewares() -> list[Any]:
    """What Serve's proxy calls through RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH."""
    from starlette.middleware import Middleware

    return [Middleware(ReplicaLost)]
