"""The shared link ledger on another host: TLS with the server's certificate and name checked.

libpq's default (``sslmode=prefer``) checks no certificate and falls back to plain text, so the
ledger's password and claims could go to anyone between the worker and the database. Beyond
loopback the ledger asks for ``verify-full`` (and refuses a weaker mode before connecting). A
server here speaks PostgreSQL's TLS opening (the ``SSLRequest``, then a handshake) with a
certificate from a test CA: the ledger refuses it unless that CA is the one it trusts.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.fixtures.tls import IssuedCert, make_ca
from write_engine.link_ledger import LinkLedger, ledger_url

SSL_REQUEST, GSSENC_REQUEST = 80877103, 80877104
HOST = "db.internal"  # the name the ledger checks; the connection goes to 127.0.0.1


def _serve_tls_opening(listener: socket.socket, certs: IssuedCert, seen: list[str]) -> None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.cert_file, certs.key_file)
    while True:
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            code = 0
            while code != SSL_REQUEST:
                length, code = struct.unpack("!II", connection.recv(8))
                if code not in (SSL_REQUEST, GSSENC_REQUEST):
                    seen.append("plain text")
                    break
                connection.sendall(b"S" if code == SSL_REQUEST else b"N")
            else:
                try:
                    with context.wrap_socket(connection, server_side=True) as tls:
                        seen.append("handshake completed")
                        tls.recv(1)
                except (ssl.SSLError, OSError) as error:
                    seen.append(f"handshake failed: {error}")


@pytest.fixture
def tls_postgres(tmp_path: Path) -> Iterator[tuple[int, Path, list[str]]]:
    """A port speaking PostgreSQL's TLS opening with a certificate for ``HOST`` from a test CA:
    (port, that CA's file, what each connection did)."""
    ca = make_ca(tmp_path / "ca")
    certs = ca.issue(tmp_path / "server", [HOST])
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[str] = []
    thread = threading.Thread(target=_serve_tls_opening, args=(listener, certs, seen), daemon=True)
    thread.start()
    yield listener.getsockname()[1], ca.cert_file, seen
    listener.close()


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
    assert _first(seen).startswith("handshake failed"), seen

    # the same server with the CA the ledger trusts: the handshake completes (then this fake
    # server closes, which a real PostgreSQL would not)
    seen.clear()
    trusted = ledger_url(tmp_path, _url(port, sslrootcert=str(ca_file), gssencmode="disable"))
    with pytest.raises(sa.exc.OperationalError) as closed:
        LinkLedger(trusted, "tenant")
    assert "certificate verify failed" not in str(closed.value)
    assert _first(seen) == "handshake completed", seen


def _first(seen: list[str]) -> str:
    """What the server saw of the first connection (its thread may note it a moment after the
    client gave up)."""
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    return seen[0] if seen else "nothing"


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
