"""What a job asks for: replicas x per-pod requests, summed over its replica templates (issue 16 §4).

Per pod, as the scheduler counts it: for each resource, the larger of (the app containers plus
the sidecars, i.e. init containers with ``restartPolicy: Always``) and (each regular init
container plus the sidecars declared before it), plus ``spec.overhead``. A container's request is
its ``requests`` entry, else its ``limits`` entry: the API server defaults a missing request to
the limit, and extended resources (GPUs) may only be given as limits.

Replica templates per kind:

- batch Job: ``min(parallelism, completions)`` (parallelism defaults to 1) x ``spec.template``;
- Kubeflow v1 and MPIJob v2beta1: ``spec.<x>ReplicaSpecs[*]`` ``replicas`` (default 1) x ``template``;
- JobSet: ``replicatedJobs[*].replicas`` (default 1) x the Job template's pods, as above;
- TrainJob: ``trainer.numNodes`` x ``trainer.resourcesPerNode``; the runtime's own template is
  not visible on the TrainJob, so a missing part makes the result ``partial``;
- Volcano Job: ``tasks[*].replicas`` x ``template``;
- RayJob: the head (1) + ``workerGroupSpecs[*]`` ``replicas`` (else ``minReplicas``, default 1)
  x ``numOfHosts`` (default 1) x ``template``; a RayJob that runs on an existing cluster
  (``clusterSelector``) asks for nothing of its own and is ``partial``.

The GPU product comes from a template's ``nodeSelector`` or node affinity (required terms, then
preferred) on one of :data:`GPU_PRODUCT_LABELS`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from trainwatch_common.events.diagnosis import JobResources

GPU_RESOURCES: tuple[str, ...] = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "gpu.intel.com/xe",
)
# Node labels that name the GPU model: NVIDIA GPU feature discovery, GKE, EKS, Alibaba ACK,
# AMD's node labeller, and the generic "accelerator" many clusters use.
GPU_PRODUCT_LABELS: tuple[str, ...] = (
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
    "aliyun.accelerator/nvidia_name",
    "amd.com/gpu.product-name",
    "accelerator",
)
_NOT_EXTENDED = ("cpu", "memory", "ephemeral-storage", "storage", "pods")

KUBEFLOW_REPLICA_SPECS: Mapping[str, str] = {
    "pytorchjob": "pytorchReplicaSpecs",
    "tfjob": "tfReplicaSpecs",
    "mpijob": "mpiReplicaSpecs",  # v1 and v2beta1
    "xgboostjob": "xgbReplicaSpecs",
    "paddlejob": "paddleReplicaSpecs",
    "jaxjob": "jaxReplicaSpecs",
}

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: object) -> Decimal | None:
    """A Kubernetes resource.Quantity ("500m", "2", "16Gi", "1e3", 4) as a Decimal; None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value)) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    try:
        number = Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        return None
    return number if number >= 0 else None


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _count(value: object, default: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return max(value, 0)


def container_requests(container: Mapping[str, Any]) -> dict[str, Decimal]:
    """requests, else limits, per resource (the API server's defaulting)."""
    resources = _map(container.get("resources"))
    requests, limits = _map(resources.get("requests")), _map(resources.get("limits"))
    out: dict[str, Decimal] = {}
    for name in {*requests, *limits}:
        quantity = parse_quantity(requests[name]) if name in requests else None
        if quantity is None:
            quantity = parse_quantity(limits.get(name))
        if quantity is not None and isinstance(name, str):
            out[name] = quantity
    return out


def _add(into: dict[str, Decimal], other: Mapping[str, Decimal], times: int = 1) -> None:
    for name, quantity in other.items():
        into[name] = into.get(name, Decimal(0)) + quantity * times


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """The effective request of one pod (module docstring)."""
    app: dict[str, Decimal] = {}
    for container in _list(pod_spec.get("containers")):
        if isinstance(container, Mapping):
            _add(app, container_requests(container))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in _list(pod_spec.get("initContainers")):
        if not isinstance(container, Mapping):
            continue
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(sidecars, requests)
            continue
        during = dict(sidecars)
        _add(during, requests)
        for name, quantity in during.items():
            init_peak[name] = max(init_peak.get(name, Decimal(0)), quantity)
    total = dict(app)
    _add(total, sidecars)
    for name, quantity in init_peak.items():
        total[name] = max(total.get(name, Decimal(0)), quantity)
    overhead = _map(pod_spec.get("overhead"))
    _add(total, {k: q for k, v in overhead.items() if (q := parse_quantity(v)) is not None})
    return total


def gpu_products(pod_spec: Mapping[str, Any]) -> list[str]:
    """The GPU model(s) a pod template pins through nodeSelector or node affinity."""
    selector = _map(pod_spec.get("nodeSelector"))
    for label in GPU_PRODUCT_LABELS:
        value = selector.get(label)
        if isinstance(value, str) and value:
            return [value]
    affinity = _map(_map(pod_spec.get("affinity")).get("nodeAffinity"))
    required = _map(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms: list[Any] = list(_list(required.get("nodeSelectorTerms")))
    preferred = sorted(
        (
            p
            for p in _list(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"))
            if isinstance(p, Mapping)
        ),
        key=lambda p: -_count(p.get("weight"), 0),
    )
    for group in (terms, [_map(p.get("preference")) for p in preferred]):
        found: list[str] = []
        for term in group:
            for expression in _list(_map(term).get("matchExpressions")):
                expression = _map(expression)
                if expression.get("key") in GPU_PRODUCT_LABELS and expression.get("operator") == "In":
                    found += [v for v in _list(expression.get("values")) if isinstance(v, str) and v]
        if found:
            return list(dict.fromkeys(found))
    return []


@dataclass
class _Sum:
    pods: int = 0
    totals: dict[str, Decimal] = field(default_factory=dict)
    products: list[str] = field(default_factory=list)
    partial: bool = False

    def add_template(self, template: object, replicas: int) -> None:
        spec = _map(_map(template).get("spec"))
        if not spec:
            self.partial = True
            return
        self.pods += replicas
        _add(self.totals, pod_requests(spec), replicas)
        if replicas:
            self.products += gpu_products(spec)

    def add_job_spec(self, job_spec: object, times: int) -> None:
        """A batch Job spec's pods at full parallelism, ``times`` over."""
        job_spec = _map(job_spec)
        parallelism = _count(job_spec.get("parallelism"), 1)
        completions = job_spec.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool):
            parallelism = min(parallelism, max(completions, 0))
        self.add_template(job_spec.get("template"), parallelism * times)

    def add_requests(self, requests: Mapping[str, Decimal], replicas: int) -> None:
        self.pods += replicas
        _add(self.totals, requests, replicas)


def _trainjob(spec: Mapping[str, Any], into: _Sum) -> None:
    trainer = _map(spec.get("trainer"))
    nodes = trainer.get("numNodes")
    per_node = trainer.get("resourcesPerNode")
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not isinstance(per_node, Mapping):
        into.partial = True  # the runtime decides what is missing
    replicas = _count(nodes, 1)
    into.add_requests(
        container_requests({"resources": per_node}) if isinstance(per_node, Mapping) else {}, replicas
    )
    # podTemplateOverrides[].spec (PodTemplateSpecOverride) may pin a nodeSelector or affinity.
    for override in _list(spec.get("podTemplateOverrides")):
        into.products += gpu_products(_map(_map(override).get("spec")))


def _rayjob(spec: Mapping[str, Any], into: _Sum) -> None:
    cluster = _map(spec.get("rayClusterSpec"))
    if not cluster:
        into.partial = True  # runs on an existing RayCluster (clusterSelector)
        return
    into.add_template(_map(cluster.get("headGroupSpec")).get("template"), 1)
    for group in _list(cluster.get("workerGroupSpecs")):
        group = _map(group)
        replicas = group.get("replicas", group.get("minReplicas"))
        hosts = _count(group.get("numOfHosts"), 1) or 1
        into.add_template(group.get("template"), _count(replicas, 1) * hosts)


def summarize_resources(job: Mapping[str, Any], kind: str) -> JobResources:
    """Requested pods, GPUs (with product), CPU and memory of a job object of kind key ``kind``."""
    spec = _map(job.get("spec")) if isinstance(job, Mapping) else {}
    total = _Sum()
    if kind == "job":
        total.add_job_spec(spec, 1)
    elif kind in KUBEFLOW_REPLICA_SPECS:
        replica_specs = _map(spec.get(KUBEFLOW_REPLICA_SPECS[kind]))
        for replica in replica_specs.values():
            replica = _map(replica)
            total.add_template(replica.get("template"), _count(replica.get("replicas"), 1))
    elif kind == "jobset":
        for replicated in _list(spec.get("replicatedJobs")):
            replicated = _map(replicated)
            total.add_job_spec(
                _map(replicated.get("template")).get("spec"), _count(replicated.get("replicas"), 1)
            )
    elif kind == "trainjob":
        _trainjob(spec, total)
    elif kind == "volcanojob":
        for task in _list(spec.get("tasks")):
            task = _map(task)
            total.add_template(task.get("template"), _count(task.get("replicas"), 1))
    elif kind == "rayjob":
        _rayjob(spec, total)
    else:
        total.partial = True
    return _resources(total)


def _resources(total: _Sum) -> JobResources:
    gpus, gpu_resource = 0, None
    for name in GPU_RESOURCES:
        quantity = total.totals.get(name)
        if quantity:
            gpus += int(quantity)
            gpu_resource = gpu_resource or name
    extended = {
        name: int(quantity)
        for name, quantity in sorted(total.totals.items())
        if quantity
        and name not in GPU_RESOURCES
        and name not in _NOT_EXTENDED
        and not name.startswith("hugepages-")
    }
    products = list(dict.fromkeys(total.products))
    memory = total.totals.get("memory", Decimal(0))
    return JobResources(
        pods=total.pods,
        gpus=gpus,
        gpu_resource=gpu_resource,
        gpu_product=",".join(products) or None,
        cpu=float(round(total.totals.get("cpu", Decimal(0)), 3)),
        memory_bytes=int(memory.to_integral_value(rounding="ROUND_CEILING")),
        extended=extended,
        partial=total.partial,
    )


def job_times(
    created_at: datetime | None,
    first_running_at: datetime | None,
    finished_at: datetime | None,
    observed_at: datetime,
    *,
    terminal: bool = False,
) -> tuple[float | None, float | None]:
    """(queue_wait_seconds, run_seconds) as docs/contracts.md defines them.

    Queue wait: created -> first Running; a job that never ran has waited until it finished
    (terminal) or until now. Run time: first Running -> finished (terminal) or now; None if it never
    ran. The watcher keeps ``first_running_at`` per uid (the first event with phase Running).
    """
    end = finished_at if terminal and finished_at is not None else observed_at

    def seconds(start: datetime | None, stop: datetime | None) -> float | None:
        if start is None or stop is None:
            return None
        return max((stop - start).total_seconds(), 0.0)

    if first_running_at is None:
        return seconds(created_at, end), None
    return seconds(created_at, first_running_at), seconds(first_running_at, end)
