"""Prometheus metrics of the persister (served on /metrics by the common health routes)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

EVENTS_RECEIVED = Counter("trainwatch_persister_events_total", "Job-status messages fetched from JetStream")
TRANSITIONS_INSERTED = Counter(
    "trainwatch_persister_transitions_inserted_total", "History rows written (duplicates excluded)"
)
DUPLICATES = Counter(
    "trainwatch_persister_duplicate_events_total", "Events whose id was already in the history"
)
JOBS_CHANGED = Counter(
    "trainwatch_persister_jobs_changed_total", "Current-state rows inserted or moved forward"
)
DEADLETTERED = Counter(
    "trainwatch_persister_deadlettered_total", "Messages sent to the dead-letter stream", ["reason"]
)
DATABASE_ERRORS = Counter(
    "trainwatch_persister_database_errors_total", "Batch writes that failed and will be retried"
)
CONSUMER_ERRORS = Counter(
    "trainwatch_persister_consumer_errors_total", "Fetch-loop failures (NATS errors and the like)"
)
BATCH_SECONDS = Histogram(
    "trainwatch_persister_batch_seconds",
    "Time to write and ack one batch",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
BATCH_SIZE = Histogram(
    "trainwatch_persister_batch_size",
    "Messages per fetched batch",
    buckets=(1, 10, 50, 100, 250, 500, 1000, 5000),
)
PRUNED = Counter("trainwatch_persister_pruned_rows_total", "Rows deleted by retention", ["table"])
DATABASE_UP = Gauge("trainwatch_persister_database_up", "1 when the last database operation succeeded")
JOBS_BY_PHASE = Gauge(
    "trainwatch_persister_jobs",
    "Jobs not deleted from their cluster, by cluster, kind and phase, as stored (refreshed every "
    "TRAINWATCH_JOBS_GAUGE_INTERVAL_SECONDS; every replica reports the same: aggregate with max)",
    ["cluster", "kind", "phase"],
)
CONSUMER_PENDING = Gauge(
    "trainwatch_persister_consumer_pending",
    "Job events in JOBS not yet written and acked by the persisters (the durable consumer's pending "
    "plus ack-pending; every replica reports the same: aggregate with max)",
)
