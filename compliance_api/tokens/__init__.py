"""One shared, rate-limited, encrypted access token per customer key (docs/shared-token.md).
Stores, locks and rate limiters are protocols, so the Prefect layer plugs in server-backed ones."""

from compliance_api.tokens.broker import BrokerPolicy, TokenBroker, TokenStatus
from compliance_api.tokens.errors import (
    NotConnectedError,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
    TokenStoreError,
)
from compliance_api.tokens.factory import broker_from_settings
from compliance_api.tokens.keys import CustomerKey, secret_fingerprint
from compliance_api.tokens.limiter import FileRateLimiter, RateLimiter
from compliance_api.tokens.lock import LocalFileLock, TokenLock
from compliance_api.tokens.record import TokenCodec, TokenRecord
from compliance_api.tokens.store import LocalFileTokenStore, TokenStore

__all__ = [
    "BrokerPolicy",
    "CustomerKey",
    "FileRateLimiter",
    "LocalFileLock",
    "LocalFileTokenStore",
    "NotConnectedError",
    "RateLimiter",
    "TokenBroker",
    "TokenCodec",
    "TokenLock",
    "TokenLockTimeoutError",
    "TokenRateLimitWaitError",
    "TokenRecord",
    "TokenStatus",
    "TokenStore",
    "TokenStoreError",
    "broker_from_settings",
    "secret_fingerprint",
]
