"""Counters that tests read through ``GET /_sandbox/stats`` to prove what a client sent.

Tests count calls instead of timing them: token mints, requests per route, and for every
write the number of times it succeeded, so a test can show that nothing was sent twice.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

WRITE_KINDS = (
    "add_to_managed",
    "document_link",
    "questionnaire_patch",
    "questionnaire_approve",
    "account_patch",
)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.token_requests: Counter[str] = Counter()
        self.token_mints: Counter[str] = Counter()
        self.status_counts: Counter[str] = Counter()
        self.route_counts: Counter[str] = Counter()
        self.group_add_counts: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.write_counts: dict[str, Counter[str]] = {kind: Counter() for kind in WRITE_KINDS}
        self.unauthorized = 0
        self.forbidden = 0
        self.faults_injected = 0
        self.requests_total = 0

    def snapshot(self) -> dict[str, Any]:
        return {
            "token_requests": dict(self.token_requests),
            "token_mints": dict(self.token_mints),
            "status_counts": dict(self.status_counts),
            "route_counts": dict(self.route_counts),
            "group_add_counts": {g: dict(c) for g, c in self.group_add_counts.items()},
            "write_counts": {kind: dict(c) for kind, c in self.write_counts.items()},
            "unauthorized": self.unauthorized,
            "forbidden": self.forbidden,
            "faults_injected": self.faults_injected,
            "requests_total": self.requests_total,
        }
