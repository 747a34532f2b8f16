"""The two tables: ``jobs`` (current state per cluster and uid) and ``job_transitions`` (history).

Both carry the event's diagnosis (issue 16): category, blame and summary as columns, the whole
diagnosis as JSON. On ``jobs`` it is the diagnosis of the highest-ordered event whatever its
``change``, so a ``diagnosis`` update moves it (and the ordering key) without changing the phase.

``jobs`` is rewritten by an upsert whenever an event is newer by the ordering rule in
``ordering.py``; ``job_transitions`` is append-only and unique on the deterministic event id, so
a redelivered or re-published event is recognised and ignored.

Index choice: every list query sorts by one of (updated_at | created_at | name) with
(cluster_id, uid) as the tie-breaker that makes the keyset unique, so each sort has an index in
exactly that order (scanned backwards for descending pages), and the most common filters
(cluster, phase) have one leading with the filter column. PostgreSQL adds a GIN index for label
containment and, where pg_trgm is available, a trigram index for the name search (migration 0001).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in and out: timestamptz on PostgreSQL, naive UTC text on SQLite.

    SQLite compares timestamps as text, so every value is stored in UTC in one format.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        try:
            value = value.astimezone(UTC)
        except OverflowError:
            # Outside datetime's range once in UTC (0001-01-01 at +14:00, 9999-12-31 at -12:00):
            # the nearest representable instant compares the same with every stored time.
            value = (datetime.min if value.year == 1 else datetime.max).replace(tzinfo=UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JsonDocument: sa.types.TypeEngine[Any] = sa.JSON().with_variant(JSONB(), "postgresql")
# None is SQL NULL, not the JSON document `null`: "no diagnosis" is then IS NULL on both dialects.
NullableJsonDocument: sa.types.TypeEngine[Any] = sa.JSON(none_as_null=True).with_variant(
    JSONB(none_as_null=True), "postgresql"
)


def diagnosis_columns() -> list[sa.Column[Any]]:
    """The diagnosis on a row: the fields lists filter on, and the whole diagnosis as published."""
    return [
        sa.Column("diagnosis_category", sa.String(32)),
        sa.Column("diagnosis_blame", sa.String(16)),
        sa.Column("diagnosis_summary", sa.String(256)),
        sa.Column("diagnosis", NullableJsonDocument),
    ]


metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("cluster_id", sa.String(63), primary_key=True),
    sa.Column("uid", sa.String(128), primary_key=True),
    sa.Column("namespace", sa.String(253), nullable=False),
    sa.Column("kind_key", sa.String(32), nullable=False),
    sa.Column("kind", sa.String(64), nullable=False),
    sa.Column("api_version", sa.String(128), nullable=False),
    sa.Column("name", sa.String(253), nullable=False),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("sub_phase", sa.String(16)),
    sa.Column("terminal", sa.Boolean, nullable=False),
    sa.Column("previous_phase", sa.String(16)),
    sa.Column("reason", sa.Text),
    sa.Column("message", sa.Text),
    sa.Column("owner", sa.String(253)),
    sa.Column("queue", sa.String(253)),
    sa.Column("labels", JsonDocument, nullable=False),
    sa.Column("replicas", JsonDocument, nullable=False),
    sa.Column("restart_count", sa.Integer, nullable=False),
    # The job's creationTimestamp (the first observation when the event lacks one).
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("started_at", UtcDateTime),
    sa.Column("finished_at", UtcDateTime),
    # When the event holding the current state was observed.
    sa.Column("updated_at", UtcDateTime, nullable=False),
    sa.Column("deleted_at", UtcDateTime),
    # The ordering key of the current state (see ordering.py).
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("resource_version", sa.String(64), nullable=False),
    sa.Column("rv_number", sa.BigInteger, nullable=False),
    sa.Column("event_id", sa.String(400), nullable=False),
    sa.Column("watcher_id", sa.String(253)),
    # Issue 16 (migration 0004): the diagnosis of the event holding the current state (null when it
    # has none: nothing to explain, or a watcher without diagnosis), and what the job asked for.
    *diagnosis_columns(),
    # The change of the event holding the current state: "diagnosis" when a diagnosis update (same
    # phase) is the newest, which keeps the previous_phase of the transition before it.
    sa.Column("last_change", sa.String(16)),
    sa.Column("gpus", sa.Integer),
    sa.Column("gpu_product", sa.String(253)),
    sa.Column("cpu", sa.Float),
    sa.Column("memory_bytes", sa.BigInteger),
    sa.Column("queue_wait_seconds", sa.Float),
    sa.Column("run_seconds", sa.Float),
)

sa.Index("ix_jobs_updated_at_cluster_id_uid", jobs.c.updated_at, jobs.c.cluster_id, jobs.c.uid)
sa.Index("ix_jobs_created_at_cluster_id_uid", jobs.c.created_at, jobs.c.cluster_id, jobs.c.uid)
sa.Index("ix_jobs_name_cluster_id_uid", jobs.c.name, jobs.c.cluster_id, jobs.c.uid)
sa.Index("ix_jobs_cluster_id_updated_at_uid", jobs.c.cluster_id, jobs.c.updated_at, jobs.c.uid)
sa.Index("ix_jobs_phase_updated_at", jobs.c.phase, jobs.c.updated_at, jobs.c.cluster_id, jobs.c.uid)
# Counts by cluster and phase (the list's total, /v1/stats) are answered from this index alone.
sa.Index("ix_jobs_cluster_id_phase", jobs.c.cluster_id, jobs.c.phase)
# "Which jobs are OOMKilled / waiting in a queue": the category filter, in the list's default order.
sa.Index("ix_jobs_diagnosis_category_updated_at", jobs.c.diagnosis_category, jobs.c.updated_at,
         jobs.c.cluster_id, jobs.c.uid)  # fmt: skip
sa.Index("ix_jobs_namespace_cluster_id", jobs.c.namespace, jobs.c.cluster_id)
sa.Index("ix_jobs_kind_key", jobs.c.kind_key)
sa.Index("ix_jobs_owner", jobs.c.owner)
sa.Index("ix_jobs_deleted_at", jobs.c.deleted_at)
# The unfinished live jobs, where the overview's "jobs running over time" starts (migration 0004).
sa.Index("ix_jobs_terminal_deleted_at", jobs.c.terminal, jobs.c.deleted_at)
# The overview's breakdown (live jobs per cluster, namespace and phase) from the index alone.
sa.Index("ix_jobs_cluster_id_namespace_phase_deleted_at", jobs.c.cluster_id, jobs.c.namespace, jobs.c.phase,
         jobs.c.deleted_at)  # fmt: skip
sa.Index(
    "ix_jobs_labels", jobs.c.labels, postgresql_using="gin", postgresql_ops={"labels": "jsonb_path_ops"}
).ddl_if(dialect="postgresql")
# ix_jobs_name_trgm (gin, gin_trgm_ops) exists only where the pg_trgm extension could be created:
# it is made by migration 0001, not declared here.
NAME_TRIGRAM_INDEX = "ix_jobs_name_trgm"

job_transitions = sa.Table(
    "job_transitions",
    metadata,
    sa.Column("event_id", sa.String(400), primary_key=True),
    sa.Column("cluster_id", sa.String(63), nullable=False),
    sa.Column("uid", sa.String(128), nullable=False),
    sa.Column("sequence", sa.BigInteger, nullable=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("change", sa.String(16), nullable=False),
    sa.Column("phase", sa.String(16), nullable=False),
    sa.Column("sub_phase", sa.String(16)),
    sa.Column("terminal", sa.Boolean, nullable=False),
    sa.Column("previous_phase", sa.String(16)),
    sa.Column("reason", sa.Text),
    sa.Column("message", sa.Text),
    sa.Column("resource_version", sa.String(64), nullable=False),
    sa.Column("observed_at", UtcDateTime, nullable=False),
    sa.Column("source_transition_time", UtcDateTime),
    sa.Column("watcher_id", sa.String(253)),
    *diagnosis_columns(),
    # The whole event as published (replicas, timestamps, labels...), for the detail view.
    sa.Column("event", JsonDocument, nullable=False),
)

sa.Index("ix_job_transitions_cluster_id_uid_sequence", job_transitions.c.cluster_id, job_transitions.c.uid,
         job_transitions.c.sequence)  # fmt: skip
sa.Index("ix_job_transitions_observed_at", job_transitions.c.observed_at)

# Live totals per (cluster, phase, kind, terminal, deleted), kept exact by triggers on `jobs`
# (migrations 0002 and 0005) in the same transaction as every change: a list's `total` for these
# filters, and /v1/stats, are read from a few rows here instead of counting a million index entries.
job_counts = sa.Table(
    "job_counts",
    metadata,
    sa.Column("cluster_id", sa.String(63), primary_key=True),
    sa.Column("phase", sa.String(16), primary_key=True),
    sa.Column("kind_key", sa.String(32), primary_key=True),
    sa.Column("terminal", sa.Boolean, primary_key=True),
    sa.Column("deleted", sa.Boolean, primary_key=True),
    sa.Column("jobs", sa.BigInteger, nullable=False),
)
