"""SQLite vs PostgreSQL side by side, from one ``make bench`` run's raw results.

The scale-out targets ("Production stack at scale"): a burst of 400 discovered vendors managed,
each exactly once, within 60 s of the bridge run's start on SQLite (1 worker) and within 45 s on
PostgreSQL (3 workers), in at most 3 promotion runs, with no "database is locked", no traceback,
at most 1 token mint and no 401 (bench/burst.py); nothing lost and token-wait p99 under 1 s on
PostgreSQL in the token contention; the add-people marginal ratio at most 1.10 on PostgreSQL.
Each row says whether its target is met, missed, or could not be judged (a side failed or was
not measured): a missing number never counts as met.

The token wait is the time inside the broker's ``get_token`` (bench/token_contention.py); the
token task call (that wait plus Prefect's task-run machinery) has a row of its own. Results
from before the two were told apart measured only the task call, under the name of the wait:
their number is shown as the task call, and the token-wait target is not judged on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import burst as burst_bench

TOKEN_WAIT_P99_TARGET_MS = 1000.0
ADD_PEOPLE_RATIO_TARGET = 1.10

MET, MISSED, UNKNOWN = "met", "**MISSED**", "not judged"


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 2)


def _verdict(value: float | None, good: Callable[[float], bool]) -> str:
    if value is None:
        return UNKNOWN
    return MET if good(value) else MISSED


def _zero_on_both(sqlite: Any, postgresql: Any) -> str:
    if not isinstance(sqlite, int) or not isinstance(postgresql, int):
        return UNKNOWN
    return MET if sqlite == 0 and postgresql == 0 else MISSED


def _row(
    measure: str,
    sqlite: Any,
    postgresql: Any,
    ratio: Any = None,
    target: str = "",
    verdict: str = "",
) -> dict[str, Any]:
    return {
        "measure": measure,
        "sqlite": sqlite,
        "postgresql": postgresql,
        "ratio": ratio,
        "target": target,
        "verdict": verdict,
    }


def _burst_of(side: dict[str, Any] | None, size: int) -> dict[str, Any] | None:
    """The backend's burst of ``size`` vendors (None: not measured, or measured before a burst
    was coalesced into one run, when a side had no ``bursts``)."""
    if not side or "error" in side:
        return None
    return next((b for b in side.get("bursts") or [] if b.get("size") == size), None)


def _burst_verdict(checks: dict[str, dict[str, bool | None] | None], keys: tuple[str, ...]) -> str:
    """Missed if either backend missed one of ``keys``; met only if both met every one."""
    values = [(checks[b] or {}).get(key) for b in ("sqlite", "postgresql") for key in keys]
    if any(ok is False for ok in values):
        return MISSED
    return MET if all(ok is True for ok in values) else UNKNOWN


def burst_rows(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The burst of ``TARGET_SIZE`` on each backend against the issue's targets."""
    size = burst_bench.TARGET_SIZE
    sides = ((result or {}).get("backends")) or {}
    bursts = {b: _burst_of(sides.get(b), size) for b in ("sqlite", "postgresql")}
    checks = {b: burst_bench.target_checks(b, run) if run else None for b, run in bursts.items()}

    def value(backend: str, *keys: str) -> Any:
        run = bursts[backend]
        if run is None:
            return "failed" if sides.get(backend) and "error" in sides[backend] else None
        if "error" in run:
            return "failed"
        if keys == ("wall_seconds",) and run.get("wall_seconds") is None:
            return "never" if not run.get("timed_out") else "timed out"
        return " / ".join(str(run.get(key)) for key in keys)

    def number(backend: str, key: str) -> float | None:
        run = bursts[backend]
        found = None if run is None or "error" in run else run.get(key)
        return found if isinstance(found, (int, float)) else None

    walls = burst_bench.WALL_TARGET_SECONDS
    rows = [
        (
            f"burst of {size}: wall time, bridge run created -> every vendor managed (s)",
            ("wall_seconds",),
            f"<= {walls['sqlite']:g} s on SQLite, <= {walls['postgresql']:g} s on PostgreSQL",
            ("wall",),
        ),
        (
            f"burst of {size}: promotion runs",
            ("promote_runs",),
            f"<= {burst_bench.MAX_PROMOTION_RUNS} on both",
            ("runs",),
        ),
        (
            f"burst of {size}: vendors managed twice / not managed",
            ("vendors_managed_twice", "vendors_not_managed"),
            "0 / 0 on both",
            ("once",),
        ),
        (
            f'burst of {size}: "database is locked" / tracebacks in the logs',
            ("database_is_locked", "tracebacks"),
            "0 / 0 on both",
            ("database_is_locked", "tracebacks"),
        ),
        (
            f"burst of {size}: token mints / 401s",
            ("mints", "401s"),
            f"<= {burst_bench.MAX_MINTS} / 0 on both",
            ("mints", "401s"),
        ),
    ]
    table = [
        _row(
            measure,
            value("sqlite", *keys),
            value("postgresql", *keys),
            None,
            target,
            _burst_verdict(checks, judged),
        )
        for measure, keys, target, judged in rows
    ]
    table[0]["ratio"] = _ratio(
        number("sqlite", "wall_seconds"), number("postgresql", "wall_seconds")
    )
    return table


def _shared_rows(result: dict[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    rows = (result or {}).get("rows") or []
    return {
        (row.get("backend") or "sqlite", row.get("store") or "local"): row
        for row in rows
        if row.get("mode") == "shared"
    }


def measures_broker_wait(row: dict[str, Any]) -> bool:
    """Whether the row's ``wait_*`` is the wait for the token itself: the broker's for the shared
    rows (older ones timed the whole task call there, and have no ``task_call_*``), the mint's
    for the naive client (no Prefect, no task)."""
    return row.get("mode") == "naive" or "task_call_p99_ms" in row


def token_wait_ms(row: dict[str, Any], stat: str) -> Any:
    """The token wait (inside the broker) ``stat`` ("p50", "p99", "max"); None if not measured."""
    return row.get(f"wait_{stat}_ms") if measures_broker_wait(row) else None


def task_call_ms(row: dict[str, Any], stat: str) -> Any:
    """The whole token task call ``stat``; in an older row, what it called the wait."""
    key = f"task_call_{stat}_ms" if measures_broker_wait(row) else f"wait_{stat}_ms"
    return row.get(key)


def token_rows(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    shared = _shared_rows(result)
    stores = list(dict.fromkeys(store for _, store in shared)) or ["local"]
    rows: list[dict[str, Any]] = []
    for store in stores:
        s = shared.get(("sqlite", store)) or {}
        p = shared.get(("postgresql", store)) or {}
        label = f"token contention ({store} store)"

        def value(row: dict[str, Any], key: str) -> Any:
            return None if not row or "error" in row else row.get(key)

        def wait(row: dict[str, Any], stat: str) -> Any:
            return None if not row or "error" in row else token_wait_ms(row, stat)

        def call(row: dict[str, Any], stat: str) -> Any:
            return None if not row or "error" in row else task_call_ms(row, stat)

        p99 = wait(p, "p99")
        p99_verdict = _verdict(p99, lambda v: v < TOKEN_WAIT_P99_TARGET_MS)
        rows += [
            _row(
                f"{label}: wall time (s)",
                value(s, "wall_seconds"),
                value(p, "wall_seconds"),
                _ratio(value(s, "wall_seconds"), value(p, "wall_seconds")),
            ),
            _row(
                f"{label}: lost runs (not Completed)",
                value(s, "lost"),
                value(p, "lost"),
                None,
                "0 on both",
                _zero_on_both(value(s, "lost"), value(p, "lost")),
            ),
            _row(
                f"{label}: token-wait p50 (ms, inside the broker)",
                wait(s, "p50"),
                wait(p, "p50"),
                _ratio(wait(s, "p50"), wait(p, "p50")),
            ),
            _row(
                f"{label}: token-wait p99 (ms, inside the broker)",
                wait(s, "p99"),
                wait(p, "p99"),
                _ratio(wait(s, "p99"), wait(p, "p99")),
                f"< {TOKEN_WAIT_P99_TARGET_MS:g} ms on PostgreSQL",
                p99_verdict,
            ),
            _row(
                f"{label}: token task call p99 (ms, the wait + Prefect's task run)",
                call(s, "p99"),
                call(p, "p99"),
                _ratio(call(s, "p99"), call(p, "p99")),
            ),
            _row(f"{label}: mints", value(s, "mints"), value(p, "mints")),
        ]
    return rows


def add_people_rows(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    result = result or {}
    # a result from before backends was measured on SQLite only
    backends = result.get("backends") or ({"sqlite": result} if "summary" in result else {})

    def marginal(backend: str) -> float | None:
        side = backends.get(backend) or {}
        if "error" in side:
            return None
        value = (side.get("summary") or {}).get("marginal_ratio")
        return value if isinstance(value, (int, float)) else None

    p = marginal("postgresql")
    verdict = _verdict(p, lambda v: v <= ADD_PEOPLE_RATIO_TARGET)
    return [
        _row(
            "add-people: marginal cost ratio flow / plain",
            marginal("sqlite"),
            p,
            None,
            f"<= {ADD_PEOPLE_RATIO_TARGET:.2f} on PostgreSQL",
            verdict,
        )
    ]


def comparison_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        *burst_rows(results.get("burst")),
        *token_rows(results.get("token_contention")),
        *add_people_rows(results.get("add_people")),
    ]


def busy_sides(results: dict[str, dict[str, Any]], threshold: float) -> list[str]:
    """Measurements during which other processes used more than ``threshold`` of the cores."""
    busy = []
    for backend, side in ((results.get("burst") or {}).get("backends") or {}).items():
        for run in side.get("bursts") or []:
            share = (run.get("foreign_cpu") or {}).get("share_of_cores")
            if share is not None and share > threshold:
                size = run.get("size")
                busy.append(f"burst of {size} on {backend} ({share:.0%} of the cores)")
    for backend, side in ((results.get("add_people") or {}).get("backends") or {}).items():
        share = (side.get("foreign_cpu") or {}).get("share_of_cores")
        if share is not None and share > threshold:
            busy.append(f"add-people on {backend} ({share:.0%} of the cores)")
    return busy


def comparison_md(results: dict[str, dict[str, Any]], busy_threshold: float) -> list[str]:
    rows = comparison_rows(results)
    verdicts = [row["verdict"] for row in rows if row["verdict"]]
    lines = [
        "The same benchmarks on the two databases of the Prefect server, in this run: the same "
        "`prefect server start` with the project's settings (and for the burst the same stack), "
        "only the database differs, and for the burst the workers: 1 on SQLite, 3 on "
        "PostgreSQL. Ratio = SQLite / PostgreSQL (above 1: PostgreSQL is faster).",
        "",
        f"**Targets: {verdicts.count(MET)} met, {verdicts.count(MISSED)} missed, "
        f"{verdicts.count(UNKNOWN)} not judged.**",
        "",
        "| measure | SQLite | PostgreSQL | ratio | target | |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [row["measure"], row["sqlite"], row["postgresql"], row["ratio"]]
        cells += [row["target"], row["verdict"]]
        lines.append("| " + " | ".join("–" if c is None else str(c) for c in cells) + " |")
    busy = busy_sides(results, busy_threshold)
    if busy:
        lines += [
            "",
            "* **Other processes were busy during: " + "; ".join(busy) + "**: those numbers are "
            "slower than on an idle machine.",
        ]
    return lines
