"""The lab's whole stack on one machine: a real 4-node Slurm, one trainguard exporter per node,
Prometheus and Alertmanager with the `fast` profile, and the responder acting on Slurm.

Used by `make demo` (scripts/lab/demo.py), `make bench` (bench/lab.py) and the e2e test. Everything
listens on 127.0.0.1 and lives under one directory; `down()` stops all of it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from trainguard.lab.common import terminate
from trainguard.lab.stack import (
    RESEND_DELAY,
    TSDB_FLAGS,
    Service,
    StackError,
    alertmanager_config,
    poll,
    prometheus_config,
    start_alertmanager,
    start_prometheus,
    wait_first_scrape,
)

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the lab runs slurm/lab.sh and scripts/lab/
BIN = Path(sys.executable).parent
TRAINGUARD = str(BIN / "trainguard")
NODES = ("n1", "n2", "n3", "n4")
CLUSTER = "lab"
REQUIRED = {
    "prometheus": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "slurmctld": "slurm-wlm",
    "slurmd": "slurm-wlm",
    "munged": "munge",
}


class LabError(RuntimeError):
    """The lab could not be brought up or did not behave; the message says what and where to look."""


def missing_requirements() -> list[str]:
    """What this machine lacks to run the lab, in words a newcomer can act on (empty: nothing)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root: the Slurm lab runs slurmctld, slurmd and munged as root (run `sudo make demo`)")
    absent = [b for b in REQUIRED if not shutil.which(b) and not Path(f"/usr/sbin/{b}").exists()]
    packages = sorted({REQUIRED[b] for b in absent})
    if packages:
        missing.append(f"Debian packages: apt-get install {' '.join(packages)}")
    if importlib.util.find_spec("torch") is None:
        missing.append(f"PyTorch (CPU) in the virtualenv: {BIN}/pip install torch==2.13.0")
    return missing


def wait(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    try:
        return poll(predicate, timeout, what, interval)
    except StackError as exc:
        raise LabError(str(exc)) from None


@dataclass
class Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        terminate(self.proc, 10, 10)


LAB_BREAKER: dict[str, Any] = {"correlated_window_s": 5, "max_node_fraction": 0.5, "window_s": 60, "max_actions": 100}


@dataclass
class Lab:
    """One lab. ``mode`` is the responder's mode for cluster ``lab`` (act, approve or monitor)."""

    root: Path
    mode: str = "act"
    port_base: int = 19400
    correlation_window_s: float = 1.0
    fast_path: bool = False  # exporters also post critical matches straight to Alertmanager
    # approve mode: the lab answers a waiting decision with `trainguard approve` after this long (the
    # operator reading the decision); None: it waits up to operator_wait_s for a person to answer
    approve_after_s: float | None = 5.0
    operator_wait_s: float = 600.0
    policy: dict[str, Any] | None = None  # the cluster's policy settings (None: the defaults)
    breaker: dict[str, Any] | None = None  # the breaker's settings (None: LAB_BREAKER)
    say: Callable[[str], None] = print
    procs: list[Proc] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    exporters: dict[str, Proc] = field(default_factory=dict)

    # -- layout ---------------------------------------------------------------------------------

    @property
    def slurm_dir(self) -> Path:
        return self.root / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "etc" / "slurm.conf"

    @property
    def responder_url(self) -> str:
        return f"http://127.0.0.1:{self.port_base}"

    def exporter_port(self, node: str) -> int:
        return self.port_base + 1 + NODES.index(node)

    def node_dir(self, kind: str, node: str) -> Path:
        return self.root / kind / node

    def kmsg(self, node: str) -> Path:
        return self.root / "kmsg" / f"{node}.log"

    def slurm_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SLURM_CONF": str(self.slurm_conf),
            "SLURM_LAB_DIR": str(self.slurm_dir),
            "SLURM_LAB_CTLD_PORT": str(self.port_base + 30),
            "SLURM_LAB_NODE_PORT_BASE": str(self.port_base + 20),
            "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin",
        }

    # -- bring-up -------------------------------------------------------------------------------

    def up(self) -> None:
        missing = missing_requirements()
        if missing:
            raise LabError("cannot run the lab here; missing:\n  - " + "\n  - ".join(missing))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # munged refuses a socket below a directory others cannot traverse
        for node in NODES:
            for kind in ("logs", "progress"):
                self.node_dir(kind, node).mkdir(parents=True, exist_ok=True)
            self.kmsg(node).parent.mkdir(parents=True, exist_ok=True)
            self.kmsg(node).touch()
        (self.root / "control").mkdir(exist_ok=True)
        (self.root / "ckpt").mkdir(exist_ok=True)
        self.say("starting a 4-node Slurm cluster (slurmctld + 4 slurmd, munge) ...")
        self._run([str(ROOT / "slurm" / "lab.sh"), "up", str(self.slurm_dir)], timeout=120)
        self.say("starting the responder (act mode for cluster 'lab', Slurm adapter) ...")
        self._start_responder()
        self.say("starting one trainguard exporter per node ...")
        for node in NODES:
            self.start_exporter(node)
        self.say("starting Prometheus and Alertmanager (fast profile: 1 s scrape and evaluation) ...")
        self._start_prometheus_stack()

    def _run(self, argv: list[str], timeout: float = 60) -> str:
        result = subprocess.run(argv, env=self.slurm_env(), capture_output=True, text=True, timeout=timeout,
                                check=False)  # fmt: skip
        if result.returncode != 0:
            raise LabError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env or dict(os.environ))
        entry = Proc(name, proc, log)
        self.procs.append(entry)
        return entry

    def _start_responder(self) -> None:
        token = secrets.token_urlsafe(16)
        (self.root / "webhook.token").write_text(token + "\n")
        config = {
            "host": "127.0.0.1",
            "port": self.port_base,
            "db_path": str(self.root / "trainguard.db"),
            "webhook_token_file": str(self.root / "webhook.token"),
            "correlation_window_s": self.correlation_window_s,
            "prometheus_url": f"http://127.0.0.1:{self.port_base + 10}",
            "prometheus_timeout_s": 1.0,
            "clusters": {
                CLUSTER: {
                    "mode": self.mode,
                    "nodes": len(NODES),
                    **({"policy": self.policy} if self.policy else {}),
                    "scheduler": {
                        "kind": "slurm",
                        "transport": "local",
                        "slurm_conf": str(self.slurm_conf),
                        "command_timeout_s": 10,
                    },
                }
            },
            # Lab trials fault one job after another, seconds apart: a shorter correlation window keeps
            # consecutive trials from tripping the correlated-failure breaker; a larger node share lets
            # every trial exclude a node on a 4-node cluster.
            "breaker": self.breaker or LAB_BREAKER,
            "ledger": {"drain_after_workloads": 1000},
        }
        path = self.root / "trainguard.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        env = {**os.environ, "SLURM_CONF": str(self.slurm_conf), "PATH": f"{os.environ.get('PATH', '')}:/usr/sbin"}
        proc = self._spawn("responder", [TRAINGUARD, "serve", "--config", str(path)], env)

        def ready() -> bool:
            if proc.proc.poll() is not None:
                raise LabError(f"the responder exited:\n{proc.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.responder_url}/readyz", timeout=1).status_code == 200
            return False

        wait(ready, 30, "the responder")

    def start_exporter(self, node: str) -> None:
        argv = [
            TRAINGUARD, "exporter", "--cluster", CLUSTER, "--node", node, "--port", str(self.exporter_port(node)),
            "--log", str(self.node_dir("logs", node) / "*.log"), "--kernel-log", str(self.kmsg(node)),
            "--progress-dir", str(self.node_dir("progress", node)), "--poll-interval", "0.2", "--no-nvml",
        ]  # fmt: skip
        if self.fast_path:
            argv += ["--alertmanager-url", f"http://127.0.0.1:{self.port_base + 11}"]
        self.exporters[node] = self._spawn(f"exporter-{node}", argv)

    def stop_exporter(self, node: str) -> None:
        proc = self.exporters.pop(node, None)
        if proc is not None:
            proc.proc.kill()
            proc.proc.wait(10)

    def _start_prometheus_stack(self) -> None:
        am = start_alertmanager(
            alertmanager_config("fast", f"{self.responder_url}/v1/alerts", self.root / "webhook.token"),
            self.root / "alertmanager", port=self.port_base + 11,
        )  # fmt: skip
        self.services.append(am)
        scrape: list[dict[str, Any]] = [
            {
                "job_name": "trainguard-exporter",
                "honor_labels": True,
                "static_configs": [
                    {"targets": [f"127.0.0.1:{self.exporter_port(n)}"], "labels": {"host": n, "cluster": CLUSTER}}
                    for n in NODES
                ],
            },
            {"job_name": "trainguard-responder", "static_configs": [{"targets": [f"127.0.0.1:{self.port_base}"]}]},
        ]
        prom = start_prometheus(prometheus_config("fast", scrape, am.port), self.root / "prometheus",
                                resend_delay=RESEND_DELAY["fast"], port=self.port_base + 10,
                                tsdb_flags=TSDB_FLAGS["fast"])  # fmt: skip
        self.services.append(prom)
        am.wait_ready()
        prom.wait_ready()
        wait_first_scrape(prom, "trainguard-exporter", timeout=40)
        time.sleep(1.5)

    def down(self) -> None:
        for service in reversed(self.services):
            with contextlib.suppress(Exception):
                service.stop()
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        with contextlib.suppress(Exception):
            self._run([str(ROOT / "slurm" / "lab.sh"), "down", str(self.slurm_dir)], timeout=60)

    @contextlib.contextmanager
    def running(self) -> Iterator[Lab]:
        try:
            self.up()
            yield self
        finally:
            self.down()

    # -- jobs -----------------------------------------------------------------------------------

    def submit(self, nodes: int = 3, steps: int = 100000, name: str = "train") -> str:
        """Submit the training job (opted in to trainguard) and return its id."""
        script = ROOT / "scripts" / "lab" / "job.sh"
        argv = [
            "sbatch", "--parsable", f"--nodes={nodes}", "--ntasks-per-node=1", "--requeue", f"--job-name={name}",
            "--comment=trainguard:policy=default", "--open-mode=append",
            f"--output={self.root / 'logs' / 'batch-%j.out'}",
            f"--export=ALL,LAB_ROOT={self.root},LAB_REPO={ROOT},LAB_PYTHON={sys.executable},LAB_STEPS={steps}",
            str(script),
        ]  # fmt: skip
        return self._run(argv).strip().split(";")[0]

    def cancel(self, job: str) -> None:
        with contextlib.suppress(LabError):
            self._run(["scancel", job])

    def squeue(self, job: str) -> dict[str, Any] | None:
        out = self._run(["squeue", "--json"])
        for entry in json.loads(out).get("jobs", []):
            if str(entry.get("job_id")) == job:
                return dict(entry)
        return None

    def rank_states(self, job: str) -> list[dict[str, Any]]:
        """The progress hook's state files of ``job`` on every node (all attempts)."""
        states = []
        for node in NODES:
            for path in self.node_dir("progress", node).glob(f"{job}-a*-r*.json"):
                with contextlib.suppress(OSError, ValueError):
                    states.append({**json.loads(path.read_text()), "node": node})
        return states

    def steps(self, job: str, attempt: int) -> dict[str, tuple[int, float]]:
        """rank -> (step, completion time) for one attempt."""
        out = {}
        for state in self.rank_states(job):
            ident = state.get("identity", {})
            if ident.get("attempt") == str(attempt) and state.get("step") is not None:
                out[ident["rank"]] = (int(state["step"]), float(state["step_time"]))
        return out

    def wait_productive(self, job: str, attempt: int, ranks: int, min_step: int, timeout: float = 90) -> float:
        """Wait until every rank of ``attempt`` has passed ``min_step``; the time the first one did."""

        def check() -> float | None:
            steps = self.steps(job, attempt)
            if len(steps) >= ranks and all(step >= min_step for step, _ in steps.values()):
                return min(t for _, t in steps.values())
            return None

        result: float = wait(check, timeout, f"job {job} attempt {attempt} to pass step {min_step} on {ranks} ranks")
        return result

    def rank_on(self, job: str, attempt: int, node: str) -> dict[str, Any]:
        for state in self.rank_states(job):
            ident = state.get("identity", {})
            if state["node"] == node and ident.get("attempt") == str(attempt):
                return state
        raise LabError(f"no rank of job {job} attempt {attempt} on {node}")

    def checkpoint_step(self, job: str) -> int | None:
        found = sorted(int(p.stem.split("-")[1]) for p in (self.root / "ckpt" / job).glob("step-*.pt"))
        return found[-1] if found else None

    # -- the responder's view -------------------------------------------------------------------

    def decisions(self, workload: str) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.responder_url}/v1/decisions", params={"workload": workload, "limit": "50"},
                         timeout=5).json()  # fmt: skip
        return [d for d in body["decisions"] if d["kind"] == "decision"]

    def alerts(self, workload: str) -> list[dict[str, Any]]:
        """Alerts the responder stored for ``workload`` (read-only look at its SQLite store)."""
        db = sqlite3.connect(f"file:{self.root / 'trainguard.db'}?mode=ro", uri=True, timeout=5)
        try:
            rows = db.execute(
                "SELECT received_at, labels, disposition FROM alerts WHERE workload=? ORDER BY received_at",
                (workload,),
            ).fetchall()
        finally:
            db.close()
        return [{"received_at": r[0], "labels": json.loads(r[1]), "disposition": r[2]} for r in rows]

    def set_mode(self, mode: str) -> None:
        response = httpx.put(f"{self.responder_url}/v1/clusters/{CLUSTER}/mode", json={"mode": mode}, timeout=5)
        response.raise_for_status()
        self.mode = mode
