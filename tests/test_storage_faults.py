"""Storage faults on real parts: a full disk (a 1 MiB tmpfs), an immutable db (``chattr +i``) and another
process holding SQLite's write lock for 120 s.

In each: while the fault lasts the webhook answers 503 within seconds (so Alertmanager resends) and
``/healthz`` reports the stalled loop; once it clears, the loop recovers by itself, every stored
incident is decided exactly once, and nothing that was acknowledged (2xx) is lost. Needs root (CI
runs as root) for the mount and ``chattr``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.synchronize
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Responder
from tests.services import require_binary, require_root, wait_until
from trainguard.lab.payloads import alert, notification

FAST_503_S = 5.0  # the webhook's answer while the store cannot write: 503, and within this


def _fault(workload: str) -> dict[str, Any]:
    return notification([alert("TrainguardGpuXid", "infra_gpu", workload=workload, host="n1",
                               pattern="xid_79_fallen_off_bus")])  # fmt: skip


def _post_fast(r: Responder, workload: str) -> int:
    t0 = time.monotonic()
    status: int = r.post(_fault(workload)).status_code
    assert time.monotonic() - t0 < FAST_503_S, "the webhook must answer fast while the store cannot write"
    return status


def _run_fault(r: Responder, fault: Callable[[], Any], hold_s: float = 0.0) -> None:
    """Post, break the store, check the 503s and the stall, clear it, check recovery and completeness."""
    acked = ["1000"]
    assert r.post(_fault("1000")).status_code == 200
    refused: list[str] = []
    with fault():  # the incident comes due while the fault lasts (a 1.5 s correlation window)
        wait_until(lambda: r.client.get("/healthz").status_code == 503, 30, what="/healthz to report the stall")
        assert r.client.get("/readyz").status_code == 503
        assert r.client.get("/healthz").json()["loop"]["consecutive_failures"] > 0
        end, i = time.monotonic() + hold_s, 0
        while i < 3 or time.monotonic() < end:  # for as long as the fault lasts, the webhook answers fast
            workload = str(2000 + i)
            status = _post_fast(r, workload)
            assert status in (200, 503)
            (acked if status == 200 else refused).append(workload)
            i += 1
            if i >= 3:
                time.sleep(min(10.0, max(0.0, end - time.monotonic())))
        assert refused, "a store that cannot write must refuse (503) rather than acknowledge"
        assert r.metric("trainguard_responder_loop_errors_total") > 0
    wait_until(lambda: r.client.get("/healthz").status_code == 200, 60, what="the loop to recover by itself")
    for workload in refused:  # what Alertmanager does with a 503: send it again
        assert r.post(_fault(workload)).status_code == 200
    expected = set(acked + refused)
    wait_until(lambda: expected <= {d["workload"] for d in r.decisions(limit="1000")}, 30, what="all decided")
    workloads = [d["workload"] for d in r.decisions(limit="1000")]
    assert len(workloads) == len(set(workloads)), "each incident decided exactly once"
    assert r.store.open_incident_count() == 0


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    require_root("mounts a 1 MiB tmpfs to fill")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_then_freed(make_responder: Callable[..., Responder], tiny_disk: Path) -> None:
    r = make_responder(db_path=tiny_disk / "tg.db", correlation_window_s=1.5, loop_stall_after_s=2)

    @contextmanager
    def full() -> Iterator[None]:
        filler = tiny_disk / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as out:
            while True:
                out.write(b"\0" * 4096)
                out.flush()

        # The WAL may hold free pages it reuses: write until a commit fails for want of space.
        def fill() -> None:
            for i in range(10_000):
                r.store.set_mode(f"fill-{i}", "monitor", time.time(), "x" * 2000)

        with pytest.raises(sqlite3.OperationalError):
            fill()
        try:
            yield
        finally:
            filler.unlink()

    _run_fault(r, full)


def test_immutable_db_then_writable(make_responder: Callable[..., Responder], tmp_path: Path) -> None:
    require_root("chattr +i")
    chattr = require_binary("chattr")
    r = make_responder(correlation_window_s=1.5, loop_stall_after_s=2)
    files = [str(p) for p in tmp_path.glob("trainguard.db*")]

    @contextmanager
    def immutable() -> Iterator[None]:
        subprocess.run([chattr, "+i", *files], check=True)
        try:
            yield
        finally:
            subprocess.run([chattr, "-i", *files], check=True)

    _run_fault(r, immutable)


def _hold_lock(db: str, held: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    held.set()
    release.wait(600)
    conn.execute("ROLLBACK")
    conn.close()


def test_write_lock_held_by_another_process_for_120s(make_responder: Callable[..., Responder], tmp_path: Path) -> None:
    # The holder takes a second or two to start (spawn): the incident comes due after it holds the lock.
    r = make_responder(correlation_window_s=8, loop_stall_after_s=2)
    ctx = multiprocessing.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(tmp_path / "trainguard.db"), held, release))

    @contextmanager
    def locked() -> Iterator[None]:
        holder.start()
        assert held.wait(30)
        try:
            yield
        finally:
            release.set()
            holder.join(30)

    _run_fault(r, locked, hold_s=120)
