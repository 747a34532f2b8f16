"""One job's scripted run: writes as a controller would, and records the intended state."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kubesim import objects
from kubesim.errors import ApiError
from kubesim.kinds import KindSpec
from kubesim.truth import NormState, TruthLog

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

__all__ = ["JobGone", "JobRun", "Options", "set_condition"]

Outcome = Literal["succeeded", "failed"]


@dataclass(frozen=True, slots=True)
class Options:
    """What a lifecycle goes through. ``delete_while_running`` deletes the job while it
    runs (no outcome); ``delete`` deletes it after it finished."""

    outcome: Outcome = "succeeded"
    restarts: int = 1
    suspend: bool = True
    delete: bool = True
    delete_while_running: bool = False


class JobGone(Exception):
    """The job was deleted (or its kind removed) under the scenario's feet."""


def set_condition(
    conds: list[dict[str, Any]],
    ctype: str,
    status: str,
    reason: str,
    message: str,
    *,
    update_time: bool = True,
    metav1: bool = False,
) -> None:
    """Set one condition the way the controllers do: replace the entry of that type,
    appended at the end; keep ``lastTransitionTime`` when the status did not change."""
    now = objects.now()
    old = next((c for c in conds if c.get("type") == ctype), None)
    transition = old["lastTransitionTime"] if old is not None and old.get("status") == status else now
    if old is not None:
        conds.remove(old)
    cond: dict[str, Any] = {"type": ctype, "status": status, "reason": reason, "message": message}
    if update_time and not metav1:
        cond["lastUpdateTime"] = now
    cond["lastTransitionTime"] = transition
    conds.append(cond)


def remove_condition(conds: list[dict[str, Any]], ctype: str) -> None:
    conds[:] = [c for c in conds if c.get("type") != ctype]


class JobRun:
    """The handle a lifecycle script uses to act on one job."""

    def __init__(
        self,
        cluster: Cluster,
        truth: TruthLog,
        spec: KindSpec,
        namespace: str,
        name: str,
        interval: float,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.cluster = cluster
        self.truth = truth
        self.spec = spec
        self.namespace = namespace
        self.name = name
        self.interval = interval
        self.gate = gate  # while cleared, every write waits (ScenarioDriver.hold)
        self.obj: dict[str, Any] = {}
        self.status: dict[str, Any] = {}
        self.children: list[tuple[KindSpec, str]] = []

    @property
    def uid(self) -> str:
        return str(self.obj.get("metadata", {}).get("uid", ""))

    async def pause(self) -> None:
        await asyncio.sleep(self.interval)
        await self._wait_gate()

    async def _wait_gate(self) -> None:
        if self.gate is not None:
            await self.gate.wait()

    def _guard(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            result: dict[str, Any] = fn(*args, **kwargs)
        except KeyError as exc:
            raise JobGone(str(exc)) from None
        except ApiError as exc:
            if exc.code == 404:
                raise JobGone(exc.message) from None
            raise
        return result

    async def create(self, body: dict[str, Any], state: NormState) -> None:
        await self._wait_gate()
        self.obj = self._guard(self.cluster.store.create, self.spec, body, drop_status=True)
        self.truth.created(self.cluster.name, self.obj, state)

    async def write_status(self, state: NormState) -> None:
        """Write ``self.status`` through the status subresource (a full UpdateStatus)."""
        await self.pause()
        self.obj = self._guard(
            self.cluster.store.replace_status,
            self.spec,
            self.namespace,
            self.name,
            copy.deepcopy(self.status),
        )
        self.truth.observe(self.cluster.name, self.obj, state)

    async def patch_spec(self, patch: dict[str, Any]) -> None:
        """A user's spec change (bumps generation); the normalized state does not change."""
        await self.pause()
        self.obj = self._guard(
            self.cluster.store.patch, self.spec, self.namespace, self.name, {"spec": patch}
        )

    async def delete(self) -> None:
        await self.pause()
        obj, _ = self._guard_delete(self.spec, self.name)
        self.truth.deleted(self.cluster.name, obj)
        for spec, name in self.children:
            with contextlib.suppress(ApiError, KeyError):
                self.cluster.store.delete(spec, self.namespace, name)

    def _guard_delete(self, spec: KindSpec, name: str) -> tuple[dict[str, Any], bool]:
        try:
            return self.cluster.store.delete(spec, self.namespace, name, ignore_finalizers=True)
        except KeyError as exc:
            raise JobGone(str(exc)) from None
        except ApiError as exc:
            raise JobGone(exc.message) from None

    # ---------------------------------------------- owned child objects
    def child(self, spec: KindSpec | None, name: str, body: dict[str, Any]) -> None:
        """Create an object owned by this job (not part of the ground truth)."""
        if spec is None or not self.cluster.store.serves(spec):
            return
        try:
            self.cluster.store.create(spec, body, drop_status=True)
        except ApiError:
            return
        self.children.append((spec, name))

    def child_status(self, spec: KindSpec | None, name: str, status: dict[str, Any]) -> None:
        if spec is None or (spec, name) not in self.children:
            return
        with contextlib.suppress(ApiError, KeyError):
            self.cluster.store.replace_status(spec, self.namespace, name, copy.deepcopy(status))

    def has_child(self, spec: KindSpec | None) -> bool:
        return any(s == spec for s, _ in self.children)
