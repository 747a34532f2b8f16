"""Property-style check: garbage anywhere in an object yields a status or MalformedObject, nothing else.

A seeded generator (no hypothesis dependency) mutates realistic objects of every kind: it replaces,
deletes and adds values at random paths, with random JSON values and near-miss values (wrong
types, negative and huge counters, odd timestamps, unknown enum strings), and feeds a random
``previous``. Each failure names its seed, so it can be replayed.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from kinds_testkit import (
    KUEUE,
    jobset,
    k8s_condition,
    kubeflow_condition,
    kubeflow_job,
    meta_condition,
    mpi_v2_job,
    podgroup,
    ray_job,
    ray_status,
    step,
    train_job,
    ts,
    volcano_job,
    volcano_status,
)
from kinds_testkit import batch_job as batch_job_object

from trainwatch_common import kinds as catalog
from trainwatch_common.events.jobs import Phase, ReplicaCounts, SubPhase
from trainwatch_watcher.kinds import MalformedObject, NormalizedStatus, normalize_object
from trainwatch_watcher.kinds.fields import MAX_MESSAGE_CHARS

ITERATIONS_PER_KIND = 400

BASES: dict[catalog.JobKind, dict[str, Any]] = {
    catalog.BATCH_JOB: batch_job_object(
        {
            "conditions": [k8s_condition("Suspended", "False", "JobResumed", "Job resumed", 2)],
            "startTime": ts(2),
            "active": 1,
            "ready": 0,
            "failed": 1,
        },
        labels=KUEUE,
    ),
    catalog.PYTORCH_JOB: kubeflow_job(
        "PyTorchJob",
        {
            "conditions": [
                kubeflow_condition("Created", "True", minutes=0),
                kubeflow_condition("Restarting", "True"),
            ],
            "replicaStatuses": {"Master": {"active": 1}, "Worker": {"failed": 1}},
            "startTime": ts(1),
            "lastReconcileTime": ts(2),
        },
    ),
    catalog.MPI_JOB_V2BETA1: mpi_v2_job(
        {
            "conditions": [
                kubeflow_condition("Created", "True", "MPIJob", minutes=0),
                kubeflow_condition("Running", "True", "MPIJob"),
            ],
            "replicaStatuses": {"Launcher": {"failed": 1}, "Worker": {"active": 2}},
            "startTime": ts(1),
        }
    ),
    catalog.TRAIN_JOB: train_job(
        {
            "conditions": [meta_condition("Suspended", "False", "Resumed", "TrainJob is resumed", 1)],
            "jobsStatus": [step("dataset-initializer", succeeded=1), step("node", active=1, ready=1)],
        }
    ),
    catalog.JOBSET: jobset(
        {
            "conditions": [meta_condition("RestartingJobSet", "False", "JobsReady", "jobs ready", 3)],
            "restarts": 1,
            "replicatedJobsStatus": [step("leader", active=1, ready=1), step("workers", active=1)],
        }
    ),
    catalog.VOLCANO_JOB: volcano_job(
        volcano_status(
            "Running",
            history=("Pending",),
            running=6,
            retryCount=1,
            taskStatusCount={"default-nginx": {"phase": {"Running": 6}}},
        )
    ),
    catalog.RAY_JOB: ray_job(ray_status("Running", "RUNNING", failed=1), labels=KUEUE),
}
# The other Kubeflow v1 kinds share the PyTorchJob normalizer; one base covers their code.
COMPANIONS: list[dict[str, Any] | None] = [
    None,
    podgroup("Pending"),
    podgroup("Inqueue"),
    jobset({"restarts": 2}),
]

STRINGS = [
    "",
    "True",
    "False",
    "Unknown",
    "Running",
    "RUNNING",
    "Complete",
    "STOPPED",
    "Aborted",
    "Failed",
    "ünïcødé",
    "x" * 9000,
]
TIMES = [
    "2026-11-29T10:00:00Z",
    "2026-11-29T10:00:00.999999999Z",
    "0000-00-00T00:00:00Z",
    "9999-12-31T23:59:59-23:59",
    "Z",
]


def garbage(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value, biased towards the values that come close to meaning something."""
    choice = rng.randrange(12)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice([0, 1, -1, 2**63, -(2**63), rng.randrange(-10, 10)])
    if choice == 3:
        return rng.choice([0.5, -1.5, 1e308, float("inf")])
    if choice in (4, 5):
        return rng.choice(STRINGS)
    if choice == 6:
        return rng.choice(TIMES)
    if choice == 7 and depth < 3:
        return [garbage(rng, depth + 1) for _ in range(rng.randrange(3))]
    if choice == 8 and depth < 3:
        return {
            rng.choice(["type", "status", "phase", "name", "active", "x"]): garbage(rng, depth + 1)
            for _ in range(rng.randrange(3))
        }
    if choice == 9:
        return {
            "type": rng.choice(["Failed", "Complete", "Running", "Suspended", "RestartingJobSet"]),
            "status": rng.choice(STRINGS[:4]),
        }
    return rng.choice(STRINGS)


def containers(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of ``node`` and of every dict and list inside it (where a mutation can be made)."""
    found = [path]
    children = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in children:
        if isinstance(value, dict | list):
            found += containers(value, (*path, key))
    return found


def resolve(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


def mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    for _ in range(rng.randrange(1, 6)):
        target = resolve(obj, rng.choice(containers(obj)))
        if isinstance(target, dict):
            keys = list(target)
            action = rng.randrange(3)
            if keys and action == 0:
                target[rng.choice(keys)] = garbage(rng)
            elif keys and action == 1:
                del target[rng.choice(keys)]
            else:
                target[
                    rng.choice([*keys, "status", "conditions", "phase", "extra"]) if keys else "status"
                ] = garbage(rng)
        elif isinstance(target, list):
            if target and rng.random() < 0.5:
                target[rng.randrange(len(target))] = garbage(rng)
            else:
                target.append(garbage(rng))
    return obj


def random_previous(rng: random.Random) -> NormalizedStatus | None:
    if rng.random() < 0.3:
        return None
    return NormalizedStatus(
        phase=rng.choice(list(Phase)),
        sub_phase=rng.choice([None, *SubPhase]),
        source=rng.choice([None, "heuristic:status.failed", "condition:Running"]),
        restart_count=rng.randrange(0, 5),
        restart_counter=rng.randrange(0, 5),
        replicas={"x": ReplicaCounts()},
    )


@pytest.mark.parametrize("kind", list(BASES), ids=lambda k: f"{k.key}-{k.version}")
def test_garbage_never_raises_anything_but_malformed(kind: catalog.JobKind) -> None:
    normalized = malformed = 0
    for iteration in range(ITERATIONS_PER_KIND):
        seed = f"{kind.key}/{kind.version}/{iteration}"
        rng = random.Random(seed)
        obj = mutate(BASES[kind], rng)
        companion = rng.choice(COMPANIONS)
        if companion is not None and rng.random() < 0.5:
            companion = mutate(companion, rng)
        try:
            result = normalize_object(kind, obj, random_previous(rng), related=companion)
        except MalformedObject:
            malformed += 1
            continue
        except Exception as error:  # pragma: no cover - the assertion below reports it
            pytest.fail(f"{kind.key} iteration {iteration} (seed {seed}) raised {error!r} for {obj!r}")
        normalized += 1
        assert isinstance(result.phase, Phase)
        assert not result.terminal or result.phase in (Phase.SUCCEEDED, Phase.FAILED)
        assert result.message is None or len(result.message) <= MAX_MESSAGE_CHARS
        assert result.restart_count >= 0
        assert result.restart_counter >= 0
        assert result.finished_at is None or result.phase in (Phase.SUCCEEDED, Phase.FAILED)
    # The mutations must exercise both outcomes, or the test proves little.
    assert normalized > ITERATIONS_PER_KIND // 4
    assert malformed > 0
