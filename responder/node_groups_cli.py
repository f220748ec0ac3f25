"""``trainguard mode --group GROUP CLUSTER [MODE]``, and the groups' lines under ``trainguard mode CLUSTER``.

Both call the responder's API (``responder.api_node_groups``) with the operator token for a switch, so
a group's switch is checked and logged as a cluster's is.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import httpx

Call = Callable[[str, argparse.Namespace, Callable[[httpx.Client], httpx.Response]], Any]


def group_mode(args: argparse.Namespace, call: Call, headers: Callable[[], dict[str, str]]) -> int:
    """Show or switch one node group's mode: 0 done, 1 unreachable or a server error, 2 refused."""
    path = f"/v1/clusters/{args.cluster}/groups/{args.group}/mode"

    def send(client: httpx.Client) -> httpx.Response:
        if args.mode is None:
            return client.get(path)
        return client.put(path, json={"mode": args.mode}, headers=headers())

    body = call("mode", args, send)
    if isinstance(body, int):
        return body
    print(f"{body['cluster']} group {body['group']}: {body['mode']} ({_source(body['source'])})")
    return 0


def print_groups(args: argparse.Namespace, call: Call) -> int:
    """After a cluster's mode: each of its node groups, and which keep a mode of their own."""
    body = call("mode", args, lambda client: client.get(f"/v1/clusters/{args.cluster}/groups"))
    if isinstance(body, int):
        return body
    for group in body["groups"]:
        own = group["source"] != "cluster" and group["mode"] != body["mode"]
        hint = f"; switch it with trainguard mode --group {group['group']} {args.cluster} MODE" if own else ""
        print(f"  group {group['group']}: {group['mode']} ({_source(group['source'])}{hint})")
    return 0


def _source(source: str) -> str:
    return {"operator": "set by an operator", "configured": "configured", "cluster": "follows the cluster"}.get(
        source, source
    )
