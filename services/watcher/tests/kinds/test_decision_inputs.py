"""Kubeflow v1 ``decision_inputs``: the informer skips normalizing an update whose inputs are equal
to those of the last computed status. That is sound only if, for random (and odd) objects:

- equal inputs give an equal trimmed status for the same ``previous``;
- the last computed status, fed back as ``previous``, yields itself again (a fixed point);
- an object with inputs is never one ``normalize`` rejects as malformed (it would go uncounted).
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from test_normalize_fuzz import BASES, garbage, mutate, random_previous

from trainwatch_common import kinds as catalog
from trainwatch_watcher.kinds import MalformedObject, kubeflow_v1
from trainwatch_watcher.kinds.catalog import decision_inputs_for
from trainwatch_watcher.records import trim

ITERATIONS = 1500
KUBEFLOW_V1 = [
    catalog.PYTORCH_JOB,
    catalog.TF_JOB,
    catalog.MPI_JOB_V1,
    catalog.XGBOOST_JOB,
    catalog.PADDLE_JOB,
    catalog.JAX_JOB,
]
VOLATILE_STATUS_KEYS = ("startTime", "lastReconcileTime", "completionTime")


def volatile_change(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """What most real updates change: counters, messages, timestamps, the resourceVersion."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(rng.randrange(10**6))
    status = obj.get("status")
    if not isinstance(status, dict):
        return obj
    for _ in range(rng.randrange(1, 4)):
        choice = rng.randrange(4)
        replicas = status.get("replicaStatuses")
        conditions = status.get("conditions")
        if choice == 0 and isinstance(replicas, dict) and replicas:
            entry = replicas[rng.choice(list(replicas))]
            if isinstance(entry, dict):
                entry[rng.choice(["active", "succeeded", "failed"])] = rng.choice([0, 1, 3, garbage(rng)])
        elif choice == 1 and isinstance(conditions, list) and conditions:
            entry = rng.choice(conditions)
            if isinstance(entry, dict):
                entry[rng.choice(["message", "lastUpdateTime"])] = garbage(rng)
        elif choice == 2:
            status[rng.choice(VOLATILE_STATUS_KEYS)] = garbage(rng)
        else:
            status.pop(rng.choice(VOLATILE_STATUS_KEYS), None)
    return obj


def test_only_the_kubeflow_v1_kinds_have_decision_inputs() -> None:
    assert all(decision_inputs_for(kind) is kubeflow_v1.decision_inputs for kind in KUBEFLOW_V1)
    for kind in catalog.ALL_JOB_KINDS:
        if kind not in KUBEFLOW_V1:
            assert decision_inputs_for(kind) is None, kind


@pytest.mark.parametrize("mutated", [False, True], ids=["realistic", "mutated"])
def test_equal_inputs_mean_the_same_trimmed_status(mutated: bool) -> None:
    base = BASES[catalog.PYTORCH_JOB]
    equal_inputs = skipped_malformed = 0
    for iteration in range(ITERATIONS):
        rng = random.Random(f"decision/{mutated}/{iteration}")
        first = mutate(base, rng) if mutated else volatile_change(base, rng)
        if rng.random() < 0.5:  # vary the conditions that decide the row
            first["status"] = copy.deepcopy(rng.choice([b["status"] for b in BASES.values()]))
            first = volatile_change(first, rng) if not mutated else mutate(first, rng)
        inputs = kubeflow_v1.decision_inputs(first)
        previous = random_previous(rng)
        try:
            computed = kubeflow_v1.normalize(first, previous)
        except MalformedObject:
            assert inputs is None, f"iteration {iteration}: malformed object has inputs {first!r}"
            skipped_malformed += 1
            continue
        if inputs is None:
            continue
        last = trim(computed)
        # Fed back as previous, the last computed status is a fixed point.
        assert trim(kubeflow_v1.normalize(first, last)) == last, f"iteration {iteration}"
        second = volatile_change(first, rng)
        if kubeflow_v1.decision_inputs(second) != inputs:
            continue
        equal_inputs += 1
        assert trim(kubeflow_v1.normalize(second, last)) == last, f"iteration {iteration}: {second!r}"
    assert equal_inputs > ITERATIONS // 10
    if mutated:
        assert skipped_malformed > 0
