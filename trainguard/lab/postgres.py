"""A throwaway PostgreSQL server for tests and benchmarks (Debian ``postgresql``: initdb, postgres, pg_ctl).

PostgreSQL refuses to run as root, so as root (CI) the cluster belongs to the ``postgres`` user the
Debian package creates, and every server command runs through ``runuser``. The data directory sits in a
fresh directory under ``/tmp`` that this user may enter (pytest's own tmp directory is root's only).
The server listens on 127.0.0.1 and a socket in that directory, trusts local connections, and is
stopped (``pg_ctl stop -m immediate``) and deleted at the end.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from trainguard.lab.common import find_binary, free_port

USER = "trainguard"


def server_bin() -> Path | None:
    """The directory of the newest installed PostgreSQL's server binaries, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    initdb = find_binary("initdb")
    return Path(initdb).parent if initdb else None


def _as_server_user() -> list[str]:
    if os.geteuid() != 0:
        return []
    runuser = find_binary("runuser")
    if runuser is None:
        raise RuntimeError("running as root, and runuser (util-linux) is missing to run PostgreSQL as postgres")
    return [runuser, "-u", "postgres", "--"]


@dataclass
class Postgres:
    """One running server: its URL (no password: local trust), data directory and log."""

    bin: Path
    root: Path
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        subprocess.run([*_as_server_user(), str(self.bin / "pg_ctl"), "stop", "-m", "immediate", "-D",
                        str(self.root / "data")], capture_output=True, timeout=60, check=False)  # fmt: skip
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(timeout: float = 60.0) -> Postgres:
    """initdb a new cluster and start it; returns once it accepts connections. Raises if it cannot."""
    bindir = server_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL not found: apt-get install postgresql")
    prefix = _as_server_user()
    root = Path(tempfile.mkdtemp(prefix="tg-pg-"))
    if prefix:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    init = subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"],
        capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.decode(errors='replace')[-2000:]}")
    port = free_port()
    with (root / "postgres.log").open("wb") as log:
        proc = subprocess.Popen(
            [*prefix, str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=50", "-c", "shared_buffers=32MB"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = Postgres(bindir, root, port, proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"postgres exited with {proc.returncode}:\n{server.log_tail()}")
        ready = subprocess.run([str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                               capture_output=True, timeout=10, check=False)  # fmt: skip
        if ready.returncode == 0:
            return server
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"postgres not ready within {timeout:g}s:\n{server.log_tail()}")
