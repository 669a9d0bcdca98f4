"""The sandbox from another process: the command line that starts one, and the COMPLIANCE_*
environment of a process that talks to it as a demo application.

Both are plain data, so whoever runs processes (the local stack, a benchmark, a test) starts
them its own way. Within one process, :func:`sandbox.runner.run_sandbox_in_thread` is the way.
This module imports neither the server nor the client.
"""

from __future__ import annotations

import base64
import os
import secrets
import sys

from sandbox.apps import DEMO_MANAGE, DEMO_MANAGE_BASIC, Credentials

#: 200 once the tier accepts requests (with the bearer token if the sandbox has a control token)
HEALTH_PATH = "/_sandbox/health"
#: the applications :func:`demo_environment` can stand for: commercial-tier manage apps
MANAGE_APPS = (DEMO_MANAGE, DEMO_MANAGE_BASIC)


def sandbox_command(
    port: int,
    gov_port: int,
    *,
    host: str = "127.0.0.1",
    scale: int = 1,
    latency_ms: float = 0.0,
    log_level: str = "warning",
) -> list[str]:
    """``python -m sandbox`` serving both tiers on the given ports; run it in the checkout (or
    with it on PYTHONPATH). A control token (required beyond loopback) goes into the child's
    SANDBOX_CONTROL_TOKEN, never onto the command line, which every user can read."""
    command = [sys.executable, "-m", "sandbox", "--host", host]
    command += ["--port", str(port), "--gov-port", str(gov_port), "--log-level", log_level]
    if scale != 1:
        command += ["--scale", str(scale)]
    if latency_ms:
        command += ["--latency-ms", str(latency_ms)]
    return command


def demo_environment(
    url: str,
    gov_url: str | None = None,
    *,
    state_dir: str | os.PathLike[str],
    encryption_key: str | None = None,
    app: Credentials = DEMO_MANAGE,
) -> dict[str, str]:
    """The COMPLIANCE_* variables of a client of the sandbox at ``url`` (and ``gov_url``, its
    gov tier, if given) as ``app``, keeping its token store and ledgers in ``state_dir`` and
    encrypting stored tokens with ``encryption_key`` (a Fernet key; default: a new one)."""
    if app not in MANAGE_APPS:
        raise ValueError(f"app {app.client_id!r}: expected one of the demo manage apps")
    env = {
        "COMPLIANCE_BASE_URL": url,
        "COMPLIANCE_CLIENT_ID": app.client_id,
        "COMPLIANCE_CLIENT_SECRET": app.client_secret,
        "COMPLIANCE_APPLICATION_TYPE": "manage",
        "COMPLIANCE_TOKEN_ENCRYPTION_KEY": encryption_key or new_encryption_key(),
        "COMPLIANCE_STATE_DIR": os.fspath(state_dir),
    }
    if gov_url is not None:
        env["COMPLIANCE_GOV_BASE_URL"] = gov_url
    return env


def new_encryption_key() -> str:
    """A Fernet key: 32 random bytes, URL-safe base64 (what ``Fernet.generate_key()`` makes)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
