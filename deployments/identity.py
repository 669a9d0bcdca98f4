"""A sign-in endpoint for people and machines, with oauth2-proxy's ``auth_request`` contract.

nginx asks it about every request (``auth_request``): ``202`` with ``X-Auth-Request-User`` for a
known identity and its password (HTTP Basic), ``401`` with a Basic challenge otherwise (the
browser asks for the name and password). In production oauth2-proxy answers the same question
from your IdP (docs/access.md); this one is for a single team, the try-out and the tests.

The people file holds one line per identity, ``name:scrypt$<n>$<r>$<p>$<salt>$<hash>``, never a
password (0600; ``python -m deployments.identity add NAME FILE`` adds or replaces one). A
verified credential is remembered for ``REMEMBER_SECONDS`` under a keyed digest, so each API
call does not pay for scrypt.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from compliance_api.files import write_secret
from deployments.auth import url_host
from deployments.processes import ChildProcess, ChildService, http_ok, wait_until

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
REMEMBER_SECONDS = 300.0
MIN_PASSWORD_CHARS = 16
AUTH_PATH = "/oauth2/auth"
USER_HEADER = "X-Auth-Request-User"
REALM = "compliance-flows"


class IdentityError(ValueError):
    """A people file or an entry that cannot be used; never holds a password."""


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    parts = ["scrypt", str(SCRYPT_N), str(SCRYPT_R), str(SCRYPT_P), _b64(salt), _b64(digest)]
    return "$".join(parts)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=2**26, dklen=32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def check_password(password: str, stored: str) -> bool:
    scheme, n, r, p, salt, digest = stored.split("$")
    if scheme != "scrypt":
        raise IdentityError(f"unknown password scheme {scheme!r}")
    given = _scrypt(password, base64.b64decode(salt), int(n), int(r), int(p))
    return hmac.compare_digest(given, base64.b64decode(digest))


def read_people(path: Path) -> dict[str, str]:
    """``{identity: stored hash}``; a malformed line is named by its number, never shown."""
    people: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, colon, stored = line.strip().partition(":")
        if not colon or not name or stored.count("$") != 5:
            raise IdentityError(f"{path}, line {number}: expected NAME:scrypt$n$r$p$salt$hash")
        people[name] = stored
    return people


def add_person(path: Path, name: str, password: str) -> None:
    """Add or replace ``name`` in the people file (created 0600)."""
    if not name or any(c in name for c in ":\n\r\t ") or name != name.strip():
        raise IdentityError(f"identity {name!r}: no spaces, tabs, newlines or colons")
    if len(password) < MIN_PASSWORD_CHARS:
        raise IdentityError(f"the password of {name!r} needs {MIN_PASSWORD_CHARS}+ characters")
    people = read_people(path) if path.exists() else {}
    people[name] = hash_password(password)
    text = "".join(f"{who}:{stored}\n" for who, stored in sorted(people.items()))
    write_secret(path, text)


@dataclass
class Verifier:
    """Who an ``Authorization: Basic`` header names, if its password is right."""

    people: dict[str, str]
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _remembered: dict[bytes, tuple[str, float]] = field(default_factory=dict)

    def identity(self, authorization: str | None) -> str | None:
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic" or not encoded:
            return None
        mark = hmac.new(self._key, encoded.encode(), hashlib.sha256).digest()
        remembered = self._remembered.get(mark)
        if remembered is not None and time.monotonic() - remembered[1] < REMEMBER_SECONDS:
            return remembered[0]
        try:
            name, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        stored = self.people.get(name)
        if stored is None or not check_password(password, stored):
            return None
        self._remembered[mark] = (name, time.monotonic())
        return name


def create_app(people_file: Path) -> object:
    """The ASGI app: ``GET /oauth2/auth`` (nginx's subrequest) and ``/ping``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    verifier = Verifier(read_people(people_file))

    async def auth(request: Request) -> Response:
        name = verifier.identity(request.headers.get("authorization"))
        if name is None:
            challenge = {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'}
            return PlainTextResponse("sign in", status_code=401, headers=challenge)
        return Response(status_code=202, headers={USER_HEADER: name})

    async def ping(request: Request) -> Response:
        return PlainTextResponse("ok")

    return Starlette(routes=[Route(AUTH_PATH, auth), Route("/ping", ping)])


class IdentityEndpoint(ChildService):
    """``python -m deployments.identity serve`` as a child process (``with`` starts and stops
    it); ``auth_url`` is what the TLS proxy's ``identity_url`` takes."""

    def __init__(self, people_file: Path, port: int, state_dir: Path, host: str = "127.0.0.1"):
        self.people_file, self.host, self.port, self.state_dir = people_file, host, port, state_dir
        self.child: ChildProcess | None = None

    @property
    def auth_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.port}{AUTH_PATH}"

    def launch(self) -> ChildProcess:
        command = [sys.executable, "-m", "deployments.identity", "serve", str(self.people_file)]
        command += ["--host", self.host, "--port", str(self.port)]
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).parents[1])}
        self.child = ChildProcess(
            "identity endpoint",
            command,
            env=env,
            cwd=self.state_dir,
            log_path=self.state_dir / "identity.log",
        )
        return self.child

    def wait_ready(self) -> None:
        ping = f"http://{url_host(self.host)}:{self.port}/ping"
        watch = [self.child] if self.child is not None else []
        wait_until("the identity endpoint", lambda: http_ok(ping), timeout=30, watch=watch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deployments.identity", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="answer nginx's auth_request on HOST:PORT")
    serve.add_argument("people_file", type=Path)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, required=True)
    add = commands.add_parser("add", help="add or replace a person or machine (password: stdin)")
    add.add_argument("name")
    add.add_argument("people_file", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            add_person(args.people_file, args.name, sys.stdin.readline().rstrip("\n"))
            print(f"{args.name} can sign in ({args.people_file})")
            return 0
        import uvicorn

        app = create_app(args.people_file)
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")  # type: ignore[arg-type]
    except (IdentityError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
