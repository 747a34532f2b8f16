"""Prometheus metrics of one watcher, in a registry of its own (so tests can run several)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WatcherMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.events_received = Counter(
            "trainwatch_watcher_watch_events_received", "Watch and list events received", ["kind"], registry=r
        )
        self.transitions_emitted = Counter(
            "trainwatch_watcher_transitions_emitted",
            "Job events published and acknowledged",
            ["kind", "change"],
            registry=r,
        )
        self.malformed_objects = Counter(
            "trainwatch_watcher_malformed_objects",
            "Objects that could not be read, counted and skipped",
            ["kind"],
            registry=r,
        )
        self.relists = Counter("trainwatch_watcher_relists", "Full relists", ["kind", "reason"], registry=r)
        self.checkpoint_corrections = Counter(
            "trainwatch_watcher_checkpoint_corrections",
            "Jobs whose Redis checkpoint was behind the JOBS stream (lost or stale) at informer start",
            ["kind"],
            registry=r,
        )
        self.event_id_conflicts = Counter(
            "trainwatch_watcher_event_id_conflicts",
            "Publishes whose id the stream already held for a different event (informer restarted)",
            ["kind"],
            registry=r,
        )
        self.expired = Counter("trainwatch_watcher_watch_expired", "410 Gone answers", ["kind"], registry=r)
        self.reconnects = Counter(
            "trainwatch_watcher_watch_reconnects",
            "Watch reconnects after an error",
            ["kind", "error"],
            registry=r,
        )
        self.publish_latency = Histogram(
            "trainwatch_watcher_publish_latency_seconds",
            "From publish to JetStream acknowledgement",
            ["kind"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.publish_retries = Counter(
            "trainwatch_watcher_publish_retries",
            "Publishes sent again for want of an acknowledgement",
            registry=r,
        )
        self.informers_running = Gauge(
            "trainwatch_watcher_informers_running", "Informer tasks running", registry=r
        )
        self.clusters_watched = Gauge(
            "trainwatch_watcher_clusters_watched", "Clusters this replica watches", registry=r
        )
        self.watch_lag = Gauge(
            "trainwatch_watcher_watch_lag_seconds",
            "Per cluster: seconds since the least recently heard-from informer heard from its API server",
            ["cluster"],
            registry=r,
        )
        self.cluster_reachable = Gauge(
            "trainwatch_watcher_cluster_reachable",
            "Per cluster this replica owns: 1 when its API server answers, 0 when it does not",
            ["cluster"],
            registry=r,
        )
        self.cache_jobs = Gauge("trainwatch_watcher_cached_jobs", "Jobs held in informer caches", registry=r)
        self.cluster_set_read_failures = Counter(
            "trainwatch_watcher_cluster_set_read_failures",
            "Reads of the registry's desired cluster set that failed and were retried",
            registry=r,
        )
