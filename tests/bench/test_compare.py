"""SQLite vs PostgreSQL in RESULTS.md (bench/compare.py) and the burst's own bookkeeping
(bench/burst.py): a target is met only on numbers that show it, never on a missing one."""

from __future__ import annotations

from typing import Any

from bench.__main__ import render
from bench.burst import summarize_burst
from bench.compare import MET, MISSED, UNKNOWN, comparison_md, comparison_rows

HEADER = {
    "date": "2026-01-01 00:00 UTC",
    "cpus": 2,
    "ram_gb": 8.0,
    "python": "3.11",
    "platform": "Linux",
    "prefect": "3.8",
    "httpx": "0.28",
    "load_average": [0.1, 0.1, 0.1],
    "bytecode_disabled_by_env": False,
}


def burst_side(wall: float | None, lost: int = 0, timed_out: bool = False) -> dict[str, Any]:
    return {
        "events": 40,
        "promote_runs": 40,
        "wall_seconds": wall,
        "timed_out": timed_out,
        "lost": lost,
        "promote_states": {"COMPLETED": 40 - lost, "CRASHED": lost} if lost else {"COMPLETED": 40},
        "vendors_not_managed": 0,
        "runs_started_again": 0,
        "recovery_runs": 0,
        "mints": 1,
        "401s": 0,
        "milestones_seconds": {"first_promote_run_created": 3.0},
        "bridge_state": "COMPLETED",
        "stack_startup_seconds": 60.0,
        "foreign_cpu": {"seconds": 0.1, "share_of_cores": 0.001, "ours_seconds": 50.0},
        "lost_runs": [],
    }


def burst(sqlite: dict[str, Any], postgresql: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": {
            "events": 40,
            "workers": 3,
            "timeout_seconds": 1800,
            "settle_seconds": 15,
            "backends": ["sqlite", "postgresql"],
        },
        "backends": {"sqlite": sqlite, "postgresql": postgresql},
    }


def token_row(
    backend: str | None, store: str | None, p99: float, lost: int = 0, task_call_p99: float = 0.0
) -> dict[str, Any]:
    """A row of bench/token_contention.py: ``p99`` is the token wait (inside the broker)."""
    return {
        "mode": "shared" if backend else "naive",
        "backend": backend,
        "store": store,
        "runs": 40,
        "lost": lost,
        "wall_seconds": 30.0,
        "mints": 1,
        "token_calls": 1,
        "401s": 0,
        "429s": 0,
        "max_token_calls_per_60s": 1,
        "failed_calls": 0,
        "wait_p50_ms": 10.0,
        "wait_p99_ms": p99,
        "wait_max_ms": p99,
        "waits_over_1s": 0,
        "task_call_p50_ms": 50.0,
        "task_call_p99_ms": task_call_p99 or p99 + 100.0,
        "task_call_max_ms": task_call_p99 or p99 + 100.0,
        "task_calls_over_1s": 0,
        "lost_reasons": [],
    }


def tokens(*rows: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": "python -m bench.token_contention",
        "returncode": 0,
        "rows": list(rows),
        "stdout": "8 processes x 5 concurrent runs x 3 calls\n",
        "stderr": "",
        "wall_seconds": 100.0,
    }


def verdicts(results: dict[str, Any]) -> dict[str, str]:
    return {row["measure"]: row["verdict"] for row in comparison_rows(results) if row["verdict"]}


def find(rows: dict[str, str], start: str) -> str:
    return next(verdict for measure, verdict in rows.items() if measure.startswith(start))


def test_each_target_is_met_or_missed_on_its_numbers() -> None:
    results = {
        "burst": burst(burst_side(200.0), burst_side(40.0)),
        "token_contention": tokens(
            token_row("sqlite", "local", 65000.0),
            token_row("postgresql", "local", 800.0),
            token_row(None, None, 300.0),
        ),
    }
    rows = verdicts(results)
    assert find(rows, "burst of 40") == MET  # 5x
    assert find(rows, "burst: lost") == MET
    assert find(rows, "token contention (local store): token-wait p99") == MET
    assert find(rows, "token contention (local store): lost") == MET
    assert find(rows, "add-people") == UNKNOWN  # not measured: never "met"

    slower = {"burst": burst(burst_side(100.0, lost=2), burst_side(40.0))}
    rows = verdicts(slower)
    assert find(rows, "burst of 40") == MISSED  # 2.5x
    assert find(rows, "burst: lost") == MISSED


def test_a_failed_or_timed_out_side_is_not_taken_for_a_number() -> None:
    failed = {"burst": burst({"backend": "sqlite", "error": "Traceback"}, burst_side(40.0))}
    rows = verdicts(failed)
    assert find(rows, "burst of 40") == UNKNOWN
    assert find(rows, "burst: lost") == UNKNOWN

    # SQLite did not finish within 1200 s: at least 1200/40 = 30x, so the speed-up is met...
    timed_out = {"burst": burst(burst_side(None, lost=5, timed_out=True), burst_side(40.0))}
    rows = verdicts(timed_out)
    assert find(rows, "burst of 40") == MET
    assert find(rows, "burst: lost") == MISSED
    # ...but a lower bound under 4x proves nothing either way
    slow_pg = {"burst": burst(burst_side(None, timed_out=True), burst_side(600.0))}
    assert find(verdicts(slow_pg), "burst of 40") == UNKNOWN


def test_a_burst_whose_runs_were_never_all_created_is_judged_generously_for_sqlite() -> None:
    def partial(wall: float, created: int) -> dict[str, Any]:
        return burst_side(wall) | {"promote_runs": created, "events": 40, "lost": 40 - created}

    complete = burst_side(40.0) | {"promote_runs": 40, "events": 40}
    # 36 runs in 100 s: even 40 in 100 * 40/36 s would be 2.8x: missed
    assert find(verdicts({"burst": burst(partial(100.0, 36), complete)}), "burst of 40") == MISSED
    # 36 runs in 150 s is 3.75x, 40 in up to 167 s could be 4.2x: cannot say
    assert find(verdicts({"burst": burst(partial(150.0, 36), complete)}), "burst of 40") == UNKNOWN
    assert find(verdicts({"burst": burst(partial(170.0, 36), complete)}), "burst of 40") == MET
    # PostgreSQL itself lost runs: its wall covers less work, so its speed-up proves nothing
    assert find(verdicts({"burst": burst(complete, partial(10.0, 30))}), "burst of 40") == UNKNOWN
    text = render({"burst": burst(partial(100.0, 36), complete)}, HEADER, quick=False)
    assert "100.0 (36 of 40 runs created)" in text


def test_token_wait_target_is_judged_per_store_on_postgresql() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 500.0),
            token_row("postgresql", "local", 900.0),
            token_row("sqlite", "prefect", 500.0),
            token_row("postgresql", "prefect", 1500.0, lost=1),
        )
    }
    rows = verdicts(results)
    assert find(rows, "token contention (local store): token-wait p99") == MET
    assert find(rows, "token contention (prefect store): token-wait p99") == MISSED
    assert find(rows, "token contention (prefect store): lost") == MISSED


def test_token_wait_target_is_judged_on_the_broker_wait_and_the_task_call_is_shown() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 400.0, task_call_p99=2500.0),
            token_row("postgresql", "local", 600.0, task_call_p99=1800.0),
        )
    }
    rows = {row["measure"]: row for row in comparison_rows(results)}
    wait = rows["token contention (local store): token-wait p99 (ms, inside the broker)"]
    assert (wait["postgresql"], wait["verdict"]) == (600.0, MET)
    call = next(row for measure, row in rows.items() if "task call p99" in measure)
    assert (call["sqlite"], call["postgresql"], call["verdict"]) == (2500.0, 1800.0, "")
    text = render(results, HEADER, quick=False)
    assert "token task call p99 ms" in text and "| 600.0 |" in text and "| 1800.0 |" in text


def test_a_row_from_before_the_broker_wait_was_measured_is_not_judged_on_it() -> None:
    old = token_row("postgresql", "local", 800.0)
    for key in ("task_call_p50_ms", "task_call_p99_ms", "task_call_max_ms", "task_calls_over_1s"):
        del old[key]  # its wait_* timed the whole task call
    results = {"token_contention": tokens(token_row("sqlite", "local", 300.0), old)}
    rows = {row["measure"]: row for row in comparison_rows(results)}
    wait = rows["token contention (local store): token-wait p99 (ms, inside the broker)"]
    assert (wait["postgresql"], wait["verdict"]) == (None, UNKNOWN)
    call = next(row for measure, row in rows.items() if "task call p99" in measure)
    assert call["postgresql"] == 800.0  # shown for what it measured


def test_add_people_ratio_target_on_postgresql() -> None:
    def side(ratio: float) -> dict[str, Any]:
        return {"summary": {"marginal_ratio": ratio}}

    met = {"add_people": {"backends": {"sqlite": side(1.2), "postgresql": side(1.08)}}}
    missed = {"add_people": {"backends": {"sqlite": side(1.0), "postgresql": side(1.12)}}}
    assert find(verdicts(met), "add-people") == MET
    assert find(verdicts(missed), "add-people") == MISSED


def test_results_md_opens_with_the_comparison_and_keeps_every_section() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 65000.0),
            token_row("postgresql", "local", 800.0),
            token_row(None, None, 300.0),
        ),
        "burst": burst(burst_side(200.0), {"backend": "postgresql", "error": "Traceback: boom"}),
    }
    text = render(results, HEADER, quick=False)
    assert text.index("SQLite vs PostgreSQL") < text.index("## 2. Token contention")
    assert "## 5. Burst" in text and "Traceback: boom" in text
    assert "| shared | PostgreSQL | local | 40 | 0 |" in text
    summary = comparison_md(results, 0.05)
    assert any("Targets:" in line for line in summary)


def test_burst_counts_runs_not_completed_and_vendors_not_managed() -> None:
    vendors = ["v1", "v2", "v3"]
    runs = [
        {"state": {"type": "COMPLETED"}, "parameters": {"discovered_vendor_ids": ["v1"]}},
        {
            "state": {"type": "CRASHED"},
            "parameters": {"discovered_vendor_ids": ["v2"]},
            "run_count": 2,
        },
    ]
    result = summarize_burst(
        3,
        vendors,
        runs,
        {"v1": 1, "v2": 2},
        wall_seconds=12.34,
        timed_out=False,
        mints=1,
        unauthorized=0,
    )
    assert result["runs_not_completed"] == 1  # v2's run crashed (the vendor was managed anyway)
    assert result["vendors_not_managed"] == 1  # v3 never got a run
    assert result["lost"] == 2
    assert result["vendors_without_a_run"] == 1
    assert result["vendors_promoted_twice_or_more"] == 1
    assert result["runs_started_again"] == 1
    assert result["wall_seconds"] == 12.3


def test_token_rows_count_lost_runs_and_the_waits_of_the_runs_that_got_a_token() -> None:
    from bench.token_contention import summarize

    stats = {
        "token_mints": {"demo-manage": 1},
        "token_requests": {"demo-manage": 1},
        "unauthorized": 0,
        "status_counts": {"200": 10},
    }
    reports = [
        {"waits": [0.01, 0.02], "task_calls": [0.1, 0.3], "failures": 0, "runs": 2, "lost": 0},
        {
            "waits": [1.5],
            "task_calls": [1.7],
            "failures": 0,
            "runs": 2,
            "lost": 1,
            "lost_reasons": ["CRASHED: x"],
        },
    ]
    row = summarize("shared", reports, stats, 1, wall_seconds=3.21, backend="sqlite", store="local")
    assert (row["runs"], row["lost"], row["waits_over_1s"]) == (4, 1, 1)
    assert row["wait_p50_ms"] == 20.0 and row["wait_max_ms"] == 1500.0
    assert row["task_call_p50_ms"] == 300.0 and row["task_call_p99_ms"] == 1700.0
    assert row["task_calls_over_1s"] == 1
    naive = summarize("naive", [{"waits": [0.2], "failures": 0, "runs": 1}], stats, 1)
    assert naive["wait_p99_ms"] == 200.0 and naive["task_call_p99_ms"] is None
    assert row["lost_reasons"] == ["CRASHED: x"]
    assert row["wall_seconds"] == 3.2
