"""``trainguard approve ID`` and ``trainguard reject ID``: answer a decision waiting in approve mode.

They call the responder's API (``POST /v1/decisions/{id}/approve|reject``) with the operator token
from ``TRAINGUARD_OPERATOR_TOKEN`` (or ``_FILE``), so the answer is checked and recorded exactly as the
console's is. Exit codes: 0 answered, 1 unreachable or a server error, 2 refused (unknown id, already
answered or expired, bad token).
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable
from typing import Any

import httpx

Call = Callable[[str, argparse.Namespace, Callable[[httpx.Client], httpx.Response]], Any]


def add_parsers(sub: Any, call: Call, headers: Callable[[], dict[str, str]], default_url: str) -> None:
    """Register ``approve`` and ``reject``; ``call`` and ``headers`` are ``responder.cli``'s client helpers."""
    for verb, what in (("approve", "carry out"), ("reject", "drop")):
        parser = sub.add_parser(
            verb,
            help=f"{verb} a decision waiting in approve mode",
            description=(
                f"{verb.capitalize()} a decision that waits for an operator (outcome awaiting_approval): the "
                f"responder will {what} its action. Who, when and the token identity go into the audit record. "
                "Needs the operator token (TRAINGUARD_OPERATOR_TOKEN or TRAINGUARD_OPERATOR_TOKEN_FILE) unless "
                "the responder has none and you run on its host."
            ),
        )
        parser.add_argument("id", help="decision id, as `trainguard decisions` prints it (dec_...)")
        parser.add_argument("--by", default=None, help="your name for the record (default: your login name)")
        parser.add_argument("--note", default="", help="why, for the record")
        parser.add_argument("--url", help=f"responder URL (default $TRAINGUARD_URL or {default_url})")
        parser.set_defaults(handler=_handler(verb, call, headers))


def _handler(verb: str, call: Call, headers: Callable[[], dict[str, str]]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        body = {"by": args.by if args.by is not None else getpass.getuser(), "note": args.note}

        def send(client: httpx.Client) -> httpx.Response:
            return client.post(f"/v1/decisions/{args.id}/{verb}", json=body, headers=headers())

        answer = call(verb, args, send)
        if isinstance(answer, int):
            return answer
        approval = answer.get("approval", {})
        print(f"{answer['id']}: {answer['outcome']} ({approval.get('state')} by {approval.get('by')}, "
              f"{approval.get('identity')})")  # fmt: skip
        return 0

    return run
