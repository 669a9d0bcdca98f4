"""Bursts of 40 and 400 discovered vendors through the ``make serve`` stack on SQLite (1
worker), PostgreSQL (3) and PostgreSQL + Redis as 2 API replicas (3) (``python -m bench --only
burst``; docs/performance.md says how a burst is driven and when it ends). ``target_checks``:
what the issues ask of a burst of 400.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import ForeignCpu, database_name, fresh_database, fresh_redis
from deployments.processes import wait_until
from sandbox.apps import DEMO_MANAGE

BRIDGE = "bridge-event-log/every-3-minutes"
PROMOTE = "promote-discovered-vendors/on-discovery"
RECOVER = "recover-crashed-run/on-crash"
CATCH_UP = "catch-up"  # the promote deployment's schedule, off during the bursts
SIZES = (40, 400)
STACKS = ("sqlite", "postgresql", "replicas")
WORKERS = {"sqlite": 1, "postgresql": 3, "replicas": 3}
API_REPLICAS = 2
FINAL = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
#: the burst is over: every run final this long (vendors managed), or GIVE_UP_QUIET_SECONDS
#: (vendors not managed: nothing will manage them), or ``run``'s timeout after the bridge
SETTLE_SECONDS = 20.0
GIVE_UP_QUIET_SECONDS = 120.0
#: the sandbox's counts are read this often (the wall time's resolution), the Prefect API less
POLL_SECONDS = 0.5
PREFECT_POLL_SECONDS = 1.0
#: a read of the Prefect API is given this long, and tried again until READ_PATIENCE_SECONDS
READ_TIMEOUT_SECONDS = 60.0
READ_PATIENCE_SECONDS = 600.0

#: the issue's targets for a burst of TARGET_SIZE vendors (``target_labels`` words them); at
#: most MAX_MINTS mints: 0 when the token minted before the burst is still valid
TARGET_SIZE = 400
WALL_TARGET_SECONDS = {"sqlite": 60.0, "postgresql": 45.0}
#: the replicas' wall time, at most this multiple of the single-server PostgreSQL burst's
REPLICA_WALL_RATIO = 1.5
MAX_PROMOTION_RUNS = 3
MAX_MINTS = 1


class Api:
    """The Prefect REST calls of a burst: reads ride out a server that stalls or answers 503
    (SQLite under a burst does both); writes go through ``LocalStack.request`` (503s retried)."""

    def __init__(self, stack: Any) -> None:
        self.stack = stack
        self._ids: dict[str, str] = {}
        self._http = httpx.Client(
            base_url=stack.api_url, timeout=READ_TIMEOUT_SECONDS, auth=stack.http_auth
        )

    def close(self) -> None:
        self._http.close()

    def read(self, method: str, path: str, body: Any = None) -> Any:
        deadline = time.monotonic() + READ_PATIENCE_SECONDS
        while True:
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException:
                if time.monotonic() > deadline:
                    raise
                continue
            if response.status_code == 503 and time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            response.raise_for_status()
            return response.json()

    def deployment_id(self, name: str) -> str:
        if name not in self._ids:
            self._ids[name] = str(self.read("GET", f"/deployments/name/{name}")["id"])
        return self._ids[name]

    def run_deployment(self, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
        path = f"/deployments/{self.deployment_id(name)}/create_flow_run"
        return dict(self.stack.request("POST", path, {"parameters": parameters}).json())

    def flow_runs(self, name: str) -> list[dict[str, Any]]:
        ids = {"any_": [self.deployment_id(name)]}
        query = {"flow_runs": {"deployment_id": ids}, "sort": "ID_DESC", "limit": 200}
        return list(self.read("POST", "/flow_runs/filter", query))

    def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        return dict(self.read("GET", f"/flow_runs/{flow_run_id}"))

    def pause_schedules(self, name: str, slug: str | None = None) -> None:
        """The deployment's active schedules off, or only ``slug`` (their queued runs go too)."""
        deployment = self.read("GET", f"/deployments/name/{name}")
        for schedule in deployment.get("schedules") or []:
            if schedule.get("active") and slug in (None, schedule.get("slug")):
                path = f"/deployments/{deployment['id']}/schedules/{schedule['id']}"
                self.stack.request("PATCH", path, {"active": False})


def state_type(run: dict[str, Any]) -> str:
    return str((run.get("state") or {}).get("type") or "NONE")


def all_final(runs: list[dict[str, Any]]) -> bool:
    return all(state_type(run) in FINAL for run in runs)


def summarize_burst(
    size: int,
    vendors: list[str],
    runs: list[dict[str, Any]],
    managed_calls: dict[str, int],
    *,
    wall_seconds: float | None,
    timed_out: bool,
    mints: int,
    unauthorized: int,
    logs: dict[str, int],
) -> dict[str, Any]:
    """The burst's outcome: its promotion runs, the sandbox's promotion calls, the logs' counts."""
    states = Counter(state_type(run) for run in runs)
    return {
        "size": size,
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 1),
        "timed_out": timed_out,
        "promote_runs": len(runs),
        "promote_states": dict(sorted(states.items())),
        "runs_not_completed": sum(n for state, n in states.items() if state != "COMPLETED"),
        "vendors_managed_twice": sum(1 for v in vendors if managed_calls.get(v, 0) > 1),
        "vendors_not_managed": sum(1 for v in vendors if not managed_calls.get(v)),
        "runs_started_again": sum(1 for run in runs if (run.get("run_count") or 0) > 1),
        "database_is_locked": logs.get("database_is_locked_errors", 0),
        "tracebacks": logs.get("tracebacks", 0),
        "mints": mints,
        "401s": unauthorized,
    }


def target_labels(backend: str) -> dict[str, str]:
    """What each of ``target_checks``' keys asks of a burst of ``TARGET_SIZE`` on ``backend``."""
    limit = f"{WALL_TARGET_SECONDS.get(backend, 0):g} s"
    if backend == "replicas":
        limit = f"{REPLICA_WALL_RATIO:g}x the PostgreSQL burst's time"
    return {
        "wall": f"every vendor managed within {limit}",
        "once": "each vendor managed exactly once",
        "runs": f"at most {MAX_PROMOTION_RUNS} promotion runs",
        "database_is_locked": '0 "database is locked"',
        "tracebacks": "0 tracebacks",
        "mints": f"at most {MAX_MINTS} mint",
        "401s": "0 x 401",
    }


def target_checks(
    backend: str, burst: dict[str, Any], reference_wall: float | None = None
) -> dict[str, bool | None] | None:
    """Each of the issue's targets (``target_labels``) this burst is held to: True met, False
    missed, None not measured (a failed burst). None: no target for this backend and size. The
    replicas' wall is held to a multiple of ``reference_wall``, the PostgreSQL burst's."""
    if backend not in STACKS or burst.get("size") != TARGET_SIZE:
        return None
    limit = WALL_TARGET_SECONDS.get(backend)
    if backend == "replicas":
        limit = None if reference_wall is None else reference_wall * REPLICA_WALL_RATIO
    if "error" in burst:
        return dict.fromkeys(target_labels(backend), None)

    def at_most(key: str, bound: float) -> bool | None:
        number = burst.get(key)
        return None if number is None else number <= bound

    wall = burst.get("wall_seconds")  # None: not every vendor was managed
    return {
        "wall": None if limit is None else wall is not None and wall <= limit,
        "once": burst.get("vendors_managed_twice") == 0 and burst.get("vendors_not_managed") == 0,
        "runs": at_most("promote_runs", MAX_PROMOTION_RUNS),
        "database_is_locked": at_most("database_is_locked", 0),
        "tracebacks": at_most("tracebacks", 0),
        "mints": at_most("mints", MAX_MINTS),
        "401s": at_most("401s", 0),
    }


def targets_met(checks: dict[str, bool | None] | None) -> bool | None:
    """All met: True; one missed: False; otherwise (none, or one not measured): None."""
    if not checks:
        return None
    if any(ok is False for ok in checks.values()):
        return False
    return None if any(ok is None for ok in checks.values()) else True


def targets_missed(backend: str, checks: dict[str, bool | None] | None) -> list[str]:
    """The targets ``checks`` shows missed, as the issue words them."""
    labels = target_labels(backend)
    return [labels[key] for key, ok in (checks or {}).items() if ok is False]


LOG_NEEDLES = {
    "database_is_locked_errors": "(sqlite3.OperationalError) database is locked",
    "tracebacks": "Traceback (most recent call last)",
}


def log_counts(logs_dir: Path) -> dict[str, int]:
    """Signs of trouble in the stack's logs (Prefect logs its clients' retries only at DEBUG)."""
    counts = dict.fromkeys(LOG_NEEDLES, 0)
    for path in sorted(logs_dir.glob("*.log")):
        text = path.read_text(errors="replace")
        for key, needle in LOG_NEEDLES.items():
            counts[key] += text.count(needle)
    return counts


def counts_since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What the logs gained between two ``log_counts`` (the stack keeps appending)."""
    return {key: after.get(key, 0) - before.get(key, 0) for key in after}


def traceback_errors(logs_dir: Path) -> Counter[str]:
    """The error each traceback in the stack's logs ended with (its first unindented line)."""
    errors: Counter[str] = Counter()
    for path in sorted(logs_dir.glob("*.log")):
        lines = path.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines):
            if LOG_NEEDLES["tracebacks"] not in line:
                continue
            error = next(
                (ln for ln in lines[index + 1 :] if ln.strip() and not ln[0].isspace()), "?"
            )
            errors[error.strip()[:200]] += 1
    return errors


def watch_burst(
    api: Api,
    control: Any,
    vendors: set[str],
    bridge_id: str,
    earlier: set[str],
    started: float,
    timeout: float,
) -> tuple[list[dict[str, Any]], float | None, bool]:
    """Poll until the burst is over: every vendor managed and everything quiet for
    ``SETTLE_SECONDS``, or quiet for ``GIVE_UP_QUIET_SECONDS`` with vendors still not managed,
    or ``timeout``. Returns the burst's promotion runs (not those in ``earlier``), the seconds
    until every vendor was managed (None: not all were) and whether it timed out."""
    runs: list[dict[str, Any]] = []
    managed_at: float | None = None
    quiet_since: float | None = None
    next_prefect_read = 0.0
    while True:
        now = time.monotonic() - started
        managed = control.stats()["write_counts"]["add_to_managed"]
        if managed_at is None and all(managed.get(vendor) for vendor in vendors):
            managed_at = time.monotonic() - started
        if time.monotonic() >= next_prefect_read:
            next_prefect_read = time.monotonic() + PREFECT_POLL_SECONDS
            runs = [run for run in api.flow_runs(PROMOTE) if run["id"] not in earlier]
            # the rest only matters once every promotion there is has ended
            quiet = all_final(runs) and state_type(api.flow_run(bridge_id)) in FINAL
            if not (quiet and all_final(api.flow_runs(RECOVER))):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            still = 0.0 if quiet_since is None else now - quiet_since
            if still >= (GIVE_UP_QUIET_SECONDS if managed_at is None else SETTLE_SECONDS):
                return runs, managed_at, False
        if now > timeout:
            return runs, managed_at, True
        time.sleep(POLL_SECONDS)


def drive(stack: Any, api: Api, control: Any, size: int, timeout: float) -> dict[str, Any]:
    """Inject one burst into a running stack and watch it to its end; the bridge's schedule and
    the promote deployment's catch-up off, so the one bridge run and the trigger carry it."""
    api.pause_schedules(BRIDGE)
    api.pause_schedules(PROMOTE, slug=CATCH_UP)
    wait_until(
        "earlier bridge and promotion runs to end",
        lambda: all_final(api.flow_runs(BRIDGE)) and all_final(api.flow_runs(PROMOTE)),
        timeout=300,
        interval=0.5,
    )
    earlier = {str(run["id"]) for run in api.flow_runs(PROMOTE)}
    earlier_recoveries = len(api.flow_runs(RECOVER))
    logs_before = log_counts(stack.logs_dir)
    errors_before = traceback_errors(stack.logs_dir)
    before = control.stats()
    start_date = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).isoformat()
    vendors = [str(control.inject("vendor_discovered")["id"]) for _ in range(size)]
    if len(set(vendors)) != size:
        raise RuntimeError(f"the sandbox discovered {len(set(vendors))} vendors, not {size}")
    with ForeignCpu(database_name(stack.options.database_url)) as foreign:
        started = time.monotonic()
        bridge = api.run_deployment(BRIDGE, {"start_date": start_date, "reset_checkpoint": True})
        runs, managed_at, timed_out = watch_burst(
            api, control, set(vendors), str(bridge["id"]), earlier, started, timeout
        )
    after = control.stats()
    mints = [stats["token_mints"].get(DEMO_MANAGE.client_id, 0) for stats in (before, after)]
    result = summarize_burst(
        size,
        vendors,
        runs,
        after["write_counts"]["add_to_managed"],
        wall_seconds=managed_at,
        timed_out=timed_out,
        mints=mints[1] - mints[0],
        unauthorized=after["unauthorized"] - before["unauthorized"],
        logs=counts_since(logs_before, log_counts(stack.logs_dir)),
    )
    return result | {
        "traceback_errors": dict(traceback_errors(stack.logs_dir) - errors_before),
        "bridge_state": state_type(api.flow_run(str(bridge["id"]))),
        "recovery_runs": len(api.flow_runs(RECOVER)) - earlier_recoveries,
        "runs": [
            {
                "name": run.get("name"),
                "state": state_type(run),
                "message": ((run.get("state") or {}).get("message") or "")[:300],
                "run_count": run.get("run_count"),
            }
            for run in runs[:20]
        ],
        "foreign_cpu": foreign.report(),
    }


def bursts_on(backend: str, sizes: list[int], timeout: float) -> dict[str, Any]:
    """One stack on ``backend``, its bursts one after the other (a failed burst is a result)."""
    from deployments.stack import LocalStack, StackOptions
    from sandbox.control import SandboxControl

    workers = WORKERS[backend]
    replicas = backend == "replicas"
    state_dir = Path(tempfile.mkdtemp(prefix=f"bench-burst-{backend}-"))
    side: dict[str, Any] = {"backend": backend, "workers": workers, "bursts": []}
    redis = fresh_redis() if replicas else contextlib.nullcontext(None)
    with fresh_database("postgresql" if replicas else backend) as database_url, redis as redis_url:
        options: dict[str, Any] = {"prefect_port": None, "sandbox_port": None, "ui": False}
        options |= {"database_url": database_url, "redis_url": redis_url, "workers": workers}
        options |= {"worker_poll_seconds": 1.0, "startup_timeout": 180.0}
        options["api_replicas"] = API_REPLICAS if replicas else 1
        stack = LocalStack(StackOptions(state_dir=state_dir, **options))
        began = time.monotonic()
        with (
            stack,
            contextlib.closing(Api(stack)) as api,
            contextlib.closing(SandboxControl(stack.sandbox_url, timeout=60)) as control,
        ):
            side["stack_startup_seconds"] = round(time.monotonic() - began, 1)
            for size in sizes:
                print(f"bench.burst: {backend}, {size} ...", file=sys.stderr, flush=True)
                try:
                    burst = drive(stack, api, control, size, timeout)
                except Exception:
                    burst = {"size": size, "error": traceback.format_exc()[-4000:]}
                burst["targets"] = target_checks(backend, burst)
                side["bursts"].append(burst)
                wall, met = burst.get("wall_seconds"), targets_met(burst["targets"])
                print(f"bench.burst: {wall} s, targets met: {met}", file=sys.stderr)
    return side


def judge_replicas(results: dict[str, Any]) -> None:
    """The replicas' burst of ``TARGET_SIZE`` against the PostgreSQL one of the same run."""
    bursts = (results.get("postgresql") or {}).get("bursts") or []
    reference = next((b.get("wall_seconds") for b in bursts if b.get("size") == TARGET_SIZE), None)
    for burst in (results.get("replicas") or {}).get("bursts") or []:
        burst["targets"] = target_checks("replicas", burst, reference)
        if burst.get("size") == TARGET_SIZE and reference and burst.get("wall_seconds"):
            burst["wall_vs_postgresql"] = round(burst["wall_seconds"] / reference, 2)


def run(
    sizes: list[int] | None = None, backends: list[str] | None = None, timeout: float = 600.0
) -> dict[str, Any]:
    """Per stack its bursts; ``timeout``: per burst, from the bridge run's creation."""
    sizes = sorted(sizes or SIZES)
    backends = list(backends or STACKS)
    results: dict[str, Any] = {}
    for backend in backends:
        try:
            results[backend] = bursts_on(backend, sizes, timeout)
        except Exception:  # a backend that fails is a result, and the other still runs
            results[backend] = {"backend": backend, "error": traceback.format_exc()[-4000:]}
    judge_replicas(results)
    config = {"sizes": sizes, "workers": {b: WORKERS[b] for b in backends}, "backends": backends}
    config |= {"timeout_seconds": timeout, "settle_seconds": SETTLE_SECONDS}
    return {"config": config, "backends": results}
