"""Trainwatch persister: the history of every job, kept in SQL and served by a query API.

A durable JetStream consumer writes each batch of job-status events in one transaction (the
current state per job and the append-only transition history) and acks only after the commit;
a FastAPI app answers list, detail and statistics queries over the same tables.
"""

__version__ = "0.1.0"
