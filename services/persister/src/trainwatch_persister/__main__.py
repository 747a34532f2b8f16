"""``python -m trainwatch_persister [serve|migrate|prune|openapi]`` (default: serve)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from trainwatch_common.observability.logging import configure_logging
from trainwatch_persister import openapi, retention
from trainwatch_persister.settings import PersisterSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainwatch_persister", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("serve", help="consume job events and serve the query API (the default)")
    commands.add_parser("migrate", help="bring the database schema to the newest revision, then exit")
    commands.add_parser("prune", help="apply the retention setting once, then exit")
    spec = commands.add_parser("openapi", help="write the OpenAPI document")
    spec.add_argument("--output", type=Path, default=openapi.DEFAULT_PATH)
    args = parser.parse_args(argv)

    settings = PersisterSettings()
    if args.command == "openapi":
        print(openapi.write(args.output))
        return
    if args.command in ("migrate", "prune"):
        configure_logging(service="persister", level=settings.log_level, fmt=settings.log_format)
        asyncio.run(_once(args.command, settings))
        return
    from trainwatch_common.auth import ApiTokens
    from trainwatch_persister.app import serve

    try:  # a placeholder token such as replace-me stops the start with one clear line
        ApiTokens().refuse_weak()
    except ValueError as exc:
        raise SystemExit(f"persister: {exc}") from None
    asyncio.run(serve(settings))


async def _once(command: str, settings: PersisterSettings) -> None:
    from trainwatch_persister.database import make_engine
    from trainwatch_persister.migrate import migrate

    if command == "migrate":
        await migrate(settings.database_url)
        return
    engine = make_engine(settings.database_url)
    try:
        await retention.prune_once(engine, retention_days=settings.retention_days)
    finally:
        await engine.dispose()


if __name__ == "__main__":
    main()
