"""``trainwatch``: the operator's CLI over the registry and query APIs (httpx; never touches a database).

    trainwatch clusters add --name "GPU east" --kubeconfig ~/.kube/east.yaml [--context east] [--id gpu-east]
        [--allow-unreachable] [--force]
    trainwatch clusters list | get ID | health ID | update ID ... | rotate ID --kubeconfig FILE
    trainwatch clusters remove ID | test ID
    trainwatch clusters import
    trainwatch clusters join --context CTX [--kubeconfig FILE]
    trainwatch clusters leave ID --context CTX | rotate-token ID --context CTX

    trainwatch jobs list [--cluster C] [--kind K] [--phase P] [--since 2h] | get C JOB | timeline C JOB

    trainwatch silences create [--cluster C] [--namespace N] [--kind K] [--job NAME|UID] [--owner O]
        [--label k=v] [--category OOMKilled] --for 2h --reason TEXT [--author NAME]
    trainwatch silences list [--state active|expired|all] | expire ID | suppressed [--silence ID]

    trainwatch notifications dead-letters list [--reason R] [--after SEQ] | replay SEQ [SEQ ...]

The API URL and token come from --api-url / --token or TRAINWATCH_API_URL / TRAINWATCH_API_TOKEN;
the jobs commands read the persister's query API at --query-url or TRAINWATCH_QUERY_URL, the
silences and notifications commands the notifier's admin API at --notifier-url or
TRAINWATCH_NOTIFIER_URL.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import time
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainwatch_common import Phase
from trainwatch_registry import join as joining
from trainwatch_registry.addresses import server_key

app = typer.Typer(no_args_is_help=True, help="Trainwatch operator CLI.")
clusters = typer.Typer(no_args_is_help=True, help="Clusters under management.")
app.add_typer(clusters, name="clusters")
jobs = typer.Typer(no_args_is_help=True, help="Jobs, from the persister's query API.")
app.add_typer(jobs, name="jobs")
silences = typer.Typer(no_args_is_help=True, help="Silences, from the notifier's admin API.")
app.add_typer(silences, name="silences")
notifications = typer.Typer(no_args_is_help=True, help="Notifications, from the notifier's admin API.")
app.add_typer(notifications, name="notifications")
dead_letters = typer.Typer(no_args_is_help=True, help="Notifications the notifier gave up on.")
notifications.add_typer(dead_letters, name="dead-letters")


def _version(value: bool) -> None:
    if value:
        try:
            version = importlib.metadata.version("trainwatch-registry")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        print(f"trainwatch {version}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit")
    ] = False,
) -> None:
    """Trainwatch operator CLI."""


def _console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console.width = 4096  # piped or redirected: no 80-column cut (rich's default off a terminal)
    return console


out = _console()
err = _console(stderr=True)

ApiUrl = Annotated[str, typer.Option("--api-url", envvar="TRAINWATCH_API_URL", help="Registry base URL")]
Token = Annotated[
    str, typer.Option("--token", envvar="TRAINWATCH_API_TOKEN", help="Bearer token", show_default=False)
]
KubeconfigFile = Annotated[
    Path,
    typer.Option(
        "--kubeconfig", exists=True, dir_okay=False, readable=True, help="Kubeconfig file (YAML or JSON)"
    ),
]
Labels = Annotated[list[str] | None, typer.Option("--label", "-l", help="key=value; repeatable")]
DEFAULT_URL = "http://127.0.0.1:8000"


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, json or yaml")]


def _emit(data: Any, output: Output) -> bool:
    """Print ``data`` as JSON or YAML and return True; False for table output (the caller prints)."""
    if output is Output.json:
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
        return True
    if output is Output.yaml:
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
        return True
    return False


def _client(api_url: str, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=30)


def _fail(message: str, code: int = 1) -> typer.Exit:
    # The message is text, not markup: an id pattern like '^([a-z0-9]...)?$' must print as it is.
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def _warn(message: str) -> None:
    err.print(f"[bold yellow]warning:[/] {escape(message)}", highlight=False)


def _read_kubeconfig(path: Path) -> str:
    """The file's text, or a clear error (not a traceback) when it is not UTF-8 or cannot be read."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(f"{path} is not UTF-8 text (a kubeconfig is YAML or JSON)") from None
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}") from None


def _request(
    api_url: str, token: str, method: str, path: str, *, service: str = "the registry", **kwargs: Any
) -> httpx.Response:
    try:
        with _client(api_url, token) as client:
            return client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach {service} at {api_url}: {exc}") from None


def _answer(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise _fail(_explain(response))
    return response.json() if response.content else None


def _call(
    api_url: str, token: str, method: str, path: str, *, service: str = "the registry", **kwargs: Any
) -> Any:
    return _answer(_request(api_url, token, method, path, service=service, **kwargs))


# The registry's 409s that force=true overrides (registrations.ServerConflict).
SERVER_CONFLICTS = frozenset({"cluster.duplicate_server", "cluster.server_changed"})


def _server_conflict(response: httpx.Response) -> str | None:
    """The registry's reason when it refused a call because of the kubeconfig's API server (one
    registered already, or not the cluster's), else None."""
    if response.status_code != 409:
        return None
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        return None
    for item in detail if isinstance(detail, list) else []:
        if isinstance(item, dict) and item.get("type") in SERVER_CONFLICTS:
            ctx = item.get("ctx")
            ctx = ctx if isinstance(ctx, dict) else {}
            return str(ctx.get("reason") or item.get("msg"))
    return None


def _call_guarded(
    api_url: str,
    token: str,
    method: str,
    path: str,
    *,
    force: bool,
    refused: str,
    anyway: str,
    params: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """A call the registry refuses when the kubeconfig's API server is registered already or is
    not the cluster's. Without ``force`` that refusal is the answer, worded for the CLI (``refused``:
    what did not happen and how to override it); with it, the reason is shown as a warning and the
    call made again with force=true, so the warning appears only when there was something to force."""
    params = dict(params or {})
    response = _request(api_url, token, method, path, params=params, **kwargs)
    reason = _server_conflict(response)
    if reason is not None:
        if not force:
            raise _fail(f"{reason}; {refused}")
        _warn(f"{reason} ({anyway}: --force)")
        response = _request(api_url, token, method, path, params={**params, "force": "true"}, **kwargs)
    return _answer(response)


def _explain(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    if isinstance(detail, list):
        lines = [f"  - {item.get('msg')} ({'.'.join(map(str, item.get('loc', [])[1:]))})" for item in detail]
        detail = "refused:\n" + "\n".join(lines)
    hints = {401: " (set TRAINWATCH_API_TOKEN or --token)", 403: ""}
    return f"{response.status_code}: {detail}{hints.get(response.status_code, '')}"


def _labels(pairs: list[str] | None) -> dict[str, str] | None:
    if pairs is None:
        return None
    labels: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise _fail(f"label {pair!r} is not key=value")
        labels[key] = value
    return labels


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:63].rstrip("-")


def _id_from_name(name: str) -> str:
    """The default id: the name as a slug. A name with no ASCII letters or digits (中文, 日本語)
    has none: say so instead of sending an empty id for the registry to refuse."""
    slug = _slug(name)
    if not slug:
        raise _fail(
            f"cannot make a cluster id from the name {name!r}: an id uses only a-z, 0-9 and '-'; "
            "pass one with --id (e.g. --id gpu-east)"
        )
    return slug


def _show_cluster(cluster: dict[str, Any]) -> None:
    table = Table(show_header=False, box=None)
    health = cluster.get("health") or {}
    rows = [
        ("id", cluster["id"]),
        ("name", cluster["name"]),
        ("description", cluster.get("description") or ""),
        ("labels", ", ".join(f"{k}={v}" for k, v in cluster["labels"].items())),
        ("server", cluster["server"]),
        ("context", cluster["context"]),
        ("auth", cluster["auth_method"]),
        ("fingerprint", cluster["connection_fingerprint"]),
        ("revision", str(cluster["revision"])),
        ("watch", _watch(cluster["watch"])),
        ("owner", health.get("owner") or "-"),
        ("updated", cluster["updated_at"]),
    ]
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", escape(value))
    # markup of their own, data escaped
    table.add_row("[bold]credentials[/]", _credentials(cluster, long=True))
    table.add_row("[bold]health[/]", _health(health))
    out.print(table)


def _in_words(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds >= 86400:
        return f"{int(seconds // 86400)}d"
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h"
    return f"{max(int(seconds // 60), 1)}m"


def _credentials(cluster: dict[str, Any], *, long: bool = False) -> str:
    """When the registered token expires, coloured by the registry's verdict (``credentials_state``:
    within the warning window is ``expiring``); ``-`` for credentials with no known expiry."""
    expire_at, state = cluster.get("credentials_expire_at"), cluster.get("credentials_state")
    if not expire_at:
        return "no expiry known" if long else "-"
    left = (datetime.fromisoformat(expire_at) - datetime.now(UTC)).total_seconds()
    renew = f" (renew: trainwatch clusters rotate-token {cluster['id']} --context CTX)" if long else ""
    at = f" at {expire_at}" if long else ""
    if state == "expired" or left <= 0:
        return f"[red]expired {_in_words(left)} ago[/]{escape(at + renew)}"
    if state == "expiring":
        return f"[yellow]expires in {_in_words(left)}[/]{escape(at + renew)}"
    return f"expires in {_in_words(left)}{escape(at)}"


def _watch(watch: dict[str, Any]) -> str:
    kinds = ", ".join(watch.get("kinds") or []) or "all kinds"
    spaces = ", ".join(watch.get("include_namespaces") or []) or "all namespaces"
    excluded = watch.get("exclude_namespaces") or []
    return f"{kinds} in {spaces}" + (f" except {', '.join(excluded)}" if excluded else "")


def _kinds_in(health: dict[str, Any], state: str) -> list[str]:
    kinds = health.get("kinds") or {}
    return sorted(key for key, kind in kinds.items() if (kind or {}).get("state") == state)


def _health_state(health: dict[str, Any]) -> str:
    """The HEALTH column: reachable is not enough, a cluster whose every kind is forbidden
    watches nothing."""
    if not health:
        return "unknown"
    if not health.get("reachable"):
        return "[red]down[/]"
    if _kinds_in(health, "forbidden"):
        return "[red]forbidden[/]"
    if _kinds_in(health, "failing"):
        return "[yellow]degraded[/]"
    return "[green]ok[/]"


def _health(health: dict[str, Any]) -> str:
    if not health:
        return "unknown"
    state = (
        "[green]reachable[/]"
        if health.get("reachable")
        else f"[red]unreachable[/] {escape(str(health.get('last_error') or ''))}"
    )
    lines = [f"{state} (at {escape(str(health.get('observed_at')))})"]
    for label, kind_state in (
        ("watching", "watching"),
        ("starting", "starting"),
        ("forbidden (403)", "forbidden"),
        ("failing", "failing"),
    ):
        if kinds := _kinds_in(health, kind_state):
            lines.append(escape(f"{label}: {', '.join(kinds)}"))
    return "\n".join(lines)


def _show_report(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or out
    access = report.get("kinds") or {}
    server = report["server"]
    if report["ok"]:
        version = (report.get("server_version") or {}).get("git_version") or "?"
        kinds = ", ".join(report.get("kinds_served") or []) or "none"
        console.print("[green]ok[/]", escape(f"{server} Kubernetes {version}; job kinds served: {kinds}"))
    else:
        console.print("[red]failed[/]", escape(f"{server}: {report.get('error')}"))
    for key in sorted(access):
        console.print(f"  {key}: {access[key]}", markup=False)


def _watch_body(
    kinds: list[str] | None,
    namespaces: list[str] | None,
    exclude: list[str] | None,
    owner_label: str | None = None,
    owner_annotation: str | None = None,
    *,
    current: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The watch options with the given ones changed, None when none is given. A PATCH replaces
    the whole object: an update starts from the ``current`` options, so that what is not given
    (an owner annotation, the namespaces) stays as it is."""
    given = {
        "kinds": kinds,
        "include_namespaces": namespaces,
        "exclude_namespaces": exclude,
        "owner_label": owner_label,
        "owner_annotation": owner_annotation,
    }
    changes = {key: value for key, value in given.items() if value is not None}
    if not changes:
        return None
    return {**(current or {}), **changes}


def _all_clusters(api_url: str, token: str, label: list[str] | None = None) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000, "label": label or []}
        if cursor:
            params["cursor"] = cursor
        page = _call(api_url, token, "GET", "/v1/clusters", params=params)
        rows += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return rows


def _check_duplicate_server(api_url: str, token: str, server: str, cluster_id: str, *, force: bool) -> None:
    """Refuse (unless ``force``) to register an API server another cluster is registered at: both
    registrations would be watched, and every job of that cluster published twice under two ids.
    The registry refuses it too (409 cluster.duplicate_server); join asks first, before it creates
    anything in the cluster."""
    key = server_key(server)
    others = [
        c for c in _all_clusters(api_url, token) if c["id"] != cluster_id and server_key(c["server"]) == key
    ]
    if not others:
        return
    ids = ", ".join(c["id"] for c in others)
    message = (
        f"{server} is already registered as {ids}: a second registration watches the same cluster "
        "again and publishes each of its jobs twice, under two cluster ids"
    )
    if not force:
        raise _fail(f"{message}; nothing registered (pass --force to register it anyway)")
    _warn(f"{message} (registering anyway: --force)")


def _check_reachable(report: dict[str, Any], cluster_id: str, *, allow_unreachable: bool) -> None:
    """Refuse (unless ``allow_unreachable``) to register a cluster the registry's connection check
    fails on; with it, register and say that the cluster cannot be watched yet."""
    if report["ok"]:
        return
    problem = f"the connection check of {cluster_id} failed: {report['server']}: {report.get('error')}"
    if not allow_unreachable:
        _show_report(report, console=err)
        raise _fail(
            f"{problem}; nothing registered (fix the kubeconfig or the network, or pass "
            "--allow-unreachable to register it anyway, e.g. when only the watchers' network reaches it)",
            code=2,  # as a failed dry run
        )
    _warn(
        f"{problem}; registering it anyway (--allow-unreachable): it shows as down until a watcher reaches it"
    )


Force = Annotated[
    bool,
    typer.Option("--force", help="Register even when another cluster has the same API server"),
]
AllowUnreachable = Annotated[
    bool,
    typer.Option(
        "--allow-unreachable",
        help="Register even when the registry's connection check cannot reach the cluster",
    ),
]


Kinds = Annotated[
    list[str] | None, typer.Option("--kind", help="Job kind key to watch; repeatable (default all)")
]
Namespaces = Annotated[list[str] | None, typer.Option("--namespace", help="Namespace to watch; repeatable")]
Excluded = Annotated[
    list[str] | None, typer.Option("--exclude-namespace", help="Namespace to skip; repeatable")
]
OwnerLabel = Annotated[
    str | None, typer.Option("--owner-label", help="Job label that names the job's owner (notifications)")
]
OwnerAnnotation = Annotated[
    str | None, typer.Option("--owner-annotation", help="Job annotation that names the job's owner")
]


@clusters.command("add")
def add(
    name: Annotated[str, typer.Option("--name", help="Display name")],
    kubeconfig: KubeconfigFile,
    cluster_id: Annotated[str | None, typer.Option("--id", help="Slug id (default: from the name)")] = None,
    context: Annotated[str | None, typer.Option("--context", help="Context to use")] = None,
    description: Annotated[str, typer.Option("--description")] = "",
    label: Labels = None,
    kind: Kinds = None,
    namespace: Namespaces = None,
    exclude_namespace: Excluded = None,
    owner_label: OwnerLabel = None,
    owner_annotation: OwnerAnnotation = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and test connectivity only (exit 2 when it fails)")
    ] = False,
    force: Force = False,
    allow_unreachable: AllowUnreachable = False,
    output: OutputOpt = Output.table,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Register a cluster, after a connection check and a check that its API server is not registered yet."""
    body: dict[str, Any] = {
        "id": cluster_id or _id_from_name(name),
        "name": name,
        "description": description,
        "labels": _labels(label) or {},
        "kubeconfig": _read_kubeconfig(kubeconfig),
        "context": context,
    }
    watch = _watch_body(kind, namespace, exclude_namespace, owner_label, owner_annotation)
    if watch is not None:
        body["watch"] = watch
    # The registry refuses an API server registered already (409) in the dry run as in the real one.
    preview = _call_guarded(
        api_url, token, "POST", "/v1/clusters", json=body, params={"dry_run": "true"}, force=force,
        refused="nothing registered (pass --force to register it anyway)", anyway="registering anyway",
    )  # fmt: skip
    report = preview["connectivity"]
    if dry_run:
        if not _emit(preview, output):
            out.print("[bold]dry run[/]: nothing stored")
            _show_report(report)
        if not report["ok"]:
            raise typer.Exit(2)
        return
    _check_reachable(report, body["id"], allow_unreachable=allow_unreachable)
    # force as given: the dry run above already asked, and warned
    result = _call(api_url, token, "POST", "/v1/clusters", json=body, params={"force": str(force).lower()})
    if not _emit(result, output):
        out.print(f"registered [bold]{escape(result['id'])}[/] at revision {result['revision']}")
        _show_cluster(result)


@clusters.command("list")
def list_(
    label: Labels = None, output: OutputOpt = Output.table, api_url: ApiUrl = DEFAULT_URL, token: Token = ""
) -> None:
    """List clusters with their health."""
    rows = _all_clusters(api_url, token, label)
    if _emit(rows, output):
        return
    table = Table("ID", "NAME", "SERVER", "AUTH", "CREDENTIALS", "REV", "HEALTH", "OWNER", "LABELS")
    for c in rows:
        health = c.get("health") or {}
        state = _health_state(health)
        labels = ",".join(f"{k}={v}" for k, v in c["labels"].items())
        table.add_row(
            *map(escape, (c["id"], c["name"], c["server"], c["auth_method"])),
            _credentials(c),
            escape(str(c["revision"])),
            state,
            escape(health.get("owner") or "-"),
            escape(labels),
        )
    out.print(table)
    out.print(f"{len(rows)} cluster(s)")


@clusters.command("get")
def get(
    cluster_id: str, output: OutputOpt = Output.table, api_url: ApiUrl = DEFAULT_URL, token: Token = ""
) -> None:
    """Show one cluster."""
    cluster = _call(api_url, token, "GET", f"/v1/clusters/{cluster_id}")
    if not _emit(cluster, output):
        _show_cluster(cluster)


@clusters.command("health")
def health_(
    cluster_id: str, output: OutputOpt = Output.table, api_url: ApiUrl = DEFAULT_URL, token: Token = ""
) -> None:
    """A cluster's last health report (from its watcher) and when its credentials expire."""
    cluster = _call(api_url, token, "GET", f"/v1/clusters/{cluster_id}")
    data = {
        "cluster_id": cluster["id"],
        "health": cluster.get("health"),
        "credentials_expire_at": cluster.get("credentials_expire_at"),
        "credentials_state": cluster.get("credentials_state"),
    }
    if _emit(data, output):
        return
    table = Table(show_header=False, box=None)
    health = cluster.get("health") or {}
    table.add_row("[bold]state[/]", _health_state(health))
    table.add_row("[bold]health[/]", _health(health))
    table.add_row("[bold]owner[/]", escape(health.get("owner") or "-"))
    table.add_row("[bold]credentials[/]", _credentials(cluster, long=True))
    out.print(table)


@clusters.command("update")
def update(
    cluster_id: str,
    name: Annotated[str | None, typer.Option("--name")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    label: Labels = None,
    kind: Kinds = None,
    namespace: Namespaces = None,
    exclude_namespace: Excluded = None,
    owner_label: OwnerLabel = None,
    owner_annotation: OwnerAnnotation = None,
    context: Annotated[str | None, typer.Option("--context")] = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Change a cluster's metadata or watch options (labels given replace all labels; watch
    options not given are kept)."""
    watch: dict[str, Any] | None = None
    expected_revision: int | None = None
    if any(v is not None for v in (kind, namespace, exclude_namespace, owner_label, owner_annotation)):
        current = _call(api_url, token, "GET", f"/v1/clusters/{cluster_id}")
        watch = _watch_body(
            kind, namespace, exclude_namespace, owner_label, owner_annotation, current=current["watch"]
        )
        # Sent with the revision it was read at: a concurrent change is a 409, not overwritten.
        expected_revision = current["revision"]
    body = {
        "name": name,
        "description": description,
        "labels": _labels(label),
        "watch": watch,
        "context": context,
        "expected_revision": expected_revision,
    }
    result = _call(
        api_url,
        token,
        "PATCH",
        f"/v1/clusters/{cluster_id}",
        json={k: v for k, v in body.items() if v is not None},
    )
    out.print(f"updated [bold]{cluster_id}[/]: revision {result['revision']}")


@clusters.command("rotate")
def rotate(
    cluster_id: str,
    kubeconfig: KubeconfigFile,
    context: Annotated[str | None, typer.Option("--context")] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Rotate even when the new kubeconfig names another API server")
    ] = False,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Replace a cluster's kubeconfig (credential rotation) for the same API server."""
    body = {"kubeconfig": _read_kubeconfig(kubeconfig), "context": context}
    # The registry refuses (409 cluster.server_changed) a kubeconfig for another API server.
    result = _call_guarded(
        api_url, token, "PATCH", f"/v1/clusters/{cluster_id}", json=body, force=force,
        refused="nothing changed (pass --force if the cluster really moved)", anyway="rotating anyway",
    )  # fmt: skip
    fingerprint = result["connection_fingerprint"]
    out.print(f"rotated [bold]{cluster_id}[/]: revision {result['revision']}, fingerprint {fingerprint}")


@clusters.command("remove")
def remove(
    cluster_id: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Remove a cluster from management."""
    if not yes:
        typer.confirm(f"Remove cluster {cluster_id}?", abort=True)
    _call(api_url, token, "DELETE", f"/v1/clusters/{cluster_id}")
    out.print(f"removed [bold]{cluster_id}[/]")


@clusters.command("test")
def check(
    cluster_id: str, output: OutputOpt = Output.table, api_url: ApiUrl = DEFAULT_URL, token: Token = ""
) -> None:
    """Connect to a cluster with its stored kubeconfig and report what it serves (exit 2 on failure)."""
    report = _call(api_url, token, "POST", f"/v1/clusters/{cluster_id}/test")
    if not _emit(report, output):
        _show_report(report)
    if not report["ok"]:
        raise typer.Exit(2)


@clusters.command("import")
def import_(api_url: ApiUrl = DEFAULT_URL, token: Token = "") -> None:
    """Register every kubeconfig in the registry's import folder."""
    report = _call(api_url, token, "POST", "/v1/clusters:import")
    table = Table("FILE", "CLUSTER", "OUTCOME", "REASONS")
    for item in report["files"]:
        table.add_row(
            *map(
                escape,
                (item["file"], item.get("cluster_id") or "-", item["outcome"], "; ".join(item["reasons"])),
            )
        )
    out.print(table)


JOINED_NAMESPACE = "trainwatch.io/joined-namespace"
OperatorKubeconfig = Annotated[
    Path | None,
    typer.Option(
        "--kubeconfig",
        dir_okay=False,
        help="Your kubeconfig (default: $KUBECONFIG, else ~/.kube/config); your credentials stay here",
    ),
]
OperatorContextOpt = Annotated[str, typer.Option("--context", help="Your context for the target cluster")]


def _operator_context(kubeconfig: Path | None, context: str) -> joining.OperatorContext:
    if kubeconfig is None:
        first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
        kubeconfig = Path(first) if first else Path.home() / ".kube" / "config"
    try:
        return joining.load_operator_context(kubeconfig, context)
    except joining.JoinError as exc:
        raise _fail(str(exc)) from None


def _registration(api_url: str, token: str, cluster_id: str, op: joining.OperatorContext) -> dict[str, Any]:
    """The registration, after checking that ``op`` points at the cluster it is registered for."""
    cluster: dict[str, Any] = _call(api_url, token, "GET", f"/v1/clusters/{cluster_id}")
    if server_key(cluster["server"]) != server_key(op.server):
        raise _fail(
            f"context {op.context!r} points at {op.server}, "
            f"but {cluster_id} is registered at {cluster['server']}"
        )
    return cluster


def _objects_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("KIND", "NAME", "NAMESPACE", "ACTION")
    for row in rows:
        table.add_row(*map(escape, (row["kind"], row["name"], row["namespace"] or "-", row["action"])))
    return table


def _mint(api: joining.KubeApi, options: joining.JoinOptions) -> joining.Minted:
    if options.secret_token:
        return api.secret_token(options)
    return api.token_request(options)


def _registry_dry_run(
    api_url: str, token: str, body: dict[str, Any], wait_seconds: float = 15.0, *, force: bool = False
) -> dict[str, Any]:
    """The registry's connectivity check with the new token. A new binding can take a moment to
    reach the apiserver's RBAC cache, so a failed check is retried for a few seconds."""
    deadline = time.monotonic() + wait_seconds
    delay = 0.2
    while True:
        params = {"dry_run": "true", "force": str(force).lower()}  # join asked about duplicates already
        result = _call(api_url, token, "POST", "/v1/clusters", json=body, params=params)
        report: dict[str, Any] = result["connectivity"]
        if report["ok"] or time.monotonic() > deadline:
            return report
        time.sleep(delay)  # RBAC propagation in the target cluster: backoff, not synchronisation
        delay = min(delay * 2, 2.0)


@clusters.command("join")
def join(
    context: OperatorContextOpt,
    kubeconfig: OperatorKubeconfig = None,
    cluster_id: Annotated[
        str | None, typer.Option("--id", help="Cluster id (default: from the context)")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Display name (default: the context)")] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", help="Namespace for Trainwatch's ServiceAccount")
    ] = "trainwatch",
    token_lifetime: Annotated[
        str, typer.Option("--token-lifetime", help="TokenRequest lifetime (s, m, h, d)")
    ] = "8760h",
    secret_token: Annotated[
        bool, typer.Option("--secret-token", help="A non-expiring service-account-token Secret instead")
    ] = False,
    label: Labels = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show the plan; create and register nothing")
    ] = False,
    force: Force = False,
    allow_unreachable: AllowUnreachable = False,
    output: OutputOpt = Output.table,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Create Trainwatch's read-only ServiceAccount in a cluster (with your credentials) and register it."""
    op = _operator_context(kubeconfig, context)
    cid = cluster_id or _slug(context)
    if not cid:
        raise _fail(f"cannot derive an id from the context {context!r}: pass --id")
    try:
        options = joining.JoinOptions(
            cid,
            namespace=namespace,
            lifetime_seconds=joining.parse_lifetime(token_lifetime),
            secret_token=secret_token,
        )
    except joining.JoinError as exc:
        raise _fail(str(exc)) from None
    _check_duplicate_server(api_url, token, op.server, cid, force=force)
    objects = joining.plan(options)
    credential = (
        "service-account-token Secret (no expiry)" if secret_token else f"TokenRequest ({token_lifetime})"
    )
    result: dict[str, Any] = {"cluster_id": cid, "server": op.server, "dry_run": dry_run, "token": credential}
    try:
        with joining.KubeApi.connect(op) as api:
            rows = [
                {
                    "kind": o.kind,
                    "name": o.name,
                    "namespace": o.namespace,
                    "action": "exists (reused)" if api.get(o.path) is not None else "create",
                }
                for o in objects
            ]
            result["objects"] = rows
            if dry_run:
                if not _emit(result, output):
                    out.print(
                        f"[bold]dry run[/]: join {op.server} as [bold]{cid}[/]; nothing created or registered"
                    )
                    out.print(_objects_table(rows))
                    out.print(f"token: {credential}", highlight=False)
                return
            for row, obj in zip(rows, objects, strict=True):
                row["action"] = "created" if api.ensure(obj) == "created" else "exists (reused)"
            minted = _mint(api, options)
    except joining.JoinError as exc:
        raise _fail(str(exc)) from None
    body: dict[str, Any] = {
        "id": cid,
        "name": name or context,
        "labels": {**(_labels(label) or {}), JOINED_NAMESPACE: namespace},
        "kubeconfig": joining.registered_kubeconfig(op, cid, minted.token),
        "context": cid,
    }
    report = _registry_dry_run(api_url, token, body, force=force)
    if not report["ok"] and not allow_unreachable:
        _show_report(report, console=err)
        raise _fail(
            f"the registry cannot use the new credentials: {report.get('error')}; nothing registered "
            f"(`trainwatch clusters leave {cid} --context {context}` removes the objects; "
            "--allow-unreachable registers anyway, e.g. when only the watchers' network reaches the cluster)"
        )
    _check_reachable(report, cid, allow_unreachable=allow_unreachable)
    registered = _call(
        api_url, token, "POST", "/v1/clusters", json=body, params={"force": str(force).lower()}
    )
    result["revision"] = registered["revision"]
    result["token_expires_at"] = minted.expires_at.isoformat() if minted.expires_at else None
    if not _emit(result, output):
        out.print(_objects_table(rows))
        expiry = f", token expires {result['token_expires_at']}" if minted.expires_at else ""
        out.print(
            f"joined [bold]{cid}[/] ({op.server}) at revision {registered['revision']}{expiry}",
            highlight=False,
        )


@clusters.command("leave")
def leave(
    cluster_id: str,
    context: OperatorContextOpt,
    kubeconfig: OperatorKubeconfig = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Default: the namespace join recorded")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask")] = False,
    output: OutputOpt = Output.table,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Unregister a joined cluster and delete the objects join created in it (only those)."""
    op = _operator_context(kubeconfig, context)
    cluster = _registration(api_url, token, cluster_id, op)
    ns = namespace or cluster["labels"].get(JOINED_NAMESPACE) or "trainwatch"
    if not yes:
        typer.confirm(f"Unregister {cluster_id} and delete Trainwatch's objects in {op.server}?", abort=True)
    _call(api_url, token, "DELETE", f"/v1/clusters/{cluster_id}")
    objects = joining.plan(joining.JoinOptions(cluster_id, namespace=ns, secret_token=True))
    try:
        with joining.KubeApi.connect(op) as api:
            rows = [
                {"kind": o.kind, "name": o.name, "namespace": o.namespace, "action": api.delete_if_managed(o)}
                for o in reversed(objects)
            ]
    except joining.JoinError as exc:
        raise _fail(f"{cluster_id} is unregistered, but cleaning up failed: {exc}") from None
    if not _emit({"cluster_id": cluster_id, "objects": rows}, output):
        out.print(_objects_table(rows))
        out.print(f"left [bold]{cluster_id}[/]", highlight=False)


@clusters.command("rotate-token")
def rotate_token(
    cluster_id: str,
    context: OperatorContextOpt,
    kubeconfig: OperatorKubeconfig = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="Default: the namespace join recorded")
    ] = None,
    token_lifetime: Annotated[
        str, typer.Option("--token-lifetime", help="TokenRequest lifetime (s, m, h, d)")
    ] = "8760h",
    output: OutputOpt = Output.table,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Mint a new token for a joined cluster's ServiceAccount and update the registration."""
    op = _operator_context(kubeconfig, context)
    cluster = _registration(api_url, token, cluster_id, op)
    ns = namespace or cluster["labels"].get(JOINED_NAMESPACE) or "trainwatch"
    try:
        options = joining.JoinOptions(
            cluster_id, namespace=ns, lifetime_seconds=joining.parse_lifetime(token_lifetime)
        )
        with joining.KubeApi.connect(op) as api:
            minted = api.token_request(options)
    except joining.JoinError as exc:
        raise _fail(str(exc)) from None
    body = {"kubeconfig": joining.registered_kubeconfig(op, cluster_id, minted.token), "context": cluster_id}
    result = _call(api_url, token, "PATCH", f"/v1/clusters/{cluster_id}", json=body)
    expires = minted.expires_at.isoformat() if minted.expires_at else None
    data = {"cluster_id": cluster_id, "revision": result["revision"], "token_expires_at": expires}
    if not _emit(data, output):
        out.print(
            f"rotated the token of [bold]{cluster_id}[/]: revision {result['revision']}, expires {expires}",
            highlight=False,
        )


# -- silences: the notifier's admin API ------------------------------------------------------

NotifierUrl = Annotated[
    str,
    typer.Option(
        "--notifier-url", envvar="TRAINWATCH_NOTIFIER_URL", help="The notifier's admin API base URL"
    ),
]
DEFAULT_NOTIFIER_URL = "http://127.0.0.1:8083"
NOTIFIER_API = "the notifier (--notifier-url or TRAINWATCH_NOTIFIER_URL)"
_DURATION = re.compile(r"^(\d+)\s*([mhd])$")


def _duration(value: str) -> int:
    """``30m``, ``2h``, ``7d`` -> seconds."""
    if match := _DURATION.match(value.strip()):
        return int(match.group(1)) * {"m": 60, "h": 3600, "d": 86400}[match.group(2)]
    raise typer.BadParameter(f"{value!r} is not a duration (30m, 2h, 7d)")


def _matchers_text(matchers: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in matchers.items() if v and k != "labels"]
    parts += [f"{k}={v}" for k, v in (matchers.get("labels") or {}).items()]
    return " ".join(parts)


@silences.command("create")
def silences_create(
    reason: Annotated[str, typer.Option("--reason", help="Why (shown with the silence)")],
    duration: Annotated[int, typer.Option("--for", help="How long: 30m, 2h, 7d", parser=_duration)],
    cluster: Annotated[str | None, typer.Option("--cluster", "-c", help="Cluster id")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="Kind key or kind, e.g. pytorchjob")] = None,
    job: Annotated[str | None, typer.Option("--job", help="The job's name or uid")] = None,
    owner: Annotated[str | None, typer.Option("--owner")] = None,
    label: Labels = None,
    category: Annotated[
        str | None, typer.Option("--category", help="Diagnosis category, e.g. OOMKilled")
    ] = None,
    author: Annotated[
        str | None, typer.Option("--author", help="Who asks (default: $USER; the token's id is recorded too)")
    ] = None,
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """Silence the notifications of the jobs that match all the given matchers (admin token)."""
    matchers: dict[str, Any] = {
        k: v
        for k, v in (
            ("cluster", cluster), ("namespace", namespace), ("kind", kind), ("job", job),
            ("owner", owner), ("category", category),
        )
        if v
    }  # fmt: skip
    if label:
        matchers["labels"] = _labels(label)
    body = {
        "matchers": matchers,
        "reason": reason,
        "author": author or os.environ.get("USER") or None,
        "duration_seconds": duration,
    }
    created = _call(notifier_url, token, "POST", "/v1/silences", service=NOTIFIER_API, json=body)
    if _emit(created, output):
        return
    out.print(
        f"silence {escape(created['id'])} ({escape(_matchers_text(created['matchers']))}) "
        f"until {escape(created['ends_at'])}"
    )


@silences.command("list")
def silences_list(
    state: Annotated[str, typer.Option("--state", help="active, expired or all")] = "all",
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """Silences, newest first; expired ones stay listed as expired."""
    items = _call(notifier_url, token, "GET", "/v1/silences", service=NOTIFIER_API, params={"state": state})[
        "items"
    ]
    if _emit(items, output):
        return
    table = Table("ID", "STATE", "MATCHES", "AUTHOR", "REASON", "ENDS")
    for item in items:
        table.add_row(
            *map(
                escape,
                (
                    item["id"], item["state"], _matchers_text(item["matchers"]), item["author"],
                    item["reason"], item["ends_at"],
                ),
            )
        )  # fmt: skip
    out.print(table)
    out.print(f"{len(items)} silence(s)")


@silences.command("expire")
def silences_expire(
    silence_id: Annotated[str, typer.Argument(metavar="ID")],
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """End a silence now (admin token). Nothing it already suppressed is sent."""
    path = f"/v1/silences/{quote(silence_id, safe='')}/expire"
    expired = _call(notifier_url, token, "POST", path, service=NOTIFIER_API)
    if _emit(expired, output):
        return
    out.print(f"silence {escape(expired['id'])} {escape(expired['state'])} at {escape(expired['ends_at'])}")


@silences.command("suppressed")
def silences_suppressed(
    silence: Annotated[str | None, typer.Option("--silence", help="Only this silence's")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """The notifications silences held back, newest first."""
    params: dict[str, Any] = {"limit": limit}
    if silence:
        params["silence_id"] = silence
    items = _call(notifier_url, token, "GET", "/v1/suppressions", service=NOTIFIER_API, params=params)[
        "items"
    ]
    if _emit(items, output):
        return
    table = Table("AT", "CLUSTER", "NAMESPACE", "NAME", "PHASE", "SILENCE", "EVENT")
    for item in items:
        table.add_row(
            *map(
                escape,
                (
                    item["suppressed_at"], item["cluster_id"], item["namespace"], item["name"],
                    item["phase"], item["silence_id"], item["event_id"],
                ),
            )
        )  # fmt: skip
    out.print(table)
    out.print(f"{len(items)} suppressed notification(s)")


# -- notifications: the notifier's dead letters ----------------------------------------------


def _letter_job(letter: dict[str, Any]) -> str:
    job = letter.get("job")
    if not job:
        return "(unreadable event)"
    return f"{job['cluster_id']} {job['namespace']}/{job['name']} ({job['kind']}) {job['phase']}"


@dead_letters.command("list")
def dead_letters_list(
    reason: Annotated[
        str | None, typer.Option("--reason", help="Only this reason's, e.g. feishu-bad-signature")
    ] = None,
    after: Annotated[int, typer.Option("--after", min=0, help="Start after this sequence")] = 0,
    limit: Annotated[int, typer.Option("--limit", min=1, max=500)] = 100,
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """Notifications the notifier gave up on, oldest first, with the reason each was refused."""
    params: dict[str, Any] = {"after": after, "limit": limit}
    if reason:
        params["reason"] = reason
    page = _call(notifier_url, token, "GET", "/v1/dead-letters", service=NOTIFIER_API, params=params)
    items = page["items"]
    if _emit(items, output):
        return
    table = Table("SEQ", "AT", "CHANNEL", "REASON", "JOB", "DETAIL")
    for item in items:
        at = item["dead_lettered_at"] or ""
        table.add_row(
            *map(
                escape,
                (str(item["seq"]), at, item["channel"], item["reason"], _letter_job(item), item["detail"]),
            )
        )
    out.print(table)
    more = f"; more after --after {page['next_after']}" if page.get("next_after") else ""
    out.print(f"{len(items)} dead letter(s){more}")


@dead_letters.command("replay")
def dead_letters_replay(
    seqs: Annotated[list[int], typer.Argument(metavar="SEQ...", help="Sequences from the list")],
    output: OutputOpt = Output.table,
    notifier_url: NotifierUrl = DEFAULT_NOTIFIER_URL,
    token: Token = "",
) -> None:
    """Send dead-lettered notifications again through their channels (admin token); each one
    delivered is removed from the list. Fix the channel first: a refusal leaves it listed."""
    results = [
        _call(notifier_url, token, "POST", f"/v1/dead-letters/{seq}/replay", service=NOTIFIER_API)
        for seq in seqs
    ]
    if _emit(results, output):
        return
    for result in results:
        letter = result["letter"]
        detail = f": {result['detail']}" if result["detail"] else ""
        out.print(
            f"{letter['seq']} {escape(_letter_job(letter))} -> {escape(result['outcome'])}{escape(detail)}"
        )
    if any(result["outcome"] != "sent" and result["outcome"] != "already-sent" for result in results):
        raise typer.Exit(1)


# -- jobs: the persister's query API ---------------------------------------------------------

QueryUrl = Annotated[
    str,
    typer.Option(
        "--query-url", envvar="TRAINWATCH_QUERY_URL", help="The persister's query API (jobs) base URL"
    ),
]
DEFAULT_QUERY_URL = "http://127.0.0.1:8082"
QUERY_API = "the query API (the persister; --query-url or TRAINWATCH_QUERY_URL)"
# The query API's largest page.
JOBS_PAGE = 500
_PHASES = {phase.value.lower(): phase.value for phase in Phase}
_SINCE = re.compile(r"^(\d+)\s*([smhd])$")
_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _phase(value: str) -> str:
    """A phase as the API spells it (Running); any case accepted, anything else refused here."""
    try:
        return _PHASES[value.lower()]
    except KeyError:
        raise typer.BadParameter(f"{value!r} is not a phase: {', '.join(_PHASES.values())}") from None


def _phase_names(incomplete: str) -> list[str]:
    return [phase for phase in _PHASES.values() if phase.lower().startswith(incomplete.lower())]


def _since(value: str) -> str:
    """``30m``, ``2h``, ``7d`` back from now, or a time (ISO 8601, UTC without a zone) -> ISO time."""
    if match := _SINCE.match(value.strip()):
        moment = datetime.now(UTC) - timedelta(seconds=int(match.group(1)) * _SINCE_UNITS[match.group(2)])
        return moment.isoformat()
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is neither a duration (30m, 2h, 7d) nor a time (2026-11-30T08:00)"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _ago(moment: str | None) -> str:
    if not moment:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(moment)).total_seconds()
    return f"{_in_words(seconds)} ago" if seconds >= 0 else moment


def _phase_text(job: dict[str, Any]) -> str:
    sub = job.get("sub_phase")
    return f"{job['phase']} ({sub})" if sub else str(job["phase"])


@jobs.command("list")
def jobs_list(
    cluster: Annotated[
        list[str] | None, typer.Option("--cluster", "-c", help="Cluster id; repeatable")
    ] = None,
    kind: Annotated[
        list[str] | None, typer.Option("--kind", help="Kind key, e.g. pytorchjob; repeatable")
    ] = None,
    phase: Annotated[
        list[str] | None,
        typer.Option(
            "--phase", help="Phase (any case); repeatable", parser=_phase, autocompletion=_phase_names
        ),
    ] = None,
    namespace: Annotated[list[str] | None, typer.Option("--namespace", "-n", help="Repeatable")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Owner, exactly")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Part of the job name (any case)")] = None,
    label: Labels = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since", help="Changed since: 30m, 2h, 7d, or a time (UTC without a zone)", parser=_since
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most jobs shown (newest change first)")] = 100,
    output: OutputOpt = Output.table,
    query_url: QueryUrl = DEFAULT_QUERY_URL,
    token: Token = "",
) -> None:
    """List jobs, newest change first, from the persister's query API."""
    params: dict[str, Any] = {
        "cluster": cluster or [],
        "kind": kind or [],
        "phase": phase or [],
        "namespace": namespace or [],
        "label": label or [],
    }
    for key, value in (("owner", owner), ("name", name), ("updated_after", since)):
        if value is not None:
            params[key] = value
    rows: list[dict[str, Any]] = []
    total = 0
    cursor: str | None = None
    while len(rows) < limit:
        page_params = {**params, "limit": min(JOBS_PAGE, limit - len(rows))}
        if cursor:
            page_params["cursor"] = cursor
        page = _call(query_url, token, "GET", "/v1/jobs", service=QUERY_API, params=page_params)
        rows += page["data"]
        total = page["total"]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    if _emit(rows, output):
        return
    table = Table("CLUSTER", "NAMESPACE", "NAME", "KIND", "PHASE", "OWNER", "UPDATED", "UID")
    for job in rows:
        table.add_row(
            *map(
                escape,
                (
                    job["cluster_id"], job["namespace"], job["name"], job["kind_key"], _phase_text(job),
                    job.get("owner") or "-", _ago(job["updated_at"]), job["uid"],
                ),
            )
        )  # fmt: skip
    out.print(table)
    out.print(f"{len(rows)} of {total} job(s)" if total > len(rows) else f"{len(rows)} job(s)")


def _find_job(query_url: str, token: str, cluster_id: str, job: str, namespace: str | None) -> dict[str, Any]:
    """The job named ``job`` (or with that uid) in ``cluster_id``, with its transitions."""
    params: dict[str, Any] = {"cluster": [cluster_id], "name": job, "limit": JOBS_PAGE}
    if namespace:
        params["namespace"] = [namespace]
    page = _call(query_url, token, "GET", "/v1/jobs", service=QUERY_API, params=params)
    named = [j for j in page["data"] if j["name"] == job]  # the filter is a substring match
    if len(named) > 1:
        where = ", ".join(sorted(f"{j['namespace']} (uid {j['uid']})" for j in named))
        raise _fail(
            f"{len(named)} jobs are named {job!r} in {cluster_id}: in {where}; pass --namespace or the uid"
        )
    uid = named[0]["uid"] if named else job
    try:
        with _client(query_url, token) as client:
            response = client.get(f"/v1/jobs/{quote(cluster_id, safe='')}/{quote(uid, safe='')}")
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach {QUERY_API} at {query_url}: {exc}") from None
    if response.status_code == 404:
        in_namespace = f" in namespace {namespace}" if namespace else ""
        raise _fail(f"no job named {job!r} (nor with that uid) in cluster {cluster_id!r}{in_namespace}")
    if response.status_code >= 400:
        raise _fail(_explain(response))
    found: dict[str, Any] = response.json()
    return found


JobArg = Annotated[str, typer.Argument(help="The job's name (or uid)")]
ClusterArg = Annotated[str, typer.Argument(help="The cluster id")]
JobNamespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="When names repeat across namespaces")
]


@jobs.command("get")
def jobs_get(
    cluster_id: ClusterArg,
    job: JobArg,
    namespace: JobNamespace = None,
    output: OutputOpt = Output.table,
    query_url: QueryUrl = DEFAULT_QUERY_URL,
    token: Token = "",
) -> None:
    """Show one job's current state and diagnosis."""
    found = _find_job(query_url, token, cluster_id, job, namespace)
    if _emit({k: v for k, v in found.items() if k != "transitions"}, output):
        return
    diagnosis = found.get("diagnosis") or {}
    why = f"{diagnosis['category']} ({diagnosis['blame']}): {diagnosis['summary']}" if diagnosis else "-"
    history = f"{len(found.get('transitions') or [])} (trainwatch jobs timeline {cluster_id} {found['name']})"
    rows = [
        ("cluster", found["cluster_id"]),
        ("namespace", found["namespace"]),
        ("name", found["name"]),
        ("uid", found["uid"]),
        ("kind", f"{found['kind']} ({found['api_version']})"),
        ("phase", _phase_text(found) + (" (finished)" if found["terminal"] else "")),
        ("reason", found.get("reason") or "-"),
        ("message", found.get("message") or "-"),
        ("owner", found.get("owner") or "-"),
        ("queue", found.get("queue") or "-"),
        ("labels", ", ".join(f"{k}={v}" for k, v in found["labels"].items())),
        ("restarts", str(found["restart_count"])),
        ("created", found["created_at"]),
        ("started", found.get("started_at") or "-"),
        ("finished", found.get("finished_at") or "-"),
        ("updated", f"{found['updated_at']} ({_ago(found['updated_at'])})"),
        ("deleted", found.get("deleted_at") or "-"),
        ("diagnosis", why),
        ("transitions", history),
    ]  # fmt: skip
    table = Table(show_header=False, box=None)
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", escape(value))
    out.print(table)


@jobs.command("timeline")
def jobs_timeline(
    cluster_id: ClusterArg,
    job: JobArg,
    namespace: JobNamespace = None,
    output: OutputOpt = Output.table,
    query_url: QueryUrl = DEFAULT_QUERY_URL,
    token: Token = "",
) -> None:
    """A job's transitions, oldest first: phase, change, reason and message of each."""
    found = _find_job(query_url, token, cluster_id, job, namespace)
    transitions = sorted(found.get("transitions") or [], key=lambda t: (t["epoch"], t["sequence"]))
    ref = {k: found[k] for k in ("cluster_id", "namespace", "name", "uid")}
    if _emit({**ref, "transitions": transitions}, output):
        return
    table = Table("OBSERVED", "SEQ", "CHANGE", "PHASE", "REASON", "MESSAGE")
    for t in transitions:
        table.add_row(
            *map(
                escape,
                (
                    t["observed_at"], str(t["sequence"]), t["change"], _phase_text(t), t.get("reason") or "",
                    t.get("message") or "",
                ),
            )
        )  # fmt: skip
    out.print(f"{found['namespace']}/{found['name']} in {found['cluster_id']}", markup=False, highlight=False)
    out.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
