#!/usr/bin/env python3
"""Forced command for trainguard's SSH key on a Slurm head node (standard library only).

Install it as ``/usr/local/libexec/trainguard-ssh-command`` and force it in ``authorized_keys``:

    restrict,command="/usr/local/libexec/trainguard-ssh-command" ssh-ed25519 AAAA... trainguard

sshd then runs this script for every connection and puts what the client asked for into
``SSH_ORIGINAL_COMMAND``. The script splits it with ``shlex`` (no shell ever sees it), allows only the
exact command forms trainguard's Slurm adapter sends, validates every argument, and ``exec``s the
Slurm binary with an argv list. Anything else is refused with exit status 126 and a message on
stderr (sshd logs the connection). Edit ``BIN_DIR`` below if the Slurm binaries are not in /usr/bin.

Allowed (and nothing else):
    squeue --json
    sinfo --json
    scontrol ping
    scontrol requeue|requeuehold|hold|release JOBID
    scontrol update JobId=JOBID [ExcNodeList=NODES] [AdminComment=MARKER]
    scontrol update NodeName=NODE State=DRAIN Reason="trainguard: INCIDENT"
    scontrol update NodeName=NODE State=RESUME
    scancel JOBID
"""

from __future__ import annotations

import os
import re
import shlex
import sys

BIN_DIR = "/usr/bin"

JOB = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,7})?")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
NODES = re.compile(rf"(?:{HOST.pattern}(?:,{HOST.pattern})*)?")
INCIDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
# trainguard's AdminComment: the site's own words kept verbatim (printable, no quotes or shell
# metacharacters needed since nothing is a shell) plus trainguard:key=value tokens.
MARKER = re.compile(r"[A-Za-z0-9 _.,:;=/@+%-]{0,1024}")


def _job_update(args: list[str]) -> bool:
    if not args or not args[0].startswith("JobId=") or not JOB.fullmatch(args[0][6:]):
        return False
    seen: set[str] = set()
    for arg in args[1:]:
        key, sep, value = arg.partition("=")
        if not sep or key in seen:
            return False
        seen.add(key)
        if key == "ExcNodeList" and NODES.fullmatch(value) and len(value) <= 65536:
            continue
        if key == "AdminComment" and MARKER.fullmatch(value):
            continue
        return False
    return bool(seen)


def _node_update(args: list[str]) -> bool:
    if not args or not args[0].startswith("NodeName=") or not HOST.fullmatch(args[0][9:]):
        return False
    rest = args[1:]
    if rest == ["State=RESUME"]:
        return True
    if len(rest) == 2 and rest[0] == "State=DRAIN" and rest[1].startswith("Reason=trainguard: "):
        return bool(INCIDENT.fullmatch(rest[1][len("Reason=trainguard: ") :]))
    return False


def allowed(argv: list[str]) -> bool:
    """True when ``argv`` is one of the command forms listed in the module docstring."""
    if not argv:
        return False
    verb, args = argv[0], argv[1:]
    if verb in ("squeue", "sinfo"):
        return args == ["--json"]
    if verb == "scancel":
        return len(args) == 1 and bool(JOB.fullmatch(args[0]))
    if verb != "scontrol" or not args:
        return False
    sub, rest = args[0], args[1:]
    if sub == "ping":
        return not rest
    if sub in ("requeue", "requeuehold", "hold", "release"):
        return len(rest) == 1 and bool(JOB.fullmatch(rest[0]))
    if sub == "update":
        return _job_update(rest) or _node_update(rest)
    return False


def main() -> int:
    original = os.environ.get("SSH_ORIGINAL_COMMAND", "")
    try:
        argv = shlex.split(original)
    except ValueError:
        argv = []
    if not allowed(argv):
        print(f"trainguard-ssh-command: refused: {original[:200]!r}", file=sys.stderr)
        return 126
    os.execv(os.path.join(BIN_DIR, argv[0]), argv)  # noqa: S606 - exec of a validated argv, no shell
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
