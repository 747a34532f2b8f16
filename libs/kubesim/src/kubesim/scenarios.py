"""The scenario driver: realistic, seeded job lifecycles with a ground-truth log.

    driver = ScenarioDriver(cluster, seed=7, rate=500)
    uid = await driver.run_lifecycle("PyTorchJob", outcome="failed", restarts=2)
    await driver.run_demo(jobs=40, concurrency=8)
    driver.truth  # list[TruthEntry]

``rate`` is status writes per second per job (``None``: as fast as possible). Writes go
straight to the cluster's store, exactly as a controller's UpdateStatus would land.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kubesim import lifecycles, lifecycles_more
from kubesim.diagnosis import DiagnosisTruth
from kubesim.diagnosis_scenarios import DiagnosisRun
from kubesim.events import Recorder
from kubesim.kinds import KindSpec
from kubesim.runs import JobGone, JobRun, Options, Outcome
from kubesim.truth import TruthEntry, TruthLog

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

__all__ = ["LIFECYCLES", "Options", "ScenarioDriver"]

LIFECYCLES = {**lifecycles.LIFECYCLES, **lifecycles_more.LIFECYCLES}


class ScenarioDriver:
    """Drives jobs on one cluster. Several drivers may share one :class:`TruthLog`."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        seed: int = 0,
        rate: float | None = 200.0,
        truth: TruthLog | None = None,
        namespaces: Iterable[str] = ("default", "team-a", "team-b"),
    ) -> None:
        self.cluster = cluster
        self.seed = seed
        self.random = random.Random(seed)
        self.interval = 1.0 / rate if rate else 0.0
        self.log = truth if truth is not None else TruthLog()
        self.namespaces = tuple(namespaces)
        self._counter = itertools.count(1)
        self._gate = asyncio.Event()  # cleared by hold(): the cluster's jobs stand still
        self._gate.set()
        self.recorder = Recorder(cluster.store)
        self.diagnoses: list[DiagnosisTruth] = []

    @property
    def truth(self) -> list[TruthEntry]:
        """Every normalized change caused so far, in write order."""
        return list(self.log.entries)

    def hold(self) -> None:
        """Freeze every job of this driver: from now on no write (create, status, spec, delete)
        happens until :meth:`release`. Lets a test change what watches a cluster while nothing in
        it changes, so the truth holds no change that nobody could have seen."""
        self._gate.clear()

    def release(self) -> None:
        """Let the held jobs go on where they stopped."""
        self._gate.set()

    @property
    def held(self) -> bool:
        return not self._gate.is_set()

    def _name(self, spec: KindSpec) -> str:
        return f"{spec.kind.lower()}-{self.seed}-{next(self._counter):04d}"

    async def run_lifecycle(
        self,
        kind: KindSpec | str,
        *,
        name: str | None = None,
        namespace: str = "default",
        outcome: Outcome = "succeeded",
        restarts: int = 1,
        suspend: bool = True,
        delete: bool = True,
        delete_while_running: bool = False,
    ) -> str:
        """Run one job of ``kind`` through create -> (restarts) -> (suspend/resume) ->
        outcome -> (delete). Returns its uid. Ends quietly if the job or its kind vanishes."""
        spec = self.cluster.store.spec(kind)
        opts = Options(
            outcome=outcome,
            restarts=restarts,
            suspend=suspend,
            delete=delete,
            delete_while_running=delete_while_running,
        )
        run = JobRun(
            self.cluster, self.log, spec, namespace, name or self._name(spec), self.interval, self._gate
        )
        with contextlib.suppress(JobGone):
            await LIFECYCLES[spec.family](run, opts)
        return run.uid

    def random_options(self) -> Options:
        r = self.random
        return Options(
            outcome="succeeded" if r.random() < 0.7 else "failed",
            restarts=r.choice((0, 0, 1, 2)),
            suspend=r.random() < 0.3,
            delete=r.random() < 0.6,
            delete_while_running=r.random() < 0.05,
        )

    async def run_diagnosis(
        self,
        kind: KindSpec | str,
        category: str,
        *,
        name: str | None = None,
        namespace: str = "default",
        variant: str | None = None,
    ) -> DiagnosisTruth:
        """Drive one job of ``kind`` into diagnosis ``category`` (``kubesim.CATEGORIES``): its pods,
        Events, logs, Kueue Workload or PodGroup and its status, consistently. Returns the ground
        truth (also appended to :attr:`diagnoses`); the job's transitions go to :attr:`truth`.
        Raises ``NotApplicable`` when the category does not apply to the kind or the cluster.
        ``variant`` (``kubesim.DIAGNOSIS_VARIANTS``): ``("Preempted", "kueue")`` is Kueue preempting
        the running job; ``("Unschedulable", "after-queue")`` first waits in the queue (that
        ``QueueWaiting`` truth is appended to :attr:`diagnoses` first)."""
        spec = self.cluster.store.spec(kind)
        run = JobRun(
            self.cluster, self.log, spec, namespace, name or self._name(spec), self.interval, self._gate
        )
        scenario = DiagnosisRun(run, category, self.random, self.recorder, variant)
        truth = await scenario.execute()
        self.diagnoses.extend(scenario.earlier)
        self.diagnoses.append(truth)
        return truth

    async def run_demo(
        self, *, jobs: int = 20, concurrency: int = 8, kinds: Iterable[KindSpec | str] | None = None
    ) -> list[TruthEntry]:
        """Run ``jobs`` random lifecycles (kinds, namespaces, outcomes, restarts, suspends,
        deletions chosen by the seed), ``concurrency`` at a time. Returns the truth so far."""
        served = (
            [self.cluster.store.spec(k) for k in kinds] if kinds is not None else list(self.cluster.kinds)
        )
        if not served:
            return self.truth
        plan = []
        for _ in range(jobs):
            spec = self.random.choice(served)
            plan.append((spec, self.random.choice(self.namespaces), self._name(spec), self.random_options()))
        gate = asyncio.Semaphore(concurrency)

        async def one(spec: KindSpec, ns: str, name: str, opts: Options) -> None:
            async with gate:
                await self.run_lifecycle(
                    spec,
                    name=name,
                    namespace=ns,
                    outcome=opts.outcome,
                    restarts=opts.restarts,
                    suspend=opts.suspend,
                    delete=opts.delete,
                    delete_while_running=opts.delete_while_running,
                )

        async with asyncio.TaskGroup() as tg:
            for spec, ns, name, opts in plan:
                tg.create_task(one(spec, ns, name, opts))
        return self.truth

    async def run_forever(self, *, concurrency: int = 8, batch: int = 20) -> None:
        """Keep running demo batches until cancelled (the CLI's ``demo`` scenario)."""
        while True:
            await self.run_demo(jobs=batch, concurrency=concurrency)
