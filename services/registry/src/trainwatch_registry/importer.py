"""Import from disk: register every kubeconfig file of a folder, idempotently.

The platform Trainwatch replaces kept one kubeconfig file per cluster in a folder. Each regular,
non-hidden file becomes a cluster whose id is the file name without its extension (as a slug).
Running the import again changes nothing unless a file changed; files are only read.
- a new file registers a cluster (source "import:<file>");
- a changed file updates its cluster's connection (one event, connection_changed=True);
- a cluster registered or removed through the API is left alone: the operator's word wins;
- a file that is not a safe kubeconfig is refused with its reasons, and nothing is written.

Only files inside the folder are read: a symbolic link is followed only when its target is
inside the folder too (as in a Kubernetes Secret volume, whose files link into ``..data/``).
A refusal reason names the problem but no value from the file (the reply and the log are read
by people who may not read the file): quoted values are replaced by '…'.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
from pathlib import Path

from pydantic import SecretStr, ValidationError

from trainwatch_common.kubeconfig_yaml import MAX_DOCUMENT_BYTES
from trainwatch_registry.kubeconfig import KubeconfigRefused
from trainwatch_registry.models import ClusterCreate, ClusterUpdate, ImportedFile, ImportReport
from trainwatch_registry.registrations import ClusterConflict, Registry

log = logging.getLogger(__name__)


def cluster_id_for(path: Path) -> str:
    stem = path.name.split(".")[0] if not path.name.startswith(".") else path.name
    slug = re.sub(r"[^a-z0-9-]+", "-", stem.lower()).strip("-")
    return slug[:63].rstrip("-")


def _read(path: Path, directory: Path) -> str:
    """The file's text; raises ValueError naming why it cannot be a kubeconfig."""
    target = path.resolve()
    if not target.is_relative_to(directory.resolve()):
        # Never say where it points: the target's path is itself information about the host.
        raise ValueError("the file is a symbolic link to outside the import folder; not followed")
    # O_NOFOLLOW: the resolved path must not have become a link since it was resolved.
    descriptor = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("the file is not a regular file")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise ValueError(f"the kubeconfig is {info.st_size} bytes; the limit is 1 MiB")
        data = handle.read(MAX_DOCUMENT_BYTES + 1)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ValueError("the kubeconfig is larger than 1 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text") from None


def _files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise FileNotFoundError(f"import folder {directory} does not exist")
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


# Quoted words that are the kubeconfig's vocabulary, not the file's values: kept in reasons.
_VOCABULARY = frozenset(
    {"clusters", "users", "contexts", "cluster", "user", "context", "Config", "v1", "none", "https"}
)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def _without_values(reason: str) -> str:
    """The reason with every quoted value (a name, a field, a kind...) replaced by '…'."""
    return _QUOTED.sub(lambda m: m.group(0) if m.group(0)[1:-1] in _VOCABULARY else "'…'", reason)


async def import_file(registry: Registry, path: Path) -> ImportedFile:
    cluster_id = cluster_id_for(path)
    source = f"import:{path.name}"

    def outcome(kind: str, *reasons: str) -> ImportedFile:
        return ImportedFile(
            file=path.name, cluster_id=cluster_id or None, outcome=kind, reasons=list(reasons)
        )

    if not cluster_id:
        return outcome("refused", "the file name gives no usable cluster id")
    try:
        text = await asyncio.to_thread(_read, path, path.parent)
    except (ValueError, OSError) as exc:
        return outcome("refused", str(exc))
    try:
        sanitized = registry.intake(text, None)
        existing = await registry.row(cluster_id, include_deleted=True)
        if existing is None:
            body = ClusterCreate(id=cluster_id, name=path.stem, kubeconfig=SecretStr(text))
            # force: the folder is the operator's declared state, one file per cluster, and an
            # import answers no questions; a file whose server changed is that cluster moved.
            await registry.create(body, source=source, force=True)
            return outcome("registered")
        if existing.deleted_at is not None:
            return outcome("skipped", "removed through the API; add it again with `trainwatch clusters add`")
        if existing.source != source:
            return outcome("skipped", f"already registered ({existing.source}); not overwritten")
        if (
            existing.connection_fingerprint == sanitized.connection_fingerprint
            and existing.context == sanitized.context
        ):
            return outcome("unchanged")
        await registry.update(cluster_id, ClusterUpdate(kubeconfig=SecretStr(text)), force=True)
        return outcome("updated")
    except KubeconfigRefused as exc:
        return outcome("refused", *(f"{r.code}: {_without_values(r.message)}" for r in exc.refusals))
    except ValidationError as exc:
        return outcome("refused", *(str(e["msg"]) for e in exc.errors()))
    except ClusterConflict as exc:  # another replica imported it at the same moment
        return outcome("skipped", str(exc))


async def import_directory(registry: Registry, directory: Path) -> ImportReport:
    files = await asyncio.to_thread(_files, directory)
    results = [await import_file(registry, path) for path in files]
    summary = {
        kind: sum(1 for r in results if r.outcome == kind) for kind in ("registered", "updated", "refused")
    }
    log.info("imported kubeconfig folder", extra={"directory": str(directory), **summary})
    for result in results:
        if result.outcome == "refused":
            log.warning("refused kubeconfig file", extra={"file": result.file, "reasons": result.reasons})
    return ImportReport(directory=str(directory), files=results)
