"""Logging, health and metrics, the same in every service."""
