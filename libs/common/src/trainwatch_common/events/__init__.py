"""Event contracts: job-status and cluster events, their CloudEvents envelope and deterministic ids."""
