"""``trainguard rules|dashboards|config``: write the files a deployment needs from the installed package
(docs/deploy-slurm.md, docs/deploy-kubernetes.md). Exit 2 on a bad name, 1 when a file cannot be written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from trainguard import assets


def register(sub: Any) -> None:
    rules = sub.add_parser("rules", help="export the alert rules").add_subparsers(dest="what", metavar="ACTION")
    export = rules.add_parser(
        "export", help="the rule files of one profile", description="Without --out: one merged rule file on stdout."
    )
    export.add_argument("--profile", default="production", choices=assets.PROFILES, help="default production")
    export.add_argument("--out", type=Path, help="write one file per rule group file into this folder")
    export.add_argument(
        "--runbook-url", help="your copy of docs/runbook.md: every runbook_url points there (anchors kept)"
    )
    export.set_defaults(handler=_rules)

    dashboards = sub.add_parser("dashboards", help="export the Grafana dashboards")
    dash = dashboards.add_subparsers(dest="what", metavar="ACTION")
    dash_export = dash.add_parser("export", help="dashboards JSON (DIR/json) and provisioning (DIR/provisioning)")
    dash_export.add_argument("dir", type=Path)
    dash_export.set_defaults(handler=_dashboards)

    config = sub.add_parser("config", help="configuration examples").add_subparsers(dest="what", metavar="ACTION")
    names = "\n".join(f"  {k:<22} {v}" for k, v in {**assets.EXAMPLES, "systemd": "the systemd units"}.items())
    ex = config.add_parser(
        "example", help="print an example, or write the systemd units", description=f"Examples:\n{names}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    ex.add_argument("name", nargs="?", default="responder", help="which example (default responder)")
    ex.add_argument("--profile", default="production", help="prometheus/alertmanager profile (default production)")
    ex.add_argument("--rules-dir", default="/etc/prometheus/trainguard", help="prometheus: where the rules are")
    ex.add_argument("--out", type=Path, help="write here instead of stdout (systemd: a folder, required)")
    ex.add_argument("--venv", help=f"systemd: the virtualenv in ExecStart (default this one: {sys.prefix})")
    ex.set_defaults(handler=_config)


def _rules(args: argparse.Namespace) -> int:
    if args.out is None:
        sys.stdout.write(assets.merged_rules(args.profile, args.runbook_url))
        return 0
    return _report(lambda: assets.export_rules(args.profile, args.out, args.runbook_url))


def _dashboards(args: argparse.Namespace) -> int:
    return _report(lambda: assets.export_dashboards(args.dir))


def _config(args: argparse.Namespace) -> int:
    if args.name == "systemd":
        if args.out is None:
            print("trainguard config example systemd: --out DIR is required", file=sys.stderr)
            return 2
        return _report(lambda: assets.export_units(args.out, args.venv))
    try:
        text = assets.example(args.name, args.profile, args.rules_dir)
    except assets.AssetError as exc:
        print(f"trainguard config example: {exc}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text)
        return 0
    return _report(lambda: [_write(args.out, text)])


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _report(write: Any) -> int:
    try:
        written: list[Path] = write()
    except assets.AssetError as exc:
        print(f"trainguard: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"trainguard: cannot write: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0
