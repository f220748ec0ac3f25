"""``trainguard watchdog``: release Slurm jobs that trainguard held for longer than their lease.

Fail-open. The responder holds a job only for the few hundred milliseconds between ``scontrol
requeuehold`` and ``scontrol release`` (or for a deliberate ``hold``). Before every hold it writes
``trainguard:held=<unix time>`` into the job's ``AdminComment`` (a field only Slurm operators can set,
so users cannot forge it) and clears it after the release. A responder killed in between, a stalled
decision or a lost database therefore leaves a held job *with* that mark, and this watchdog, run on
its own (systemd timer, cron, a sidecar), releases it once the mark is older than ``--max-hold``.
It needs nothing of the responder: no database, no HTTP, only Slurm. Jobs held by anyone else carry
no mark and are never touched; an operator who wants to keep a trainguard hold removes the mark
(``scontrol update JobId=N AdminComment=``).

Every release is audited as one JSON line on stdout and, with ``--audit-log``, appended to a file: an
``AuditRecord`` (docs/interfaces.md §5), the same shape the responder writes, with ``actor: watchdog``.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from responder.model import Action, AuditRecord, FailureClass, Kind, Mode, Outcome, new_id
from responder.schedulers.base import SchedulerError
from responder.schedulers.slurm.adapter import SlurmScheduler
from responder.schedulers.slurm.settings import SlurmSettings

log = logging.getLogger(__name__)

DEFAULT_MAX_HOLD_S = 300.0
DEFAULT_INTERVAL_S = 30.0


def release_stale_holds(
    scheduler: SlurmScheduler,
    max_hold_s: float,
    audit: Callable[[dict[str, Any]], None],
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[str]:
    """One pass: release every job trainguard held for ``max_hold_s`` or longer; the released job ids.

    Raises ``SchedulerError`` when Slurm cannot be asked (the caller retries on its next tick).
    A failed release of one job is audited and does not stop the others.
    """
    jobs = scheduler.list_jobs()
    t = now()
    stale = [
        j
        for j in jobs.values()
        if j.held and j.marker.held_at is not None and t.timestamp() - j.marker.held_at >= max_hold_s
    ]
    released: list[str] = []
    cluster = scheduler.settings.cluster or "default"
    for job in stale:
        held_for = t.timestamp() - (job.marker.held_at or 0)
        try:
            result = scheduler.release_job(job)
            outcome, detail = Outcome(result.outcome), result.detail
            acted_at = result.acted_at.timestamp() if result.acted_at else None
        except SchedulerError as exc:
            outcome, detail, acted_at = Outcome.FAILED, str(exc), None
        if outcome == Outcome.DONE:
            released.append(job.job_id)
        record = AuditRecord(
            id=new_id("wdg"),
            kind=Kind.DECISION,
            time=t.timestamp(),
            cluster=cluster,
            workload=job.job_id,
            scheduler="slurm",
            attempt=str(job.restart_cnt),
            incident_id=job.marker.incident,
            patterns=[],
            evidence=[],
            failure_class=FailureClass.UNKNOWN,
            implicated_nodes=[],
            action=Action.RELEASE,
            excluded_nodes=[],
            mode=Mode.ACT,
            outcome=outcome,
            reason=(
                f"held by trainguard for {held_for:.0f}s, longer than the {max_hold_s:g}s lease: "
                "released by the watchdog (fail-open)"
            ),
            detected_at=None,
            received_at=None,
            decided_at=t.timestamp(),
            acted_at=acted_at,
            detail=detail,
            actor="watchdog",
        )
        audit(record.to_json())
    return released


class _Audit:
    def __init__(self, stream: TextIO, path: Path | None) -> None:
        self._stream = stream
        self._path = path

    def __call__(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True)
        print(line, file=self._stream, flush=True)
        if self._path is not None:
            with self._path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")


def _section(doc: dict[str, Any], cluster: str | None, source: str) -> dict[str, Any]:
    """The SlurmSettings mapping in a config file: a ``slurm:`` section, the scheduler block of a
    Slurm cluster in a responder config (``clusters.<name>.scheduler`` with ``kind: slurm``), or the
    whole file."""
    if "slurm" in doc:
        section = doc["slurm"]
        if not isinstance(section, dict):
            raise ValueError(f"{source}: 'slurm' must be a mapping")
        return dict(section)
    clusters = doc.get("clusters")
    if isinstance(clusters, dict):
        slurm = {
            name: c["scheduler"]
            for name, c in clusters.items()
            if isinstance(c, dict) and isinstance(c.get("scheduler"), dict) and c["scheduler"].get("kind") == "slurm"
        }
        if cluster is not None:
            if cluster not in slurm:
                raise ValueError(f"{source}: no Slurm scheduler configured for cluster {cluster!r}")
            name = cluster
        elif len(slurm) == 1:
            name = next(iter(slurm))
        else:
            raise ValueError(f"{source}: {len(slurm)} Slurm clusters configured; name one with --cluster")
        section = {k: v for k, v in slurm[name].items() if k != "kind"}
        section.setdefault("cluster", name)
        return section
    return dict(doc)


def load_settings(args: argparse.Namespace) -> SlurmSettings:
    """SlurmSettings from ``--config`` plus flag overrides (``--slurm-conf``, ``--cluster``)."""
    data: dict[str, Any] = {}
    if args.config is not None:
        doc = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
        if not isinstance(doc, dict):
            raise ValueError(f"{args.config}: expected a mapping")
        data.update(_section(doc, args.cluster, str(args.config)))
    if args.slurm_conf is not None:
        data["slurm_conf"] = args.slurm_conf
    if args.cluster is not None:
        data["cluster"] = args.cluster
    return SlurmSettings.model_validate(data)


def run(args: argparse.Namespace, stream: TextIO = sys.stdout) -> int:
    """Handler of ``trainguard watchdog``: 0 ok, 1 Slurm could not be asked (``--once``), 2 bad config."""
    try:
        settings = load_settings(args)
    except (OSError, ValueError, ValidationError, yaml.YAMLError) as exc:
        print(f"trainguard watchdog: bad configuration: {exc}", file=sys.stderr)
        return 2
    scheduler = SlurmScheduler(settings)
    audit = _Audit(stream, Path(args.audit_log) if args.audit_log else None)
    if args.once:
        try:
            release_stale_holds(scheduler, args.max_hold, audit)
        except SchedulerError as exc:
            print(f"trainguard watchdog: slurm: {exc}", file=sys.stderr)
            return 1
        return 0
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        del signum, frame
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    while not stop.is_set():
        started = time.monotonic()
        try:
            release_stale_holds(scheduler, args.max_hold, audit)
        except SchedulerError as exc:
            log.warning("watchdog pass failed (will retry): %s", exc)
            print(f"trainguard watchdog: slurm: {exc}", file=sys.stderr, flush=True)
        stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    return 0


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``trainguard watchdog`` on the subparsers object ``sub``."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "watchdog",
        help="release Slurm jobs a stalled or killed responder left held (fail-open)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        help="YAML file: the responder's (clusters.<name>.scheduler with kind: slurm) or one with a 'slurm:' section",
    )
    parser.add_argument("--slurm-conf", help="SLURM_CONF for the local transport")
    parser.add_argument("--cluster", help="which cluster of --config; also the cluster in audit records")
    parser.add_argument(
        "--max-hold",
        type=_positive,
        default=DEFAULT_MAX_HOLD_S,
        help=f"release trainguard holds older than this many seconds (default {DEFAULT_MAX_HOLD_S:g})",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one pass, then exit (systemd timer, cron)")
    mode.add_argument(
        "--interval",
        type=_positive,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between passes when running as a service (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument("--audit-log", help="also append each audit record (JSON line) to this file")
    parser.set_defaults(handler=run)
    return parser
