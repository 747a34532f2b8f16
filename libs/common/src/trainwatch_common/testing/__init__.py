"""Test helpers: real servers as processes, waiting on conditions, leftover-task checks.

Service code never imports this package (an import-linter contract forbids it).
"""

from trainwatch_common.testing.servers import (
    ExternalServer,
    NatsCluster,
    NatsServer,
    PostgresServer,
    RedisSentinelGroup,
    RedisServer,
    ServerMissing,
    free_port,
)
from trainwatch_common.testing.waiting import eventually

__all__ = [
    "ExternalServer",
    "NatsCluster",
    "NatsServer",
    "PostgresServer",
    "RedisSentinelGroup",
    "RedisServer",
    "ServerMissing",
    "eventually",
    "free_port",
]
