"""Time as a dependency: the app and engine read the clock they are given, so tests control it."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def format_rfc3339(moment: datetime | float, timespec: str = "milliseconds") -> str:
    """RFC 3339 in UTC with a ``Z`` (``timespec``: ``milliseconds``, the API's form, or ``seconds``)."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def rfc3339(ts: float | None) -> str | None:
    """RFC 3339 UTC with milliseconds, the form the API and audit records use; None stays None."""
    if ts is None:
        return None
    try:
        return format_rfc3339(ts)
    except (OverflowError, OSError, ValueError):  # a time stored before the edge checked it: say so, don't fail
        return f"unrepresentable ({ts!r})"


def parse_rfc3339(value: str) -> float:
    """Parse Alertmanager's RFC 3339 timestamps (nanosecond fractions allowed) to epoch seconds."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    main, _, rest = text.partition(".")
    if rest:
        digits = ""
        for ch in rest:
            if not ch.isdigit():
                break
            digits += ch
        tz = rest[len(digits) :]
        text = f"{main}.{digits[:6].ljust(6, '0')}{tz}"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone")
    return parsed.timestamp()
