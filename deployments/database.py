"""The Prefect server's database: SQLite by default (zero setup), PostgreSQL for real load
(docs/scaling.md §1). URLs are SQLAlchemy's, as ``PREFECT_API_DATABASE_CONNECTION_URL`` takes
them (``postgresql+asyncpg://USER[:PASSWORD]@HOST:PORT/DB``); show one only ``redacted``.
"""

from __future__ import annotations

import asyncio

import asyncpg
from sqlalchemy.engine import URL, make_url

POSTGRES_DRIVER = "postgresql+asyncpg"
MINIMUM_POSTGRES = (14, 9)


class DatabaseError(RuntimeError):
    """The database named by ``--database-url`` cannot serve a Prefect server."""


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


def connect_kwargs(url: URL, database: str) -> dict[str, object]:
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
        admin = await asyncpg.connect(**connect_kwargs(url, "postgres"), timeout=10)
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
            await admin.execute(f"CREATE DATABASE {quoted_name(url.database)}")
    finally:
        await admin.close()


def quoted_name(name: str | None) -> str:
    """``"name"``, for a statement that cannot take it as a parameter."""
    if not name or '"' in name or "\x00" in name:
        raise DatabaseError(f"database name {name!r} cannot be quoted safely")
    return f'"{name}"'


#: the link ledger's own role in the Prefect database: a schema of its own and nothing of
#: Prefect's (docs/scaling.md, the document-link ledger across hosts)
LEDGER_ROLE_PREFIX = "compliance_ledger_"


def ledger_role(database: str) -> str:
    """The ledger's role for ``database`` (one per database: several stacks share a cluster)."""
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in database.lower())
    return (LEDGER_ROLE_PREFIX + cleaned)[:63]


async def _prepare_ledger(url: URL, password: str) -> URL:
    role = ledger_role(str(url.database))
    name, literal = quoted_name(role), "'" + password.replace("'", "''") + "'"
    admin = await asyncpg.connect(**connect_kwargs(url, str(url.database)), timeout=10)
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", role)
        verb = "ALTER" if exists else "CREATE"
        await admin.execute(
            f"{verb} ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {literal}"
        )
        await admin.execute(f"CREATE SCHEMA IF NOT EXISTS {name} AUTHORIZATION {name}")
        database = quoted_name(url.database)
        await admin.execute(f"ALTER ROLE {name} IN DATABASE {database} SET search_path = {name}")
        await admin.execute(f"GRANT CONNECT ON DATABASE {database} TO {name}")
    finally:
        await admin.close()
    return url.set(drivername="postgresql", username=role, password=password)


def prepare_ledger(value: str, password: str) -> str:
    """A role of the link ledger's own in the Prefect database (created, or its password set),
    which can touch nothing but its schema: what workers get as the ledger URL, instead of the
    server's own (often superuser) credentials."""
    url = asyncio.run(_prepare_ledger(parse_database_url(value), password))
    return url.render_as_string(hide_password=False)


def prepare_database(value: str) -> None:
    """Check the URL and the server's version (14.9+), create the database if missing (the
    server migrates the schema itself)."""
    asyncio.run(_prepare(parse_database_url(value)))
