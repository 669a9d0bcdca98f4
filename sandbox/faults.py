"""Injected faults: errors and latency per route, and token-endpoint outages.

A rule names a route as ``"METHOD /path/{template}"`` (see ``route_counts`` in the stats) or
``"*"`` for every data route (the bearer-protected ``/v1`` routes; the token endpoint, suspend
and the consent page are faulted only by name or through a token outage). A rule with ``count``
fails exactly the next ``count`` matching calls; otherwise each call fails with probability
``error_rate``. ``latency_ms`` plus a uniform ``0..jitter_ms`` is added to matching calls with
``asyncio.sleep``, so slow calls never block the others.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass
class FaultRule:
    route: str = "*"
    error_rate: float = 0.0
    status: int = 503
    count: int | None = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0

    def validate(self, known_routes: set[str]) -> None:
        if self.route != "*" and self.route not in known_routes:
            raise ValueError(
                f"route {self.route!r} is not '*' or one of: {', '.join(sorted(known_routes))}"
            )
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"error_rate {self.error_rate} is not between 0 and 1")
        if not 400 <= self.status <= 599:
            raise ValueError(f"status {self.status} is not an HTTP error status (400-599)")
        if self.count is not None and self.count < 0:
            raise ValueError(f"count {self.count} is negative")
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise ValueError("latency_ms and jitter_ms must not be negative")


@dataclass
class Outage:
    status: int = 503
    count: int | None = None
    until: float | None = None  # sandbox-clock seconds


class Faults:
    def __init__(self, initial: list[FaultRule], seed: int) -> None:
        self._initial = [replace(rule) for rule in initial]
        self._seed = seed
        self.reset()

    def reset(self) -> None:
        self.rules: dict[str, FaultRule] = {rule.route: replace(rule) for rule in self._initial}
        self.outage: Outage | None = None
        self._rng = random.Random(self._seed)

    def clear(self) -> None:
        self.rules = {}
        self.outage = None

    def set(self, rule: FaultRule) -> None:
        self.rules[rule.route] = rule

    def describe(self) -> dict[str, Any]:
        outage = None if self.outage is None else asdict(self.outage)
        return {"rules": [asdict(rule) for rule in self.rules.values()], "token_outage": outage}

    def decide(self, route: str, is_data_route: bool) -> tuple[float, int | None]:
        """Seconds of latency to add and the status to fail with (None: let it through)."""
        if not self.rules:
            return 0.0, None
        delay = 0.0
        fail: int | None = None
        for key in (route, "*"):
            rule = self.rules.get(key)
            if rule is None or (key == "*" and not is_data_route):
                continue
            if rule.latency_ms or rule.jitter_ms:
                delay += (rule.latency_ms + self._rng.uniform(0, rule.jitter_ms)) / 1000
            if fail is not None:
                continue
            if rule.count is not None:
                if rule.count > 0:
                    rule.count -= 1
                    fail = rule.status
            elif rule.error_rate and self._rng.random() < rule.error_rate:
                fail = rule.status
        return delay, fail

    def token_outage(self, now: float) -> int | None:
        """The status a token-endpoint call fails with during an outage, else None."""
        outage = self.outage
        if outage is None:
            return None
        if outage.until is not None and now >= outage.until:
            self.outage = None
            return None
        if outage.count is not None:
            if outage.count <= 0:
                self.outage = None
                return None
            outage.count -= 1
        return outage.status
