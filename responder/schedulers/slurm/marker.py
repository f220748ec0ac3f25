"""The marker trainguard keeps in a Slurm job's ``AdminComment``: what it did to the job, and when.

Only operators can set ``AdminComment``, so a job's user cannot forge it. The tokens are
``trainguard:held=<unix time>`` (the watchdog's lease starts there), ``trainguard:exc=<nodes>`` (the
exclusions trainguard applied), ``trainguard:inc=<incident>`` and ``trainguard:stopped=<unix time>``;
anything else in the comment is kept as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from trainguard.identity import IdentityError, validate_host

MARKER_PREFIX: Final = "trainguard:"
_INCIDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_MARKER_TOKEN = re.compile(r"trainguard:(held|exc|inc|stopped)=(\S*)")


def valid_incident_id(value: str) -> bool:
    return bool(_INCIDENT.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Marker:
    """What trainguard records on a job, in its ``AdminComment`` (only operators can set that field).

    ``held_at``: Unix time trainguard put the job on hold (the watchdog's lease starts here);
    ``excluded``: the exclusions trainguard applied (anything else in ``ExcNodeList`` is the user's
    own and is kept); ``incident``: the last incident acted on; ``stopped_at``: when trainguard
    cancelled it. ``other``: the rest of the comment, kept as it was.
    """

    held_at: int | None = None
    excluded: tuple[str, ...] = ()
    incident: str | None = None
    stopped_at: int | None = None
    other: str = ""

    def format(self) -> str:
        tokens = [self.other] if self.other else []
        if self.held_at is not None:
            tokens.append(f"{MARKER_PREFIX}held={self.held_at}")
        if self.excluded:
            tokens.append(f"{MARKER_PREFIX}exc={','.join(self.excluded)}")
        if self.incident:
            tokens.append(f"{MARKER_PREFIX}inc={self.incident}")
        if self.stopped_at is not None:
            tokens.append(f"{MARKER_PREFIX}stopped={self.stopped_at}")
        return " ".join(tokens)


def parse_marker(admin_comment: str) -> Marker:
    """Read trainguard's tokens from an ``AdminComment``; malformed tokens are ignored (not trusted)."""
    held_at: int | None = None
    stopped_at: int | None = None
    excluded: tuple[str, ...] = ()
    incident: str | None = None
    other: list[str] = []
    for token in admin_comment.split():
        m = _MARKER_TOKEN.fullmatch(token)
        if not m:
            other.append(token)
            continue
        key, value = m.groups()
        if key in ("held", "stopped") and value.isdigit() and len(value) <= 12:
            if key == "held":
                held_at = int(value)
            else:
                stopped_at = int(value)
        elif key == "exc" and value:
            try:
                excluded = tuple(validate_host(v) for v in value.split(","))
            except IdentityError:
                excluded = ()
        elif key == "inc" and valid_incident_id(value):
            incident = value
    return Marker(held_at, excluded, incident, stopped_at, " ".join(other))
