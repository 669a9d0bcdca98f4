"""The Prefect server's database: SQLite by default (zero setup), PostgreSQL for real load.

A SQLite server serialises every write behind one file lock; a burst of flow runs gets 503s
("database is locked") and runs crash before they start. PostgreSQL takes the same burst.
Prefect needs PostgreSQL 14.9 or newer with the ``pg_trgm`` extension; ``prepare_database``
creates the database and the extension if they are missing (the server then migrates the
schema itself on start).

URLs are SQLAlchemy URLs, as ``PREFECT_API_DATABASE_CONNECTION_URL`` takes them:
``postgresql+asyncpg://USER[:PASSWORD]@HOST:PORT/DB``. A password in one never reaches a log:
use ``redacted`` to show one.
"""

from __future__ import annotations

import asyncio
import os

import asyncpg
from sqlalchemy.engine import URL, make_url

POSTGRES_DRIVER = "postgresql+asyncpg"
MINIMUM_POSTGRES = (14, 9)


class DatabaseError(RuntimeError):
    """The database named by ``--database-url`` cannot serve a Prefect server."""


def local_postgres_url(database: str) -> str:
    """A URL for ``database`` on the PostgreSQL server the libpq variables name (``PGHOST``,
    ``PGPORT``, ``PGUSER``, ``PGPASSWORD``; default ``postgres@127.0.0.1:5432``)."""
    user = os.environ.get("PGUSER", "postgres")
    password = os.environ.get("PGPASSWORD")
    host = os.environ.get("PGHOST", "127.0.0.1")
    port = os.environ.get("PGPORT", "5432")
    credentials = f"{user}:{password}" if password else user
    if host.startswith("/"):
        return f"{POSTGRES_DRIVER}://{credentials}@/{database}?host={host}&port={port}"
    return f"{POSTGRES_DRIVER}://{credentials}@{host}:{port}/{database}"


def parse_database_url(value: str) -> URL:
    """A PostgreSQL URL for Prefect, or a clear error naming the option and the value."""
    try:
        url = make_url(value)
    except Exception as error:  # sqlalchemy raises ArgumentError and ValueError alike
        raise DatabaseError(f"--database-url {redact_text(value)!r}: {error}") from None
    if url.drivername != POSTGRES_DRIVER:
        raise DatabaseError(
            f"--database-url {redacted(url)!r}: expected {POSTGRES_DRIVER}://USER@HOST:PORT/DB "
            f"(got driver {url.drivername!r})"
        )
    if not url.database:
        raise DatabaseError(f"--database-url {redacted(url)!r}: names no database")
    return url


def redacted(url: URL) -> str:
    """The URL with any password replaced by ``***``."""
    return url.render_as_string(hide_password=True)


def redact_text(value: str) -> str:
    """Best effort for a string that did not parse: drop whatever stands between ':' and '@'."""
    head, at, tail = value.rpartition("@")
    if not at:
        return value
    scheme, sep, credentials = head.partition("://")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{tail}" if ":" in credentials else value


def _connect_kwargs(url: URL, database: str) -> dict[str, object]:
    host = url.query.get("host") or url.host or "127.0.0.1"
    return {
        "user": url.username,
        "password": url.password,
        "host": host if isinstance(host, str) else host[0],
        "port": url.port or 5432,
        "database": database,
    }


async def _prepare(url: URL) -> None:
    try:
        admin = await asyncpg.connect(**_connect_kwargs(url, "postgres"), timeout=10)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        raise DatabaseError(
            f"cannot reach PostgreSQL at {redacted(url)}: {type(error).__name__}: {error}"
        ) from None
    try:
        version = admin.get_server_version()
        if (version.major, version.minor) < MINIMUM_POSTGRES:
            raise DatabaseError(
                f"PostgreSQL {version.major}.{version.minor} is too old for Prefect"
            )
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", url.database)
        if not exists:
            await admin.execute(f'CREATE DATABASE "{_identifier(url.database)}"')
    finally:
        await admin.close()
    target = await asyncpg.connect(**_connect_kwargs(url, str(url.database)), timeout=10)
    try:
        await target.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    except asyncpg.PostgresError as error:
        raise DatabaseError(
            f"{redacted(url)}: cannot create the pg_trgm extension Prefect needs ({error})"
        ) from None
    finally:
        await target.close()


def _identifier(name: str | None) -> str:
    if not name or '"' in name or "\x00" in name:
        raise DatabaseError(f"database name {name!r} cannot be quoted safely")
    return name


def prepare_database(value: str) -> URL:
    """Check the URL, create the database and ``pg_trgm`` if missing; returns the parsed URL."""
    url = parse_database_url(value)
    asyncio.run(_prepare(url))
    return url


async def drop_database(value: str) -> None:
    """Drop the database (tests' fresh databases), closing any connection still open to it."""
    url = parse_database_url(value)
    admin = await asyncpg.connect(**_connect_kwargs(url, "postgres"), timeout=10)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{_identifier(url.database)}" WITH (FORCE)')
    finally:
        await admin.close()
