"""The ledger of document links sent, so no link is attached twice (the API cannot list them).

Per (tenant, document, URL): ``pending`` written before the request, ``attached`` after the 201,
no entry when the service refused it. A claim is one ``INSERT ... ON CONFLICT DO NOTHING`` in a
local SQLite file or a shared PostgreSQL table (docs/write-flows.md, attach-document-links).
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed

from compliance_api.files import make_dirs, touch
from compliance_api.network import crosses_network

LedgerState = Literal["pending", "attached"]
FILE_NAME = "document-links.sqlite3"
TABLE = "compliance_document_links"

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    tenant TEXT NOT NULL,
    document_id TEXT NOT NULL,
    url TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'attached')),
    link_id TEXT,
    flow_run_id TEXT,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, document_id, url)
)
"""


@dataclass(frozen=True)
class LedgerEntry:
    document_id: str
    url: str
    state: LedgerState
    link_id: str | None
    flow_run_id: str | None
    updated_at: str

    def describe(self) -> str:
        run = f" by run {self.flow_run_id}" if self.flow_run_id else ""
        link = f" (link {self.link_id})" if self.link_id else ""
        return f"{self.state}{run} at {self.updated_at}{link}"


VERIFIED_SSLMODE = "verify-full"


def ledger_url(state_dir: Path, shared_url: str | None) -> URL:
    """The shared PostgreSQL database if one is named (any driver spelling), else the file."""
    if shared_url is None:
        make_dirs(state_dir)
        touch(state_dir / FILE_NAME)  # 0600: SQLite gives its -wal and -shm files the same
        return URL.create("sqlite", database=str(state_dir / FILE_NAME))
    url = make_url(shared_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError(f"{url.drivername!r}: the shared link ledger must be PostgreSQL")
    return _verified_tls(url.set(drivername="postgresql+psycopg"))


def _verified_tls(url: URL) -> URL:
    """Beyond this machine the ledger's password and claims cross the network: TLS with the
    server's certificate and name checked (``sslmode=verify-full``, the default there; libpq's
    own default ``prefer`` checks nothing and falls back to plain text)."""
    host = url.host or str(url.query.get("host", ""))
    if not crosses_network(host):
        return url  # the Unix socket or loopback: nothing crosses the network
    mode = url.query.get("sslmode", VERIFIED_SSLMODE)
    if mode != VERIFIED_SSLMODE:
        raise ValueError(
            f"COMPLIANCE_LINK_LEDGER_URL: sslmode={mode} for {host!r}: a ledger on another host "
            f"needs sslmode={VERIFIED_SSLMODE} (and sslrootcert=<your CA bundle>), so its "
            "certificate and name are checked"
        )
    return url.update_query_dict({"sslmode": VERIFIED_SSLMODE})


def _sqlite_pragmas(connection: Any, _record: object) -> None:
    connection.execute("PRAGMA busy_timeout=30000")
    _use_wal(connection)
    connection.execute("PRAGMA synchronous=FULL")  # a claim must survive a power cut


@retry(
    retry=retry_if_exception_type(sqlite3.OperationalError),
    stop=stop_after_attempt(50),
    wait=wait_fixed(0.1),
    reraise=True,
)
def _use_wal(connection: Any) -> None:
    """Set WAL once per file. Two ledgers opening a new file at once can get "locked" without
    the busy timeout applying, so ask again shortly."""
    if connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        connection.execute("PRAGMA journal_mode=WAL")


class LinkLedger:
    """One tenant's view of the ledger (tenant = API base URL + client id + source id)."""

    def __init__(self, url: URL, tenant: str) -> None:
        self.url = url
        self.tenant = tenant
        # one connection per ledger, every statement its own transaction
        self._engine = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
        if url.get_backend_name() == "sqlite":
            sa.event.listen(self._engine, "connect", _sqlite_pragmas)
        self._connection = self._engine.connect()
        # PostgreSQL: a worker creating the table at the same moment makes this one collide
        with contextlib.suppress(sa.exc.IntegrityError):
            self._connection.execute(sa.text(_SCHEMA))

    @property
    def shared(self) -> bool:
        return self.url.get_backend_name() != "sqlite"

    def describe(self) -> str:
        """Where the ledger is, for the run's log (never a password)."""
        if not self.shared:
            return f"local file {self.url.database} (this machine only)"
        return f"PostgreSQL {self.url.render_as_string(hide_password=True)} (every worker)"

    def _run(self, sql: str, **params: object) -> sa.CursorResult[Any]:
        return self._connection.execute(sa.text(sql), {"tenant": self.tenant, **params})

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._connection.close()
        self._engine.dispose()

    def lookup(self, document_id: str, url: str) -> LedgerEntry | None:
        row = self._run(
            f"SELECT document_id, url, state, link_id, flow_run_id, updated_at FROM {TABLE} "
            "WHERE tenant = :tenant AND document_id = :document_id AND url = :url",
            document_id=document_id,
            url=url,
        ).one_or_none()
        return LedgerEntry(*row) if row else None

    def claim(self, document_id: str, url: str, flow_run_id: str | None) -> LedgerEntry | None:
        """Record "pending" before sending; returns the existing entry if someone was first."""
        inserted = self._run(
            f"INSERT INTO {TABLE} (tenant, document_id, url, state, flow_run_id, updated_at) "
            "VALUES (:tenant, :document_id, :url, 'pending', :run, :now) "
            "ON CONFLICT (tenant, document_id, url) DO NOTHING",
            document_id=document_id,
            url=url,
            run=flow_run_id,
            now=_now(),
        )
        if inserted.rowcount == 1:
            return None
        return self.lookup(document_id, url)

    def reclaim(self, document_id: str, url: str, flow_run_id: str | None) -> None:
        """Take over a pending entry an operator decided to resend."""
        self._run(
            f"UPDATE {TABLE} SET flow_run_id = :run, updated_at = :now WHERE tenant = :tenant "
            "AND document_id = :document_id AND url = :url AND state = 'pending'",
            document_id=document_id,
            url=url,
            run=flow_run_id,
            now=_now(),
        )

    def mark_attached(
        self, document_id: str, url: str, link_id: str | None, flow_run_id: str | None
    ) -> None:
        self._run(
            f"INSERT INTO {TABLE} "
            "(tenant, document_id, url, state, link_id, flow_run_id, updated_at) "
            "VALUES (:tenant, :document_id, :url, 'attached', :link, :run, :now) "
            "ON CONFLICT (tenant, document_id, url) DO UPDATE SET state = 'attached', "
            "link_id = excluded.link_id, flow_run_id = excluded.flow_run_id, "
            "updated_at = excluded.updated_at",
            document_id=document_id,
            url=url,
            link=link_id,
            run=flow_run_id,
            now=_now(),
        )

    def release(self, document_id: str, url: str) -> None:
        """Forget a pending claim whose request the service provably refused."""
        self._run(
            f"DELETE FROM {TABLE} WHERE tenant = :tenant AND document_id = :document_id "
            "AND url = :url AND state = 'pending'",
            document_id=document_id,
            url=url,
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
