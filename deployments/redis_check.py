"""The Redis that several Prefect servers share: checked before anything starts.

Whoever reaches that Redis can inject events (which start automations), free leases and queue
docket tasks, so beyond loopback it needs a password and verified TLS (``rediss://``); and a
Redis that forgets its data on a restart leaves concurrency slots taken for good (Prefect
frees a slot only through its lease), so it must persist (docs/scaling.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

import redis

from compliance_api.network import is_loopback
from deployments.database import redact_text


class RedisCheckError(RuntimeError):
    """This Redis cannot be used; the message names the URL without its password."""


def check_redis_url(url: str) -> None:
    """``ValueError`` for a URL that would cross hosts without a password or verified TLS."""
    parts = urlsplit(url)
    shown = redact_text(url)
    if is_loopback(parts.hostname or ""):
        return
    if not parts.password:
        raise ValueError(
            f"redis_url={shown!r}: a Redis beyond loopback needs a password "
            "(rediss://:PASSWORD@HOST:PORT/DB; Redis with requirepass or an ACL user)"
        )
    if not parts.scheme.startswith("rediss"):
        raise ValueError(
            f"redis_url={shown!r}: a Redis beyond loopback needs TLS (rediss://), the password "
            "and every event cross the network"
        )
    verify = parse_qs(parts.query).get("ssl_cert_reqs", ["required"])[-1].lower()
    if verify != "required":
        raise ValueError(
            f"redis_url={shown!r}: ssl_cert_reqs={verify}: the certificate must be verified"
        )


@dataclass(frozen=True)
class RedisFacts:
    #: the Redis keeps its data across a restart (AOF or RDB snapshots); None: not known
    persistent: bool | None


def preflight(url: str, timeout: float = 5.0) -> RedisFacts:
    """Connect as the servers will: ``RedisCheckError`` if Redis refuses or cannot be
    reached, so the stack stops before any Prefect process starts."""
    shown = redact_text(url)
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    try:
        client.ping()
    except redis.RedisError as error:
        raise RedisCheckError(f"redis_url={shown!r}: {_refusal(url, error)}") from None
    try:
        return RedisFacts(persistent=_persistent(client))
    finally:
        client.close()


def _persistent(client: redis.Redis) -> bool | None:
    try:
        config = client.config_get("appendonly") | client.config_get("save")
    except redis.RedisError:  # CONFIG may be renamed or denied (managed Redis): not known
        return None
    return config.get("appendonly") == "yes" or bool(str(config.get("save") or "").strip())


def _refusal(url: str, error: redis.RedisError) -> str:
    words = _first_words(error)
    refused = isinstance(error, redis.AuthenticationError) or any(
        marker in str(error) for marker in ("NOAUTH", "WRONGPASS", "authenticated")
    )
    if refused and urlsplit(url).password:
        return f"Redis refused the password ({words})"
    if refused:
        return f"Redis requires a password ({words}): give it in the URL (redis://:PASSWORD@HOST:PORT/DB)"
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return f"cannot reach Redis ({words})"
    return words


def _first_words(error: Exception) -> str:
    return str(error).splitlines()[0][:120] if str(error) else type(error).__name__
