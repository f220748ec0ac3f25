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


def rfc3339(ts: float | None) -> str | None:
    """RFC 3339 UTC with milliseconds, the form the API and audit records use."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
