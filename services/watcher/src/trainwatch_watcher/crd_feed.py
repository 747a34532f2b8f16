"""Notice a job kind's CRD appearing or coming back within a second: watch the
CustomResourceDefinitions where the credentials allow it.

A real apiserver sends DELETED for a CRD's objects when it is deleted, then answers 404 on the
kind's URLs; a re-created CRD is a new kind to its watch cache. Periodic rediscovery alone
(``rediscovery_interval``) noticed a re-installed CRD up to a minute late, and a job that ran
meanwhile collapsed into one event. Any CRD event of a job kind's group asks the cluster's
worker to rediscover at once. Many watchers may not read CRDs (403): then this returns, and the
worker falls back to rediscovering often for a while after a kind went away (a 404).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import orjson

from trainwatch_common.kinds import ALL_JOB_KINDS
from trainwatch_watcher import errors
from trainwatch_watcher.kube.client import KubeClient
from trainwatch_watcher.kube.progress import server_resource_version
from trainwatch_watcher.kube.watching import Backoff
from trainwatch_watcher.settings import WatchTimings

log = logging.getLogger(__name__)

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
_JOB_GROUPS = frozenset(kind.group for kind in ALL_JOB_KINDS)


def _is_job_crd(obj: Any) -> bool:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return isinstance(spec, dict) and spec.get("group") in _JOB_GROUPS


async def follow_crds(client: KubeClient, timings: WatchTimings, on_change: Callable[[], None]) -> str:
    """Call ``on_change`` on every CRD event of a job kind's group, until cancelled. Returns why
    when the CRDs cannot be watched here (403 or 404): the caller then relies on its fallback."""
    backoff = Backoff(timings)
    rng = random.Random()
    first = True
    while True:
        try:
            resource_version = await server_resource_version(client, CRD_PATH)
            if not first:
                on_change()  # events between the last stream and this one were not seen
            first = False
            timeout = timings.watch_timeout_seconds + int(rng.random() * timings.watch_timeout_seconds)
            params = {"watch": "1", "resourceVersion": resource_version, "timeoutSeconds": str(timeout)}
            async with client.stream_lines(
                CRD_PATH, params, read_timeout=timeout + timings.read_timeout
            ) as lines:
                backoff.reset()
                async for line in lines:
                    try:
                        event = orjson.loads(line)
                    except orjson.JSONDecodeError:
                        continue
                    kind = event.get("type") if isinstance(event, dict) else None
                    if kind == "ERROR":
                        break  # e.g. 410: list again
                    if kind in ("ADDED", "MODIFIED", "DELETED") and _is_job_crd(event.get("object")):
                        on_change()
        except (errors.Unauthorized, errors.KindNotServed) as exc:
            return str(exc)
        except errors.StorageInitializing:
            await asyncio.sleep(timings.busy_retry)
        except errors.ClusterError as exc:
            delay = backoff.next_delay()
            log.debug("CRD watch failed; retrying", extra={"error": str(exc), "retry_in": round(delay, 2)})
            await asyncio.sleep(delay)
