"""The shared link ledger on another host: TLS with the server's certificate and name checked.

libpq's default (``sslmode=prefer``) checks no certificate and falls back to plain text, so the
ledger's password and claims could go to anyone between the worker and the database. Beyond
loopback the ledger asks for ``verify-full`` (and refuses a weaker mode before connecting). A
server here speaks PostgreSQL's TLS opening (the ``SSLRequest``, then a handshake) with a
certificate from a test CA: the ledger refuses it unless that CA is the one it trusts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.tls import make_ca
from tests.fixtures.tls_postgres import HOST, first_seen, tls_postgres
from write_engine.link_ledger import LinkLedger, ledger_url

__all__ = ["tls_postgres"]  # the fixture


def _url(port: int, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in {"hostaddr": "127.0.0.1", **query}.items())
    return f"postgresql://ledger:s3cret-ledger@{HOST}:{port}/ledger?{params}"


def test_beyond_loopback_the_ledger_refuses_a_certificate_it_cannot_verify(
    tls_postgres: tuple[int, Path, list[str]], tmp_path: Path
) -> None:
    port, ca_file, seen = tls_postgres
    other_ca = make_ca(tmp_path / "other").cert_file
    url = ledger_url(tmp_path, _url(port, sslrootcert=str(other_ca), gssencmode="disable"))
    assert url.query["sslmode"] == "verify-full"
    with pytest.raises(sa.exc.OperationalError, match="certificate verify failed"):
        LinkLedger(url, "tenant")
    assert first_seen(seen).startswith("handshake failed"), seen

    # the same server with the CA the ledger trusts: the handshake completes (then this fake
    # server closes, which a real PostgreSQL would not)
    seen.clear()
    trusted = ledger_url(tmp_path, _url(port, sslrootcert=str(ca_file), gssencmode="disable"))
    with pytest.raises(sa.exc.OperationalError) as closed:
        LinkLedger(trusted, "tenant")
    assert "certificate verify failed" not in str(closed.value)
    assert first_seen(seen) == "handshake completed", seen


@pytest.mark.parametrize("mode", ["disable", "allow", "prefer", "require", "verify-ca"])
def test_a_weaker_sslmode_beyond_loopback_is_refused_before_connecting(
    mode: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=f"sslmode={mode} for 'db.internal'") as refused:
        ledger_url(tmp_path, _url(5432, sslmode=mode))
    assert "s3cret-ledger" not in str(refused.value)


def test_on_loopback_or_the_socket_nothing_crosses_the_network(tmp_path: Path) -> None:
    for url in (
        "postgresql://ledger:pw@127.0.0.1:5432/ledger",
        "postgresql://ledger:pw@localhost/ledger?sslmode=disable",
        "postgresql://ledger@/ledger?host=/var/run/postgresql",
    ):
        assert "sslmode" not in ledger_url(tmp_path, url).query or "disable" in url
