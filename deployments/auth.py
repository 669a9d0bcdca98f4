"""Prefect's basic auth for everything the project starts, and where a server may listen.

One shared credential: ``PREFECT_SERVER_API_AUTH_STRING`` on every server process and
``PREFECT_API_AUTH_STRING`` (same value) on every client (docs/scaling.md#auth). It is a secret:
read from a 0600 file or the environment, handed on through environments only, never printed,
logged, put on a command line or stored in Prefect (``redact`` hides it in shown text).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx

from compliance_api.network import is_loopback

SERVER_AUTH_ENV = "PREFECT_SERVER_API_AUTH_STRING"
CLIENT_AUTH_ENV = "PREFECT_API_AUTH_STRING"
#: the CA bundle a Prefect client trusts for an https PREFECT_API_URL (the TLS proxy's CA)
SSL_CERT_ENV = "PREFECT_API_SSL_CERT_FILE"
#: the file next to the token-encryption key that holds the stack's auth string
AUTH_FILE_NAME = "prefect-api-auth"
DEFAULT_USER = "admin"


class AuthError(ValueError):
    """An auth string (or its absence) that must not be used; the message never holds it."""


def url_host(host: str) -> str:
    """``host`` as it stands in a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def secret_file(path: Path, make: Callable[[], str]) -> str:
    """The secret in ``path``, created once with ``make()`` in a 0600 file (an existing one is
    tightened to 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return path.read_text().strip()
    with os.fdopen(descriptor, "w") as handle:
        handle.write(make() + "\n")
    return path.read_text().strip()


#: the least an operator's own auth string's password must have (a generated one has 43)
MIN_PASSWORD_CHARS, MIN_DISTINCT_CHARS = 24, 12


def generate_auth_string(user: str = DEFAULT_USER) -> str:
    """``USER:<43 random URL-safe characters>`` (256 bits)."""
    return f"{user}:{secrets.token_urlsafe(32)}"


def check_auth_string(value: str, where: str) -> None:
    """``AuthError`` unless a usable ``USER:PASSWORD``; errors name ``where``, never the value."""
    if not value:
        raise AuthError(
            f"{where} is set but empty: set it to USER:PASSWORD, or unset it to use the "
            "generated auth string (anonymous access is never turned on)"
        )
    user, colon, password = value.partition(":")
    if not colon or not user or not password:
        raise AuthError(f"{where} must have the form USER:PASSWORD (value not shown)")
    if any(character.isspace() for character in value):
        raise AuthError(f"{where} must not contain whitespace (value not shown)")
    if len(password) < MIN_PASSWORD_CHARS or len(set(password)) < MIN_DISTINCT_CHARS:
        raise AuthError(
            f"{where}: its password is too weak (at least {MIN_PASSWORD_CHARS} characters, "
            f"{MIN_DISTINCT_CHARS} of them different; value not shown). Generate one: "
            "python -c \"import secrets; print('admin:' + secrets.token_urlsafe(32))\""
        )


def basic_auth(auth_string: str) -> httpx.BasicAuth:
    """What Prefect's own client sends: ``Authorization: Basic base64(USER:PASSWORD)``."""
    user, _, password = auth_string.partition(":")
    return httpx.BasicAuth(user, password)


def check_exposure(host: str, auth_string: str | None, what: str = "the Prefect API") -> None:
    """Refuse to listen beyond loopback without a credential, before anything starts."""
    if not auth_string and not is_loopback(host):
        raise AuthError(
            f"refusing to serve {what} on {host!r} without an auth string: anything beyond "
            f"loopback (127.0.0.0/8, ::1, localhost) needs {SERVER_AUTH_ENV}=USER:PASSWORD"
        )


def redact(text: str, secret_values: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each (non-empty) secret replaced by ``***``."""
    for value in secret_values:
        if value:
            text = text.replace(value, "***")
    return text
