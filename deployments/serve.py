"""``make serve`` (``python -m deployments.serve``): the whole system on this machine until Ctrl-C.

Starts ``deployments.stack.LocalStack`` from the command line's options, prints where everything
is (and where the auth string is, never the string), and on Ctrl-C or SIGTERM stops all of it,
flow runs included (docs/operators.md §1).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path

import httpx

from compliance_api.files import UMASK
from compliance_api.network import is_loopback
from deployments.auth import SERVER_AUTH_ENV, AuthError, redact
from deployments.database import DatabaseError, redact_text
from deployments.prefect_server import HOST
from deployments.resources import WORK_POOL_NAME
from deployments.stack import (
    DEFAULT_PREFECT_PORT,
    DEFAULT_SANDBOX_PORT,
    DEFAULT_STATE_DIR,
    LocalStack,
    StackOptions,
)
from deployments.try_out import TryOutPeople
from deployments.try_out import ensure as ensure_try_out_people


def parse_args(argv: list[str] | None = None) -> StackOptions:
    parser = argparse.ArgumentParser(
        prog="python -m deployments.serve",
        description="Sandbox + Prefect server + deployments + worker, until Ctrl-C.",
    )
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument(
        "--host",
        default=HOST,
        help="address the Prefect API/UI and the sandbox listen on and every printed URL "
        f"names (default {HOST}). Prefect's basic auth is always on: the auth string is "
        f"{SERVER_AUTH_ENV} if set, else generated into the state dir",
    )
    parser.add_argument("--prefect-port", type=int, default=DEFAULT_PREFECT_PORT)
    parser.add_argument("--sandbox-port", type=int, default=DEFAULT_SANDBOX_PORT)
    parser.add_argument(
        "--no-sandbox",
        action="store_false",
        dest="use_sandbox",
        help="use the service configured by COMPLIANCE_* variables instead of the sandbox",
    )
    parser.add_argument(
        "--database-url",
        help="the Prefect server's database: postgresql+asyncpg://USER@HOST:PORT/DB "
        "(created if missing; default: SQLite in the state dir)",
    )
    parser.add_argument(
        "--database-ca",
        type=Path,
        dest="database_ca_file",
        help="the CA of the database's certificate: verified TLS to PostgreSQL (needed for a "
        "database on another host)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="workers to start; more than one: each has its own state dir and the token is "
        "kept on the Prefect server, as on separate machines (default: 1)",
    )
    parser.add_argument(
        "--redis-url",
        help="redis://HOST:PORT/DB for Prefect's messaging, event ordering and leases "
        "(prefect-redis); needed for --api-replicas",
    )
    parser.add_argument(
        "--api-replicas",
        type=int,
        default=1,
        help="Prefect API servers (without services) plus one services process; more than "
        "one needs --database-url and --redis-url (default: 1, one server with services)",
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        help="PEM certificate (chain) for --host: serve the API/UI over https through nginx "
        "(nginx-light), the Prefect server on a loopback port behind it",
    )
    parser.add_argument("--tls-key", type=Path, help="the private key of --tls-cert (PEM)")
    parser.add_argument(
        "--tls-ca",
        type=Path,
        help="CA bundle the workers and the CLI trust (PREFECT_API_SSL_CERT_FILE; default: "
        "--tls-cert itself, right for a self-signed certificate)",
    )
    parser.add_argument(
        "--people",
        type=Path,
        dest="people_file",
        help="people sign in with the names and passwords of this file (python -m "
        "deployments.identity add NAME FILE): at the TLS proxy with --tls-cert, else (loopback "
        "only) at the Prefect server itself (docs/access.md). Default: try-out people alice, "
        "bob, carol and dave, their passwords in STATE_DIR/try-out-people.txt",
    )
    parser.add_argument(
        "--access-policy",
        type=Path,
        help="the roles of the people of --people (default: deployments/access_policy.yaml)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=float,
        default=5.0,
        dest="worker_poll_seconds",
        metavar="POLL_SECONDS",
        help="worker poll interval",
    )
    parser.add_argument(
        "--quiet-worker", action="store_true", help="worker output to the log file only"
    )
    args = vars(parser.parse_args(argv))  # named as StackOptions' fields, but for one
    quiet = args.pop("quiet_worker")
    if args["access_policy"] is not None and args["people_file"] is None:
        parser.error("--access-policy: give --people too (the people it gives roles to)")
    try:
        return StackOptions(**args, worker_output_to_terminal=not quiet and args["workers"] == 1)
    except (ValueError, DatabaseError) as error:
        parser.error(str(error))


def deployment_count(stack: LocalStack, work_pool: str = WORK_POOL_NAME) -> int | None:
    """How many deployments the server has on ``work_pool``, asked of the API (None: unknown)."""
    body = {"work_pools": {"name": {"any_": [work_pool]}}}
    try:
        count = stack.request("POST", "/deployments/count", body).json()
    except (httpx.HTTPError, ValueError):
        return None
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def with_try_out_people(options: StackOptions) -> tuple[StackOptions, TryOutPeople | None]:
    """Without ``--people``, people still sign in as themselves: the try-out people of the
    state dir (created on first start). Plain HTTP beyond loopback carries no passwords of
    people, so there the shared string (and the banner's warning) stays."""
    if options.people_file is not None or not (options.tls_cert or is_loopback(options.host)):
        return options, None
    people = ensure_try_out_people(options.state_dir)
    signed_in = dataclasses.replace(
        options, people_file=people.people_file, access_policy=people.policy_file
    )
    return signed_in, people


def banner(stack: LocalStack, seconds: float, people: TryOutPeople | None = None) -> str:
    """What ``make serve`` prints once up: addresses and where the secrets are, never one."""
    count = deployment_count(stack)
    # where the auth string is, and the shell words that read it
    if stack.auth_from_environment:
        where, read_it = f"your {SERVER_AUTH_ENV}", f'"${SERVER_AUTH_ENV}"'
    else:
        where, read_it = f"cat {stack.auth_file}", f'"$(cat {stack.auth_file})"'
    login, api_auth = f"log in with the auth string: {where}", "basic auth, PREFECT_API_AUTH_STRING"
    if stack.options.people_file is not None:  # people never hold the server's string
        login = f"sign in as a person of {stack.options.people_file}"
        api_auth = "your own name and password"
        read_it = '"<your name>:<your password>"'
    if people is not None:
        login = f"sign in as {people.describe()}: passwords in {people.passwords_file}"
        read_it = f'"$(grep ^carol: {people.passwords_file})"'

    lines = [
        "",
        f"compliance-flows is up ({seconds:.0f}s: "
        + ", ".join(f"{name} {took:.0f}s" for name, took in stack.timings.items())
        + ")",
        f"  Prefect UI:    {stack.ui_url}  ({login})",
        f"  Prefect API:   {stack.api_url}  ({api_auth})",
        f"  Database:      {stack.database_label}",
    ]
    if stack.tls_ca is not None:
        lines.append(
            f"  TLS:           nginx in front of the Prefect server on {stack.server_port} "
            f"(loopback); clients trust {stack.tls_ca}"
        )
    if stack.options.redis_url:
        lines.append(f"  Redis:         {redact_text(stack.options.redis_url)}")
        if stack.redis is not None and stack.redis.persistent is False:
            lines.append(
                "  Warning: this Redis keeps nothing on disk: if it restarts, the concurrency "
                "slots its leases held stay taken (docs/scaling.md §4: appendonly yes)"
            )
    if len(stack.replicas) > 1:
        others = ", ".join(server.api_url for server in stack.replicas[1:])
        replicas = len(stack.replicas)
        lines.append(f"  API replicas:  {replicas} (also {others}), one services process")
    if stack.options.use_sandbox:
        lines.append(f"  Sandbox:       {stack.sandbox_url}  (gov tier {stack.sandbox_gov_url})")
    else:
        lines.append("  Service:       from your COMPLIANCE_* settings")
    lines += [
        f"  Deployments:   {'?' if count is None else count} on work pool {WORK_POOL_NAME!r}, "
        f"workers: {', '.join(stack.worker_names())}",
        f"  State, logs:   {stack.state_dir}  (logs/ has each process's output)",
        "",
        "  Use the CLI against this server:",
        f"    export PREFECT_API_URL={stack.api_url}",
        f"    export PREFECT_API_AUTH_STRING={read_it}",
    ]
    if stack.tls_ca is not None:
        lines.append(f"    export PREFECT_API_SSL_CERT_FILE={stack.tls_ca}")
    lines.append("    prefect deployment ls")
    if stack.options.use_sandbox:
        token = ""
        if stack.sandbox_control_token is not None:
            token = f'-H "Authorization: Bearer $(cat {stack.sandbox_token_file})" '
        lines += [
            "  Make the sandbox discover a vendor (the bridge picks it up within 3 minutes):",
            f"    curl -s -X POST {stack.sandbox_url}/_sandbox/events {token}"
            "-H 'content-type: application/json' -d '{\"kind\": \"vendor_discovered\"}'",
        ]
    if not is_loopback(stack.host) and not stack.tls:
        lines += [
            "",
            f"  Warning: plain HTTP on {stack.host}: the auth string crosses the network "
            "unencrypted.",
            "  Put the TLS proxy in front of it for anything but a private test network "
            "(docs/scaling.md, Security).",
        ]
    lines += ["", "Press Ctrl-C to stop everything.", ""]
    return "\n".join(lines)


def serve(options: StackOptions) -> int:
    # SIGTERM raises KeyboardInterrupt, so the same cleanup runs as for Ctrl-C
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    os.umask(UMASK)  # nothing of the stack is readable by other users of the machine
    options, people = with_try_out_people(options)
    stack = LocalStack(options)
    started = time.monotonic()
    print(f"Starting the local stack in {stack.state_dir} ...", flush=True)
    try:
        stack.start()
        hidden = stack.secret_values()
        for line in stack.bootstrap_output.splitlines():
            print(f"  bootstrap: {redact(line, hidden)}", flush=True)
        print(redact(banner(stack, time.monotonic() - started, people), hidden), flush=True)
        while True:
            if failed := stack.failed_children():
                print(f"Stopping: {failed[0].describe_exit()}", file=sys.stderr, flush=True)
                return 1
            time.sleep(1.0)
    except KeyboardInterrupt:
        print("\nStopping the workers, the Prefect processes and the sandbox ...", flush=True)
        return 0
    except (RuntimeError, TimeoutError, DatabaseError, AuthError) as error:
        message = redact(str(error), stack.secret_values())
        print(f"Could not start the stack: {message}", file=sys.stderr, flush=True)
        return 1
    finally:
        # a second Ctrl-C must not interrupt the cleanup and leave orphans behind
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stack.stop()
        print("Stopped.", flush=True)


def main(argv: list[str] | None = None) -> None:
    sys.exit(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
