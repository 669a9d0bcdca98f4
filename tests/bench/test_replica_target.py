"""The replicas' burst is judged against the single-server PostgreSQL burst of the same run."""

from __future__ import annotations

from typing import Any

from bench.burst import judge_replicas, target_checks, targets_met
from tests.bench.test_report import burst_run


def sides(postgresql_wall: float | None, replicas_wall: float | None) -> dict[str, Any]:
    return {
        "postgresql": {"bursts": [burst_run(400, postgresql_wall)]},
        "replicas": {"bursts": [burst_run(400, replicas_wall)]},
    }


def test_within_one_and_a_half_times_postgresql_is_met() -> None:
    results = sides(20.0, 29.0)
    judge_replicas(results)
    burst = results["replicas"]["bursts"][0]
    assert targets_met(burst["targets"]) is True and burst["wall_vs_postgresql"] == 1.45


def test_slower_than_that_is_missed() -> None:
    results = sides(20.0, 31.0)
    judge_replicas(results)
    assert results["replicas"]["bursts"][0]["targets"]["wall"] is False


def test_without_a_postgresql_burst_the_wall_is_not_judged() -> None:
    results = sides(None, 25.0)
    judge_replicas(results)
    checks = results["replicas"]["bursts"][0]["targets"]
    assert checks["wall"] is None and targets_met(checks) is None
    assert target_checks("replicas", burst_run(40, 5.0), 10.0) is None  # only a burst of 400
