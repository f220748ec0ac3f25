"""``trainguard approve|reject ID`` against a real ``trainguard serve`` whose default mode is approve.

No scheduler is configured, so an approved action fails safe (``failed``, nothing touched); what is
under test is the command: its answer reaches the record, and a second answer is refused (exit 2).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.services import wait_until
from tests.test_cli import run
from trainguard.lab.payloads import nccl_storm_with_xid
from trainguard.lab.server import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"TRAINGUARD_CORRELATION_WINDOW_S": "0.2", "TRAINGUARD_DEFAULT_MODE": "approve"}
    proc = ServerProcess(tmp_path_factory.mktemp("approve-cli") / "tg.db", env=env)
    yield proc
    proc.stop()


def waiting(server: ServerProcess, workload: str) -> dict[str, Any]:
    httpx.post(server.url + "/v1/alerts", json=nccl_storm_with_xid(1, 2, workload=workload), timeout=5)

    def found() -> list[dict[str, Any]]:
        records = httpx.get(server.url + "/v1/decisions", params={"workload": workload}, timeout=5).json()
        return [d for d in records["decisions"] if d["outcome"] == "awaiting_approval" and d["node"] is None]

    records = wait_until(found, 10, what="a waiting decision")
    assert isinstance(records, list)
    return dict(records[0])


def test_approve_and_reject_commands(server: ServerProcess) -> None:
    env = {**os.environ, "TRAINGUARD_URL": server.url}
    first = waiting(server, "6101")
    done = run("approve", first["id"], "--by", "carol", "--note", "bad GPU", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{first['id']}: pending (approved by carol, loopback client 127.0.0.1)" in done.stdout
    record = httpx.get(f"{server.url}/v1/decisions/{first['id']}", timeout=5).json()
    assert record["approval"]["note"] == "bad GPU"
    assert record["outcome"] != "awaiting_approval"
    again = run("approve", first["id"], env=env)
    assert again.returncode == 2
    assert "409" in again.stderr

    second = waiting(server, "6102")
    rejected = run("reject", second["id"], "--by", "dave", env=env)
    assert rejected.returncode == 0, rejected.stderr
    assert httpx.get(f"{server.url}/v1/decisions/{second['id']}", timeout=5).json()["outcome"] == "rejected"
    assert run("approve", "dec_unknown", env=env).returncode == 2


def test_new_commands_have_help() -> None:
    for sub in ("approve", "reject", "replay"):
        result = run(sub, "--help")
        assert result.returncode == 0
        assert "usage: trainguard " + sub in result.stdout
