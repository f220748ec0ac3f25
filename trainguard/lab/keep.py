"""``make demo KEEP=1`` and ``make demo-stop``: leave a lab running after the demo, then end it.

A kept lab writes what ``demo-stop`` needs into one JSON file: every process it started (pid and the
start time /proc gives it, so a pid reused by something else is never signalled) and its Slurm folder.
``stop`` waits until each of them has ended (SIGTERM, then SIGKILL after a grace period), so their ports
are free when it returns; the kept processes are nobody's children any more, so an ended one may linger
as a zombie until init reaps it, which holds no port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from trainguard.lab.slurm import ROOT, Lab


def _stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state first); empty when there is no such pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else None


def running(pid: int, start: str) -> bool:
    """``pid`` is still the process that started at ``start`` and has not ended (a zombie has)."""
    fields = _stat(pid)
    return len(fields) > 19 and fields[19] == start and fields[0] not in ("Z", "X")


def keep(lab: Lab, state: Path) -> dict[str, str]:
    """Record ``lab``'s processes in ``state``; the URLs an operator opens."""
    pids = [p.proc.pid for p in lab.procs] + [s.proc.pid for s in lab.services]
    urls = {
        "console": f"{lab.responder_url}/console",
        "prometheus": f"http://127.0.0.1:{lab.port_base + 10}",
        "alertmanager": f"http://127.0.0.1:{lab.port_base + 11}",
    }
    record: dict[str, Any] = {"slurm_dir": str(lab.slurm_dir), "root": str(lab.root), "urls": urls,
                              "processes": [{"pid": pid, "start": start_time(pid)} for pid in pids]}  # fmt: skip
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps(record, indent=2))
    return urls


def stop(state: Path, grace_s: float = 15.0) -> list[int]:
    """End a kept lab: its processes (only those still the same process), then Slurm. The pids ended."""
    record = json.loads(state.read_text())
    mine = [(int(e["pid"]), str(e["start"])) for e in reversed(record["processes"]) if e["start"] is not None]
    mine = [(pid, start) for pid, start in mine if running(pid, start)]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        left = [(pid, start) for pid, start in mine if running(pid, start)]
        for pid, _ in left:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while any(running(pid, start) for pid, start in left) and time.monotonic() < deadline:
            time.sleep(0.1)
    subprocess.run([str(ROOT / "slurm" / "lab.sh"), "down", record["slurm_dir"]], check=False, timeout=60,
                   capture_output=True)  # fmt: skip
    state.unlink()
    return [pid for pid, _ in mine]
