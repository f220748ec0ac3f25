"""Sustained load on a real ``trainguard serve``: ingest and decisions measured side by side.

``bench/ingest.py`` and ``bench/reliability.py`` share it. The server runs as in production, one
process whose webhook and decision loop share one store, pinned to one core (``taskset``, where
available) so the senders in this process do not take its CPU. Senders post distinct 8-alert
notifications, each opening one incident, for a fixed time. Meanwhile the server's own ``/metrics``
is read once after a warm-up and once when the senders stop. The difference gives incidents opened
and incidents decided per second over the same interval, and whether the backlog of undecided
incidents grew. Then the time until that backlog is empty is measured, to within 0.25 s.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from trainguard.lab.common import free_port
from trainguard.lab.payloads import alert, notification

TRAINGUARD = str(Path(sys.executable).parent / "trainguard")
WARMUP_S = 3.0


def start_server(db: Path, correlation_window_s: float = 1.0) -> tuple[subprocess.Popen[bytes], str]:
    """``trainguard serve`` on ``db`` (monitor mode, pinned to core 0), ready; (the process, its URL)."""
    port = free_port()
    argv = [TRAINGUARD, "serve", "--port", str(port), "--db", str(db), "--log-level", "warning"]
    if shutil.which("taskset"):
        argv = ["taskset", "-c", "0", *argv]
    env = {
        **os.environ,
        "TRAINGUARD_BREAKER__CORRELATED_WORKLOADS": "1000000",  # thousands of workloads fail on purpose here
        "TRAINGUARD_CORRELATION_WINDOW_S": str(correlation_window_s),
    }
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("trainguard serve did not become ready")


@dataclass(frozen=True)
class Sample:
    """The server's own counters at one moment (from ``/metrics``)."""

    at: float
    opened: float  # incidents opened (trainguard_responder_incidents_total)
    undecided: float  # incidents not decided yet (trainguard_responder_open_incidents)
    latency_sum: float  # trainguard_responder_decision_latency_seconds: received -> decided, window included
    latency_count: float

    @property
    def decided(self) -> float:
        return self.opened - self.undecided


async def sample(client: httpx.AsyncClient) -> Sample:
    text = (await client.get("/metrics")).text
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    prefix = "trainguard_responder_"
    return Sample(
        time.perf_counter(),
        values.get(prefix + "incidents_total", 0.0),
        values.get(prefix + "open_incidents", 0.0),
        values.get(prefix + "decision_latency_seconds_sum", 0.0),
        values.get(prefix + "decision_latency_seconds_count", 0.0),
    )


async def sustained(url: str, seconds: float, concurrency: int, window_s: float = 1.0) -> dict[str, Any]:
    """``concurrency`` senders for ``seconds`` while the server decides; its rates side by side."""
    sent = 0
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def sender(worker: int, client: httpx.AsyncClient) -> None:
        nonlocal sent
        n = 0
        while time.perf_counter() < stop:
            workload = str(100000 + worker * 1_000_000 + n)
            alerts = [alert("TrainguardCollectiveTimeout", "collective_timeout", workload=workload, host=f"h{r}",
                            rank=str(r), pattern="nccl_watchdog_timeout") for r in range(8)]  # fmt: skip
            t0 = time.perf_counter()
            response = await client.post("/v1/alerts", json=notification(alerts))
            latencies.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.text
            sent += 1
            n += 1

    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        senders = [asyncio.create_task(sender(w, client)) for w in range(concurrency)]
        await asyncio.sleep(WARMUP_S)
        first = await sample(client)
        await asyncio.gather(*senders)
        last = await sample(client)
        elapsed = time.perf_counter() - start
        drained = last
        while drained.undecided > 0 and drained.at - last.at < 120:
            await asyncio.sleep(0.25)  # each /metrics read refreshes gauges from the store: not too often
            drained = await sample(client)
    span = last.at - first.at
    opened_per_s = (last.opened - first.opened) / span
    decided_per_s = (last.decided - first.decided) / span
    decided_latency = drained.latency_count - first.latency_count
    return {
        "seconds": round(elapsed, 2),
        "concurrency": concurrency,
        "alerts_per_notification": 8,
        "correlation_window_s": window_s,
        "notifications": sent,
        "notifications_per_s": round(sent / elapsed, 1),
        "alerts_per_s": round(8 * sent / elapsed, 1),
        "latency_s": summary(latencies),
        "side_by_side": {
            "measured_over_s": round(span, 2),
            "incidents_opened_per_s": round(opened_per_s, 1),
            "incidents_decided_per_s": round(decided_per_s, 1),
            "decided_to_opened": round(decided_per_s / opened_per_s, 3) if opened_per_s else None,
            "undecided_at_start": int(first.undecided),
            "undecided_at_end": int(last.undecided),
            "drain_after_stop_s": round(drained.at - last.at, 2),
            "decision_latency_mean_s": round(
                (drained.latency_sum - first.latency_sum) / decided_latency if decided_latency else 0.0, 3
            ),
            # Keeping up: over the interval the undecided backlog (what is inside its window, plus any queue)
            # grew by less than half a second of arrivals. A loop slower than ingest grows it without bound.
            "decisions_keep_up": last.undecided - first.undecided <= 0.5 * opened_per_s,
        },
    }


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"min": round(ordered[0], 4), "median": round(statistics.median(ordered), 4), "p95": round(p95, 4),
            "max": round(ordered[-1], 4), "n": len(ordered)}  # fmt: skip
