"""The whole sandbox: configuration, the shared clock and applications, and one state per tier.

Each tier (commercial, gov) has its own tenant data, tokens, faults and stats, and is served on
its own port, so a token of one tier never works on the other. The clock and the application
registry are shared; ``reset`` returns everything (both tiers) to the seeded state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sandbox.apps import Application, AppRegistry, demo_apps, load_apps
from sandbox.clock import Clock
from sandbox.data import Dataset
from sandbox.faults import FaultRule, Faults
from sandbox.stats import Stats
from sandbox.times import to_ms
from sandbox.tokens import TokenService

GOV_SEED_OFFSET = 1_000_003


@dataclass
class SandboxConfig:
    host: str = "127.0.0.1"
    port: int = 8700
    gov_port: int | None = None  # default: port + 1
    seed: int = 42
    scale: int = 1
    gov_scale: int = 1
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    error_status: int = 503
    token_ttl_seconds: int = 3599
    token_rate_limit: int = 5
    apps_file: str | Path | None = None
    apps: list[Application] | None = field(default=None, repr=False)
    #: bearer token the ``/_sandbox/`` control API requires (None: no auth, loopback only)
    control_token: str | None = field(default=None, repr=False)

    def initial_faults(self) -> list[FaultRule]:
        if not (self.latency_ms or self.jitter_ms or self.error_rate):
            return []
        rule = FaultRule(
            route="*",
            error_rate=self.error_rate,
            status=self.error_status,
            latency_ms=self.latency_ms,
            jitter_ms=self.jitter_ms,
        )
        rule.validate(set())
        return [rule]


class Tier:
    def __init__(self, name: str, sandbox: Sandbox, seed: int, scale: int) -> None:
        self.name = name
        self.sandbox = sandbox
        self.clock = sandbox.clock
        self.dataset = Dataset(seed, scale, sandbox.clock.now())
        self.stats = Stats()
        self.faults = Faults(sandbox.config.initial_faults(), seed)
        self.tokens = TokenService(
            tier=name,
            registry=sandbox.registry,
            clock=sandbox.clock,
            stats=self.stats,
            ttl_seconds=sandbox.config.token_ttl_seconds,
            rate_limit=sandbox.config.token_rate_limit,
        )

    def now_ms(self) -> int:
        return to_ms(self.clock.now())

    def reset(self) -> None:
        self.dataset.reset()
        self.stats.reset()
        self.faults.reset()
        self.tokens.reset()


class Sandbox:
    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        if self.config.apps is not None:
            apps = self.config.apps
        elif self.config.apps_file:
            apps = load_apps(self.config.apps_file)
        else:
            apps = demo_apps()
        self.registry = AppRegistry(apps)
        self.clock = Clock()
        self.tiers = {
            "commercial": Tier("commercial", self, self.config.seed, self.config.scale),
            "gov": Tier("gov", self, self.config.seed + GOV_SEED_OFFSET, self.config.gov_scale),
        }

    def tier_of(self, client_id: str) -> Tier | None:
        app = self.registry.get(client_id)
        return None if app is None else self.tiers[app.tier]

    def reset(self) -> None:
        self.clock.reset()
        self.registry.reset()
        for tier in self.tiers.values():
            tier.reset()
