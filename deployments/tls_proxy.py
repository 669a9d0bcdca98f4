"""TLS in front of a Prefect server: nginx (Debian's ``nginx-light``) as a child process.

Rendered from ``TLSProxyOptions`` and run as ``nginx -c <conf> -g 'daemon off;'`` with config,
pid file, logs and temp paths in a state directory of its own (so it runs beside a system nginx,
as root or not). It proxies everything, websockets included, to ``upstream``; Prefect's basic
auth passes through untouched (docs/scaling.md#tls).
"""

from __future__ import annotations

import base64
import grp
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr

from compliance_api.files import write_secret
from deployments.auth import url_host
from deployments.processes import ChildProcess, ChildService, wait_until

INSTALL_HINT = "apt-get install -y --no-install-recommends nginx-light"
#: Mozilla's "intermediate" TLS 1.2 ciphers (TLS 1.3's are all forward secret): ECDHE only, so
#: every session has forward secrecy; no RSA key exchange, no CBC
TLS12_CIPHERS = ":".join(
    [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ]
)
#: one client (address) at most this many connections at once (websockets included: a worker
#: holds about 5, a browser tab about 10; behind one NAT, many) and requests a second (burst)
CONNECTIONS_PER_CLIENT = 256
REQUESTS_PER_SECOND, REQUEST_BURST = 200, 1000
#: HSTS: browsers use https only for this host for two years
HSTS_SECONDS = 63072000
#: the websockets of Prefect 3's API: kept open for an hour without traffic
WEBSOCKET_PATHS = (
    r"^/api/events/(in|out)$",
    r"^/api/logs/out$",
    r"^/api/task_runs/subscriptions/scheduled$",
    r"^/api/work_pools/[^/]+/workers/connect$",
)


def nginx_executable() -> str | None:
    """``nginx`` on PATH or in /usr/sbin (where Debian puts it, off a non-root user's PATH)."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


def require_nginx() -> str:
    found = nginx_executable()
    if found is None:
        raise RuntimeError(f"nginx is not installed: {INSTALL_HINT} (as root)")
    return found


@dataclass
class TLSProxyOptions:
    #: the address to listen on (any: 127.0.0.1, a bridge address, 0.0.0.0, ::1)
    listen_host: str
    listen_port: int
    #: the Prefect server, ``http://HOST:PORT`` (no path)
    upstream: str
    #: PEM certificate (chain) for ``listen_host`` and its private key
    cert_file: Path
    key_file: Path
    #: config, pid file, logs and temp paths
    state_dir: Path
    startup_timeout: float = 30.0
    #: the sign-in endpoint nginx asks about every request (``auth_request``): oauth2-proxy's
    #: ``http://HOST:PORT/oauth2/auth``, or ``deployments.identity``'s; None: no sign-in here,
    #: clients send the server's auth string themselves
    identity_url: str | None = None
    #: with ``identity_url``: the server's auth string, which the proxy adds upstream (people
    #: never hold it); the config file that carries it is 0600
    server_auth_string: SecretStr | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
            raise ValueError(f"upstream={self.upstream!r}: expected http://HOST:PORT")
        if not 0 < self.listen_port < 65536:
            raise ValueError(f"listen_port={self.listen_port}: not a TCP port")
        if self.identity_url is not None:
            identity = urlsplit(self.identity_url)
            if identity.scheme not in ("http", "https") or not identity.netloc:
                raise ValueError(
                    f"identity_url={self.identity_url!r}: expected http(s)://HOST:PORT/PATH"
                )
            if not self.server_auth_string:
                raise ValueError(
                    "identity_url needs server_auth_string: the proxy adds it upstream"
                )


def _nobody_group() -> str:
    try:
        grp.getgrnam("nogroup")
    except KeyError:
        return "nobody"
    return "nogroup"


def _quoted(path: Path) -> str:
    text = str(path)
    if any(character in text for character in "\"';{}\n\\"):
        raise ValueError(f"{text!r}: nginx cannot take this path")
    return f'"{text}"'


def render_nginx_config(options: TLSProxyOptions, *, as_root: bool | None = None) -> str:
    """The whole ``nginx.conf``: one TLS server proxying everything to ``upstream``, streamed
    (not buffered), so nginx's workers (``nobody`` as root) never write into the state dir."""
    state = options.state_dir.resolve()
    upstream = options.upstream.rstrip("/")
    root = os.geteuid() == 0 if as_root is None else as_root
    listen = f"{url_host(options.listen_host)}:{options.listen_port}"
    proxied = f"""
            proxy_pass {upstream};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto https;
            proxy_buffering off;
            proxy_request_buffering off;{_identity_headers(options)}"""
    websocket_locations = "".join(
        f"""
        location ~ {path} {{{proxied}
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection "upgrade";
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }}"""
        for path in WEBSOCKET_PATHS
    )
    temp_paths = "\n".join(
        f"    {name}_temp_path {_quoted(state / 'temp' / name)};"
        for name in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    identity_log = _identity_log(options)
    return f"""# rendered by deployments/tls_proxy.py (nginx -c <this file> -g 'daemon off;')
{f"user nobody {_nobody_group()};" if root else "# not root: the workers run as this user"}
worker_processes auto;
worker_rlimit_nofile 16384;
pid {_quoted(state / "nginx.pid")};
error_log stderr notice;

events {{
    worker_connections 4096;
}}

http {{{identity_log}
    access_log {_quoted(state / "access.log")}{" people" if identity_log else ""};
{temp_paths}
    client_max_body_size 64m;
    server_tokens off;
    # a client that sends nothing is dropped: no slot held by a silent connection
    client_header_timeout 10s;
    client_body_timeout 30s;
    send_timeout 30s;
    keepalive_timeout 30s;
    # per client address: connections at once and requests a second (429 beyond them)
    limit_conn_zone $binary_remote_addr zone=per_client:10m;
    limit_req_zone $binary_remote_addr zone=per_client_rate:10m rate={REQUESTS_PER_SECOND}r/s;
    limit_conn_status 429;
    limit_req_status 429;

    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}

    server {{
        listen {listen} ssl;
        ssl_certificate {_quoted(options.cert_file.resolve())};
        ssl_certificate_key {_quoted(options.key_file.resolve())};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_ciphers {TLS12_CIPHERS};
        ssl_prefer_server_ciphers off;
        ssl_session_tickets off;
        ssl_session_cache shared:compliance_tls:10m;
        ssl_session_timeout 1d;
        add_header Strict-Transport-Security "max-age={HSTS_SECONDS}" always;
        limit_conn per_client {CONNECTIONS_PER_CLIENT};
        limit_req zone=per_client_rate burst={REQUEST_BURST} nodelay;
{_sign_in(options, proxied)}{websocket_locations}

        location / {{{proxied}
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


IDENTITY_LOCATION = "/_compliance_identity"


def _identity_headers(options: TLSProxyOptions) -> str:
    """Upstream, the identity nginx checked (any the client sent is replaced) and the server's
    auth string in place of the client's credential."""
    if options.identity_url is None or options.server_auth_string is None:
        return ""
    secret = options.server_auth_string.get_secret_value()
    token = base64.b64encode(secret.encode()).decode()
    return f"""
            proxy_set_header X-Compliance-User $compliance_user;
            proxy_set_header Authorization "Basic {token}";"""


def _identity_log(options: TLSProxyOptions) -> str:
    if options.identity_url is None:
        return ""
    return """
    log_format people '$remote_addr $compliance_user [$time_local] '
                      '"$request_method $uri" $status';"""


def _sign_in(options: TLSProxyOptions, proxied: str) -> str:
    """Every request but the health probe asks the sign-in endpoint first (``auth_request``):
    its 401 (and challenge) goes to the client, its ``X-Auth-Request-User`` upstream."""
    if options.identity_url is None:
        return ""
    return f"""
        auth_request {IDENTITY_LOCATION};
        auth_request_set $compliance_user $upstream_http_x_auth_request_user;

        location = {IDENTITY_LOCATION} {{
            internal;
            proxy_pass {options.identity_url};
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
        }}

        location = /api/health {{
            auth_request off;{proxied}
        }}
"""


class TLSProxy(ChildService):
    """``start()`` / ``stop()`` (or ``with TLSProxy(options) as proxy:``)."""

    def __init__(self, options: TLSProxyOptions) -> None:
        self.options = options
        self.state_dir = options.state_dir.resolve()
        self.pid_path = self.state_dir / "nginx.pid"
        self.child: ChildProcess | None = None

    @property
    def api_url(self) -> str:
        """``PREFECT_API_URL`` for clients of the server behind this proxy."""
        return f"https://{url_host(self.options.listen_host)}:{self.options.listen_port}/api"

    def launch(self) -> ChildProcess:
        """Write the config and start nginx without waiting (``wait_ready`` waits)."""
        nginx = require_nginx()
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.state_dir / "temp").mkdir(exist_ok=True)
        config = self.state_dir / "nginx.conf"
        write_secret(config, render_nginx_config(self.options))  # may carry the auth string
        self.pid_path.unlink(missing_ok=True)
        self.child = ChildProcess(
            "nginx (TLS proxy)",
            [nginx, "-p", f"{self.state_dir}/", "-e", "stderr", "-c", str(config)]
            + ["-g", "daemon off;"],
            env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")},
            cwd=self.state_dir,
            log_path=self.state_dir / "nginx.log",
        )
        return self.child

    def wait_ready(self) -> None:
        """Until nginx wrote its pid file (after binding: a port held by another never passes)
        and the socket accepts."""
        wait_until(
            f"the TLS proxy on {self.options.listen_host}:{self.options.listen_port}",
            self._ready,
            timeout=self.options.startup_timeout,
            watch=[self.child] if self.child is not None else [],
            interval=0.1,
        )

    def _ready(self) -> bool:
        pid = str(self.child.pid) if self.child is not None else None
        try:
            if self.pid_path.read_text().strip() != pid:
                return False
            address = (self.options.listen_host, self.options.listen_port)
            with socket.create_connection(address, timeout=1.0):
                return True
        except OSError:
            return False
