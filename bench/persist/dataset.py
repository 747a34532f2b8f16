"""Loads N jobs and 5 transitions each into PostgreSQL with server-side SQL (generate_series).

The schema comes from the real migration; the indexes are dropped for the load and rebuilt
afterwards from the same definitions (tables.py and migration 0001), which is much faster than
maintaining them row by row.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from trainwatch_persister.database import make_engine
from trainwatch_persister.migrate import migrate
from trainwatch_persister.tables import NAME_TRIGRAM_INDEX, job_transitions, jobs

CLUSTERS = 20
TRANSITIONS_PER_JOB = 5

LOAD_JOBS = f"""
INSERT INTO jobs
SELECT
  'cluster-' || (g % {CLUSTERS}),                                    -- cluster_id
  'uid-' || g,                                                        -- uid
  'ns-' || ((g / 3) % 50),                                            -- namespace
  (ARRAY['pytorchjob','mpijob','tfjob','job','rayjob'])[1 + g % 5],   -- kind_key
  (ARRAY['PyTorchJob','MPIJob','TFJob','Job','RayJob'])[1 + g % 5],   -- kind
  'kubeflow.org/v1',
  'train-' || g || '-' || (ARRAY['resnet','bert','llama','gpt','vit','t5'])[1 + (g / 7) % 6],
  p.phase, NULL, p.phase IN ('Succeeded','Failed'), 'Running', NULL, NULL,
  'user-' || (g % 200), 'queue-' || (g % 4),
  jsonb_build_object('team', 'team-' || ((g / 7) % 20),
                     'tier', CASE WHEN g % 3 = 0 THEN 'gpu' ELSE 'cpu' END),
  '{{"worker": {{"active": 2, "succeeded": 0, "failed": 0}}}}'::jsonb,
  0,
  timestamptz '2026-10-01 00:00:00+00' + g * interval '2 seconds',                      -- created_at
  timestamptz '2026-10-01 00:00:00+00' + g * interval '2 seconds' + interval '1 minute',
  NULL,
  timestamptz '2026-10-01 00:00:00+00' + g * interval '2 seconds'
    + ((g::bigint * 7919) % 86400) * interval '1 second',                                       -- updated_at
  CASE WHEN g % 50 = 0 THEN timestamptz '2026-11-20 00:00:00+00' END,                    -- deleted_at
  {TRANSITIONS_PER_JOB - 1}, 1, (1000 + g)::text, 1000 + g,
  'job.cluster-' || (g % {CLUSTERS}) || '.uid-' || g || '.{TRANSITIONS_PER_JOB - 1}', 'bench'
FROM generate_series(1, :jobs) AS g
CROSS JOIN LATERAL (
  -- (g / CLUSTERS) so that phases are spread evenly inside each cluster
  SELECT (ARRAY['Running','Running','Running','Succeeded','Succeeded','Succeeded','Succeeded',
                'Failed','Pending','Restarting'])[1 + (g / {CLUSTERS}) % 10] AS phase
) AS p
"""

LOAD_TRANSITIONS = f"""
INSERT INTO job_transitions
SELECT
  'job.cluster-' || (g % {CLUSTERS}) || '.uid-' || g || '.' || s,
  'cluster-' || (g % {CLUSTERS}), 'uid-' || g, s, 1,
  CASE WHEN s = 0 THEN 'created' ELSE 'transition' END,
  (ARRAY['Pending','Running','Restarting','Running','Succeeded'])[1 + s % 5], NULL, s = 4,
  NULL, NULL, NULL, (1000 + g)::text,
  timestamptz '2026-10-01 00:00:00+00' + g * interval '2 seconds' + s * interval '10 minutes',
  NULL, 'bench',
  jsonb_build_object('event_id', 'job.cluster-' || (g % {CLUSTERS}) || '.uid-' || g || '.' || s,
                     'sequence', s, 'epoch', 1, 'reason', 'bench')
FROM generate_series(1, :jobs) AS g CROSS JOIN generate_series(0, {TRANSITIONS_PER_JOB - 1}) AS s
"""


async def _drop_indexes(conn: AsyncConnection) -> None:
    for table in (jobs, job_transitions):
        for index in table.indexes:
            await conn.execute(sa.text(f"DROP INDEX IF EXISTS {index.name}"))
        await conn.execute(sa.text(f"ALTER TABLE {table.name} DROP CONSTRAINT pk_{table.name}"))
    await conn.execute(sa.text(f"DROP INDEX IF EXISTS {NAME_TRIGRAM_INDEX}"))


async def _create_indexes(conn: AsyncConnection) -> None:
    for table in (jobs, job_transitions):
        keys = ", ".join(c.name for c in table.primary_key.columns)
        await conn.execute(
            sa.text(f"ALTER TABLE {table.name} ADD CONSTRAINT pk_{table.name} PRIMARY KEY ({keys})")
        )
        for index in table.indexes:
            await conn.execute(sa.schema.CreateIndex(index))
    await conn.execute(sa.text(f"CREATE INDEX {NAME_TRIGRAM_INDEX} ON jobs USING gin (name gin_trgm_ops)"))


async def load(database_url: str, *, jobs_count: int, log: object = print) -> dict[str, float]:
    """Create and fill the database; returns the seconds each step took."""
    await migrate(database_url)
    engine = make_engine(database_url, command_timeout=3600)
    steps: dict[str, float] = {}
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("SET maintenance_work_mem = '512MB'"))
            await conn.execute(sa.text("SET max_parallel_maintenance_workers = 2"))
            await _drop_indexes(conn)
            for name, statement in (("jobs", LOAD_JOBS), ("transitions", LOAD_TRANSITIONS)):
                started = time.perf_counter()
                await conn.execute(sa.text(statement), {"jobs": jobs_count})
                steps[f"load {name}"] = time.perf_counter() - started
                log(f"  loaded {name} in {steps[f'load {name}']:.1f}s")  # type: ignore[operator]
            started = time.perf_counter()
            await _create_indexes(conn)
            steps["build indexes"] = time.perf_counter() - started
            log(f"  built indexes in {steps['build indexes']:.1f}s")  # type: ignore[operator]
        started = time.perf_counter()
        async with engine.execution_options(isolation_level="AUTOCOMMIT").connect() as conn:
            await conn.execute(sa.text("VACUUM (ANALYZE) jobs"))
            await conn.execute(sa.text("VACUUM (ANALYZE) job_transitions"))
        steps["vacuum analyze"] = time.perf_counter() - started
    finally:
        await engine.dispose()
    return steps
