"""The benchmark's check that it had the machine to itself (bench.common.ForeignCpu)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench.common import ForeignCpu
from bench.report import foreign_cpu_note

#: burns this many seconds of CPU, then exits
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass\n"


def test_a_child_of_the_benchmark_is_its_own_work_counted_once() -> None:
    # (foreign time is the machine's busy time minus this, so only this is checked here: what
    # other programs on a shared machine do meanwhile is not the test's to control)
    with ForeignCpu() as foreign:
        subprocess.run([sys.executable, "-c", BURN.format(seconds=1.0)], check=True)
    assert 0.9 <= foreign.ours_seconds < 1.5


def test_a_process_outside_the_benchmark_is_foreign(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    # the shell starts the burner in the background and exits at once: the burner is
    # re-parented away from this process tree, like any other program on the machine
    script = f'{sys.executable} -c "$BURN" & echo $! > {pid_file}'
    with ForeignCpu() as foreign:
        subprocess.run(
            ["sh", "-c", script], check=True, env={**os.environ, "BURN": BURN.format(seconds=1.5)}
        )
        burner = int(pid_file.read_text())
        deadline = time.monotonic() + 60
        while running(burner) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not running(burner)
    assert foreign.seconds >= 1.2
    assert foreign.ours_seconds < 1.0


def test_results_flag_a_busy_machine() -> None:
    idle = foreign_cpu_note({"seconds": 1.0, "share_of_cores": 0.01, "ours_seconds": 80.0})
    busy = foreign_cpu_note({"seconds": 30.0, "share_of_cores": 0.2, "ours_seconds": 80.0})
    assert "1.0%" in idle and "busy" not in idle
    assert "20.0%" in busy and "The machine was busy" in busy
    assert foreign_cpu_note(None) == ""


def running(pid: int) -> bool:
    """Alive and not a zombie (an init that does not reap would leave one)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_postgresql_serving_the_benchmark_is_not_foreign() -> None:
    # no backend serves a database of this name: nothing counted, and the report says so
    with ForeignCpu(database="compliance_flows_bench_no_such_database") as foreign:
        pass
    assert foreign.database_seconds == 0.0
    assert foreign.report()["database_seconds"] == 0.0
    with ForeignCpu() as plain:
        pass
    assert "database_seconds" not in plain.report()
    line = foreign_cpu_note(
        {"seconds": 1.0, "share_of_cores": 0.01, "ours_seconds": 80.0, "database_seconds": 4.0}
    )
    assert "PostgreSQL serving its database 4.0 s" in line
