"""The 40-event burst through the whole stack, on SQLite and on PostgreSQL in the same run.

    uv run --no-sync python -m bench.burst [--events 40] [--backends sqlite postgresql]
        [--timeout 1800]

Per backend: the stack ``make serve`` runs (``deployments.stack.LocalStack``: sandbox, Prefect
server, bootstrap, ``prefect deploy --all``, three workers that share nothing but the Prefect
API, the token on the Prefect server) with the same options, except the server's database
(SQLite in the state directory, or a fresh PostgreSQL database dropped afterwards). The sandbox
discovers ``--events`` vendors at once; one run of ``bridge-event-log`` turns their audit
entries into events; each event's trigger starts a ``Promote discovered vendors`` run, which the
workers run (at most the work pool's limit at a time). As tests/deployments/test_scale_out.py,
without killing a worker.

Measured: wall time from the bridge run's creation until every promotion run is final (and no crash
recovery is under way, held for a few seconds so a crash that recovery would restart is not taken
for the end). An event whose run Prefect's trigger service never created (SQLite under a burst
drops some) is sent again by the stack's scheduled ``redeliver-missed-events`` (every 5 minutes,
for events the trigger service has passed, or at least 15 minutes old), so the burst waits for
those runs too, until the redelivery gives up on an event or the timeout. Lost = promotion runs
that did not end Completed plus discovered vendors that did not end managed (such as a vendor whose
run was never created); token mints and 401s during the burst; runs started again after a crash;
events resent by the redelivery. The bridge's 3-minute schedule is switched off during the burst
(both backends), so the one bridge run started here is the one that carries the burst.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import BACKENDS, ForeignCpu, database_name, fresh_database
from deployments.processes import wait_until

BRIDGE = "bridge-event-log/every-3-minutes"
PROMOTE = "Promote discovered vendors/promote-discovered-vendors"
RECOVER = "recover-crashed-run/recover-crashed-runs"
RESENT = "compliance.redelivery.sent"
GAVE_UP = "compliance.redelivery.gave-up"
WORKERS = 3
EVENTS = 40
FINAL = frozenset({"COMPLETED", "FAILED", "CRASHED", "CANCELLED"})
#: every promotion final and no recovery under way for this long: the burst is over (a crashed
#: run's recovery starts within a second or two of the crash)
SETTLE_SECONDS = 15.0
#: while runs are missing, how often to look for the redelivery giving up (a read of events)
GAVE_UP_POLL_SECONDS = 15.0
DEFAULT_TIMEOUT_SECONDS = 1800.0
POLL_SECONDS = 1.0
#: a read of the Prefect API is given this long, and tried again until READ_PATIENCE_SECONDS
READ_TIMEOUT_SECONDS = 60.0
READ_PATIENCE_SECONDS = 600.0
DEMO_CLIENT_ID = "demo-manage"


# --------------------------------------------------------------------------- Prefect API
class Api:
    """The few Prefect REST calls the burst needs, on a running ``LocalStack``.

    Reads (the poll) go through a client of their own that rides out a server that stalls or
    answers 503 (a SQLite server under a burst does both) and records how often it did; writes
    go through ``LocalStack.request`` (503s retried; a timed-out write is an error, since it may
    have landed).
    """

    def __init__(self, stack: Any) -> None:
        import httpx

        self.stack = stack
        self._ids: dict[str, str] = {}
        self._http = httpx.Client(base_url=stack.api_url, timeout=READ_TIMEOUT_SECONDS)
        self.read_timeouts = 0
        self.read_503s = 0
        self.slowest_read_seconds = 0.0

    def close(self) -> None:
        self._http.close()

    def read(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        deadline = time.monotonic() + READ_PATIENCE_SECONDS
        while True:
            began = time.monotonic()
            try:
                response = self._http.request(method, path, json=body)
            except httpx.TimeoutException:
                self.read_timeouts += 1
                if time.monotonic() > deadline:
                    raise
                continue
            self.slowest_read_seconds = max(self.slowest_read_seconds, time.monotonic() - began)
            if response.status_code == 503 and time.monotonic() < deadline:
                self.read_503s += 1
                time.sleep(1.0)
                continue
            response.raise_for_status()
            return response.json()

    def deployment(self, name: str) -> dict[str, Any]:
        return dict(self.read("GET", f"/deployments/name/{name}"))

    def deployment_id(self, name: str) -> str:
        if name not in self._ids:
            self._ids[name] = str(self.deployment(name)["id"])
        return self._ids[name]

    def run_deployment(self, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
        path = f"/deployments/{self.deployment_id(name)}/create_flow_run"
        return dict(self.stack.request("POST", path, {"parameters": parameters}).json())

    def flow_runs(self, name: str) -> list[dict[str, Any]]:
        query = {
            "flow_runs": {"deployment_id": {"any_": [self.deployment_id(name)]}},
            "limit": 200,
        }
        return list(self.read("POST", "/flow_runs/filter", query))

    def flow_run(self, flow_run_id: str) -> dict[str, Any]:
        return dict(self.read("GET", f"/flow_runs/{flow_run_id}"))

    def events(self, name: str, since: str) -> list[dict[str, Any]]:
        """Every stored event called ``name`` that occurred since ``since`` (ISO 8601)."""
        body = {"filter": {"occurred": {"since": since}, "event": {"name": [name]}}, "limit": 50}
        page = self.read("POST", "/events/filter", body)
        events = list(page["events"])
        while page.get("next_page"):
            page = self.read("GET", str(page["next_page"]))
            events.extend(page["events"])
        return events

    def pause_schedules(self, name: str) -> int:
        """Switch the deployment's schedules off (Prefect deletes the runs they had queued)."""
        deployment = self.deployment(name)
        paused = 0
        for schedule in deployment.get("schedules") or []:
            if schedule.get("active"):
                path = f"/deployments/{deployment['id']}/schedules/{schedule['id']}"
                self.stack.request("PATCH", path, {"active": False})
                paused += 1
        return paused


def state_type(run: dict[str, Any]) -> str:
    return str((run.get("state") or {}).get("type") or "NONE")


def all_final(runs: list[dict[str, Any]]) -> bool:
    return all(state_type(run) in FINAL for run in runs)


# --------------------------------------------------------------------------- one burst
def summarize_burst(
    events: int,
    vendors: list[str],
    runs: list[dict[str, Any]],
    managed_calls: dict[str, int],
    *,
    wall_seconds: float | None,
    timed_out: bool,
    mints: int,
    redelivery_gave_up: bool = False,
    unauthorized: int,
) -> dict[str, Any]:
    """The burst's outcome from the promotion runs and the sandbox's promotion calls."""
    states = Counter(state_type(run) for run in runs)
    by_vendor: Counter[str] = Counter()
    for run in runs:
        for vendor in (run.get("parameters") or {}).get("discovered_vendor_ids") or []:
            by_vendor[vendor] += 1
    not_completed = sum(count for state, count in states.items() if state != "COMPLETED")
    unmanaged = sorted(vendor for vendor in vendors if not managed_calls.get(vendor))
    return {
        "events": events,
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 1),
        "timed_out": timed_out,
        "redelivery_gave_up": redelivery_gave_up,
        "promote_runs": len(runs),
        "promote_states": dict(sorted(states.items())),
        "runs_not_completed": not_completed,
        "vendors_not_managed": len(unmanaged),
        "lost": not_completed + len(unmanaged),
        "vendors_without_a_run": sum(1 for vendor in vendors if not by_vendor[vendor]),
        "vendors_with_two_runs_or_more": sum(1 for count in by_vendor.values() if count > 1),
        "vendors_promoted_twice_or_more": sum(
            1 for vendor in vendors if managed_calls.get(vendor, 0) > 1
        ),
        "runs_started_again": sum(1 for run in runs if (run.get("run_count") or 0) > 1),
        "mints": mints,
        "401s": unauthorized,
    }


def log_counts(logs_dir: Path) -> dict[str, int]:
    """Signs of trouble in the stack's logs (server, workers and their flow runs). Prefect logs
    its clients' retries of a busy server only at DEBUG, so these count what surfaced."""
    needles = {
        "database_is_locked_errors": "(sqlite3.OperationalError) database is locked",
        "tracebacks": "Traceback (most recent call last)",
    }
    counts = dict.fromkeys(needles, 0)
    for path in sorted(logs_dir.glob("*.log")):
        text = path.read_text(errors="replace")
        for key, needle in needles.items():
            counts[key] += text.count(needle)
    return counts


def drive(stack: Any, events: int, timeout: float) -> dict[str, Any]:
    """Inject the burst into a running stack and watch it to its end."""
    from sandbox.control import SandboxControl

    api = Api(stack)
    control = SandboxControl(stack.sandbox_url, timeout=60)
    try:
        paused = api.pause_schedules(BRIDGE)
        wait_until(
            "earlier bridge runs to end",
            lambda: all_final(api.flow_runs(BRIDGE)),
            timeout=300,
            interval=0.5,
        )
        before = control.stats()
        start_date = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)).isoformat()
        vendors = [str(control.inject("vendor_discovered")["id"]) for _ in range(events)]
        if len(set(vendors)) != events:
            raise RuntimeError(f"the sandbox discovered {len(set(vendors))} vendors, not {events}")
        with ForeignCpu(database_name(stack.options.database_url)) as foreign:
            started = time.monotonic()
            bridge = api.run_deployment(
                BRIDGE, {"start_date": start_date, "reset_checkpoint": True}
            )
            timeline: list[dict[str, Any]] = []
            milestones: dict[str, float] = {}
            settled_since: float | None = None
            timed_out = gave_up = False
            runs: list[dict[str, Any]] = []
            gave_up_checked = 0.0
            while True:
                runs = api.flow_runs(PROMOTE)
                now = round(time.monotonic() - started, 1)
                # the rest only matters once every promotion there is has ended: one read a
                # second while the burst runs (the poll is load on the server too, the same on
                # both backends)
                quiet = all_final(runs)
                if quiet:
                    quiet = state_type(api.flow_run(str(bridge["id"]))) in FINAL
                if quiet:
                    quiet = all_final(api.flow_runs(RECOVER))
                counts = dict(sorted(Counter(state_type(run) for run in runs).items()))
                if not timeline or timeline[-1]["states"] != counts:
                    timeline.append({"t": now, "states": counts})
                if runs:
                    milestones.setdefault("first_promote_run_created", now)
                if len(runs) >= events:
                    milestones.setdefault("all_promote_runs_created", now)
                if any(state_type(run) == "COMPLETED" for run in runs):
                    milestones.setdefault("first_promote_run_completed", now)
                if quiet:
                    settled_since = now if settled_since is None else settled_since
                    if len(runs) >= events and now - settled_since >= SETTLE_SECONDS:
                        break
                    # runs missing: the redelivery resends their events, or gives up on them
                    if len(runs) < events and now - gave_up_checked >= GAVE_UP_POLL_SECONDS:
                        gave_up_checked = now
                        if api.events(GAVE_UP, start_date) and now - settled_since >= 60:
                            gave_up = True
                            break
                else:
                    settled_since = None
                if now > timeout:
                    timed_out = True
                    break
                time.sleep(POLL_SECONDS)
        after = control.stats()
        bridge_run = api.flow_run(str(bridge["id"]))
        managed_calls = after["write_counts"]["add_to_managed"]
        result = summarize_burst(
            events,
            vendors,
            runs,
            managed_calls,
            wall_seconds=None if timed_out else settled_since,
            timed_out=timed_out,
            redelivery_gave_up=gave_up,
            mints=after["token_mints"].get(DEMO_CLIENT_ID, 0)
            - before["token_mints"].get(DEMO_CLIENT_ID, 0),
            unauthorized=after["unauthorized"] - before["unauthorized"],
        )
        resent = api.events(RESENT, start_date)
        result.update(
            {
                "redelivery": {
                    "events_resent": len({e["resource"]["prefect.resource.id"] for e in resent}),
                    "resends": len(resent),
                    "events_given_up": len(api.events(GAVE_UP, start_date)),
                },
                "bridge_state": state_type(bridge_run),
                "bridge_schedules_paused": paused,
                "recovery_runs": len(api.flow_runs(RECOVER)),
                "poll": {
                    "read_timeouts": api.read_timeouts,
                    "read_503s": api.read_503s,
                    "slowest_read_seconds": round(api.slowest_read_seconds, 1),
                },
                "milestones_seconds": milestones,
                "timeline": timeline,
                "lost_runs": [
                    {
                        "name": run.get("name"),
                        "state": state_type(run),
                        "message": ((run.get("state") or {}).get("message") or "")[:300],
                        "run_count": run.get("run_count"),
                    }
                    for run in runs
                    if state_type(run) != "COMPLETED"
                ][:20],
                "foreign_cpu": foreign.report(),
            }
        )
        return result
    finally:
        control.close()
        api.close()


def burst_once(backend: str, events: int, timeout: float) -> dict[str, Any]:
    """One stack on ``backend``, one burst; the stack stopped and its database dropped after."""
    from deployments.stack import LocalStack, StackOptions

    state_dir = Path(tempfile.mkdtemp(prefix=f"bench-burst-{backend}-"))
    with fresh_database(backend) as database_url:
        options = StackOptions(
            state_dir=state_dir,
            prefect_port=None,
            sandbox_port=None,
            ui=False,
            worker_poll_seconds=1.0,
            startup_timeout=180.0,
            database_url=database_url,
            workers=WORKERS,
        )
        stack = LocalStack(options)
        began = time.monotonic()
        with stack:
            startup = round(time.monotonic() - began, 1)
            result = drive(stack, events, timeout)
            result["stack_startup_seconds"] = startup
            result["stack_timings_seconds"] = {k: round(v, 1) for k, v in stack.timings.items()}
        result["log_counts"] = log_counts(stack.logs_dir)
    result["backend"] = backend
    result["database"] = "SQLite (state dir)" if database_url is None else "PostgreSQL (fresh)"
    return result


def run(
    events: int = EVENTS,
    backends: list[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    backends = list(backends or BACKENDS)
    results: dict[str, Any] = {}
    for backend in backends:
        print(f"bench.burst: {backend} ...", file=sys.stderr, flush=True)  # noqa: T201
        try:
            results[backend] = burst_once(backend, events, timeout)
        except Exception:  # a backend that fails is a result, and the other still runs
            results[backend] = {"backend": backend, "error": traceback.format_exc()[-4000:]}
        print(json.dumps(results[backend], default=str), file=sys.stderr, flush=True)  # noqa: T201
    return {
        "config": {
            "events": events,
            "workers": WORKERS,
            "worker_poll_seconds": 1.0,
            "timeout_seconds": timeout,
            "settle_seconds": SETTLE_SECONDS,
            "backends": backends,
        },
        "backends": results,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=EVENTS)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS)
    args = parser.parse_args(argv)
    from bench.common import use_bytecode_cache

    use_bytecode_cache()
    print(json.dumps(run(args.events, args.backends, args.timeout), indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
