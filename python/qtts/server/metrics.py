"""Prometheus metrics of one app: HTTP requests by route and status, time to first audio, and
the scheduler's own counters and gauges, read from its stats at scrape time; every sample
labelled with the app's own labels if it has any (a Ray Serve replica's id)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..runtime.scheduling.scheduler import Scheduler

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


class _Labelled(Collector):
    """A registry's metrics with constant labels added to every sample."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self.registry, self.labels = registry, dict(labels)

    def collect(self) -> Iterator[Metric]:
        for metric in self.registry.collect():
            metric.samples = [s._replace(labels={**s.labels, **self.labels}) for s in metric.samples]
            yield metric


class Metrics:
    def __init__(self, scheduler: Scheduler, labels: Mapping[str, str] | None = None) -> None:
        self.registry = CollectorRegistry()
        self._exported: CollectorRegistry | _Labelled = _Labelled(self.registry, labels) if labels else self.registry
        self.requests = Counter("qtts_http_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=self.registry)
        self.ttfa = Histogram("qtts_time_to_first_audio_seconds",
                              "From a speech request's admission to its first audio bytes, queueing included",
                              buckets=_TTFA_BUCKETS, registry=self.registry)
        self.registry.register(_SchedulerCollector(scheduler))

    def count(self, route: str, status: int) -> None:
        self.requests.labels(route=route, status=str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self._exported)  # type: ignore[arg-type]


def route_of(scope: dict[str, Any]) -> str:
    """The route template (/v1/audio/voices/{voice_id}), so that labels stay few."""
    route = scope.get("route")
    return getattr(route, "path", None) or "unmatched"
