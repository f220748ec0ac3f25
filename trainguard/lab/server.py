"""Run a real ``trainguard serve`` process for tests that need one (crash safety, the CLI, the demo)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from trainguard.lab.common import free_port, poll

TRAINGUARD = str(Path(sys.executable).parent / "trainguard")


class ServerProcess:
    def __init__(
        self, db: Path, env: dict[str, str] | None = None, port: int | None = None, args: list[str] | None = None
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = db.with_suffix(f".{self.port}.log")
        full_env = {**os.environ, **(env or {})}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [TRAINGUARD, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--db", str(db), *(args or [])],
                stdout=out, stderr=subprocess.STDOUT, env=full_env,
            )  # fmt: skip
        poll(self._ready, 20, what=f"trainguard serve on {self.url} (log {self.log})")

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"trainguard serve exited {self.proc.returncode}: {self.log.read_text()}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
