"""The Prefect server's database: SQLite by default (zero setup), PostgreSQL for real load
(docs/scaling.md §1). URLs are SQLAlchemy's, as ``PREFECT_API_DATABASE_CONNECTION_URL`` takes
them (``postgresql+asyncpg://USER[:PASSWORD]@HOST:PORT/DB``); show one only ``redacted``.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import asyncpg
from sqlalchemy.engine import URL, make_url

from compliance_api.network import crosses_network

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


def _host(url: URL) -> str:
    host = url.query.get("host") or url.host or "127.0.0.1"
    return host if isinstance(host, str) else host[0]


def crosses_hosts(url: URL) -> bool:
    """The database is on another host (not loopback, not a Unix socket)."""
    return crosses_network(_host(url))


def check_tls(value: str, ca_file: Path | None) -> None:
    """PostgreSQL on another host only with verified TLS: the password and every record cross
    the network (docs/scaling.md §1)."""
    url = parse_database_url(value)
    if crosses_hosts(url) and ca_file is None:
        raise DatabaseError(
            f"--database-url {redacted(url)!r}: PostgreSQL on another host needs verified TLS: "
            "give --database-ca CA_FILE (the CA of its certificate; ssl = on, hostssl lines)"
        )


def tls_settings(ca_file: Path) -> dict[str, str]:
    """The Prefect server's settings for verified TLS to PostgreSQL (asyncpg checks the
    certificate against ``ca_file`` and the host name)."""
    prefix = "PREFECT_SERVER_DATABASE_SQLALCHEMY_CONNECT_ARGS_TLS_"
    return {
        prefix + "ENABLED": "true",
        prefix + "CA_FILE": str(ca_file),
        prefix + "CHECK_HOSTNAME": "true",
    }


def connect_kwargs(url: URL, database: str, ca_file: Path | None = None) -> dict[str, object]:
    kwargs: dict[str, object] = {
        "user": url.username,
        "password": url.password,
        "host": _host(url),
        "port": url.port or 5432,
        "database": database,
    }
    if ca_file is not None:
        kwargs["ssl"] = ssl.create_default_context(cafile=str(ca_file))
    return kwargs


async def _prepare(url: URL, ca_file: Path | None) -> None:
    try:
        admin = await asyncpg.connect(**connect_kwargs(url, "postgres", ca_file), timeout=10)
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


async def _prepare_ledger(url: URL, password: str, ca_file: Path | None) -> URL:
    role = ledger_role(str(url.database))
    name, literal = quoted_name(role), "'" + password.replace("'", "''") + "'"
    admin = await asyncpg.connect(**connect_kwargs(url, str(url.database), ca_file), timeout=10)
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
    ledger = url.set(drivername="postgresql", username=role, password=password)
    if ca_file is not None:  # the ledger checks the server's certificate too (link_ledger.py)
        ledger = ledger.update_query_dict({"sslmode": "verify-full", "sslrootcert": str(ca_file)})
    return ledger


def prepare_ledger(value: str, password: str, ca_file: Path | None = None) -> str:
    """A role of the link ledger's own in the Prefect database (created, or its password set),
    which can touch nothing but its schema: what workers get as the ledger URL, instead of the
    server's own (often superuser) credentials."""
    url = asyncio.run(_prepare_ledger(parse_database_url(value), password, ca_file))
    return url.render_as_string(hide_password=False)


def prepare_database(value: str, ca_file: Path | None = None) -> None:
    """Check the URL and the server's version (14.9+), create the database if missing (the
    server migrates the schema itself); over verified TLS when ``ca_file`` is given, which a
    database on another host needs (``check_tls``)."""
    check_tls(value, ca_file)
    asyncio.run(_prepare(parse_database_url(value), ca_file))
