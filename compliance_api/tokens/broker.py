"""The token broker: one shared token per customer key, for every caller of every process.

The mint path is ``read the store -> lock -> re-read the store -> (still needed?) rate-limit
slot -> token endpoint -> persist encrypted -> release``. Re-reading under the lock is what turns
forty simultaneous requests into one mint; the compare-and-swap in ``replace_token`` is what
keeps a 401 from becoming a stampede: only the exact token that failed is ever replaced.

Reading is never what the lock is for: a caller first reads the store without it and adopts a
usable record that is not the rejected one, and a caller that has to wait for the lock waits
in short slices (``BrokerPolicy.lock_poll_seconds``), reading the store again after each, so it
adopts the token the moment the holder has stored it instead of queueing behind every other
waiter for a lock it no longer needs. Only a caller that finds nothing usable *under* the lock
mints. Within a process, the callers of one event loop leave all this to one of them and wait
for it together: they all wake the moment it has the token.

``connect`` (authorization code) runs against a deadline: a code lives 30 s after its
redirect, so every wait on that path (locks, rate-limit slot, 429 Retry-After, backoff) is
bounded by the time left, and a wait that would pass it fails at once instead.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from compliance_api.auth import AccessToken
from compliance_api.errors import RateLimitedError, ServerError, TransportError
from compliance_api.oauth import (
    CODE_EXCHANGE_SAFETY_SECONDS,
    CodeExchangeDeadline,
    OAuthClient,
    TokenGrant,
    verify_state,
)
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


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class BrokerPolicy:
    """Timing knobs; defaults follow the spec (§5.6, §8)."""

    renewal_margin: timedelta | None = None  # None: COMPLIANCE_TOKEN_RENEWAL_MARGIN_SECONDS
    lock_timeout_seconds: float = 180.0
    #: a waiter for the lock reads the store again this often (and then asks for the lock again)
    lock_poll_seconds: float = 0.25
    token_call_attempts: int = 6
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 30.0
    persist_attempts: int = 3
    code_exchange_safety_seconds: float = CODE_EXCHANGE_SAFETY_SECONDS


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
        self.renewal_margin = self.policy.renewal_margin or timedelta(
            seconds=settings.token_renewal_margin_seconds
        )
        self._codec = TokenCodec(settings.fernet())
        self._public = settings.application_type is ApplicationType.INTEGRATION_PUBLIC
        self._secret_fingerprint = secret_fingerprint(settings.client_secret)
        self._clock = clock
        self._current: AccessToken | None = None
        self._loop_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        #: per event loop, the renewal under way: its other callers wait for it to finish
        self._renewals: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, asyncio.Future[None]
        ] = weakref.WeakKeyDictionary()
        self._loop_locks_guard = threading.Lock()

    # -- TokenProvider -------------------------------------------------------------------------

    async def get_token(self) -> AccessToken:
        current = self._current
        if current is not None and self._fresh(current):
            return current
        return await self._renew(rejected=None)

    async def replace_token(self, failed: AccessToken) -> AccessToken:
        current = self._current
        if (
            current is not None
            and current.fingerprint != failed.fingerprint
            and self._fresh(current)
        ):
            return current
        logger.info("token %s was refused; replacing it", failed.fingerprint)
        return await self._renew(rejected=failed.fingerprint)

    # -- public integrations -------------------------------------------------------------------

    async def connect(
        self,
        code: str,
        state: str,
        expected_state: str,
        *,
        received_at: datetime | None = None,
    ) -> AccessToken:
        """Exchange an authorization code (spec §5.5) and store the customer's grant.

        ``received_at`` is when the redirect with the code arrived (default: now); the code
        lives 30 s from then. Rather than wait past that for the lock, a rate-limit slot or a
        429's Retry-After, this raises ``CodeExchangeDeadlineError`` without sending the code.
        """
        verify_state(expected_state, state)  # before taking a rate-limit slot or the lock
        deadline = CodeExchangeDeadline.after_redirect(
            received_at, clock=self._clock, safety_seconds=self.policy.code_exchange_safety_seconds
        )
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

    # -- the mint path -------------------------------------------------------------------------

    def _fresh(self, token: AccessToken) -> bool:
        return not token.expires_within(self.renewal_margin, now=self._clock())

    async def _renew(self, *, rejected: str | None) -> AccessToken:
        """One renewal per event loop at a time; the loop's other callers wait for it together.

        They all wake the moment it ends (a queue on a lock would hand over one loop turn after
        another, and on a busy loop each turn can take a good part of a second), then use its
        token, or, if it failed or found only the token they reject, one of them renews next.
        """
        loop = asyncio.get_running_loop()
        while True:
            current = self._current
            if current is not None and current.fingerprint != rejected and self._fresh(current):
                return current  # another task of this loop renewed while this one waited
            with self._loop_locks_guard:
                renewing = self._renewals.get(loop)
                if renewing is None:
                    renewing = self._renewals[loop] = loop.create_future()
                    break
            await asyncio.wait([renewing])  # never cancels the renewal of the one it waits for
        try:
            async with self._loop_lock():  # connect or disconnect of this loop may be under way
                current = self._current
                if current is not None and current.fingerprint != rejected and self._fresh(current):
                    return current
                # Another process may have stored a usable token already: read it, no lock.
                adopted = await self._adopt_stored(rejected)
                if adopted is not None:
                    return adopted
                return await self._renew_under_lock(rejected)
        finally:
            with self._loop_locks_guard:
                self._renewals.pop(loop, None)
            renewing.set_result(None)

    async def _renew_under_lock(self, rejected: str | None) -> AccessToken:
        """Mint under the cross-process lock, unless the store has a usable token by then.

        The lock is asked for in slices of ``lock_poll_seconds``; after each slice that did not
        get it, the store is read again: while another process mints, its waiters adopt the
        token as soon as it is stored, instead of taking the lock one after the other only to
        read it. The wait as a whole is still bounded by ``lock_timeout_seconds``.
        """
        limit = self.policy.lock_timeout_seconds
        deadline = time.monotonic() + limit
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            last_slice = remaining <= self.policy.lock_poll_seconds
            acquired = False
            try:
                async with self.lock.hold(
                    self.key, wait_seconds=min(remaining, self.policy.lock_poll_seconds)
                ):
                    acquired = True
                    record = await self._load()
                    if record is not None and self._adoptable(record, rejected):
                        self._current = record.token
                        return record.token
                    record = await self._obtain(record)
                    self._current = record.token
                    return record.token
            except TokenLockTimeoutError as exc:
                if acquired:
                    raise  # not the lock's wait: something under the lock
                if last_slice:
                    raise TokenLockTimeoutError(
                        f"waited {limit:g} s for the token lock of {self.key.describe()}, and "
                        f"no usable token was stored meanwhile (the last try: {exc})"
                    ) from None
            adopted = await self._adopt_stored(rejected)
            if adopted is not None:
                return adopted

    async def _adopt_stored(self, rejected: str | None) -> AccessToken | None:
        """The stored token, made current, if it is usable and not ``rejected``; read without
        the lock. A store that cannot be read now counts as empty: the read under the lock
        (before any mint) is the one whose errors are raised."""
        try:
            record = await self._load(quiet=True)
        except TokenStoreError:
            return None
        if record is None or not self._adoptable(record, rejected):
            return None
        self._current = record.token
        return record.token

    def _adoptable(self, record: TokenRecord, rejected: str | None) -> bool:
        if record.token.fingerprint == rejected:
            return False
        return record.usable(self.renewal_margin, self._clock())

    async def _obtain(self, stored: TokenRecord | None) -> TokenRecord:
        if not self._public:
            grant = await self._call_token_endpoint(self.oauth.client_credentials)
            record = self._record_from(grant)
            try:
                await self._persist(record)
            except TokenStoreError:
                # The mint already revoked the old token; using the new one in this process is
                # the least harmful choice (others will find no fresh record and mint their own).
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
        # Rotation rule: the new refresh token is stored before the new access token is used.
        # If that fails we raise; the stored (previous) refresh token stays valid for 3 hours
        # after its first use, so the next attempt refreshes with it.
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
            stop=stop_after_attempt(self.policy.persist_attempts),
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
        """Every token-endpoint call takes a rate-limit slot; 429 waits, 5xx backs off.

        With a ``deadline`` no wait (slot, Retry-After, backoff) may pass it: such a wait
        raises ``CodeExchangeDeadlineError`` at once.
        """
        backoff = wait_exponential_jitter(
            initial=self.policy.retry_initial_seconds, max=self.policy.retry_max_seconds
        )

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            if isinstance(error, RateLimitedError):
                return _retry_after(error)
            return backoff(state)

        retrying = AsyncRetrying(
            retry=retry_if_exception_type((RateLimitedError, ServerError, TransportError)),
            wait=wait,
            stop=stop_after_attempt(self.policy.token_call_attempts),
            before_sleep=_refuse_sleep_past(deadline) if deadline is not None else None,
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

    # -- locking -------------------------------------------------------------------------------

    def _loop_lock(self) -> asyncio.Lock:
        """One holder per event loop of the cross-process lock: a renewal, connect or
        disconnect; so only one task per loop polls the file lock."""
        loop = asyncio.get_running_loop()
        with self._loop_locks_guard:
            lock = self._loop_locks.get(loop)
            if lock is None:
                lock = self._loop_locks[loop] = asyncio.Lock()
            return lock

    @asynccontextmanager
    async def _exclusive(self, deadline: CodeExchangeDeadline | None = None) -> AsyncIterator[None]:
        """Both locks, for operations (connect, disconnect) that rewrite the record outright;
        with a ``deadline``, neither is waited for past it."""
        async with self._held_loop_lock(deadline), self._held_token_lock(deadline):
            yield

    @asynccontextmanager
    async def _held_loop_lock(self, deadline: CodeExchangeDeadline | None) -> AsyncIterator[None]:
        """This event loop's lock; with a ``deadline``, waited for only until it."""
        lock = self._loop_lock()
        if deadline is None:
            async with lock:
                yield
            return
        try:
            await asyncio.wait_for(lock.acquire(), timeout=max(0.0, deadline.remaining()))
        except TimeoutError:
            raise deadline.missed("another task of this process holds the token lock") from None
        try:
            yield
        finally:
            lock.release()

    @asynccontextmanager
    async def _held_token_lock(self, deadline: CodeExchangeDeadline | None) -> AsyncIterator[None]:
        """The cross-process lock of this key; a wait cut short by the ``deadline`` raises
        ``CodeExchangeDeadlineError`` rather than ``TokenLockTimeoutError``."""
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


def _retry_after(error: RateLimitedError) -> float:
    """The 429's Retry-After, or the whole rate window when the service gave none."""
    return error.retry_after if error.retry_after is not None else DEFAULT_RETRY_AFTER_SECONDS


def _refuse_sleep_past(deadline: CodeExchangeDeadline) -> Callable[[RetryCallState], None]:
    """A tenacity ``before_sleep`` that raises instead of sleeping past ``deadline``."""

    def before_sleep(state: RetryCallState) -> None:
        sleep = float(state.upcoming_sleep)
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, RateLimitedError):
            why = f"the token endpoint answered 429 with Retry-After {_retry_after(error):.0f} s"
        else:
            why = f"a retry after {type(error).__name__} would wait {sleep:.1f} s"
        deadline.refuse_wait(sleep, why)

    return before_sleep
