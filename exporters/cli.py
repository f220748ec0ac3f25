"""Subcommands of the node-side exporter: ``trainguard exporter`` and ``trainguard patterns``."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from exporters import patterns_cli
from exporters.exporter import Exporter, ExporterConfig
from exporters.progress import DEFAULT_DIR, identity_from_environ
from exporters.rows import CatalogError
from exporters.state import DEFAULT_PROGRESS_PATTERNS, compile_progress_patterns
from trainguard.identity import (
    IdentityError,
    validate_cluster,
    validate_decimal,
    validate_host,
    validate_scheduler,
    validate_workload,
)

EXPORTER_HELP = """\
Run on every node of the cluster (systemd unit, Slurm prolog, or Kubernetes DaemonSet). Serves
Prometheus metrics at http://LISTEN:PORT/metrics:

  - log-pattern counters: follows the training logs (--log, a glob, repeatable) and the kernel log
    (--kernel-log) and counts lines that match the pattern catalog (NCCL timeouts, CUDA errors, XIDs...)
  - per-rank progress: reads the state files that training code writes with exporters.progress
    (--progress-dir), or parses step numbers from the logs (--log-progress)
  - GPU faults through NVML when nvidia-ml-py and a GPU are present (XID events, ECC, row remap, NVLink)

Example (Slurm, one per node):
  trainguard exporter --cluster lab --log '/shared/logs/*/rank*.log' --kernel-log /dev/kmsg

Every option also reads an environment variable (shown) or a key of the --config YAML file (the option
name with '_' for '-'); the command line wins over the environment, which wins over the file.
Identity labels of the workload come from the progress state files; --workload and friends (or
SLURM_JOB_ID / SLURM_RESTART_COUNT in the exporter's own environment) name it when there are none.
Metrics: docs/metrics.md. Catalog: docs/patterns.md.
"""

# option dest -> (environment variable, type for the file/env value)
_ENV: dict[str, tuple[str, type]] = {
    "cluster": ("TRAINGUARD_CLUSTER", str),
    "node": ("TRAINGUARD_NODE", str),
    "listen": ("TRAINGUARD_EXPORTER_LISTEN", str),
    "port": ("TRAINGUARD_EXPORTER_PORT", int),
    "log": ("TRAINGUARD_LOG_GLOBS", list),
    "kernel_log": ("TRAINGUARD_KERNEL_LOG", str),
    "progress_dir": ("TRAINGUARD_PROGRESS_DIR", str),
    "catalog": ("TRAINGUARD_CATALOG", str),
    "poll_interval": ("TRAINGUARD_POLL_INTERVAL", float),
    "alertmanager_url": ("TRAINGUARD_ALERTMANAGER_URL", str),
    "workload": ("TRAINGUARD_WORKLOAD", str),
    "scheduler": ("TRAINGUARD_SCHEDULER", str),
    "attempt": ("TRAINGUARD_ATTEMPT", str),
    "rank_from_path": ("TRAINGUARD_RANK_FROM_PATH", str),
    "progress_pattern": ("TRAINGUARD_PROGRESS_PATTERNS", list),
    "max_identities": ("TRAINGUARD_MAX_IDENTITIES", int),
}
_DEFAULTS: dict[str, Any] = {
    "listen": "127.0.0.1",
    "port": 9481,
    "log": [],
    "progress_dir": DEFAULT_DIR,
    "poll_interval": 1.0,
    "rank_from_path": r"rank[-_.]?(\d+)",
    "progress_pattern": [],
    "max_identities": 1024,
}


class UsageError(ValueError):
    pass


def _env_option(p: argparse.ArgumentParser, env: Mapping[str, str], flag: str, text: str, **kwargs: Any) -> None:
    """Add ``flag``; its help, ``text``, ends with the environment variable that also sets it."""
    p.add_argument(flag, help=f"{text} [{env[flag[2:].replace('-', '_')]}]", **kwargs)


def _workload_options(p: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    """The exporter's options for lines no state file names, progress parsing, NVML and the identity cap."""
    _env_option(p, env, "--workload", "workload label for log lines when no state file names it")
    _env_option(p, env, "--scheduler", "scheduler label with --workload", choices=["slurm", "jobset", "pytorchjob"])
    _env_option(p, env, "--attempt", "attempt label with --workload (default 0)")
    _env_option(
        p,
        env,
        "--rank-from-path",
        r"regex whose group 1 is the rank in a log file's name (default 'rank[-_.]?(\d+)'; '' for none)",
        metavar="REGEX",
    )
    p.add_argument(
        "--log-progress",
        action="store_true",
        default=None,
        help="parse 'step N' / 'iteration N/M' from the logs for ranks without the progress hook",
    )
    _env_option(
        p,
        env,
        "--progress-pattern",
        "a progress regex with a (?P<step>...) group (implies --log-progress); repeatable",
        action="append",
        metavar="REGEX",
    )
    p.add_argument("--no-nvml", action="store_true", default=None, help="do not try NVML even where it is installed")
    _env_option(p, env, "--max-identities", "cap on identity label sets for log counters (default 1024)", type=int)


def register(sub: Any) -> None:
    """Add the exporter's subcommands to the ``trainguard`` parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "exporter",
        help="node-side exporter: progress, log patterns, GPU faults",
        description=EXPORTER_HELP,
        formatter_class=fmt,
    )
    env = {k: v[0] for k, v in _ENV.items()}
    p.add_argument("--config", type=Path, help="YAML file with any of the options below (keys as dest names)")
    _env_option(p, env, "--cluster", "cluster name for the 'cluster' label (required)")
    _env_option(p, env, "--node", "this node's name for 'host' (default: SLURMD_NODENAME, NODE_NAME, hostname)")
    _env_option(p, env, "--listen", "address to serve /metrics on (default 127.0.0.1)", metavar="ADDR")
    _env_option(p, env, "--port", "port to serve /metrics on (default 9481)", type=int)
    p.add_argument(
        "--log",
        action="append",
        metavar="GLOB",
        help=f"training log files to follow, a glob ('**' allowed); repeatable [{env['log']}, comma-separated]",
    )
    _env_option(
        p,
        env,
        "--kernel-log",
        "kernel log for 'NVRM: Xid' lines: /dev/kmsg or a file such as /var/log/kern.log",
        metavar="PATH",
    )
    _env_option(
        p,
        env,
        "--progress-dir",
        f"where training's progress hook writes state files (default {DEFAULT_DIR})",
        metavar="DIR",
    )
    _env_option(p, env, "--catalog", "pattern catalog (default: the one shipped)", metavar="CSV")
    _env_option(
        p,
        env,
        "--poll-interval",
        "how often log globs (new, rotated files) and state files are checked (default 1); open logs: every 0.25 s",
        type=float,
        metavar="SECONDS",
    )
    _env_option(
        p,
        env,
        "--alertmanager-url",
        "fast path: also POST critical alerts to this Alertmanager (http://am:9093)",
        metavar="URL",
    )
    p.add_argument(
        "--from-start",
        action="store_true",
        default=None,
        help="read log files present at start-up from their beginning (default: from their end)",
    )
    _workload_options(p, env)
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(handler=run_exporter)

    patterns_cli.register(sub, fmt)


# -- exporter ---------------------------------------------------------------------------------------


def resolve_options(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, Any]:
    """Command line over environment over config file over defaults; raises UsageError."""
    file_values: dict[str, Any] = {}
    if args.config is not None:
        try:
            loaded = yaml.safe_load(args.config.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise UsageError(f"--config {args.config}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise UsageError(f"--config {args.config}: expected a mapping of options")
        section = loaded.get("exporter", loaded)
        file_values = {str(k).replace("-", "_"): v for k, v in section.items()}
        unknown = set(file_values) - set(_ENV) - {"from_start", "log_progress", "no_nvml"}
        if unknown:
            raise UsageError(f"--config {args.config}: unknown keys {sorted(unknown)}")
    opts: dict[str, Any] = {}
    for dest in [*_ENV, "from_start", "log_progress", "no_nvml"]:
        value = getattr(args, dest, None)
        if value is None and dest in _ENV:
            var, kind = _ENV[dest]
            raw = environ.get(var)
            if raw:
                try:
                    value = [s for s in raw.split(",") if s] if kind is list else kind(raw)
                except ValueError as exc:
                    raise UsageError(f"{var}={raw!r}: not a {kind.__name__}") from exc
        if value is None:
            value = file_values.get(dest)
        if value is None:
            value = _DEFAULTS.get(dest)
        opts[dest] = value
    return opts


def build_config(opts: Mapping[str, Any], environ: Mapping[str, str]) -> ExporterConfig:
    if not opts["cluster"]:
        raise UsageError("--cluster (or TRAINGUARD_CLUSTER) is required: the name of this cluster")
    try:
        cluster = validate_cluster(str(opts["cluster"]))
        node = (
            opts["node"]
            or environ.get("SLURMD_NODENAME")
            or environ.get("NODE_NAME")
            or socket.gethostname().split(".")[0]
        )
        node = validate_host(str(node))
        workload, scheduler, attempt = opts["workload"], opts["scheduler"], opts["attempt"]
        if not workload and (
            environ.get("SLURM_JOB_ID") or environ.get("JOBSET_NAME") or environ.get("PYTORCHJOB_NAME")
        ):
            env_ident = identity_from_environ(environ)
            workload, scheduler = env_ident.get("workload"), env_ident.get("scheduler")
            attempt = attempt or env_ident.get("attempt")
        if workload:
            scheduler = validate_scheduler(str(scheduler or ("slurm" if "/" not in str(workload) else "jobset")))
            workload = validate_workload(str(workload), scheduler)
            attempt = validate_decimal("attempt", str(attempt or "0"))
    except IdentityError as exc:
        raise UsageError(str(exc)) from exc
    patterns = list(opts["progress_pattern"] or [])
    if opts["log_progress"] and not patterns:
        patterns = list(DEFAULT_PROGRESS_PATTERNS)
    try:
        compile_progress_patterns(patterns)
    except (ValueError, re.error) as exc:
        raise UsageError(f"--progress-pattern: {exc}") from exc
    if float(opts["poll_interval"]) <= 0:
        raise UsageError("--poll-interval must be positive")
    return ExporterConfig(
        cluster=cluster,
        host=node,
        listen=str(opts["listen"]),
        port=int(opts["port"]),
        log_globs=list(opts["log"] or []),
        kernel_log=opts["kernel_log"] or None,
        progress_dir=Path(str(opts["progress_dir"])),
        catalog=Path(str(opts["catalog"])) if opts["catalog"] else None,
        poll_interval=float(opts["poll_interval"]),
        from_start=bool(opts["from_start"]),
        rank_from_path=opts["rank_from_path"] or None,
        progress_patterns=patterns,
        workload=workload or None,
        scheduler=scheduler if workload else None,
        attempt=attempt if workload else None,
        alertmanager_url=opts["alertmanager_url"] or None,
        nvml=not opts["no_nvml"],
        max_identities=int(opts["max_identities"]),
    )


def run_exporter(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = build_config(resolve_options(args, os.environ), os.environ)
        exporter = Exporter(config, CollectorRegistry(auto_describe=False))
    except (UsageError, CatalogError) as exc:
        print(f"trainguard exporter: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        exporter.start()
    except OSError as exc:
        print(f"trainguard exporter: cannot listen on {config.listen}:{config.port}: {exc.strerror}", file=sys.stderr)
        return 1
    logging.getLogger("trainguard.exporter").info(
        "serving http://%s:%d/metrics; following %s; progress %s",
        config.listen,
        config.port,
        config.log_globs or "no logs",
        config.progress_dir,
    )
    stop.wait()
    exporter.stop()
    return 0
