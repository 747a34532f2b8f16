"""Alembic migrations, run with ``python -m trainwatch_persister migrate`` or at start-up."""
