"""What one informer watches, and everything its behaviour depends on (pure: no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

from trainwatch_common.events.clusters import WatchOptions
from trainwatch_common.kinds import JobKind
from trainwatch_watcher.records import ALL_NAMESPACES


@dataclass(frozen=True, slots=True)
class InformerSpec:
    """Everything an informer's behaviour depends on: a change of any field restarts it."""

    cluster_id: str
    kind: JobKind
    namespace: str | None
    options: WatchOptions
    epoch: int
    owner: str
    # A kind whose same-named object completes this kind's status (the JobSet of a TrainJob).
    companion: JobKind | None = None

    @property
    def scope(self) -> str:
        return self.namespace or ALL_NAMESPACES

    @property
    def name(self) -> str:
        return f"informer {self.cluster_id}/{self.kind.key}/{self.scope}"

    def in_scope(self, namespace: str) -> bool:
        if self.namespace is not None and namespace != self.namespace:
            return False
        return self.options.watches_namespace(namespace)
