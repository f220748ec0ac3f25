"""Multi-line events: Python tracebacks, torchelastic failure summaries, NVRM messages over several lines.

Each event is one finding, named by the highest-precedence row its cause lines match, its ``line`` the line
that names the cause. Lines are grouped per launcher prefix (``[rank3]:``, ``0: ``...), so
interleaved ranks each get their own event. An event is fed line by line (``feed``: True when it takes the
line) and turned into its finding by ``finish``.
"""

from __future__ import annotations

import contextlib
import re
import signal
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Final, Protocol

from exporters.rows import Pattern
from trainguard.identity import IdentityError, validate_decimal, validate_host

TRACEBACK_START: Final = "Traceback (most recent call last):"
_CHAIN: Final = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
MAX_EVENT_LINES: Final = 2000
MAX_MESSAGE_LINES: Final = 10  # lines of an exception message after its first line
MAX_NVRM_LINES: Final = 16
MAX_FOREIGN: Final = 200  # lines of other prefixes passing an open event before it is closed
# A line that starts a new log record (time stamp, level, NCCL prefix, bracket) ends an exception message.
_RECORD: Final = re.compile(r"^(?:\[|\d{2,4}[-/:]\d\d|[A-Z]{4,}\b|[IWEF]\d{4} |[\w.-]+:\d+:\d+ \[)")
_ELASTIC_LINE: Final = re.compile(
    r"^\s*(?:={5,}|-{5,}|\[\d+\]:|.* FAILED|Failures:|Root Cause \(first observed failure\):|<NO_OTHER_FAILURES>|"
    r"\w[\w ]*:.*)\s*$"
)
_ELASTIC_FIELD: Final = re.compile(r"^\s*(host|rank|exitcode|traceback)\s*:\s*(.*?)\s*$")
_SIGNAL: Final = re.compile(r"Signal (\d+) \((SIG[A-Z0-9]+)\)")


@dataclass
class Finding:
    """One object of ``patterns scan``: a row's match, or (``pattern`` None) an unclassified line."""

    line: int
    pattern: Pattern | None
    text: str
    tokens: dict[str, str] = field(default_factory=dict)
    kind: str | None = None  # unclassified: traceback, exception, fatal, error, failed
    count: int = 1  # equal lines in a row folded into this finding (a scanner with collapse=True)

    @property
    def rank(self) -> str | None:
        return self.tokens.get("rank")

    @property
    def host(self) -> str | None:
        return self.tokens.get("host")


@dataclass
class Line:
    number: int
    raw: str
    key: str  # the launcher prefix
    content: str  # the line after its prefix
    row: int | None  # the engine's winning row for this line
    mark: str | None  # the unclassified kind this line looks like


class Context(Protocol):
    patterns: list[Pattern]

    def match_text(self, text: str) -> int | None: ...

    def tokens(self, text: str) -> dict[str, str]: ...


def _joined_cause(ctx: Context, parts: list[tuple[int, str]]) -> tuple[int, int, str] | None:
    """(row, line number, text) for lines joined with a space, the line being where the row's match starts."""
    joined = " ".join(text for _, text in parts)
    row = ctx.match_text(joined)
    if row is None:
        return None
    starts, pos = [], 0
    for _, text in parts:
        starts.append(pos)
        pos += len(text) + 1
    m = ctx.patterns[row].regex.search(joined)
    at = bisect_right(starts, m.start() if m else 0) - 1
    return row, parts[at][0], joined


class Elastic:
    """torchelastic's ``ChildFailedError`` summary: rank, host, exit code and signal of the root cause."""

    def __init__(self, first: Line) -> None:
        self.parts: list[tuple[int, str]] = [(first.number, first.content.strip())]
        self.in_root = "Root Cause" in first.content
        self.done = False
        self.fields: dict[str, str] = {}

    def feed(self, line: Line) -> bool:
        if self.done or len(self.parts) >= 100 or not _ELASTIC_LINE.match(line.content):
            return False
        text = line.content.strip()
        self.parts.append((line.number, text))
        if text.startswith("Root Cause"):
            self.in_root = True
        elif self.in_root and text.startswith("====="):
            self.done = True
        elif self.in_root and (m := _ELASTIC_FIELD.match(line.content)):
            self._field(m.group(1), m.group(2))
        return True

    def _field(self, key: str, value: str) -> None:
        if key == "host":
            self.fields["host"] = value
        elif key == "rank" and (m := re.match(r"(\d+)", value)):
            self.fields["rank"] = m.group(1)
        elif key == "exitcode" and (m := re.match(r"(-?\d+)", value)):
            self.fields["exitcode"] = m.group(1)
            code = int(m.group(1))
            if code < 0 and "signal" not in self.fields:
                with contextlib.suppress(ValueError):
                    self.fields["signal"] = signal.Signals(-code).name
        elif key == "traceback" and (m := _SIGNAL.search(value)):
            self.fields["signal"] = m.group(2)

    def cause(self, ctx: Context) -> tuple[int, int, str] | None:
        return _joined_cause(ctx, self.parts)

    def tokens(self) -> dict[str, str]:
        """The root cause's fields; rank and host only when valid identity values."""
        out = {k: v for k, v in self.fields.items() if k in ("exitcode", "signal")}
        try:
            if "rank" in self.fields:
                out["rank"] = validate_decimal("rank", str(int(self.fields["rank"])))
            if "host" in self.fields:
                out["host"] = validate_host(self.fields["host"])
        except IdentityError:
            pass
        return out


class Traceback:
    """A Python traceback with its chained tracebacks; the cause is the best row of its exception lines."""

    def __init__(self, first: Line) -> None:
        self.key = first.key
        self.first = first
        self.state = "frames"
        self.message: list[Line] = []  # exception message lines of the whole chain
        self.last: Line | None = None  # the final exception line
        self.elastic: Elastic | None = None
        self.count = 1
        self.foreign = 0
        self.extra = 0  # message lines after the exception line
        self.ended = False  # a line of its own prefix did not continue it

    def feed(self, line: Line) -> bool:
        if line.key != self.key:
            self.foreign += 1
            return False
        self.foreign = 0
        took = self.count < MAX_EVENT_LINES and self._step(line, line.content.rstrip())
        self.count += took
        self.ended = not took
        return took

    def _step(self, line: Line, text: str) -> bool:
        if self.elastic is not None and self.state == "message":
            if self.elastic.feed(line):
                return True
            self.elastic.done = True
        if self.state == "frames":
            if text[:1].isspace() or not text:
                return True
            self._exception(line)
            return True
        if text.startswith(TRACEBACK_START):
            if self.state != "chain":
                return False
            self.state = "frames"
            return True
        if text in _CHAIN:
            self.state = "chain"
            return True
        if not text:
            if self.state == "message":
                self.state = "after"
            return self.state in ("after", "chain")
        if self.state == "message" and self.elastic is None and self._continues(text):
            self.message.append(line)
            return True
        return False

    def _continues(self, text: str) -> bool:
        if self.extra >= MAX_MESSAGE_LINES or _RECORD.match(text):
            return False
        self.extra += 1
        return True

    def _exception(self, line: Line) -> None:
        self.state = "message"
        self.last = line
        self.extra = 0
        self.message.append(line)
        if "ChildFailedError" in line.content:
            self.elastic = Elastic(line)

    @property
    def closed(self) -> bool:
        return self.ended or self.foreign > MAX_FOREIGN

    def finish(self, ctx: Context) -> Finding:
        cands = [(ln.row, ln.number, ln.raw) for ln in self.message if ln.row is not None]
        extra: dict[str, str] = {}
        if self.elastic is not None:
            got = self.elastic.cause(ctx)
            if got is not None:
                cands.append(got)
            extra = self.elastic.tokens()
        anchor = self.last or self.first
        if not cands:
            tokens = {**ctx.tokens(self.first.raw), **ctx.tokens(anchor.raw), **extra}
            return Finding(anchor.number, None, anchor.raw, tokens, "traceback")
        row, number, text = min(cands)
        tokens = {**ctx.tokens(self.first.raw), **ctx.tokens(text), **extra}
        return Finding(number, ctx.patterns[row], text, tokens)


class StandaloneElastic:
    """A torchelastic summary outside a traceback (``ChildFailedError:`` or ``Root Cause`` first)."""

    def __init__(self, first: Line) -> None:
        self.key = first.key
        self.first = first
        self.block = Elastic(first)
        self.foreign = 0
        self.ended = False

    def feed(self, line: Line) -> bool:
        if line.key != self.key:
            self.foreign += 1
            return False
        self.ended = not self.block.feed(line)
        return not self.ended

    @property
    def closed(self) -> bool:
        return self.block.done or self.ended or self.foreign > MAX_FOREIGN

    def finish(self, ctx: Context) -> Finding:
        got = self.block.cause(ctx)
        tokens = {**ctx.tokens(self.first.raw), **self.block.tokens()}
        if got is None:
            return Finding(self.first.number, None, self.first.raw, tokens, self.first.mark or "failed")
        row, number, text = got
        return Finding(number, ctx.patterns[row], text, tokens)


class Nvrm:
    """Consecutive kernel ``NVRM:`` lines, one message; an Xid line ends it. Joined from each ``NVRM:``."""

    key = "\0nvrm"

    def __init__(self, first: Line) -> None:
        self.lines = [first]
        self.done = False

    def feed(self, line: Line) -> bool:
        at = line.raw.find("NVRM:")
        if self.done or at < 0 or len(self.lines) >= MAX_NVRM_LINES:
            self.done = True
            return False
        self.lines.append(line)
        self.done = line.raw.startswith("NVRM: Xid", at)
        return True

    @property
    def closed(self) -> bool:
        return self.done

    def finish(self, ctx: Context) -> Finding | None:
        if len(self.lines) == 1:
            only = self.lines[0]
            if only.row is None and only.mark is None:
                return None
            pattern = ctx.patterns[only.row] if only.row is not None else None
            return Finding(only.number, pattern, only.raw, ctx.tokens(only.raw), None if pattern else only.mark)
        parts = [(ln.number, ln.raw[ln.raw.find("NVRM:") :]) for ln in self.lines]
        got = _joined_cause(ctx, parts)
        joined = " ".join(text for _, text in parts)
        if got is None:
            marked = next((ln for ln in self.lines if ln.mark is not None), None)
            if marked is None:
                return None
            return Finding(marked.number, None, marked.raw, ctx.tokens(joined), marked.mark)
        row, number, _ = got
        text = next(ln.raw for ln in self.lines if ln.number == number)
        return Finding(number, ctx.patterns[row], text, {**ctx.tokens(joined), **ctx.tokens(text)})
