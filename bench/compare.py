"""SQLite vs PostgreSQL side by side, from one ``make bench`` run's raw results.

The scale-out targets ("Production stack at scale"): nothing lost on either backend; the
40-event burst at least 4x faster on PostgreSQL than on SQLite; token-wait p99 under 1 s on
PostgreSQL; the add-people marginal ratio at most 1.10 on PostgreSQL. Each row says whether its
target is met, missed, or could not be judged (a side failed or was not measured): a missing
number never counts as met.

The token wait is the time inside the broker's ``get_token`` (bench/token_contention.py); the
token task call (that wait plus Prefect's task-run machinery) has a row of its own. Results
from before the two were told apart measured only the task call, under the name of the wait:
their number is shown as the task call, and the token-wait target is not judged on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

BURST_SPEEDUP_TARGET = 4.0
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


def burst_rows(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not result or "backends" not in result:
        return [_row("burst: wall time (s)", None, None, None, ">= 4x faster", UNKNOWN)]
    sides = {b: result["backends"].get(b) or {} for b in ("sqlite", "postgresql")}
    events = result.get("config", {}).get("events", "?")
    timeout = result.get("config", {}).get("timeout_seconds")

    def wall(side: dict[str, Any]) -> tuple[float | None, str]:
        """(seconds, how far they go): "all" runs, "timeout" (at least that long), or
        "partial" (fewer runs than events were ever created: the wall of those)."""
        if not side or "error" in side:
            return None, "failed"
        if side.get("timed_out"):
            return timeout, "timeout"
        if (side.get("promote_runs") or 0) < (side.get("events") or 0):
            return side.get("wall_seconds"), "partial"
        return side.get("wall_seconds"), "all"

    s_side, p_side = sides["sqlite"], sides["postgresql"]
    (s_wall, s_kind), (p_wall, p_kind) = wall(s_side), wall(p_side)
    speedup = _ratio(s_wall, p_wall)
    speed_verdict = UNKNOWN
    if speedup is not None and p_kind == "all":
        if speedup >= BURST_SPEEDUP_TARGET:
            speed_verdict = MET  # SQLite with every run (or more time) could only be slower
        elif s_kind == "all":
            speed_verdict = MISSED
        elif s_kind == "partial":
            # the most SQLite's missing runs could add: their share of its wall time
            created = s_side.get("promote_runs") or 1
            generous = speedup * (s_side.get("events") or created) / created
            speed_verdict = MISSED if generous < BURST_SPEEDUP_TARGET else UNKNOWN

    def show_wall(value: float | None, kind: str, side: dict[str, Any]) -> Any:
        if kind == "failed":
            return "failed" if side else None
        if kind == "timeout":
            return f">= {value} (timed out)"
        if kind == "partial":
            return f"{value} ({side.get('promote_runs')} of {side.get('events')} runs created)"
        return value

    ratio_shown: Any = speedup
    if speedup is not None and s_kind == "timeout":
        ratio_shown = f">= {speedup}"

    def lost(side: dict[str, Any]) -> Any:
        return side.get("lost") if side and "error" not in side else None

    def tokens(side: dict[str, Any]) -> Any:
        if not side or "error" in side:
            return None
        return f"{side.get('mints')} / {side.get('401s')}"

    return [
        _row(
            f"burst of {events}: wall time, bridge run created -> all promotions final (s)",
            show_wall(s_wall, s_kind, s_side),
            show_wall(p_wall, p_kind, p_side),
            ratio_shown,
            f"PostgreSQL >= {BURST_SPEEDUP_TARGET:g}x faster",
            speed_verdict,
        ),
        _row(
            "burst: lost (runs not Completed + vendors not managed)",
            lost(sides["sqlite"]),
            lost(sides["postgresql"]),
            None,
            "0 on both",
            _zero_on_both(lost(sides["sqlite"]), lost(sides["postgresql"])),
        ),
        _row(
            "burst: token mints / 401s",
            tokens(sides["sqlite"]),
            tokens(sides["postgresql"]),
        ),
    ]


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
        share = (side.get("foreign_cpu") or {}).get("share_of_cores")
        if share is not None and share > threshold:
            busy.append(f"burst on {backend} ({share:.0%} of the cores)")
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
        "`prefect server start` with the project's settings (and for the burst the same stack, "
        "3 workers), only the database differs. Ratio = SQLite / PostgreSQL (above 1: "
        "PostgreSQL is faster).",
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
