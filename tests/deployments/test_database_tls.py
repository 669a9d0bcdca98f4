"""The Prefect server's PostgreSQL on another host: only over verified TLS.

``serve --database-url`` to a host beyond loopback needs ``--database-ca``: without it nothing
starts; with it the stack's own connections (preparing the database, the ledger's role) check
the server's certificate against that CA and its name, and every Prefect server process gets
Prefect's TLS settings (``PREFECT_SERVER_DATABASE_SQLALCHEMY_CONNECT_ARGS_TLS_*``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.database import DatabaseError, prepare_database
from deployments.prefect_server import PrefectServer, PrefectServerOptions
from deployments.serve import parse_args
from tests.fixtures.tls import make_ca
from tests.fixtures.tls_postgres import first_seen, tls_postgres

__all__ = ["tls_postgres"]  # the fixture

REMOTE = "postgresql+asyncpg://prefect:s3cret-db@db.internal:5432/prefect"


def test_a_database_on_another_host_without_its_ca_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--database-url", REMOTE])
    error = capsys.readouterr().err
    assert "needs verified TLS: give --database-ca" in error and "s3cret-db" not in error


def test_with_its_ca_every_server_process_gets_prefects_tls_settings(tmp_path: Path) -> None:
    ca = make_ca(tmp_path / "ca").cert_file
    options = parse_args(["--database-url", REMOTE, "--database-ca", str(ca)])
    assert options.database_ca_file == ca
    server = PrefectServer(
        PrefectServerOptions(port=4200, home=tmp_path, database_url=REMOTE, database_ca_file=ca),
        base_env={},
    )
    env = server.env()
    prefix = "PREFECT_SERVER_DATABASE_SQLALCHEMY_CONNECT_ARGS_TLS_"
    assert (env[prefix + "ENABLED"], env[prefix + "CA_FILE"]) == ("true", str(ca))
    assert env[prefix + "CHECK_HOSTNAME"] == "true"


def test_the_stack_checks_the_databases_certificate(
    tls_postgres: tuple[int, Path, list[str]], tmp_path: Path
) -> None:
    """Against a server speaking PostgreSQL's TLS opening with a certificate for its name (here
    ``localhost``, which resolves): a CA that did not sign it is refused at the handshake; with
    the one that did, the handshake completes (then this fake server closes)."""
    port, ca_file, seen = tls_postgres
    url = f"postgresql+asyncpg://prefect:s3cret-db@localhost:{port}/prefect"
    other = make_ca(tmp_path / "other").cert_file
    with pytest.raises(DatabaseError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        prepare_database(url, other)
    assert first_seen(seen).startswith("handshake failed"), seen
    seen.clear()
    with pytest.raises(DatabaseError) as closed:
        prepare_database(url, ca_file)
    assert "verify failed" not in str(closed.value).lower() and "s3cret-db" not in str(closed.value)
    assert first_seen(seen) == "handshake completed", seen
