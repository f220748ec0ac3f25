"""``make demo KEEP=1`` / ``make demo-stop`` (trainguard/lab/keep.py): the stop ends exactly the
processes the kept lab recorded, and never a pid that now belongs to another process."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from trainguard.lab.keep import start_time, stop


def test_stop_ends_the_recorded_processes_and_no_reused_pid(tmp_path: Path) -> None:
    kept = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        entries = [{"pid": p.pid, "start": start_time(p.pid)} for p in kept]
        # this test's own pid, recorded with another start time: a pid the kernel gave to someone else
        entries.append({"pid": os.getpid(), "start": "1"})
        state = tmp_path / "lab.json"
        state.write_text(json.dumps({"slurm_dir": str(tmp_path / "slurm"), "processes": entries, "urls": {}}))
        ended = stop(state)
        assert sorted(ended) == sorted(p.pid for p in kept)
        assert all(p.wait(10) == -15 for p in kept)  # SIGTERM
        assert not state.exists()
    finally:
        for p in kept:
            p.kill()
            p.wait()
