"""Trainwatch's bounded chaos run (issue 13): ``make chaos-short``, ``make chaos SEED=n``.

The whole system runs as real processes on loopback: kubesim in a process of its own
(``kubesim_host``: clusters serving every kind, seeded job lifecycles and their ground truth,
fault knobs), nats-server, redis-server and PostgreSQL from the test harness, the registry,
three watcher replicas (lease TTL 2 s), the persister on PostgreSQL and the notifier sending
signed cards to a Feishu-compatible sink that checks signatures and rate limits (one bot per
cluster). Under load, one fault after the other (``runner.Chaos.schedule``); then the run
settles, and ``compare`` holds the truth against the JOBS stream, the persister's tables and
the cards, job by job, prints one table and ends with exactly one line:

    chaos: N transitions, N lost, N duplicated, N wrong final, N out of order

Modules: ``runner`` (modes, the schedule, settling, the report), ``system`` (processes and
servers), ``observe`` (leases, health, reading the three surfaces), ``compare`` (pure),
``kubesim_host`` (the simulator process).
"""
