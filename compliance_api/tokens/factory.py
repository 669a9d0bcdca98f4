"""The broker for plain library use: local store, local lock, local rate limiter."""

from __future__ import annotations

from compliance_api.settings import Settings
from compliance_api.tokens.broker import BrokerPolicy, Clock, TokenBroker, utc_now
from compliance_api.tokens.limiter import FileRateLimiter, RateLimiter
from compliance_api.tokens.lock import LocalFileLock, TokenLock
from compliance_api.tokens.store import LocalFileTokenStore, TokenStore


def local_store(settings: Settings) -> LocalFileTokenStore:
    return LocalFileTokenStore(settings.state_dir / "tokens")


def local_lock(settings: Settings) -> LocalFileLock:
    return LocalFileLock(settings.state_dir / "locks")


def broker_from_settings(
    settings: Settings,
    *,
    store: TokenStore | None = None,
    lock: TokenLock | None = None,
    limiter: RateLimiter | None = None,
    policy: BrokerPolicy | None = None,
    clock: Clock = utc_now,
) -> TokenBroker:
    """A broker that works without Prefect; pass backends to share beyond one machine."""
    return TokenBroker(
        settings=settings,
        store=store or local_store(settings),
        lock=lock or local_lock(settings),
        # one budget per machine: the service counts all token calls of the tenant together
        limiter=limiter or FileRateLimiter(settings.state_dir / "limits" / "token-endpoint.json"),
        policy=policy,
        clock=clock,
    )
