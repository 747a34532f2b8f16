"""Which clusters a replica should own: rendezvous preferences, exact quotas, a sticky plan (pure).

Three pieces, all deterministic functions of their arguments (no Redis, no clock):

* **Rendezvous (highest-random-weight) scores.** ``score(replica, cluster)`` is a stable 64-bit
  hash. For each cluster, the live replicas ranked by score give its order of preference; a
  replica's *preferred clusters* are those where it ranks first, then second, and so on. Adding
  or removing a replica changes only the rankings that involve it, which is why HRW moves about
  1/N of the clusters per membership change.

* **Quotas.** ``fair_share(n, r) = ceil(n / r)`` bounds every replica. A ceiling alone can still
  leave largest - smallest = 2 (1,000 clusters on 3 replicas: 334, 334, 332), so ``quota`` hands
  out exactly ``n mod r`` "plus one" slots: every replica gets ``floor(n / r)``, and the first
  ``n mod r`` replicas in a fixed order (by their own hash) get one more. Quotas sum to ``n``, none
  exceeds the fair share, and they differ by at most one. The order of the replicas by hash is
  stable as members come and go, so the "plus one" slots rarely move.

* **A sticky plan.** Plain HRW is not balanced (with 60 clusters on 3 replicas the largest share
  is typically 24-26, not 20), and HRW with bounded load recomputed from scratch cascades: a
  cluster bumped from a full replica bumps another. So the plan starts from what each replica
  *holds*: keep what you hold up to your quota; when over it, hand off your least preferred
  clusters; when under it, take free clusters, most preferred first. A scale event then moves
  only what must move: on scale-up exactly the surplus of the existing replicas, on scale-down
  exactly the departed replica's clusters (give or take where the "plus one" slots land).
  Rendezvous decides *which* clusters move, so the outcome does not depend on timing races more
  than it must, and a fresh start converges near the HRW assignment.

**Weighting by job count: not done, on purpose.** Shares count clusters, every cluster weighs
one. A cluster's job count is not known before someone watches it, it changes all day (a batch
of 5,000 Jobs appears and is gone an hour later), and every move costs a relist and a handoff, so
a share that followed job counts would churn exactly when the fleet is busiest. The cost of an
idle watch (connections, informers, discovery) is per cluster, and the work of a busy one follows
its event rate, not its job count; neither is captured by a job count that is cheap to read.
Operators can read the per-cluster metrics and split an outsized cluster's load by namespace
(watch options) if one ever dominates. Counting clusters keeps the promise that is easy to
state and test: largest - smallest share <= 1, and a scale event moves the minimum.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache


@lru_cache(maxsize=1 << 16)  # a replica rescores the same pairs every tick
def score(replica_id: str, cluster_id: str) -> int:
    """The rendezvous weight of ``replica_id`` for ``cluster_id`` (stable across processes)."""
    digest = hashlib.blake2b(f"{cluster_id}\x00{replica_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _replica_order_key(replica_id: str) -> tuple[int, str]:
    digest = hashlib.blake2b(f"replica\x00{replica_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big"), replica_id


def fair_share(n_clusters: int, n_replicas: int) -> int:
    """ceil(clusters / replicas): no replica ever holds more. With no replicas, all of them."""
    if n_replicas <= 0:
        return n_clusters
    return -(-n_clusters // n_replicas)


def quota(replica_id: str, replicas: Collection[str], n_clusters: int) -> int:
    """How many clusters ``replica_id`` should hold: floor(n/r), plus one for the first n mod r
    replicas ordered by hash. Quotas of all replicas sum to ``n_clusters`` and differ by <= 1.

    ``replica_id`` counts as live even if absent from ``replicas`` (its heartbeat may not have
    landed yet): a replica never plans for a world without itself.
    """
    members = set(replicas) | {replica_id}
    base, extra = divmod(n_clusters, len(members))
    ordered = sorted(members, key=_replica_order_key)
    return base + (1 if ordered.index(replica_id) < extra else 0)


def preferred_clusters(replica_id: str, replicas: Collection[str], clusters: Iterable[str]) -> list[str]:
    """``clusters`` in ``replica_id``'s order of preference.

    First the clusters whose top-scoring live replica is ``replica_id``, then those where it ranks
    second, and so on; within one rank, higher score first (ties by cluster id, for determinism).
    """
    members = sorted(set(replicas) | {replica_id})
    keyed: list[tuple[int, int, str]] = []
    for cluster_id in clusters:
        mine = score(replica_id, cluster_id)
        rank = sum(1 for other in members if other != replica_id and score(other, cluster_id) > mine)
        keyed.append((rank, -mine, cluster_id))
    keyed.sort()
    return [cluster_id for _, _, cluster_id in keyed]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one replica should do next.

    ``drop``: clusters I hold that are no longer desired (stop and release).
    ``hand_off``: clusters I hold beyond my quota, least preferred first (stop, checkpoint, release).
    ``acquire``: clusters to try, in preference order; stop after ``want`` successes (others may
    win some of the races).
    """

    quota: int
    want: int
    acquire: list[str] = field(default_factory=list)
    hand_off: list[str] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)


def plan(
    *,
    me: str,
    replicas: Collection[str],
    desired: Collection[str],
    owned: Collection[str],
    others: Mapping[str, str] | None = None,
) -> Plan:
    """Decide what ``me`` acquires and hands off so that ownership converges to the quotas.

    ``others`` maps cluster → holder for leases held by anyone else, when known. Clusters held by
    others are never candidates (stealing is not needed: an over-quota holder hands off on its own,
    and a dead holder's lease expires). Without ``others``, every cluster I do not hold is a
    candidate and the lease acquisition itself decides.
    """
    desired_set = set(desired)
    owned_set = set(owned)
    drop = sorted(owned_set - desired_set)
    kept = owned_set & desired_set
    my_quota = quota(me, replicas, len(desired_set))
    if len(kept) > my_quota:
        order = preferred_clusters(me, replicas, kept)
        return Plan(quota=my_quota, want=0, hand_off=order[my_quota:][::-1], drop=drop)
    want = my_quota - len(kept)
    if want == 0:
        return Plan(quota=my_quota, want=0, drop=drop)
    taken = set(others or ()) - owned_set
    candidates = preferred_clusters(me, replicas, desired_set - kept - taken)
    return Plan(quota=my_quota, want=want, acquire=candidates, drop=drop)


def assign(replicas: Collection[str], clusters: Iterable[str]) -> dict[str, str]:
    """A full assignment from scratch, as replicas planning one after another would reach it.

    Used by the benchmark and tests as the "fresh start" reference; replicas never call it.
    """
    holdings: dict[str, set[str]] = {replica: set() for replica in replicas}
    return converge(holdings, list(clusters))


def converge(holdings: dict[str, set[str]], clusters: list[str], *, max_rounds: int = 100) -> dict[str, str]:
    """Run ``plan`` for every replica in turn until nothing changes; mutates ``holdings``.

    A replica absent from ``holdings`` is gone, and its clusters are free. Returns cluster → owner.
    """
    replicas = sorted(holdings)
    for _ in range(max_rounds):
        changed = False
        owner_of = {c: r for r, held in holdings.items() for c in held}
        for replica in replicas:  # first everyone hands off, so that the others can take
            step = plan(me=replica, replicas=replicas, desired=clusters, owned=holdings[replica])
            for cluster_id in step.hand_off + step.drop:
                holdings[replica].discard(cluster_id)
                owner_of.pop(cluster_id, None)
                changed = True
        for replica in replicas:
            others = {c: r for c, r in owner_of.items() if r != replica}
            step = plan(
                me=replica, replicas=replicas, desired=clusters, owned=holdings[replica], others=others
            )
            for cluster_id in step.acquire[: step.want]:
                holdings[replica].add(cluster_id)
                owner_of[cluster_id] = replica
                changed = True
        if not changed:
            return owner_of
    raise RuntimeError("ownership did not converge")  # a bug: quotas always sum to the cluster count
