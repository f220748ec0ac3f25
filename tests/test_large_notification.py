"""A notification too large to accept, on a real ``trainguard serve`` (uvicorn, the default limit).

78,000 alerts of one group (every rank of a very large job timing out) make a 41 MB notification,
over the default ``max_body_bytes`` (32 MiB). The responder answers 413 with a JSON body that names
the limit, whether the size is declared (``Content-Length``) or not (chunked), and stays healthy:
what it acknowledged before is kept and decided, and the next notification is stored as usual.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx

from responder.settings import Settings
from tests.services import wait_until
from trainguard.lab.payloads import alert, nccl_storm_with_xid, notification
from trainguard.lab.server import ServerProcess

ALERTS = 78_000


def huge() -> bytes:
    def timeout(rank: int) -> dict[str, object]:
        return alert("TrainguardCollectiveTimeout", "collective_timeout", workload="9001",
                     host=f"gpu-{rank // 8:05d}", rank=str(rank), pattern="nccl_watchdog_timeout")  # fmt: skip

    return json.dumps(notification([timeout(rank) for rank in range(ALERTS)])).encode()


def refused(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    prefix = 'trainguard_responder_notifications_total{result="payloadtoolarge"}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_a_notification_over_max_body_bytes_gets_a_json_413_and_loses_nothing(tmp_path: Path) -> None:
    limit = Settings().max_body_bytes
    body = huge()
    assert len(body) > limit, "the notification must exceed the default limit"
    server = ServerProcess(tmp_path / "tg.db", env={"TRAINGUARD_CORRELATION_WINDOW_S": "0.5"})
    try:
        before = nccl_storm_with_xid(ranks_per_host=2, hosts=2, bad_host="gpu-002", workload="77")
        accepted = httpx.post(f"{server.url}/v1/alerts", json=before, timeout=10)
        assert accepted.status_code == 200
        assert accepted.json()["new"] == 5

        headers = {"content-type": "application/json"}
        declared = httpx.post(f"{server.url}/v1/alerts", content=body, headers=headers, timeout=60)
        assert declared.status_code == 413
        assert declared.headers["content-type"] == "application/json"
        assert declared.json() == {
            "error": "payload too large",
            "detail": f"body of {len(body)} bytes exceeds max_body_bytes ({limit} bytes); nothing of it was stored",
        }

        def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
            for start in range(0, len(body), 1 << 16):
                yield body[start : start + (1 << 16)]

        streamed = httpx.post(f"{server.url}/v1/alerts", content=chunks(), headers=headers, timeout=60)
        assert streamed.status_code == 413
        assert streamed.json()["error"] == "payload too large"
        assert "sent without Content-Length" in streamed.json()["detail"]
        assert refused(server.url) == 2

        # Nothing of the refused body was stored, what came before is decided, the webhook goes on.
        found = wait_until(lambda: httpx.get(f"{server.url}/v1/decisions", timeout=10).json()["decisions"], 15)
        assert isinstance(found, list)
        assert {d["workload"] for d in found} == {"77"}
        [decision] = [d for d in found if d["kind"] == "decision"]
        assert {e["fingerprint"] for e in decision["evidence"]} == {a["fingerprint"] for a in before["alerts"]}
        after = nccl_storm_with_xid(ranks_per_host=1, hosts=2, bad_host="gpu-001", workload="78")
        assert httpx.post(f"{server.url}/v1/alerts", json=after, timeout=10).json()["new"] == 3
        health = httpx.get(f"{server.url}/healthz", timeout=5)
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
    finally:
        server.stop()
