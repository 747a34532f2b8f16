"""An independent reading of the §3.3 mapping tables, used only to check the scenarios.

It folds a stream of watch events into (phase, sub_phase, terminal) per uid, the way a
correct watcher would, so the tests can compare it with the scenario's ground truth.
"""

from __future__ import annotations

from typing import Any

State = tuple[str, str | None, bool]


def _true(status: dict[str, Any], ctype: str) -> bool:
    conds = status.get("conditions") or []
    return any(c.get("type") == ctype and c.get("status") == "True" for c in conds)


class ReferenceNormalizer:
    def __init__(self) -> None:
        self.last_failed: dict[str, int] = {}
        self.jobsets: dict[tuple[str, str], dict[str, Any]] = {}

    def state(self, obj: dict[str, Any]) -> State:
        kind, av = obj["kind"], obj["apiVersion"]
        st = obj.get("status") or {}
        uid = obj["metadata"]["uid"]
        if av == "batch/v1":
            return self._job(uid, st)
        if av == "kubeflow.org/v2beta1":
            return self._kubeflow(uid, st, mpi_v2=True)
        if av == "kubeflow.org/v1":
            return self._kubeflow(uid, st, mpi_v2=False)
        if kind == "TrainJob":
            meta = obj["metadata"]
            return self._trainjob(st, self.jobsets.get((meta["namespace"], meta["name"]), {}))
        if kind == "JobSet":
            return self._jobset(st)
        if av == "batch.volcano.sh/v1alpha1":
            return self._volcano(st)
        if kind == "RayJob":
            return self._ray(st)
        return ("Unknown", None, False)

    def _increased(self, uid: str, failed: int) -> bool:
        before = self.last_failed.get(uid, 0)
        self.last_failed[uid] = failed
        return failed > before

    def _job(self, uid: str, st: dict[str, Any]) -> State:
        increased = self._increased(uid, int(st.get("failed", 0)))
        if _true(st, "Failed"):
            return ("Failed", None, True)
        if _true(st, "Complete"):
            return ("Succeeded", None, True)
        if _true(st, "FailureTarget"):
            return ("Failed", "Finishing", False)
        if _true(st, "SuccessCriteriaMet"):
            return ("Succeeded", "Finishing", False)
        if _true(st, "Suspended"):
            return ("Suspended", None, False)
        if increased:
            return ("Restarting", None, False)
        if st.get("active", 0) > 0 and st.get("ready", 0) > 0:
            return ("Running", None, False)
        if st.get("active", 0) > 0:
            return ("Pending", "Scheduling", False)
        return ("Pending", "Created", False)

    def _kubeflow(self, uid: str, st: dict[str, Any], *, mpi_v2: bool) -> State:
        launcher = ((st.get("replicaStatuses") or {}).get("Launcher") or {}).get("failed", 0)
        increased = self._increased(uid, int(launcher)) if mpi_v2 else False
        if _true(st, "Failed"):
            return ("Failed", None, True)
        if _true(st, "Succeeded"):
            return ("Succeeded", None, True)
        if _true(st, "Suspended"):
            return ("Suspended", None, False)
        if not mpi_v2 and _true(st, "Restarting"):
            return ("Restarting", None, False)
        if mpi_v2 and increased:
            return ("Restarting", None, False)
        if _true(st, "Running"):
            return ("Running", None, False)
        return ("Pending", "Created", False)

    def _trainjob(self, st: dict[str, Any], jobset: dict[str, Any]) -> State:
        if _true(st, "Failed"):
            return ("Failed", None, True)
        if _true(st, "Complete"):
            return ("Succeeded", None, True)
        if _true(st, "Suspended"):
            return ("Suspended", None, False)
        if _true(jobset.get("status") or {}, "RestartingJobSet"):
            return ("Restarting", None, False)
        steps = {j["name"]: j for j in st.get("jobsStatus") or []}
        node = steps.get("node") or {}
        if node.get("active", 0) > 0 and node.get("ready", 0) >= 1:
            return ("Running", None, False)
        if any(j.get("active", 0) > 0 for n, j in steps.items() if n.endswith("initializer")):
            return ("Pending", "Initializing", False)
        if any(j.get("active", 0) > 0 for j in steps.values()):
            return ("Pending", "Scheduling", False)
        return ("Pending", "Created", False)

    def _jobset(self, st: dict[str, Any]) -> State:
        if st.get("terminalState") == "Failed" or _true(st, "Failed"):
            return ("Failed", None, True)
        if st.get("terminalState") == "Completed" or _true(st, "Completed"):
            return ("Succeeded", None, True)
        if _true(st, "Suspended"):
            return ("Suspended", None, False)
        if _true(st, "RestartingJobSet"):
            return ("Restarting", None, False)
        rjs = st.get("replicatedJobsStatus") or []
        if any(r.get("ready", 0) > 0 for r in rjs):
            return ("Running", None, False)
        if any(r.get("active", 0) > 0 for r in rjs):
            return ("Pending", "Scheduling", False)
        return ("Pending", None, False)

    def _volcano(self, st: dict[str, Any]) -> State:
        phase = (st.get("state") or {}).get("phase", "")
        if phase == "Pending":
            # No PodGroup is read here: pods exist only once the gang left Pending (Inqueue).
            return ("Pending", "Scheduling", False) if st.get("pending") else ("Pending", "Queued", False)
        table: dict[str, State] = {
            "": ("Pending", "Created", False),
            "Running": ("Running", None, False),
            "Restarting": ("Restarting", None, False),
            "Completing": ("Succeeded", "Finishing", False),
            "Completed": ("Succeeded", None, True),
            "Aborting": ("Suspended", "Aborting", False),
            "Aborted": ("Suspended", None, False),
            "Terminating": ("Failed", "Finishing", False),
            "Terminated": ("Failed", None, True),
            "Failed": ("Failed", None, True),
        }
        return table.get(phase, ("Unknown", None, False))

    def _ray(self, st: dict[str, Any]) -> State:
        dep, job = st.get("jobDeploymentStatus", ""), st.get("jobStatus", "")
        if dep == "":
            return ("Pending", "Created", False)
        if dep == "Initializing":
            return ("Pending", "Initializing", False)
        if dep == "Running":
            if job in ("", "PENDING"):
                return ("Pending", "Scheduling", False)
            if job == "RUNNING":
                return ("Running", None, False)
            return ("Succeeded" if job == "SUCCEEDED" else "Failed", "Finishing", False)
        if dep == "Complete":
            return ("Succeeded", None, True) if job == "SUCCEEDED" else ("Failed", None, True)
        if dep in ("Failed", "ValidationFailed"):
            return ("Failed", None, True)
        if dep == "Retrying":
            return ("Restarting", None, False)
        if dep in ("Suspending", "Suspended"):
            return ("Suspended", None, False)
        return ("Unknown", None, False)


def fold(events: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None, bool]]:
    """Watch events (in order) -> [(uid, change, phase, sub_phase, terminal)] like the truth log."""
    norm = ReferenceNormalizer()
    last: dict[str, State] = {}
    out: list[tuple[str, str, str, str | None, bool]] = []
    for ev in events:
        obj = ev["object"]
        meta = obj["metadata"]
        if obj["kind"] == "JobSet":
            norm.jobsets[(meta["namespace"], meta["name"])] = obj
        if any(r.get("controller") for r in meta.get("ownerReferences") or []):
            continue  # a child of a higher-level job
        uid = meta["uid"]
        if ev["type"] == "DELETED":
            state = last.pop(uid)
            out.append((uid, "deleted", *state))
            continue
        state = norm.state(obj)
        if uid not in last:
            out.append((uid, "created", *state))
        elif last[uid] != state:
            out.append((uid, "transition", *state))
        last[uid] = state
    return out
