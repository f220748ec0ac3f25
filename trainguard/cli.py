"""The ``trainguard`` command line: one entry point, a subcommand per job.

Each component registers its own subcommands (``responder.cli``, ``exporters.cli``), so this
module only assembles them. Exit codes: 0 success, 1 the operation failed, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from exporters import cli as exporter_cli
from responder import cli as responder_cli
from trainguard import __version__, export_cli

DESCRIPTION = """\
trainguard watches distributed training jobs and recovers them when a node fails.

  on each node:      trainguard exporter        per-rank progress and log-pattern metrics
  beside Alertmanager: trainguard serve         decide on alerts, requeue/stop/drain (monitor mode first)
  operators:         trainguard decisions       read the audit trail
                     trainguard mode CLUSTER    show or switch monitor/approve/act for a cluster
                     trainguard approve|reject ID  answer a decision waiting in approve mode
                     trainguard replay --config NEW.yaml  what a config change would have decided
                     trainguard watchdog        release jobs a stalled responder left held
  debugging:         trainguard patterns scan   run the log-pattern catalog over a log
  deploying:         trainguard rules export    alert rules; also: dashboards export, config example

Start with:  trainguard serve --db ./trainguard.db   (no config needed; monitor mode)
Every subcommand has --help.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainguard", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    responder_cli.register(sub)
    exporter_cli.register(sub)
    export_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
