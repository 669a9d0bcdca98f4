"""The token broker: one shared token per customer key, for every caller of every process.

A usable token is taken from memory, else the store, else the store under the cross-process
lock, and only then minted; ``replace_token(failed)`` never takes the failed token again. The
whole path, with the reasons: docs/shared-token.md#the-token-path.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeGuard, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from compliance_api.auth import AccessToken
from compliance_api.errors import RateLimitedError, ServerError, TransportError
from compliance_api.oauth import CodeExchangeDeadline, OAuthClient, TokenGrant, verify_state
from compliance_api.settings import ApplicationType, Settings
from compliance_api.tokens.errors import (
    NotConnectedError,
    TokenLockTimeoutError,
    TokenRateLimitWaitError,
    TokenStoreError,
)
from compliance_api.tokens.keys import CustomerKey, secret_fingerprint
from compliance_api.tokens.limiter import RateLimiter
from compliance_api.tokens.lock import TokenLock
from compliance_api.tokens.record import TokenCodec, TokenRecord
from compliance_api.tokens.store import TokenStore

logger = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], datetime]
DEFAULT_RETRY_AFTER_SECONDS = 60.0
#: tries to store a new record before giving up on it
PERSIST_ATTEMPTS = 3


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class BrokerPolicy:
    """Timing knobs; defaults follow the spec (§5.6, §8)."""

    lock_timeout_seconds: float = 180.0
    #: the renewer asks for the lock in slices this long, reading the store before each
    lock_poll_seconds: float = 0.25
    token_call_attempts: int = 6
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 30.0


@dataclass(frozen=True)
class TokenStatus:
    """What may be shown about a stored grant: never the token, only its fingerprint."""

    key: CustomerKey
    fingerprint: str
    expires_at: datetime
    has_refresh_token: bool


class TokenBroker:
    """``TokenProvider`` for one customer key, backed by a store, a lock and a rate limiter."""

    def __init__(
        self,
        *,
        settings: Settings,
        store: TokenStore,
        lock: TokenLock,
        limiter: RateLimiter,
        oauth: OAuthClient | None = None,
        policy: BrokerPolicy | None = None,
        clock: Clock = utc_now,
    ) -> None:
        self.key = CustomerKey.from_settings(settings)
        self.store = store
        self.lock = lock
        self.limiter = limiter
        self.oauth = oauth or OAuthClient(settings)
        self.policy = policy or BrokerPolicy()
        self.renewal_margin = timedelta(seconds=settings.token_renewal_margin_seconds)
        self._codec = TokenCodec(settings.fernet())
        self._public = settings.application_type is ApplicationType.INTEGRATION_PUBLIC
        self._secret_fingerprint = secret_fingerprint(settings.client_secret)
        self._clock = clock
        self._current: AccessToken | None = None
        #: the renewal under way in this process (any thread or event loop); done when it ends
        self._renewal: concurrent.futures.Future[None] | None = None
        self._guard = threading.Lock()

    async def get_token(self) -> AccessToken:
        return await self._token(rejected=None)

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        if not self._usable(self._current, failed.fingerprint):
            logger.info("token %s was refused; replacing it", failed.fingerprint)
        return await self._token(rejected=failed.fingerprint)

    async def connect(
        self,
        code: str,
        state: str,
        expected_state: str,
        *,
        received_at: datetime | None = None,
    ) -> AccessToken:
        """Exchange an authorization code (spec §5.5) and store the grant. The code lives 30 s
        from ``received_at`` (default: now); a wait past that raises ``CodeExchangeDeadlineError``
        without sending it."""
        verify_state(expected_state, state)  # before taking a rate-limit slot or the lock
        deadline = CodeExchangeDeadline.after_redirect(received_at, clock=self._clock)
        deadline.check()
        async with self._exclusive(deadline):
            grant = await self._call_token_endpoint(
                lambda: self.oauth.exchange_code(code, state, expected_state, deadline=deadline),
                deadline=deadline,
            )
            record = self._record_from(grant)
            await self._persist(record)
            self._current = record.token
            return record.token

    async def disconnect(self) -> bool:
        """Suspend the customer's token (public apps) and delete what is stored; True if any."""
        async with self._exclusive():
            record = await self._load()
            if record is not None and self._public:
                await self._call_token_endpoint(lambda: self.oauth.suspend(record.access_token))
            deleted = await self.store.delete(self.key)
            self._current = None
            return deleted or record is not None

    async def status(self) -> TokenStatus | None:
        record = await self._load()
        if record is None:
            return None
        return TokenStatus(
            key=self.key,
            fingerprint=record.token.fingerprint,
            expires_at=record.expires_at,
            has_refresh_token=record.refresh_token is not None,
        )

    def _usable(self, token: AccessToken | None, rejected: str | None) -> TypeGuard[AccessToken]:
        """Not the token a 401 rejected, and not within the renewal margin of its expiry."""
        if token is None or token.fingerprint == rejected:
            return False
        return not token.expires_within(self.renewal_margin, now=self._clock())

    async def _token(self, rejected: str | None) -> AccessToken:
        """The current token if usable; else this caller renews, or waits for the renewal under
        way and looks again (if that renewal failed, one of its waiters renews next)."""
        while True:
            with self._guard:
                current = self._current
                if self._usable(current, rejected):
                    return current
                renewal = self._renewal
                if renewal is None:
                    renewal = self._renewal = concurrent.futures.Future()
                    break
            await asyncio.wait([asyncio.wrap_future(renewal)])  # a waiter never cancels it
        try:
            token = await self._renew(rejected)
            self._current = token
            return token
        finally:
            with self._guard:
                self._renewal = None
            renewal.set_result(None)

    async def _renew(self, rejected: str | None) -> AccessToken:
        """A usable stored token, else one minted under the lock. The lock is asked for in
        slices of ``lock_poll_seconds`` with a store read before each (not sooner than a refusal's
        ``retry_after``); only the read under the lock may lead to a mint."""
        limit, poll = self.policy.lock_timeout_seconds, self.policy.lock_poll_seconds
        deadline = time.monotonic() + limit
        ask_at, last_refusal = 0.0, "the lock was not asked for"
        while True:
            stored = await self._load_usable(rejected)
            if stored is not None:
                return stored.token
            now = time.monotonic()
            slice_end = min(now + poll, deadline)
            await asyncio.sleep(max(0.0, min(ask_at, slice_end) - now))  # the backend's Retry-After
            if ask_at < slice_end:
                async with AsyncExitStack() as held:
                    try:
                        wait = max(0.0, slice_end - time.monotonic())
                        await held.enter_async_context(self.lock.hold(self.key, wait_seconds=wait))
                    except TokenLockTimeoutError as refusal:
                        ask_at = time.monotonic() + (refusal.retry_after or 0.0)
                        last_refusal = str(refusal)
                    else:
                        record = await self._load()
                        if record is None or not self._usable(record.token, rejected):
                            record = await self._obtain(record)
                        return record.token
            if slice_end >= deadline:
                raise TokenLockTimeoutError(
                    f"waited {limit:g} s for the token lock of {self.key.describe()}, and no "
                    f"usable token was stored meanwhile (the last try: {last_refusal})"
                )

    async def _load_usable(self, rejected: str | None) -> TokenRecord | None:
        """The stored record if its token is usable; read without the lock. A store that cannot
        be read now counts as empty: the read under the lock (before any mint) raises."""
        try:
            record = await self._load(quiet=True)
        except TokenStoreError:
            return None
        return record if record is not None and self._usable(record.token, rejected) else None

    async def _obtain(self, stored: TokenRecord | None) -> TokenRecord:
        if not self._public:
            grant = await self._call_token_endpoint(self.oauth.client_credentials)
            record = self._record_from(grant)
            try:
                await self._persist(record)
            except TokenStoreError:
                # The mint revoked the old token: using the new one here is the least harm.
                logger.warning("minted token %s could not be stored", record.token.fingerprint)
            return record
        if stored is None or stored.refresh_token is None:
            raise NotConnectedError(
                f"no stored grant for {self.key.describe()}: the customer must authorize the "
                "application (compliance-flows authorize-url, then compliance-flows connect)"
            )
        refresh_token = stored.refresh_token
        grant = await self._call_token_endpoint(lambda: self.oauth.refresh(refresh_token))
        record = self._record_from(grant, previous=stored)
        # The new refresh token is stored before the new access token is used; if that fails
        # we raise, and the next attempt uses the previous one (valid 3 h after first use).
        await self._persist(record)
        return record

    def _record_from(self, grant: TokenGrant, previous: TokenRecord | None = None) -> TokenRecord:
        now = self._clock()
        refresh = grant.refresh_token or (previous.refresh_token if previous else None)
        return TokenRecord(
            key=self.key,
            access_token=grant.access_token,
            refresh_token=refresh,
            expires_at=now + timedelta(seconds=grant.expires_in),
            minted_at=now,
            secret_fingerprint=self._secret_fingerprint,
        )

    async def _load(self, *, quiet: bool = False) -> TokenRecord | None:
        """The stored record, or None; ``quiet``: no log line for a record it discards (the
        reads without the lock repeat while a caller waits, the read under it logs)."""
        ciphertext = await self.store.read(self.key)
        if ciphertext is None:
            return None
        try:
            record = self._codec.decrypt(ciphertext, self.key)
        except TokenStoreError:
            if self._public:
                raise  # the refresh token is in there: never silently drop a customer's grant
            if not quiet:
                logger.warning(
                    "discarding an undecryptable token record of %s", self.key.describe()
                )
            return None
        if not self._public and record.secret_fingerprint != self._secret_fingerprint:
            # client_credentials tokens die with the secret that minted them (spec §5.6).
            if not quiet:
                logger.info("discarding a token minted with a previous client secret")
            return None
        return record

    async def _persist(self, record: TokenRecord) -> None:
        ciphertext = self._codec.encrypt(record)
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TokenStoreError),
            stop=stop_after_attempt(PERSIST_ATTEMPTS),
            wait=wait_exponential_jitter(initial=0.1, max=1.0),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self.store.write(self.key, ciphertext)
        except TokenStoreError as exc:
            raise TokenStoreError(
                f"could not store the new token of {self.key.describe()}: {exc}. It was not "
                "used; the previously stored refresh token (valid 3 hours after first use) "
                "will be tried on the next attempt"
                if self._public
                else f"could not store the new token of {self.key.describe()}: {exc}"
            ) from None

    async def _call_token_endpoint(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        deadline: CodeExchangeDeadline | None = None,
    ) -> T:
        """Every call takes a rate-limit slot; 429 waits, 5xx backs off. A wait that would pass
        the ``deadline`` raises ``CodeExchangeDeadlineError`` at once."""
        backoff = wait_exponential_jitter(
            initial=self.policy.retry_initial_seconds, max=self.policy.retry_max_seconds
        )

        def wait(state: RetryCallState) -> float:
            """A 429's Retry-After (the whole rate window if it gave none), else the backoff."""
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, RateLimitedError):
                retry_after = error.retry_after
                return DEFAULT_RETRY_AFTER_SECONDS if retry_after is None else retry_after
            return backoff(state)

        def refuse_sleep_past_deadline(state: RetryCallState) -> None:
            if deadline is None:
                return
            sleep = float(state.upcoming_sleep)
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, RateLimitedError):  # then ``sleep`` is its Retry-After
                why = f"the token endpoint answered 429 with Retry-After {sleep:.0f} s"
            else:
                why = f"a retry after {type(error).__name__} would wait {sleep:.1f} s"
            deadline.refuse_wait(sleep, why)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type((RateLimitedError, ServerError, TransportError)),
            wait=wait,
            stop=stop_after_attempt(self.policy.token_call_attempts),
            before_sleep=refuse_sleep_past_deadline,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await self._take_slot(deadline)
                return await call()
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def _take_slot(self, deadline: CodeExchangeDeadline | None) -> None:
        """A rate-limit slot, waiting at most until the deadline (if any)."""
        if deadline is None:
            await self.limiter.acquire()
            return
        try:
            await self.limiter.acquire(max_wait=max(0.0, deadline.remaining()))
        except TokenRateLimitWaitError as exc:
            raise deadline.missed(str(exc)) from None

    @asynccontextmanager
    async def _exclusive(self, deadline: CodeExchangeDeadline | None = None) -> AsyncIterator[None]:
        """The cross-process lock, for operations (connect, disconnect) that rewrite the record
        outright; a wait cut short by the ``deadline`` raises ``CodeExchangeDeadlineError``."""
        limit = self.policy.lock_timeout_seconds
        wait = limit if deadline is None else min(limit, max(0.0, deadline.remaining()))
        async with AsyncExitStack() as stack:
            try:
                await stack.enter_async_context(self.lock.hold(self.key, wait_seconds=wait))
            except TokenLockTimeoutError as exc:
                if deadline is None or wait >= limit:
                    raise
                raise deadline.missed(str(exc)) from None
            yield
