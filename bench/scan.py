"""Exporter benchmark: catalog scanning throughput (Hyperscan, re, ripgrep), CPU at 100 KB/s, memory under a flood.

    .venv/bin/python bench/scan.py            # full run (about 2 minutes on 2 cores)
    .venv/bin/python bench/scan.py --quick    # smaller log, shorter windows

Writes bench/results/scan.json. The generated logs live in a temporary directory (never committed).

1. A realistic mixed training log (>= 100 MB: per-step lines, Megatron iteration lines, NCCL INFO,
   warnings, tqdm bars, AMP overflow skips, and a rare real error) is scanned with the catalog, as
   ``trainguard patterns scan`` does, with the Hyperscan engine and with the ``re`` engine, and with
   ``rg -c -f`` using the same line-bounded regexes, in the same run, on the same file, all measured in
   CPU time of one core (the machine is shared) and reported as ratios. The contenders run in turns
   (``rounds``), the best of each is kept; ripgrep, in the same turns, is the yardstick for the noise.
   "End to end" is the whole ``patterns scan`` loop (reading, line numbers, events, findings);
   "engine only" is the matching of the whole file in memory.
2. A real ``trainguard exporter`` process follows a log written at 100 KB/s and is scraped every second;
   its CPU time over the window is reported as a percentage of one core: once scraped on one kept HTTP/1.1
   connection, as Prometheus scrapes, and once with a new connection for every scrape.
3. The same exporter follows a file that receives 800,000 identical-but-for-the-timestamp XID lines in
   one write; the time from that write to the first scrape (every 50 ms) that shows all of them counted,
   the exporter's CPU, peak RSS (VmHWM) before and after and the number of series are reported.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from exporters.engines import hyperscan_available
from exporters.patterns import Matcher, load_catalog
from exporters.patterns_cli import iter_findings
from trainguard.lab.common import bench_arguments, free_port

ROOT = Path(__file__).resolve().parents[1]

XID_LINE = "[{t:.6f}] NVRM: Xid (PCI:0000:10:1c): 79, pid=1896, name=python3, GPU has fallen off the bus.\n"


def generate(path: Path, size_mb: int, seed: int = 7) -> dict[str, int]:
    """A mixed log of ``size_mb`` MB; returns how many error lines were planted."""
    rnd = random.Random(seed)
    patterns = load_catalog()
    errors = [p.example for p in patterns]
    planted = 0
    target = size_mb * 1_000_000
    written = 0
    step = 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            block = []
            for _ in range(2000):
                r = rnd.random()
                rank = rnd.randrange(64)
                if r < 0.30:
                    step += 1
                    block.append(
                        f"[rank{rank}]: step {step} | loss {rnd.uniform(1.5, 3.5):.4f} | "
                        f"lr {3e-4 * rnd.random():.3e} | "
                        f"grad_norm {rnd.uniform(0.2, 2):.3f} | tokens/s {rnd.randrange(300_000, 500_000)} | "
                        f"mem {rnd.uniform(60, 79):.1f} GiB"
                    )
                elif r < 0.45:
                    block.append(
                        f" iteration {step:8d}/  500000 | consumed samples: {step * 16:10d} | "
                        "elapsed time per iteration "
                        f"(ms): {rnd.uniform(700, 900):.1f} | learning rate: {3e-4:.3E} | global batch size:  1024 | "
                        f"lm loss: {rnd.uniform(1.5, 3):.6E} | loss scale: 65536.0 | grad norm: {rnd.random():.3f} | "
                        "number of skipped iterations:   0 | number of nan iterations:   0 |"
                    )
                elif r < 0.75:
                    block.append(
                        f"gpu-{rank // 8:03d}:{rnd.randrange(1000, 99999)}:{rnd.randrange(1000, 99999)} [{rank % 8}] "
                        + rnd.choice(
                            [
                                f"NCCL INFO Channel {rnd.randrange(32):02d}/0 : {rank}[{rank % 8}] -> {(rank + 1) % 64}"
                                f"[{(rank + 1) % 8}] via P2P/CUMEM/read",
                                "NCCL INFO Connected all rings",
                                "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.35.2<0>",
                                f"NCCL INFO comm 0x55d1c8a0 rank {rank} nranks 64 cudaDev {rank % 8} "
                                "busId 10000 - Init COMPLETE",
                                "NCCL INFO Using non-device net plugin version 0",
                                "NCCL INFO ncclCommInitRank comm 0x55d1c8a0 rank 3 nranks 64 - Init START",
                            ]
                        )
                    )
                elif r < 0.85:
                    block.append(
                        rnd.choice(
                            [
                                "/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:464: UserWarning: "
                                "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.",
                                "  warnings.warn(",
                                "FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                                "`torch.amp.autocast('cuda', args...)` instead.",
                                f"[2026-11-29 10:{rnd.randrange(60):02d}:00,123] [INFO] "
                                "[logging.py:96:log_dist] [Rank 0] "
                                f"step={step}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]",
                                f"INFO: data loader worker {rank % 8} prefetched {rnd.randrange(100)} batches",
                                f"[rank{rank}]: saving checkpoint at step {step} to /shared/ckpt (took 31.2 s)",
                            ]
                        )
                    )
                elif r < 0.95:
                    pct = rnd.randrange(100)
                    block.append(
                        f"Epoch 3: {pct:3d}%|{'#' * (pct // 10):10s}| {pct * 100}/10000 [12:01<17:18, 5.68it/s, "
                        f"loss={rnd.uniform(1.5, 3):.3f}, v_num=0]"
                    )
                elif r < 0.9999:
                    block.append(
                        f"[rank{rank}]: Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0"
                    )
                else:
                    planted += 1
                    block.append(rnd.choice(errors))
            text = "\n".join(block) + "\n"
            f.write(text)
            written += len(text.encode())
    return {"bytes": path.stat().st_size, "planted_errors": planted}


def _scan_cpu(matcher: Matcher, path: Path) -> tuple[float, int]:
    """CPU seconds of ``trainguard patterns scan``'s loop over the file, and the findings a row names."""
    t0 = time.process_time()
    with path.open("rb") as f:
        matches = sum(1 for x in iter_findings(matcher, f) if x.pattern is not None)
    return time.process_time() - t0, matches


def _engine_cpu(matcher: Matcher, data: bytes) -> float:
    """CPU seconds of the matching alone, in memory: no reading, no line counting, no findings."""
    t0 = time.process_time()
    matcher.engine.scan(data)
    return time.process_time() - t0


def _ripgrep(rg: str, path: Path, pattern_file: str) -> tuple[float, float, int]:
    """ripgrep with the same expressions (it matches within lines): CPU and wall seconds of the child, lines."""
    t0 = time.perf_counter()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # -j1: one thread, as our scan runs on one core; the CPU time is what is compared
    out = subprocess.run(
        [rg, "-j1", "--no-mmap", "-c", "-f", pattern_file, str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if out.returncode not in (0, 1):  # 1: no line matched; anything else is an error, not a measurement
        raise RuntimeError(f"ripgrep failed (exit {out.returncode}): {out.stderr.strip()[-500:]}")
    return cpu, time.perf_counter() - t0, int(out.stdout.strip() or 0)


def bench_scan(path: Path, rounds: int) -> dict[str, Any]:
    """The v2 scanner with each engine and ripgrep on the same file, in CPU seconds of one core.

    The machine is shared, so the measurements are interleaved (each round runs every contender once) and
    the best round of each is kept; ripgrep, measured in the same rounds, is the yardstick for the noise."""
    catalog = load_catalog()
    size = path.stat().st_size
    mb = size / 1e6
    out: dict[str, Any] = {"file_mb": round(mb, 1), "patterns": len(catalog), "rounds": rounds}
    engines = ["hyperscan", "re"] if hyperscan_available() else ["re"]
    matchers = {name: Matcher(catalog, name) for name in engines}
    data = path.read_bytes()
    best: dict[str, float] = {}
    findings: dict[str, int] = {}
    rg = shutil.which("rg")
    rg_count, rg_wall = -1, float("inf")
    with tempfile.NamedTemporaryFile("w", suffix=".rx", delete=False) as pf:
        pf.write("\n".join(p.source for p in catalog) + "\n")
    try:
        for _ in range(rounds):
            for name, matcher in matchers.items():
                cpu, findings[name] = _scan_cpu(matcher, path)
                best[name] = min(best.get(name, cpu), cpu)
                cpu = _engine_cpu(matcher, data)
                best[name + "/engine"] = min(best.get(name + "/engine", cpu), cpu)
            if rg is not None:
                cpu, wall, rg_count = _ripgrep(rg, path, pf.name)
                best["ripgrep"] = min(best.get("ripgrep", cpu), cpu)
                rg_wall = min(rg_wall, wall)
    finally:
        os.unlink(pf.name)
    del data
    for name in engines:
        out[name] = {
            "cpu_seconds": round(best[name], 3),
            "mb_per_s_per_core": round(mb / best[name], 1),
            "engine_only_cpu_seconds": round(best[name + "/engine"], 3),
            "engine_only_mb_per_s_per_core": round(mb / best[name + "/engine"], 1),
            "findings": findings[name],
        }
    if rg is None:
        out["ripgrep"] = "not installed (apt-get install ripgrep; make install-lab does it)"
    else:
        version = subprocess.run([rg, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
        out["ripgrep"] = {
            "cpu_seconds": round(best["ripgrep"], 3),
            "wall_seconds": round(rg_wall, 3),
            "matching_lines": rg_count,
            "version": version,
            "mb_per_s_per_core": round(mb / best["ripgrep"], 1),
        }
        for name in engines:
            out[f"ratio_{name}_to_ripgrep"] = round(best["ripgrep"] / best[name], 3)
            out[f"ratio_{name}_engine_only_to_ripgrep"] = round(best["ripgrep"] / best[name + "/engine"], 3)
    if len(engines) == 2:
        out["ratio_hyperscan_to_re"] = round(best["re"] / best["hyperscan"], 2)
        out["engines_agree"] = findings["re"] == findings["hyperscan"]
    out["target_mb_per_s_per_core_hyperscan"] = 1000
    return out


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])  # kB
    return -1


def _scrape(port: int) -> str:
    import httpx  # noqa: PLC0415 - only the exporter parts of the bench need it

    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return ""


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith((name + " ", name + "{}")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class ExporterProcess:
    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "trainguard.cli", "exporter", "--cluster", "bench", "--node", "bench-node",
            "--port", str(self.port), "--log", str(workdir / "logs" / "*.log"),
            "--progress-dir", str(workdir / "progress"), "--no-nvml", "--workload", "1", "--scheduler", "slurm",
            "--log-level", "WARNING",
        ]  # fmt: skip
        self.proc = subprocess.Popen(argv, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not _scrape(self.port):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("exporter did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_cpu(workdir: Path, seconds: float, rate: int = 100_000, keep_connection: bool = True) -> dict[str, Any]:
    """The exporter's CPU while it follows a log written at ``rate`` and is scraped every second: on one kept
    HTTP/1.1 connection as Prometheus scrapes (``keep_connection``), or on a new connection per scrape."""
    import httpx  # noqa: PLC0415 - only the exporter parts of the bench need it

    source = (workdir / "mixed.log").read_bytes()[: rate * int(seconds + 5)]
    home = workdir / ("cpu-kept" if keep_connection else "cpu-new")
    exp = ExporterProcess(home)
    client = httpx.Client(timeout=5) if keep_connection else None

    scrape_s: list[float] = []

    def scrape() -> None:
        t = time.perf_counter()
        if client is None:
            _scrape(exp.port)
        else:
            client.get(f"http://127.0.0.1:{exp.port}/metrics")
        scrape_s.append(time.perf_counter() - t)

    try:
        log = home / "logs" / "train.log"
        with log.open("ab", buffering=0) as f:
            time.sleep(1.0)
            cpu0, t0 = _proc_cpu(exp.proc.pid), time.monotonic()
            pos = 0
            tick = 0.1
            nxt = t0
            while time.monotonic() - t0 < seconds:
                chunk = int(rate * tick)
                f.write(source[pos : pos + chunk])
                pos += chunk
                if int((nxt - t0) / 1.0) != int((nxt + tick - t0) / 1.0):
                    scrape()  # a 1 s scrape interval, as the fast detection profile uses
                nxt += tick
                time.sleep(max(0.0, nxt - time.monotonic()))
            time.sleep(1.5)
            cpu = _proc_cpu(exp.proc.pid) - cpu0
            wall = time.monotonic() - t0
        text = _scrape(exp.port)
        read = _value(text, "trainguard_exporter_log_bytes_total")
    finally:
        if client is not None:
            client.close()
        exp.stop()
    return {
        "scrape_connection": "kept (HTTP/1.1, as Prometheus)" if keep_connection else "new per scrape",
        "log_rate_bytes_per_s": rate,
        "window_s": round(wall, 1),
        "bytes_read": int(read),
        "cpu_seconds": round(cpu, 3),
        "percent_of_one_core": round(100 * cpu / wall, 2),
        "scrape_interval_s": 1,
        "poll_interval_s": 1,
        "scrape_wall_ms_median": round(1000 * sorted(scrape_s)[len(scrape_s) // 2], 1) if scrape_s else None,
        "scrape_wall_ms_max": round(1000 * max(scrape_s), 1) if scrape_s else None,
        "target_percent": 0.5,
    }


def _xid_count(text: str) -> float:
    """The xid_79 counter in a scrape (0 before it exists)."""
    for line in text.splitlines():
        if line.startswith("trainguard_log_pattern_matches_total{") and 'pattern="xid_79_fallen_off_bus"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def bench_flood(workdir: Path, lines: int) -> dict[str, Any]:
    """From the moment the lines are in the followed file to the moment a scrape shows all of them counted."""
    blob = "".join(XID_LINE.format(t=1000 + i * 1e-3) for i in range(lines)).encode()  # made before the clock
    exp = ExporterProcess(workdir / "flood")
    try:
        log = workdir / "flood" / "logs" / "kern.log"
        log.write_text("")
        time.sleep(1.5)
        before = _scrape(exp.port)
        series_before = sum(1 for x in before.splitlines() if x.startswith("trainguard_log_pattern_matches_total{"))
        rss_before = _proc_status(exp.proc.pid, "VmRSS")
        cpu0 = _proc_cpu(exp.proc.pid)
        t0 = time.monotonic()
        with log.open("ab") as f:
            f.write(blob)  # one write: the lines are in the file (page cache) when it returns
        written = time.monotonic() - t0
        deadline = time.monotonic() + 300
        text = ""
        while time.monotonic() < deadline:
            text = _scrape(exp.port)
            if _xid_count(text) >= lines:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        cpu = _proc_cpu(exp.proc.pid) - cpu0  # includes the scrapes of the wait loop
        series_after = sum(1 for x in text.splitlines() if x.startswith("trainguard_log_pattern_matches_total{"))
        xid = [
            x for x in text.splitlines() if 'pattern="xid_79_fallen_off_bus"' in x and x.startswith("trainguard_log")
        ]
        hwm = _proc_status(exp.proc.pid, "VmHWM")
        rss_after = _proc_status(exp.proc.pid, "VmRSS")
    finally:
        exp.stop()
    return {
        "lines": lines,
        "file_mb": round(len(blob) / 1e6, 1),
        "seconds_to_count_all": round(elapsed, 2),
        "seconds_writing": round(written, 2),
        "exporter_cpu_seconds": round(cpu, 2),
        "note": "from the start of one write of all the lines to the first scrape (every 50 ms) whose xid_79 "
        "counter shows them all; includes the wait for the exporter's next read (open logs: every 0.25 s)",
        "target_seconds": 2,
        "rss_kb_before": rss_before,
        "rss_kb_after": rss_after,
        "peak_rss_kb": hwm,
        "series_before": series_before,
        "series_after": series_after,
        "xid_79_counter": xid,
    }


def main() -> int:
    quick = "20 MB log, 10 s CPU window, 100,000-line flood"
    args = bench_arguments(__doc__, quick, ROOT / "bench" / "results" / "scan.json").parse_args()
    size_mb, window, flood, rounds = (20, 10.0, 100_000, 1) if args.quick else (110, 30.0, 800_000, 3)
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-") as tmp:
        workdir = Path(tmp)
        t0 = time.perf_counter()
        gen = generate(workdir / "mixed.log", size_mb)
        print(f"generated {gen['bytes'] / 1e6:.0f} MB in {time.perf_counter() - t0:.0f} s", flush=True)
        scan = bench_scan(workdir / "mixed.log", rounds)
        print(json.dumps(scan), flush=True)
        cpu = bench_cpu(workdir, window)
        print(json.dumps(cpu), flush=True)
        cpu_new = bench_cpu(workdir, window, keep_connection=False)
        print(json.dumps(cpu_new), flush=True)
        fl = bench_flood(workdir, flood)
        print(json.dumps(fl), flush=True)
    result = {
        "benchmark": "exporter",
        "quick": args.quick,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "log": gen,
        "scan": scan,
        "cpu_at_100kb_per_s": cpu,
        "cpu_at_100kb_per_s_new_connection_per_scrape": cpu_new,
        "flood": fl,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
