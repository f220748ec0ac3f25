"""Subcommands of the responder: ``serve``, ``decisions`` and ``mode``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from responder import approval_cli, node_groups_cli, replay_cli
from responder.errors import ConfigError
from responder.model import Mode
from responder.schedulers.slurm import watchdog

if TYPE_CHECKING:
    from responder.store.sql import SqlStore

DEFAULT_URL = "http://127.0.0.1:9480"

SERVE_HELP = """\
Run the responder: Alertmanager posts notifications to POST /v1/alerts; the responder groups them into
one incident per workload attempt, attributes the fault, decides, and writes an audit record.

Every cluster starts in monitor mode: decisions are recorded and nothing touches a scheduler until an
operator runs `trainguard mode CLUSTER act`. Works without a config file:

  trainguard serve --db /var/lib/trainguard/trainguard.db

Secrets come from the environment or files, never flags: TRAINGUARD_WEBHOOK_TOKEN (or webhook_token_file
in the config) for Alertmanager, TRAINGUARD_OPERATOR_TOKEN for mode changes and reviews,
TRAINGUARD_READ_TOKEN for reads where read_token is set. Any setting can
be overridden by TRAINGUARD_<KEY> (nested keys with __, e.g. TRAINGUARD_BREAKER__MAX_ACTIONS=10).
See docs/configuration.md.
"""


def register(sub: Any) -> None:
    """Add the responder's subcommands to the ``trainguard`` parser."""
    serve = sub.add_parser(
        "serve", help="run the responder (webhook receiver and decision engine)", description=SERVE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    serve.add_argument("--config", type=Path, help="YAML configuration file (optional)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 9480)")
    serve.add_argument("--db", type=Path, help="SQLite audit store path (default ./trainguard.db)")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default info")
    serve.set_defaults(handler=_serve)

    decisions = sub.add_parser(
        "decisions",
        help="query the audit trail",
        description="List audit records (newest first) from a running responder, or straight from its store: "
        "a SQLite file (--db) or the PostgreSQL database replicas share (--store-url, read in a read-only "
        "session; the password comes from PGPASSWORD or PGPASSFILE, never the URL).",
    )
    source = decisions.add_mutually_exclusive_group()
    source.add_argument("--url", help=f"responder URL (default $TRAINGUARD_URL or {DEFAULT_URL})")
    source.add_argument("--db", type=Path, help="read the SQLite store directly instead (read-only use)")
    source.add_argument("--store-url", help="read a PostgreSQL store directly instead: postgresql://user@host:port/db")
    decisions.add_argument("--cluster")
    decisions.add_argument("--workload")
    decisions.add_argument("--action", help="requeue, requeue_excluding, stop, drain_node, none, ...")
    decisions.add_argument("--mode", choices=[m.value for m in Mode])
    decisions.add_argument("--since", help="RFC 3339 time, e.g. 2026-11-29T00:00:00Z")
    decisions.add_argument("--limit", type=int, default=20, help="default 20")
    decisions.add_argument("--id", help="show one record in full, with its evidence")
    decisions.add_argument("--json", action="store_true", help="one JSON object per line")
    decisions.set_defaults(handler=_decisions)

    mode = sub.add_parser(
        "mode",
        help="show or switch a cluster between monitor, approve and act",
        description=(
            "Show a cluster's mode, or switch it. In monitor mode (the default) decisions are only recorded; in "
            "approve mode they wait for `trainguard approve ID`; in act mode they are carried out through the "
            "scheduler. Needs the operator token "
            "(TRAINGUARD_OPERATOR_TOKEN) unless the responder has none configured and you call it from loopback. "
            "A cluster that is neither configured nor seen is refused without --create; act mode is refused for a "
            "cluster with no scheduler configured."
        ),
    )
    mode.add_argument("cluster", help="cluster name, as in the alerts' cluster label")
    mode.add_argument("mode", nargs="?", choices=[m.value for m in Mode], help="new mode; omit to show the current one")
    mode.add_argument(
        "--create", action="store_true", help="switch a cluster neither configured nor seen yet (else refused)"
    )
    mode.add_argument(
        "--group",
        help="a node group of the cluster (node_groups): show or switch its mode only; give it before CLUSTER",
    )
    mode.add_argument("--url", help=f"responder URL (default $TRAINGUARD_URL or {DEFAULT_URL})")
    mode.set_defaults(handler=_mode)

    approval_cli.add_parsers(sub, _call, _operator_headers, DEFAULT_URL)
    replay_cli.add_parser(sub)
    watchdog.add_parser(sub)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - only the server needs it
    from prometheus_client import CollectorRegistry  # noqa: PLC0415
    from pydantic import ValidationError  # noqa: PLC0415

    from responder.app import create_app  # noqa: PLC0415
    from responder.clock import SystemClock  # noqa: PLC0415
    from responder.guardrails import act_without_scheduler  # noqa: PLC0415
    from responder.lease import open_store  # noqa: PLC0415
    from responder.schedulers.router import build_schedulers  # noqa: PLC0415
    from responder.settings import load_settings  # noqa: PLC0415

    try:
        settings = load_settings(args.config, host=args.host, port=args.port, db_path=args.db, log_level=args.log_level)
        settings.webhook_secret()
        settings.operator_secret()
        registry = CollectorRegistry()
        scheduler = build_schedulers(settings.schedulers(), registry)
        refused = act_without_scheduler(settings, scheduler)
        if refused:
            raise ConfigError("; ".join(refused) + " (set the scheduler, or mode: monitor)")
    except (ConfigError, ValueError, ValidationError) as exc:
        print(f"trainguard serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    log = logging.getLogger("trainguard")
    store, lease = open_store(settings)
    app = create_app(settings, store, scheduler, SystemClock(), registry=registry, lease=lease)
    modes = {name: app.state.services.engine.mode(name) for name in settings.clusters}
    log.info(
        "trainguard responder on %s://%s:%d, store %s, default mode %s, clusters %s, webhook token %s",
        "https" if settings.tls_certfile else "http", settings.host, settings.port,
        settings.store.url or settings.db_path, settings.default_mode, modes or "(none configured)",
        "required" if settings.webhook_secret() else "NOT configured",
    )  # fmt: skip
    cert, key = settings.tls_certfile, settings.tls_keyfile
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                ssl_certfile=str(cert) if cert else None, ssl_keyfile=str(key) if key else None)  # fmt: skip
    store.close()
    return 0


def _base_url(args: argparse.Namespace) -> str:
    return str(args.url or os.environ.get("TRAINGUARD_URL") or DEFAULT_URL).rstrip("/")


def _operator_headers() -> dict[str, str]:
    token = os.environ.get("TRAINGUARD_OPERATOR_TOKEN")
    path = os.environ.get("TRAINGUARD_OPERATOR_TOKEN_FILE")
    if not token and path:
        token = Path(path).read_text().strip()
    return {"Authorization": f"Bearer {token}"} if token else {}


def _read_headers() -> dict[str, str]:
    """The read token (TRAINGUARD_READ_TOKEN), else the operator token: reads may need one (read_token)."""
    token = os.environ.get("TRAINGUARD_READ_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else _operator_headers()


def _call(command: str, args: argparse.Namespace, send: Callable[[httpx.Client], httpx.Response]) -> Any:
    """The JSON body of one API call, or the exit code: 1 unreachable or a server error, 2 refused."""
    url = _base_url(args)
    try:
        with httpx.Client(base_url=url, timeout=10, headers=_read_headers()) as client:
            response = send(client)
    except httpx.HTTPError as exc:
        print(f"trainguard {command}: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        print(f"trainguard {command}: {response.status_code} {_detail(response)}", file=sys.stderr)
        return 1 if response.status_code >= 500 else 2
    return response.json()


def _detail(response: httpx.Response) -> str:
    """The error's own words (``{"error", "detail"}``) rather than raw JSON, where the body has them."""
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict) and "detail" in body:
        return f"{body.get('error', '')}: {body['detail']}"
    return response.text


def _decisions(args: argparse.Namespace) -> int:
    if args.db is not None or args.store_url is not None:
        return _decisions_from_store(args)
    params = {k: v for k in ("cluster", "workload", "action", "mode", "since") if (v := getattr(args, k))}
    params["limit"] = str(args.limit)
    path = f"/v1/decisions/{args.id}" if args.id else "/v1/decisions"
    body = _call("decisions", args, lambda client: client.get(path, params={} if args.id else params))
    if isinstance(body, int):
        return body
    if args.id:
        print(json.dumps(body, indent=2))
        return 0
    _print_records(body["decisions"], args.json)
    return 0


def _open_store(args: argparse.Namespace) -> SqlStore | int:
    """The store ``--db`` or ``--store-url`` names, or the exit code: 2 a bad argument, 1 unreadable."""
    if args.db is not None:
        from responder.store.sqlite import SqliteStore  # noqa: PLC0415

        if not args.db.exists():
            print(f"trainguard decisions: no store at {args.db}", file=sys.stderr)
            return 2
        return SqliteStore(args.db)
    from responder.store.config import postgres_url  # noqa: PLC0415

    try:
        url = postgres_url(args.store_url, "--store-url")
        import psycopg  # noqa: PLC0415 - psycopg only for --store-url

        from responder.store.postgres import PostgresStore  # noqa: PLC0415
    except ImportError:
        print("trainguard decisions: --store-url needs psycopg: pip install 'trainguard[postgres]'", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"trainguard decisions: {exc}", file=sys.stderr)
        return 2
    try:
        return PostgresStore(url, busy_timeout_s=10.0, read_only=True)
    except (psycopg.Error, RuntimeError) as exc:  # out of reach, refused, or no trainguard store there
        print(f"trainguard decisions: cannot read {url}: {exc}", file=sys.stderr)
        return 1


def _decisions_from_store(args: argparse.Namespace) -> int:
    from responder.clock import parse_rfc3339  # noqa: PLC0415
    from responder.store import RecordQuery  # noqa: PLC0415

    store = _open_store(args)
    if isinstance(store, int):
        return store
    try:
        if args.id:
            record = store.record(args.id)
            if record is None:
                print(f"trainguard decisions: no decision {args.id!r}", file=sys.stderr)
                return 1
            print(json.dumps(record.to_json(), indent=2))
            return 0
        since = parse_rfc3339(args.since) if args.since else None
        query = RecordQuery(args.cluster, args.workload, args.action, args.mode, since=since, limit=args.limit)
        _print_records([r.to_json() for r in store.records(query)], args.json)
    finally:
        store.close()
    return 0


def _print_records(records: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        for record in records:
            print(json.dumps(record, sort_keys=True))
        return
    if not records:
        print("no decisions")
        return
    for r in records:
        nodes = f" excluding {','.join(r['excluded_nodes'])}" if r["excluded_nodes"] else ""
        print(
            f"{r['time']}  {r['id']}  {r['cluster']}/{r['workload']} attempt {r['attempt'] or '?'}  "
            f"{r['action']}{nodes}  [{r['mode']}, {r['outcome']}]\n    {r['reason']}"
        )


def _mode(args: argparse.Namespace) -> int:
    if args.group is not None:
        return node_groups_cli.group_mode(args, _call, _operator_headers)
    path = f"/v1/clusters/{args.cluster}/mode"

    def send(client: httpx.Client) -> httpx.Response:
        if args.mode is None:
            return client.get(path)
        return client.put(path, json={"mode": args.mode, "create": args.create}, headers=_operator_headers())

    body = _call("mode", args, send)
    if isinstance(body, int):
        return body
    print(f"{body['cluster']}: {body['mode']}")
    if body.get("known") is False:
        print(f"trainguard mode: cluster {body['cluster']!r} is unknown (not configured, no records): a typo?",
              file=sys.stderr)  # fmt: skip
        return 2
    return node_groups_cli.print_groups(args, _call)
