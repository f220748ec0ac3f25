"""``trainguard replay --config NEW.yaml [--since 7d]``: what a new configuration would have decided.

Reads the audit store and prints, per decision the new policy would change, the recorded decision
beside the new one and the operator's review, then the precision on reviewed decisions, recorded and
replayed. Writes nothing and calls no scheduler (``responder.replay``). Exit codes: 0 report printed,
2 bad input (config, --since, missing store).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from responder.clock import parse_rfc3339, rfc3339
from responder.errors import ConfigError
from responder.replay import Precision, ReplayReport, replay
from responder.settings import load_settings

_SPAN = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "replay",
        help="re-run attribution and policy of a new config over past incidents (no side effects)",
        description=(
            "Re-decide the incidents in the audit store under NEW.yaml's policy and print the decisions "
            "that would change, beside the recorded ones and their reviews, and the precision the new "
            "policy would have had on reviewed decisions. Decides from the stored alerts alone (Prometheus "
            "context is not stored; such decisions are marked); the circuit breaker is not replayed. "
            "Writes nothing, calls no scheduler."
        ),
    )
    parser.add_argument("--config", type=Path, required=True, help="the candidate configuration (YAML)")
    parser.add_argument("--since", help="only incidents decided since: a span (7d, 12h, 30m) or RFC 3339 time")
    parser.add_argument("--db", type=Path, help="audit store (default: the config's db_path)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.set_defaults(handler=_replay)


def parse_since(value: str | None, now: float) -> float | None:
    """``7d``-style spans back from ``now``, or an RFC 3339 time; ``ValueError`` names what is accepted."""
    if value is None:
        return None
    match = _SPAN.match(value.strip())
    if match:
        return now - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        return parse_rfc3339(value)
    except ValueError as exc:
        raise ValueError(f"--since: {value!r} is neither a span like 7d, 12h, 30m nor an RFC 3339 time") from exc


def _replay(args: argparse.Namespace) -> int:
    from responder.store.sqlite import SqliteStore  # noqa: PLC0415 - only this command needs the store

    try:
        settings = load_settings(args.config)
        since = parse_since(args.since, time.time())
    except (ConfigError, ValueError) as exc:
        print(f"trainguard replay: {exc}", file=sys.stderr)
        return 2
    db = args.db or settings.db_path
    if not db.exists():
        print(f"trainguard replay: no audit store at {db}", file=sys.stderr)
        return 2
    store = SqliteStore(db)
    try:
        report = replay(store, settings, since)
    finally:
        store.close()
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    return 0


def render(report: ReplayReport) -> str:
    lines = [f"{len(report.rows)} decisions replayed, {len(report.changed)} would change"]
    for row in report.changed:
        nodes = f" [{', '.join(row.recorded_nodes)}]" if row.recorded_nodes else ""
        new_nodes = f" [{', '.join(row.new_nodes)}]" if row.new_nodes else ""
        marks = " (recorded with Prometheus context)" if row.context else ""
        lines.append(
            f"{rfc3339(row.time)}  {row.id}  {row.cluster}/{row.workload} attempt {row.attempt or '-'}{marks}\n"
            f"    recorded: {row.recorded_action}{nodes} ({row.recorded_outcome})   review: {row.review or '-'}\n"
            f"    new:      {row.new_action}{new_nodes}: {row.new_reason}"
        )
    lines.append("precision on reviewed decisions that acted:")
    lines.append(f"    recorded: {_share(report.recorded)} of {report.recorded.reviewed} reviewed")
    new = report.new
    lines.append(
        f"    new:      {_share(new)} of {new.judged} judged; {new.unjudged} would act differently (no review "
        f"covers them); would not act on {new.dropped_wrong} reviewed wrong, {new.dropped_correct} reviewed correct"
    )
    return "\n".join(lines)


def _share(p: Precision) -> str:
    return "n/a" if p.precision is None else f"{p.precision:.2f} ({p.correct} correct)"
