"""``trainwatch``: the operator's CLI over the registry API (httpx; never touches the database).

    trainwatch clusters add --name "GPU east" --kubeconfig ~/.kube/east.yaml [--context east] [--id gpu-east]
    trainwatch clusters list | get ID | update ID ... | rotate ID --kubeconfig FILE | remove ID | test ID
    trainwatch clusters import

The API URL and token come from --api-url / --token or TRAINWATCH_API_URL / TRAINWATCH_API_TOKEN.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Trainwatch operator CLI.")
clusters = typer.Typer(no_args_is_help=True, help="Clusters under management.")
app.add_typer(clusters, name="clusters")

out = Console()
err = Console(stderr=True)

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


def _client(api_url: str, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=api_url.rstrip("/"), headers=headers, timeout=30)


def _fail(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(1)


def _read_kubeconfig(path: Path) -> str:
    """The file's text, or a clear error (not a traceback) when it is not UTF-8 or cannot be read."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(f"{path} is not UTF-8 text (a kubeconfig is YAML or JSON)") from None
    except OSError as exc:
        raise _fail(f"cannot read {path}: {exc.strerror or exc}") from None


def _call(api_url: str, token: str, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with _client(api_url, token) as client:
            response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise _fail(f"cannot reach the registry at {api_url}: {exc}") from None
    if response.status_code >= 400:
        raise _fail(_explain(response))
    return response.json() if response.content else None


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
        ("health", _health(health)),
        ("owner", health.get("owner") or "-"),
        ("updated", cluster["updated_at"]),
    ]
    for key, value in rows:
        table.add_row(f"[bold]{key}[/]", value)
    out.print(table)


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
        else f"[red]unreachable[/] {health.get('last_error') or ''}"
    )
    lines = [f"{state} (at {health.get('observed_at')})"]
    for label, kind_state in (
        ("watching", "watching"),
        ("starting", "starting"),
        ("forbidden (403)", "forbidden"),
        ("failing", "failing"),
    ):
        if kinds := _kinds_in(health, kind_state):
            lines.append(f"{label}: {', '.join(kinds)}")
    return "\n".join(lines)


def _show_report(report: dict[str, Any]) -> None:
    access = report.get("kinds") or {}
    if report["ok"]:
        version = (report.get("server_version") or {}).get("git_version") or "?"
        kinds = ", ".join(report.get("kinds_served") or []) or "none"
        out.print(f"[green]ok[/] {report['server']} Kubernetes {version}; job kinds served: {kinds}")
    else:
        out.print(f"[red]failed[/] {report['server']}: {report.get('error')}")
    for key in sorted(access):
        out.print(f"  {key}: {access[key]}")


def _watch_body(
    kinds: list[str] | None, namespaces: list[str] | None, exclude: list[str] | None
) -> dict[str, Any] | None:
    if kinds is None and namespaces is None and exclude is None:
        return None
    return {"kinds": kinds or [], "include_namespaces": namespaces or [], "exclude_namespaces": exclude or []}


Kinds = Annotated[
    list[str] | None, typer.Option("--kind", help="Job kind key to watch; repeatable (default all)")
]
Namespaces = Annotated[list[str] | None, typer.Option("--namespace", help="Namespace to watch; repeatable")]
Excluded = Annotated[
    list[str] | None, typer.Option("--exclude-namespace", help="Namespace to skip; repeatable")
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
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and test connectivity only")] = False,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Register a cluster."""
    body: dict[str, Any] = {
        "id": cluster_id or _slug(name),
        "name": name,
        "description": description,
        "labels": _labels(label) or {},
        "kubeconfig": _read_kubeconfig(kubeconfig),
        "context": context,
    }
    watch = _watch_body(kind, namespace, exclude_namespace)
    if watch is not None:
        body["watch"] = watch
    result = _call(
        api_url, token, "POST", "/v1/clusters", json=body, params={"dry_run": str(dry_run).lower()}
    )
    if dry_run:
        out.print("[bold]dry run[/]: nothing stored")
        _show_report(result["connectivity"])
        return
    out.print(f"registered [bold]{result['id']}[/] at revision {result['revision']}")
    _show_cluster(result)


@clusters.command("list")
def list_(label: Labels = None, api_url: ApiUrl = DEFAULT_URL, token: Token = "") -> None:
    """List clusters with their health."""
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
            break
    table = Table("ID", "NAME", "SERVER", "AUTH", "REV", "HEALTH", "OWNER", "LABELS")
    for c in rows:
        health = c.get("health") or {}
        state = _health_state(health)
        labels = ",".join(f"{k}={v}" for k, v in c["labels"].items())
        table.add_row(
            c["id"],
            c["name"],
            c["server"],
            c["auth_method"],
            str(c["revision"]),
            state,
            health.get("owner") or "-",
            labels,
        )
    out.print(table)
    out.print(f"{len(rows)} cluster(s)")


@clusters.command("get")
def get(cluster_id: str, api_url: ApiUrl = DEFAULT_URL, token: Token = "") -> None:
    """Show one cluster."""
    _show_cluster(_call(api_url, token, "GET", f"/v1/clusters/{cluster_id}"))


@clusters.command("update")
def update(
    cluster_id: str,
    name: Annotated[str | None, typer.Option("--name")] = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    label: Labels = None,
    kind: Kinds = None,
    namespace: Namespaces = None,
    exclude_namespace: Excluded = None,
    context: Annotated[str | None, typer.Option("--context")] = None,
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Change a cluster's metadata or watch options (labels given replace all labels)."""
    body = {
        "name": name,
        "description": description,
        "labels": _labels(label),
        "watch": _watch_body(kind, namespace, exclude_namespace),
        "context": context,
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
    api_url: ApiUrl = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Replace a cluster's kubeconfig (credential rotation)."""
    body = {"kubeconfig": _read_kubeconfig(kubeconfig), "context": context}
    result = _call(api_url, token, "PATCH", f"/v1/clusters/{cluster_id}", json=body)
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
def check(cluster_id: str, api_url: ApiUrl = DEFAULT_URL, token: Token = "") -> None:
    """Connect to a cluster with its stored kubeconfig and report what it serves."""
    report = _call(api_url, token, "POST", f"/v1/clusters/{cluster_id}/test")
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
            item["file"], item.get("cluster_id") or "-", item["outcome"], "; ".join(item["reasons"])
        )
    out.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
