"""Where a host is: on this machine (loopback) or across a network, which decides whether a
connection to it needs TLS with a checked certificate."""

from __future__ import annotations

import ipaddress

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or ``localhost``: reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def crosses_network(host: str) -> bool:
    """A connection to ``host`` leaves this machine: not loopback, and not a Unix socket (a
    path, as libpq and asyncpg take one for ``host``); an empty host is the local default."""
    return bool(host) and not host.startswith("/") and not is_loopback(host)
