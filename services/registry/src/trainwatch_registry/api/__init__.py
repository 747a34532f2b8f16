"""The registry's HTTP API (FastAPI): routes, dependencies and error mapping."""
