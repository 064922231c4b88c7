"""Prometheus metrics of one app: HTTP requests by route and status, time to first audio, and
the scheduler's own counters and gauges, read from its stats at scrape time."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..runtime.scheduler import Scheduler

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TTFA_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)


class _SchedulerCollector(Collector):
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        s = self.scheduler.stats
        yield GaugeMetricFamily("qtts_running_requests", "Requests being generated", value=s.running)
        yield GaugeMetricFamily("qtts_queued_requests", "Requests waiting for a slot", value=s.queued)
        yield GaugeMetricFamily("qtts_batch_size", "Sequences stepped together now", value=s.batch_size)
        yield GaugeMetricFamily("qtts_max_batch", "Most requests generated at once", value=s.max_batch)
        yield GaugeMetricFamily("qtts_max_queue", "Most requests waiting", value=s.max_queue)
        yield CounterMetricFamily("qtts_generations", "Requests admitted by the scheduler", value=s.requests_total)
        yield CounterMetricFamily("qtts_frames", "Codec frames generated (12.5 per second of audio)",
                                  value=s.frames_total)
        yield CounterMetricFamily("qtts_cancelled", "Generations cancelled (client gone, shutdown)",
                                  value=s.cancelled_total)


class Metrics:
    def __init__(self, scheduler: Scheduler) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("qtts_http_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.ttfa = Histogram("qtts_time_to_first_audio_seconds",
                              "From a speech request's admission to its first audio bytes, queueing included",
                              buckets=_TTFA_BUCKETS, registry=self.registry)
        self.registry.register(_SchedulerCollector(scheduler))

    def count(self, route: str, status: int) -> None:
        self.requests.labels(route=route, status=str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def route_of(scope: dict[str, Any]) -> str:
    """The route template (/v1/audio/voices/{voice_id}), so that labels stay few."""
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"
