"""Child processes that can always be stopped: own process group, whole tree, bounded waits.

A worker starts each flow run in a group of its own, so a child's tree is recorded before it is
signalled and whatever outlives the grace period is killed. On Linux a child also gets SIGTERM
if this process dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import ssl
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Self

import httpx
import psutil

from compliance_api.files import UMASK, make_dirs, open_append

#: seconds a child gets to exit after SIGTERM (the worker cancels its flow runs in that time)
GRACE_SECONDS = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child between fork and exec."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ChildProcess:
    """One long-running child (server, worker, sandbox) with its output in a log file."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self._log: IO[bytes] | None = None
        if log_path is not None:
            make_dirs(log_path.parent)
            self._log = open_append(log_path)  # closed in stop()
        self.process = subprocess.Popen(
            self.command,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT if self._log is not None else None,
            start_new_session=True,
            umask=UMASK,  # what the child writes is 0640 at most (docs/scaling.md, files)
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads touch the fork window
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe_exit(self) -> str:
        tail = f"; see {self.log_path}" if self.log_path else ""
        return f"{self.name} exited with code {self.process.returncode}{tail}"

    def tree(self) -> list[psutil.Process]:
        """The child and every process below it (flow runs included)."""
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def stop(self, grace_seconds: float = GRACE_SECONDS) -> None:
        """SIGTERM to the child's group, wait, then SIGKILL whatever of its tree is left. Its
        tree is read again while it exits: a worker may still start a flow run (in a session of
        its own), which would no longer be below it once it is gone."""
        tree = {process.pid: process for process in self.tree()}
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while self.alive() and time.monotonic() < deadline:
            tree.update((process.pid, process) for process in self.tree())
            time.sleep(0.05)
        remaining = max(0.0, deadline - time.monotonic())
        _, alive = psutil.wait_procs(list(tree.values()), timeout=remaining)
        for process in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(alive, timeout=5)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


class ChildService(ABC):
    """A long-running child behind a readiness check: ``launch()`` starts it, ``wait_ready()``
    waits for it; ``start()`` does both and stops a child that never became ready; ``stop()``;
    ``with`` starts and stops it."""

    child: ChildProcess | None = None

    @abstractmethod
    def launch(self) -> ChildProcess:
        """Start the process without waiting."""

    @abstractmethod
    def wait_ready(self) -> None:
        """Return once it serves; raise if it died or did not in time."""

    def start(self) -> None:
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_to_completion(
    name: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    timeout: float,
) -> str:
    """Run a one-shot command (bootstrap, deploy); returns its output (also in ``log_path``).
    ``RuntimeError`` with the output's tail if it fails or outlasts ``timeout``."""
    child = ChildProcess(name, command, env=env, cwd=cwd, log_path=log_path)
    start = log_path.stat().st_size if log_path.exists() else 0
    try:
        code = child.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.stop(grace_seconds=2)
        raise RuntimeError(f"{name} took longer than {timeout:.0f}s; see {log_path}") from None
    child.stop(grace_seconds=0)
    with open(log_path, "rb") as handle:
        handle.seek(start)
        output = handle.read().decode("utf-8", errors="replace")
    if code != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise RuntimeError(f"{name} failed (exit code {code}):\n{tail}")
    return output


def wait_until(
    what: str,
    ready: Callable[[], bool],
    *,
    timeout: float,
    watch: Sequence[ChildProcess] = (),
    interval: float = 0.25,
) -> None:
    """Poll ``ready`` until true; fail early if a watched child died, or after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        for child in watch:
            if not child.alive():
                raise RuntimeError(f"{child.describe_exit()} while waiting for {what}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f}s")
        time.sleep(interval)


def http_ok(url: str, headers: Mapping[str, str] | None = None) -> bool:
    """``GET url`` answers 200 (a readiness probe: any error is "not yet")."""
    try:
        return httpx.get(url, timeout=2.0, headers=headers, verify=tls_context()).status_code == 200
    except httpx.HTTPError:
        return False


def tls_context(cafile: Path | None = None) -> ssl.SSLContext:
    """What an HTTP client here trusts: ``cafile`` (a stack's own CA), else httpx's default.

    Made once per file and kept: httpx builds a new one for every client it creates, loading
    the whole CA bundle (about 20 ms of CPU), and the probes and tests create a client for
    every call, several a second.
    """
    if cafile is None:
        return _default_tls_context()
    return _tls_context(str(cafile), cafile.stat().st_mtime_ns)


@functools.cache
def _default_tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


@functools.cache
def _tls_context(cafile: str, modified: int) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=cafile)
