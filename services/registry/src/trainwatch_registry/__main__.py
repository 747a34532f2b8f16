"""``python -m trainwatch_registry [serve|openapi|rotate-key|generate-key|migrate|import]``.

With no command it serves the API (uvicorn handles SIGTERM: in-flight requests finish, then
the lifespan stops the relay and the health consumer).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from trainwatch_common.observability.logging import configure_logging
from trainwatch_registry import openapi
from trainwatch_registry.settings import RegistrySettings

main = typer.Typer(add_completion=False, help="Trainwatch registry service and its admin commands.")


def _settings() -> RegistrySettings:
    settings = RegistrySettings()
    configure_logging(service="registry", level=settings.log_level, fmt=settings.log_format)
    return settings


@main.callback(invoke_without_command=True)
def _default(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        serve()


@main.command()
def serve() -> None:
    """Serve the API, /healthz, /readyz and /metrics on TRAINWATCH_HTTP_HOST:TRAINWATCH_HTTP_PORT."""
    from trainwatch_common.auth import ApiTokens
    from trainwatch_registry.app import create_app

    settings = _settings()
    try:  # a placeholder token such as replace-me stops the start with one clear line
        ApiTokens().refuse_weak()
    except ValueError as exc:
        raise SystemExit(f"registry: {exc}") from None
    app = create_app(settings)
    uvicorn.run(app, host=settings.http_host, port=settings.http_port, log_config=None, access_log=False)


@main.command("openapi")
def write_openapi(
    out: Annotated[Path, typer.Option(help="Where to write the document")] = openapi.PUBLISHED,
    check: Annotated[bool, typer.Option(help="Only check that the file is up to date")] = False,
) -> None:
    """Regenerate docs/openapi/registry.json from the code."""
    if check:
        if not out.exists() or out.read_text() != openapi.render():
            typer.echo(f"{out} is stale: run `python -m trainwatch_registry openapi`", err=True)
            raise typer.Exit(1)
        typer.echo(f"{out} is up to date")
        return
    typer.echo(f"wrote {openapi.write(out)}")


@main.command("generate-key")
def generate_key() -> None:
    """Print a new encryption key (put it first in TRAINWATCH_REGISTRY_ENCRYPTION_KEYS, then rotate-key)."""
    from trainwatch_registry.crypto import Encryptor

    typer.echo(Encryptor.generate_key())


async def _with_registry(action: str, settings: RegistrySettings) -> None:
    from trainwatch_common.sql_engine import create_engine
    from trainwatch_registry.app import intake_policy
    from trainwatch_registry.crypto import Encryptor
    from trainwatch_registry.importer import import_directory
    from trainwatch_registry.migrations import upgrade_to_head
    from trainwatch_registry.registrations import Registry

    engine = create_engine(settings.registry_database_url)
    try:
        await upgrade_to_head(engine)
        if action == "migrate":
            typer.echo("schema is at head")
            return
        registry = Registry(
            engine=engine, encryptor=Encryptor(settings.encryption_keys()), policy=intake_policy(settings)
        )
        if action == "rotate-key":
            typer.echo(f"re-encrypted {await registry.rotate_key()} kubeconfigs with the primary key")
        elif action == "import":
            if settings.registry_import_dir is None:
                raise typer.BadParameter("set TRAINWATCH_REGISTRY_IMPORT_DIR")
            report = await import_directory(registry, settings.registry_import_dir)
            for item in report.files:
                typer.echo(f"{item.outcome:<10} {item.file} {'; '.join(item.reasons)}".rstrip())
            typer.echo("events are published by the running registry's outbox relay")
    finally:
        await engine.dispose()


@main.command("rotate-key")
def rotate_key() -> None:
    """Re-encrypt every stored kubeconfig with the first (primary) configured key."""
    asyncio.run(_with_registry("rotate-key", _settings()))


@main.command()
def migrate() -> None:
    """Run the Alembic migrations to head."""
    asyncio.run(_with_registry("migrate", _settings()))


@main.command("import")
def import_folder() -> None:
    """Register every kubeconfig in TRAINWATCH_REGISTRY_IMPORT_DIR (idempotent)."""
    asyncio.run(_with_registry("import", _settings()))


if __name__ == "__main__":
    main()
