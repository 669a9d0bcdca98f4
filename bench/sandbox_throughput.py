"""Sandbox throughput: requests per second on loopback with no injected latency, from a bare
asyncio client and from httpx, and per CPU-second of the sandbox's process (docs/performance.md).

    uv run python -m bench.sandbox_throughput [--seconds 5] [--concurrency 32] [--scale 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx
import psutil

from bench.common import TOKEN_REQUEST, sandbox_process

MIX = (
    "/v1/event-logs?pageSize=10",
    "/v1/knowledge-base/resources?pageSize=10",
    "/v1/customer-trust/tag-categories",
    "/v1/knowledge-base/answer-library?pageSize=10",
)


def _rates(counts: dict[str, int], elapsed: float, concurrency: int) -> dict[str, Any]:
    total = counts["ok"] + counts["failed"]
    return {
        "requests": total,
        "failed": counts["failed"],
        "seconds": round(elapsed, 2),
        "requests_per_second": round(total / elapsed, 1),
        "concurrency": concurrency,
    }


async def _raw_load(url: str, token: str, seconds: float, concurrency: int) -> dict[str, Any]:
    """Keep-alive GETs over bare asyncio streams: one connection per worker."""
    host, port = url.removeprefix("http://").split(":")
    requests = [
        (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n").encode()
        for path in MIX
    ]
    counts = {"ok": 0, "failed": 0}
    stop_at = time.perf_counter() + seconds

    async def worker(offset: int) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        i = offset
        try:
            while time.perf_counter() < stop_at:
                writer.write(requests[i % len(requests)])
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                counts["ok" if status == 200 else "failed"] += 1
                i += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return _rates(counts, time.perf_counter() - started, concurrency)


async def _httpx_load(url: str, token: str, seconds: float, concurrency: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:
        headers = {"Authorization": f"Bearer {token}"}
        counts = {"ok": 0, "failed": 0}
        stop_at = time.perf_counter() + seconds

        async def worker(offset: int) -> None:
            i = offset
            while time.perf_counter() < stop_at:
                response = await http.get(MIX[i % len(MIX)], headers=headers)
                counts["ok" if response.status_code == 200 else "failed"] += 1
                i += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    return _rates(counts, elapsed, concurrency)


def run(seconds: float = 5.0, concurrency: int = 32, scale: int = 1) -> dict[str, Any]:
    with sandbox_process(scale=scale) as sandbox:
        url = sandbox.url
        grant = httpx.post(f"{url}/oauth/token", json=TOKEN_REQUEST)
        token = str(grant.raise_for_status().json()["access_token"])
        server = psutil.Process(sandbox.process.pid)
        before = server.cpu_times()
        raw = asyncio.run(_raw_load(url, token, seconds, concurrency))
        after = server.cpu_times()
        cpu = (after.user - before.user) + (after.system - before.system)
        raw["server_cpu_seconds"] = round(cpu, 2)
        raw["requests_per_server_cpu_second"] = round(raw["requests"] / cpu, 1) if cpu else None
        with_httpx = asyncio.run(_httpx_load(url, token, seconds, concurrency))
        stats = httpx.get(f"{url}/_sandbox/stats").json()
        return {
            "requests_per_second": raw["requests_per_second"],
            "requests_per_server_cpu_second": raw["requests_per_server_cpu_second"],
            "load_average": os.getloadavg(),
            "failed": raw["failed"] + with_httpx["failed"],
            "raw_client": raw,
            "httpx_client": with_httpx,
            "sandbox_status_counts": stats["status_counts"],
            "scale": scale,
            "cpus": os.cpu_count(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    result = run(args.seconds, args.concurrency, args.scale)
    print(json.dumps(result, indent=2))  # noqa: T201
    rate = result["requests_per_second"]
    capacity = result["requests_per_server_cpu_second"]
    verdict = "OK" if rate >= 1000 and not result["failed"] else "BELOW TARGET (busy machine?)"
    print(  # noqa: T201
        f"sandbox throughput: {rate} req/s wall clock ({verdict}; target >= 1000), "
        f"{capacity} req per server CPU-second"
    )


if __name__ == "__main__":
    main()
