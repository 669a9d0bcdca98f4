"""The sandbox clock: wall time plus an offset that tests advance instead of sleeping.

Token expiry, authorization-code lifetime, the refresh-token reuse window, the token-endpoint
rate-limit window and timed outages are all measured on this clock, so a test can expire a
token in microseconds with ``POST /_sandbox/clock/advance``.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("the sandbox clock only moves forward")
        self.offset += seconds
        return self.now()

    def reset(self) -> None:
        self.offset = 0.0
