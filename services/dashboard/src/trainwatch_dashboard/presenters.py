"""Pure helpers between the APIs' JSON and the templates: times, phases, forms, counts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup

from trainwatch_common import KIND_KEYS, Phase
from trainwatch_common.events.diagnosis import DiagnosisCategory
from trainwatch_common.kubeconfig_yaml import load_mapping

PHASES: tuple[str, ...] = tuple(p.value for p in Phase)
KIND_CHOICES: tuple[str, ...] = tuple(sorted(KIND_KEYS))
# The diagnosis categories the jobs page filters by (the query API's ?diagnosis=).
DIAGNOSIS_CATEGORIES: tuple[str, ...] = tuple(c.value for c in DiagnosisCategory)
# The list filters the jobs page offers, in the query API's parameter names.
JOB_FILTERS: tuple[str, ...] = (
    "cluster", "namespace", "kind", "phase", "diagnosis", "terminal", "owner", "label", "name", "deleted",
)  # fmt: skip
# ?deleted=include shows deleted jobs too; without it the list shows the live ones only.
DELETED_INCLUDED = "include"


def list_query(filters: Mapping[str, str]) -> dict[str, str]:
    """The query API's parameters for the page's filters: deleted jobs left out unless included."""
    query = {k: v for k, v in filters.items() if k != "deleted"}
    if filters.get("deleted") != DELETED_INCLUDED:
        query["deleted"] = "false"
    return query


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: Any) -> str:
    """UTC, to the second: the same on every screen, whatever the browser's zone."""
    moment = parse_time(value)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if moment else "—"


def time_tag(value: Any) -> Markup:
    """A <time> in UTC (the fallback without scripts), which dashboard.js shows in the viewer's
    local time with the UTC time on hover."""
    moment = parse_time(value)
    if moment is None:
        return Markup("—")
    utc = format_time(moment)
    return Markup('<time class="local-time" datetime="{}" title="{} UTC">{} UTC</time>').format(
        iso_utc(moment), utc, utc
    )


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "—"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{seconds:.1f}s" if seconds < 10 else f"{secs}s"


def job_duration(job: Mapping[str, Any], now: datetime | None = None) -> float | None:
    started = parse_time(job.get("started_at")) or parse_time(job.get("created_at"))
    if started is None:
        return None
    finished = parse_time(job.get("finished_at"))
    end = finished or (None if job.get("terminal") else (now or datetime.now(UTC)))
    return (end - started).total_seconds() if end else None


def phase_class(phase: Any) -> str:
    return f"phase-{str(phase).lower()}" if phase in PHASES else "phase-unknown"


def job_filters(params: Mapping[str, str]) -> dict[str, str]:
    """The filters of a jobs-page request, in the query API's names, empty ones left out (and a
    diagnosis category outside the vocabulary, which the query API would refuse)."""
    filters = {key: params[key].strip() for key in JOB_FILTERS if params.get(key, "").strip()}
    if filters.get("diagnosis") not in (None, *DIAGNOSIS_CATEGORIES):
        del filters["diagnosis"]
    return filters


def query_string(params: Mapping[str, str | None], **changes: str | None) -> str:
    merged = {**params, **changes}
    return urlencode({k: v for k, v in merged.items() if v})


def parse_labels(text: str) -> dict[str, str]:
    """key=value lines (or comma separated) into a mapping; blank lines ignored."""
    labels: dict[str, str] = {}
    for raw in text.replace(",", "\n").splitlines():
        line = raw.strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"a label is key=value, not {line!r}")
        labels[key.strip()] = value.strip()
    return labels


def format_labels(labels: Mapping[str, str] | None) -> str:
    return "\n".join(f"{k}={v}" for k, v in (labels or {}).items())


def split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").replace("\n", ",").split(",") if part.strip()]


def kubeconfig_contexts(text: str) -> tuple[list[str], str | None]:
    """The context names of a kubeconfig and its current context: names only, nothing secret.

    The registry does the real validation; this only lets the form offer a choice. It parses
    with the registry's own loader (no aliases, bounded size, depth and node count), so a
    document the registry would refuse is refused here too, with the same reason: a ValueError.
    """
    document = load_mapping(text)
    contexts = document.get("contexts") or []
    if not isinstance(contexts, list):
        raise ValueError("'contexts' is not a list")
    names = [str(c["name"]) for c in contexts if isinstance(c, dict) and c.get("name")]
    current = document.get("current-context")
    return names, (str(current) if isinstance(current, str) and current in names else None)


def watch_options(form: Mapping[str, Any]) -> dict[str, Any]:
    """Watch options from the cluster form, in WatchOptions' field names."""
    kinds = form.get("kinds") or []
    options: dict[str, Any] = {
        "include_namespaces": split_list(form.get("include_namespaces")),
        "exclude_namespaces": split_list(form.get("exclude_namespaces")),
        "kinds": [k for k in (kinds if isinstance(kinds, list) else [kinds]) if k],
    }
    for key in ("owner_label", "owner_annotation"):
        value = str(form.get(key) or "").strip()
        options[key] = value or None
    return options


def cluster_spec(form: Mapping[str, Any]) -> dict[str, Any]:
    """The registry's create body from the add-cluster form; raises ValueError on bad labels."""
    spec: dict[str, Any] = {
        "id": str(form.get("id") or "").strip(),
        "name": str(form.get("name") or "").strip() or str(form.get("id") or "").strip(),
        "description": str(form.get("description") or "").strip(),
        "labels": parse_labels(str(form.get("labels") or "")),
        "kubeconfig": str(form.get("kubeconfig") or ""),
        "watch": watch_options(form),
    }
    context = str(form.get("context") or "").strip()
    if context:
        spec["context"] = context
    return spec


def metadata_changes(form: Mapping[str, Any]) -> dict[str, Any]:
    """The registry's update body for labels, description, name and watch options."""
    changes: dict[str, Any] = {
        "description": str(form.get("description") or "").strip(),
        "labels": parse_labels(str(form.get("labels") or "")),
        "watch": watch_options(form),
    }
    name = str(form.get("name") or "").strip()
    if name:
        changes["name"] = name
    return changes


def phase_counts(stats: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """Jobs per (cluster, phase) from the query API's stats, whichever of its shapes it uses:
    rows {"by_cluster_phase": [{"cluster_id", "phase", "count"}]} (the persister's),
    {"by_cluster": {c: {phase: n}}} or {"clusters": [{"cluster_id", "phases": {...}}]}."""
    out: dict[str, dict[str, int]] = {}
    by_cluster = (
        stats.get("by_cluster_phase")
        or stats.get("by_cluster")
        or stats.get("clusters")
        or stats.get("data")
        or stats.get("counts")
    )
    if isinstance(by_cluster, Mapping):
        for cluster, phases in by_cluster.items():
            if isinstance(phases, Mapping):
                inner = phases.get("phases", phases.get("by_phase", phases))
                out[str(cluster)] = {str(p): int(n) for p, n in inner.items() if isinstance(n, int)}
    elif isinstance(by_cluster, list):
        for row in by_cluster:
            if not isinstance(row, Mapping):
                continue
            cluster = str(row.get("cluster_id") or row.get("cluster") or "")
            phases = row.get("phases") or row.get("by_phase")
            if isinstance(phases, Mapping):
                out.setdefault(cluster, {}).update({str(p): int(n) for p, n in phases.items()})
            elif row.get("phase") is not None:
                bucket = out.setdefault(cluster, {})
                bucket[str(row["phase"])] = bucket.get(str(row["phase"]), 0) + int(row.get("count", 0))
    return out


def cluster_state(health: Mapping[str, Any] | None) -> str:
    """One word for a cluster card: unknown, unreachable, forbidden (credentials refused on some
    kind: reachable is not healthy), failing, or ok. Mirrors ``cluster_state`` in dashboard.js."""
    if not health:
        return "unknown"
    if not health.get("reachable"):
        return "unreachable"
    states = {kind.get("state") for kind in (health.get("kinds") or {}).values() if isinstance(kind, Mapping)}
    if "forbidden" in states:
        return "forbidden"
    if "failing" in states:
        return "failing"
    return "ok"


def sorted_phase_counts(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    return [(phase, counts[phase]) for phase in PHASES if counts.get(phase)]


def fresher_health(*reports: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The most recently observed of several health reports for one cluster."""
    best: dict[str, Any] | None = None
    for report in reports:
        if not report:
            continue
        if best is None or (parse_time(report.get("observed_at")) or datetime.min.replace(tzinfo=UTC)) > (
            parse_time(best.get("observed_at")) or datetime.min.replace(tzinfo=UTC)
        ):
            best = dict(report)
    return best


def transitions_newest_first(transitions: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    def key(item: Mapping[str, Any]) -> tuple[int, str]:
        sequence = item.get("sequence")
        return (sequence if isinstance(sequence, int) else -1, str(item.get("observed_at") or ""))

    return sorted(transitions, key=key, reverse=True)


# -- the jobs list's columns ---------------------------------------------------------------------


def age_seconds(job: Mapping[str, Any], now: datetime | None = None) -> float | None:
    created = parse_time(job.get("created_at"))
    return ((now or datetime.now(UTC)) - created).total_seconds() if created else None


def replica_progress(replicas: Any) -> str:
    """ "7/8": ready (else active) replicas of the desired, summed over the roles; "" when unknown."""
    if not isinstance(replicas, Mapping) or not replicas:
        return ""
    counts = [c for c in replicas.values() if isinstance(c, Mapping)]
    desired = [int(c["desired"]) for c in counts if isinstance(c.get("desired"), int)]
    if not desired:
        return ""
    ready = [c.get("ready") if isinstance(c.get("ready"), int) else c.get("active") for c in counts]
    return f"{sum(int(r) for r in ready if isinstance(r, int))}/{sum(desired)}"


FAILING_PHASES = frozenset({"Failed", "Restarting"})


def failing_since(job: Mapping[str, Any]) -> datetime | None:
    """When a failed or restarting job's current state began: its finish, else its last change."""
    if job.get("phase") not in FAILING_PHASES:
        return None
    return parse_time(job.get("finished_at")) or parse_time(job.get("updated_at"))


def untracked(job: Mapping[str, Any], clusters: Iterable[str] | None) -> bool:
    """A job whose cluster was removed from the registry: its last state is no longer watched, so
    an unfinished one would otherwise show "Running" forever. ``clusters`` None: unknown (the
    registry did not answer), and then nothing is marked."""
    if clusters is None:
        return False
    return (
        job.get("cluster_id") not in set(clusters) and not job.get("terminal") and not job.get("deleted_at")
    )


def iso_utc(value: Any) -> str:
    moment = parse_time(value)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z") if moment else ""


# -- the clusters page's watch state -------------------------------------------------------------

# A health report is re-published every 30 s by default (the watcher's TRAINWATCH_HEALTH_INTERVAL);
# one much older than that means its owner stopped reporting.
HEALTH_STALE_SECONDS = 90.0


def watch_state(health: Mapping[str, Any] | None, now: datetime | None = None) -> str:
    """How far behind the watch is, as far as the health report can tell. Mirrors watchState in
    dashboard.js.

    The report's ``watch_lag_seconds`` is the time since the slowest informer last heard anything
    (an event, a bookmark, a relist): on a healthy quiet cluster that grows with the quiet, so it
    says nothing about lag. What the report does say: whether every watched kind is listed and
    watching without error, and when it was made. So: up_to_date (reachable, every watched kind
    watching, a fresh report), catching_up (a kind still listing), not_watching (unreachable,
    failing, forbidden), stale (no report for HEALTH_STALE_SECONDS), unknown (no report).
    """
    if not health:
        return "unknown"
    observed = parse_time(health.get("observed_at"))
    if observed is None or ((now or datetime.now(UTC)) - observed).total_seconds() > HEALTH_STALE_SECONDS:
        return "stale"
    if not health.get("reachable"):
        return "not_watching"
    kinds = health.get("kinds") or {}
    states = {k.get("state") for k in kinds.values() if isinstance(k, Mapping)} - {"not_installed"}
    if states & {"failing", "forbidden"}:
        return "not_watching"
    if "starting" in states or (not states and not health.get("informers_running")):
        return "catching_up"
    return "up_to_date"


def format_bytes(value: Any) -> str:
    """Binary units, as Kubernetes quantities read: 512 GiB, 1.5 TiB."""
    if not isinstance(value, int | float) or value <= 0:
        return "—"
    amount = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            return f"{amount:.0f} {unit}" if amount == int(amount) else f"{amount:.1f} {unit}"
        amount /= 1024
    return "—"  # unreachable


def diagnosis_who(diagnosis: Mapping[str, Any]) -> str:
    """The replica a diagnosis is about, as the notifier's cards name it: "Worker-3 (pytorch)"."""
    role, pod, container = diagnosis.get("role"), diagnosis.get("pod"), diagnosis.get("container")
    index = diagnosis.get("replica_index")
    if role:
        name = str(role)[:1].upper() + str(role)[1:] + (f"-{index}" if index is not None else "")
    elif pod:
        name = str(pod)
    else:
        return ""
    return f"{name} ({container})" if container else name
