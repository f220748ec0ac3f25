"""``make demo KEEP=1`` and ``make demo-stop``: leave a lab running after the demo, then end it.

A kept lab writes what ``demo-stop`` needs into one JSON file: every process it started (pid and the
start time /proc gives it, so a pid reused by something else is never signalled) and its Slurm folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from trainguard.lab.slurm import ROOT, Lab


def start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


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


def stop(state: Path) -> list[int]:
    """End a kept lab: its processes (only those still the same process), then Slurm. The pids ended."""
    record = json.loads(state.read_text())
    ended = []
    for entry in reversed(record["processes"]):
        pid = int(entry["pid"])
        if entry["start"] is not None and start_time(pid) == entry["start"]:
            os.kill(pid, signal.SIGTERM)
            ended.append(pid)
    subprocess.run([str(ROOT / "slurm" / "lab.sh"), "down", record["slurm_dir"]], check=False, timeout=60,
                   capture_output=True)  # fmt: skip
    state.unlink()
    return ended
