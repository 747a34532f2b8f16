"""When an event may replace a job's current state: the ordering rule, in one place.

Each event carries an ordering key ``(sequence, epoch, resourceVersion)``, compared left to
right; an event replaces the current state only when its key is strictly greater. Equal keys
change nothing, which is what makes a redelivery or a duplicate idempotent.

1. **sequence first.** The sequence is the job's own clock: 0 at created, +1 per event, and a
   new owner (a watcher that took the cluster over, with a higher epoch) continues it from the
   checkpoint of the previous owner. So sequence orders events across owners. The epoch cannot
   come first: it is a per-cluster lease counter, and a reset counter (a Redis restored from an
   old backup) would otherwise freeze every job's state behind the old, larger epochs.
2. **then epoch.** Two events with the same sequence are two owners reporting "the Nth
   transition" (the fenced-off owner's late event and the new owner's). The higher epoch is the
   legitimate owner: a lower-epoch event never overwrites a higher-epoch one at the same
   sequence, whatever its resourceVersion.
3. **then resourceVersion,** compared as an integer (Kubernetes' etcd revision, which grows per
   object): the same owner re-reporting the same sequence after a restart, with a fresher read
   of the object. A non-numeric resourceVersion ranks below every numeric one, so only the
   first of two such events counts (the rule stays a total order, so folding a batch in memory
   and then comparing with the stored row gives the same answer as applying events one by one).

A stale or out-of-order event still goes into the history when its event id is new; it just
does not move the current state backwards. A ``deleted`` event follows the same rule (it
normally has the highest sequence of its job) and marks the row deleted; the row is kept.
"""

from __future__ import annotations

from typing import NamedTuple

NON_NUMERIC_RESOURCE_VERSION = -1


class OrderKey(NamedTuple):
    sequence: int
    epoch: int
    rv_number: int


def rv_number(resource_version: str) -> int:
    """The resourceVersion as an integer, or -1 when it is not a (64-bit) non-negative integer."""
    if resource_version.isascii() and resource_version.isdigit():
        value = int(resource_version)
        if value < 2**63:
            return value
    return NON_NUMERIC_RESOURCE_VERSION


def supersedes(new: OrderKey, current: OrderKey) -> bool:
    """Whether an event with key ``new`` replaces a current state with key ``current``."""
    return new > current
