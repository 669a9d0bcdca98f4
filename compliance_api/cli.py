"""``compliance-flows``: token chores an operator does by hand (no Prefect needed).

Settings come from COMPLIANCE_* variables (or .env), never a credentials block; the local token
store is used (docs/shared-token.md#operator-commands).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from compliance_api.errors import ComplianceError, ConfigurationError
from compliance_api.oauth import build_authorization_request
from compliance_api.settings import Settings, load_settings
from compliance_api.tokens import broker_from_settings


def _settings(args: argparse.Namespace) -> Settings:
    """COMPLIANCE_* settings; ``--source-id`` overrides COMPLIANCE_SOURCE_ID (public apps only)."""
    if not args.source_id:
        return load_settings()
    try:
        return load_settings(source_id=args.source_id)
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{exc}\n  (--source-id {args.source_id!r} was given: it sets COMPLIANCE_SOURCE_ID)"
        ) from None


def authorize_url(args: argparse.Namespace) -> str:
    request = build_authorization_request(_settings(args))
    return f"Open: {request.url}\nKeep this state for `connect --expected-state`: {request.state}"


def connect(args: argparse.Namespace) -> str:
    broker = broker_from_settings(_settings(args))
    token = asyncio.run(broker.connect(args.code, args.state, args.expected_state))
    return f"Connected {broker.key.describe()}: token {token.fingerprint} stored (encrypted)"


def token_status(args: argparse.Namespace) -> str:
    broker = broker_from_settings(_settings(args))
    status = asyncio.run(broker.status())
    if status is None:
        return f"No stored token for {broker.key.describe()}"
    refresh = ", with refresh token" if status.has_refresh_token else ""
    return (
        f"{broker.key.describe()}: token {status.fingerprint}, "
        f"expires {status.expires_at.isoformat()}{refresh}"
    )


def disconnect(args: argparse.Namespace) -> str:
    broker = broker_from_settings(_settings(args))
    removed = asyncio.run(broker.disconnect())
    if removed:
        return f"Disconnected {broker.key.describe()}: token suspended and stored tokens deleted"
    return f"Nothing stored for {broker.key.describe()}; nothing to disconnect"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="compliance-flows", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, handler, help_text in (
        ("authorize-url", authorize_url, "print the customer consent URL and its state"),
        ("connect", connect, "exchange an authorization code and store the grant"),
        ("token-status", token_status, "show the stored token's fingerprint and expiry"),
        ("disconnect", disconnect, "suspend the customer's token and delete stored tokens"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.set_defaults(handler=handler)
        command.add_argument(
            "--source-id",
            help="customer source_id; overrides COMPLIANCE_SOURCE_ID (integration_public only)",
        )
        if name == "connect":
            command.add_argument("--code", required=True)
            command.add_argument("--state", required=True, help="state from the redirect")
            command.add_argument(
                "--expected-state", required=True, help="state printed by authorize-url"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        print(args.handler(args))
    except ComplianceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
