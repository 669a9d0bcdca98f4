"""``compliance-sandbox``: serve the Compliance API sandbox (commercial and gov tiers)."""

from __future__ import annotations

import argparse
import os
import sys

from sandbox.runner import serve_forever
from sandbox.state import SandboxConfig

CONTROL_TOKEN_ENV = "SANDBOX_CONTROL_TOKEN"


def parse_args(argv: list[str] | None = None) -> tuple[SandboxConfig, str]:
    parser = argparse.ArgumentParser(
        prog="compliance-sandbox",
        description="A local server that behaves like the Compliance API (see sandbox/README.md).",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind; beyond loopback only with a control token",
    )
    parser.add_argument(
        "--control-token",
        default=None,
        help="bearer token the /_sandbox/ control API then requires (prefer the "
        f"{CONTROL_TOKEN_ENV} variable: a command line is visible to other users)",
    )
    parser.add_argument("--port", type=int, default=8700, help="commercial tier (default 8700)")
    parser.add_argument(
        "--gov-port", type=int, default=None, help="government tier (default port+1)"
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the deterministic data")
    parser.add_argument(
        "--scale", type=int, default=1, help="multiplies the data set (200: 100,000 people)"
    )
    parser.add_argument("--gov-scale", type=int, default=1, help="data scale of the gov tier")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="added to every data call")
    parser.add_argument(
        "--jitter-ms", type=float, default=0.0, help="uniform extra latency 0..N ms"
    )
    parser.add_argument("--error-rate", type=float, default=0.0, help="share of data calls failing")
    parser.add_argument("--error-status", type=int, default=503, help="status of injected errors")
    parser.add_argument("--token-ttl-seconds", type=int, default=3599)
    parser.add_argument(
        "--token-rate-limit", type=int, default=5, help="token calls per app per minute"
    )
    parser.add_argument("--apps", dest="apps_file", default=None, help="JSON file of applications")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.gov_scale < 1:
        parser.error("--scale and --gov-scale must be at least 1")
    if not 0.0 <= args.error_rate <= 1.0:
        parser.error("--error-rate must be between 0 and 1")
    options = vars(args)
    log_level = options.pop("log_level")
    if options["control_token"] is None:
        options["control_token"] = os.environ.get(CONTROL_TOKEN_ENV) or None
    return SandboxConfig(**options), log_level


def main(argv: list[str] | None = None) -> None:
    config, log_level = parse_args(argv)
    try:
        serve_forever(config, log_level=log_level)
    except KeyboardInterrupt:
        pass
    except (OSError, ValueError) as exc:
        print(f"compliance-sandbox: {exc}", file=sys.stderr)  # noqa: T201
        sys.exit(1)


if __name__ == "__main__":
    main()
