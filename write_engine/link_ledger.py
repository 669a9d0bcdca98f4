"""The ledger of document links this project has sent, so no link is attached twice.

Creating a link is not idempotent and the service offers no way to list a document's links,
so the only memory of "already attached" is ours. Each (tenant, document, URL) goes through:

- ``pending``: written *before* the request. If the process dies or the answer is lost, the
  entry stays pending and later runs report the link for review instead of resending it.
- ``attached``: written after the service answered 201, with the link id.
- (no entry): the service refused the request outright (4xx), so nothing was created.

It is a SQLite database (WAL mode) under ``COMPLIANCE_STATE_DIR``. A claim is one INSERT, so
two runs on the same machine can never both send the same link. Workers on several machines
must share the state directory on a local-disk volume they all mount (SQLite must not live on
a network file system), or run document-link flows from one work pool on one machine.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

LedgerState = Literal["pending", "attached"]
FILE_NAME = "document-links.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS document_links (
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


class LinkLedger:
    """One tenant's view of the ledger (tenant = API base URL + client id + source id)."""

    def __init__(self, state_dir: Path, tenant: str) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / FILE_NAME
        self.tenant = tenant
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")  # a claim must survive a power cut
        self._db.execute(_SCHEMA)

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
        self._db.close()

    def lookup(self, document_id: str, url: str) -> LedgerEntry | None:
        row = self._db.execute(
            "SELECT document_id, url, state, link_id, flow_run_id, updated_at "
            "FROM document_links WHERE tenant = ? AND document_id = ? AND url = ?",
            (self.tenant, document_id, url),
        ).fetchone()
        return LedgerEntry(*row) if row else None

    def claim(self, document_id: str, url: str, flow_run_id: str | None) -> LedgerEntry | None:
        """Record "pending" before sending; returns the existing entry if someone was first."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO document_links "
            "(tenant, document_id, url, state, flow_run_id, updated_at) "
            "VALUES (?, ?, ?, 'pending', ?, ?)",
            (self.tenant, document_id, url, flow_run_id, _now()),
        )
        if cursor.rowcount == 1:
            return None
        return self.lookup(document_id, url)

    def reclaim(self, document_id: str, url: str, flow_run_id: str | None) -> None:
        """Take over a pending entry an operator decided to resend."""
        self._db.execute(
            "UPDATE document_links SET flow_run_id = ?, updated_at = ? "
            "WHERE tenant = ? AND document_id = ? AND url = ? AND state = 'pending'",
            (flow_run_id, _now(), self.tenant, document_id, url),
        )

    def mark_attached(
        self, document_id: str, url: str, link_id: str | None, flow_run_id: str | None
    ) -> None:
        self._db.execute(
            "INSERT INTO document_links "
            "(tenant, document_id, url, state, link_id, flow_run_id, updated_at) "
            "VALUES (?, ?, ?, 'attached', ?, ?, ?) "
            "ON CONFLICT (tenant, document_id, url) DO UPDATE SET state = 'attached', "
            "link_id = excluded.link_id, flow_run_id = excluded.flow_run_id, "
            "updated_at = excluded.updated_at",
            (self.tenant, document_id, url, link_id, flow_run_id, _now()),
        )

    def release(self, document_id: str, url: str) -> None:
        """Forget a pending claim whose request the service provably refused."""
        self._db.execute(
            "DELETE FROM document_links "
            "WHERE tenant = ? AND document_id = ? AND url = ? AND state = 'pending'",
            (self.tenant, document_id, url),
        )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
