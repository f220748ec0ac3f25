"""The catalog run over a stream of log buffers: engine hits, multi-line events, unclassified lines.

A ``StreamScanner`` is fed buffers of complete lines as they arrive (a file read, a chunk of standard input)
and returns findings. The engine marks every line a row or marker matches; Python looks only at those lines
and, around an event's first line, walks the following lines to assemble the event. An event still open at
the end of a buffer is held for the next one, and given up (finished) on ``flush`` or after ``idle`` seconds
without input (``due``), so a held event delays detection by at most that.

The engine scans a buffer a segment at a time, so a flood (equal lines but for the dmesg stamp) is found
after a few lines and the rest of it is counted without the engine (``run_end``), also across buffers.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Final

from exporters.engines import Engine, make_engine
from exporters.events import Finding, Line, Nvrm, StandaloneElastic, Traceback
from exporters.linecount import count_newlines
from exporters.rows import Pattern
from exporters.tokens import PREFIX, line_tokens
from exporters.unwrap import Unwrapper

# Marker expressions the engines run beside the rows. The first three start multi-line events; the rest
# flag error-looking lines that no row names (their kind, in order of precedence).
MARKERS: Final = (
    r"Traceback \(most recent call last\):",
    r"NVRM: (?:[^X]|X[^i])",
    r"ChildFailedError|Root Cause \(first observed failure\):",
    r"\b[A-Za-z_][A-Za-z0-9_.]*(?:Error|Exception)\b:",
    r"\b(?:FATAL|Fatal|fatal)\b",
    r"\b(?:ERROR|Error|error)\b",
    r"\b(?:FAILED|Failed|failed)\b",
)
_EVENT_MARKS: Final = 3
KINDS: Final = ("traceback", "exception", "fatal", "error", "failed")
_MARK_KIND: Final = (None, None, None, "exception", "fatal", "error", "failed")
IDLE: Final = 0.5  # seconds an open event waits for more lines
MEMO_SIZE: Final = 4096
MEMO_LINE: Final = 1024
Event = Traceback | StandaloneElastic | Nvrm


# the dmesg time stamp ("[ 8901.234567] " or, with -T, "[Sat Nov 28 10:01:02 2026] ") that a flood varies
_STAMP: Final = rb"\[(?:\s*[0-9]+\.[0-9]+|[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9]{2} [0-9:]{8} [0-9]{4})\] "
_STAMP_RE: Final = re.compile(_STAMP)
FOLD_AFTER: Final = 3  # equal lines in a row after which the rest of the run is taken at once
# a stamp that stays on its line (``_STAMP``'s ``\s`` may cross one): the shape the fast run check accepts
_STAMP_LINE_RE: Final = re.compile(_STAMP.replace(rb"\s", rb"[^\S\n]"))
RUN_BLOCK_LINES: Final = 4096  # lines of a flood checked at a time
SEGMENT: Final = 256 << 10  # bytes the engine scans at a time: a flood is recognised within this much


def _stamp_end(raw: bytes) -> int:
    m = _STAMP_RE.match(raw)
    return m.end() if m else 0


def _same_shape(buf: bytes, pos: int, width: int, lines: int, stamp: bytes, kn: bytes) -> bool:
    """``lines`` lines of ``width`` bytes from ``pos``, each a stamp of ``stamp``'s shape (digits where it has
    digits, its other bytes elsewhere) and then ``kn``: checked with counts and strided slices, all in C."""
    stop = pos + lines * width
    if buf[pos + width - 1 : stop : width] != b"\n" * lines or buf.count(b"\n", pos, stop) != lines:
        return False  # not every line is ``width`` long
    if buf.count(kn, pos, stop) != lines:  # each of the ``lines`` newlines ends a ``kn``
        return False
    for j, c in enumerate(stamp):
        column = buf[pos + j : stop : width]
        if not (column.isdigit() if 48 <= c <= 57 else column == stamp[j : j + 1] * lines):
            return False
    return True


def run_end(buf: bytes, pos: int, key: bytes, rx: re.Pattern[bytes]) -> tuple[int, int]:
    """The end of the run of lines from ``pos`` that are ``key`` behind an optional dmesg stamp, and its
    number of lines: exactly what ``rx`` (``StreamScanner.run_regex(key)``) matches. The usual flood, whose
    stamps keep their width, is taken a block at a time at ``bytes.count`` speed; ``rx`` takes the rest."""
    lines = 0
    eol = buf.find(b"\n", pos)
    head = eol - len(key)
    if eol != -1 and head >= pos and buf.startswith(key, head):
        stamp = buf[pos:head]
        if not stamp or _STAMP_LINE_RE.fullmatch(stamp):
            width, kn = eol + 1 - pos, key + b"\n"
            while (block := min((len(buf) - pos) // width, RUN_BLOCK_LINES)) and _same_shape(
                buf, pos, width, block, stamp, kn
            ):
                lines += block
                pos += block * width
    m = rx.match(buf, pos)
    if m is not None:
        lines += buf.count(b"\n", pos, m.end())
        pos = m.end()
    return pos, lines


class Matcher:
    """A catalog compiled for one engine; shared by every stream's scanner."""

    def __init__(
        self, patterns: list[Pattern], engine: str | None = None, pci_gpu: dict[str, str] | None = None
    ) -> None:
        """``pci_gpu``: PCI bus id -> GPU index (NVML's view) to give findings that name a PCI id a ``gpu``."""
        self.patterns = patterns
        self.pci_gpu = pci_gpu if pci_gpu is not None else {}
        self.by_id = {p.id: p for p in patterns}
        self.engine: Engine = make_engine(patterns, MARKERS, engine)

    def match_text(self, text: str) -> int | None:
        return self.engine.match(text.encode("utf-8", "replace"))

    def match_line(self, text: str) -> Pattern | None:
        """The row that names one line on its own (no event context)."""
        row = self.match_text(text)
        return None if row is None else self.patterns[row]

    def scan(self, data: bytes, first_line: int = 1) -> list[Finding]:
        """Findings of one complete buffer, events finished at its end (lines count from ``first_line``)."""
        sc = StreamScanner(self, first_line=first_line)
        return [*sc.feed(data if data.endswith(b"\n") else data + b"\n"), *sc.flush()]

    def matches(self, data: bytes, first_line: int = 1) -> list[Finding]:
        """Only the findings a row names."""
        return [f for f in self.scan(data, first_line) if f.pattern is not None]


class StreamScanner:
    def __init__(
        self,
        matcher: Matcher,
        idle: float = IDLE,
        clock: Callable[[], float] = time.monotonic,
        first_line: int = 1,
        collapse: bool = False,
    ) -> None:
        """``collapse``: equal findings in a row (equal lines but for the dmesg stamp; lines that match nothing
        in between do not break the row) are one finding with a ``count`` (the exporter counts, it prints none)."""
        self.m = matcher
        self.collapse = collapse
        self.patterns = matcher.patterns
        self.idle = idle
        self.clock = clock
        self.lines = first_line - 1  # input lines seen
        self.open: dict[str, Event] = {}
        self.last_feed = clock()
        self.unwrapper = Unwrapper()
        self._memo: dict[bytes, dict[str, str]] = {}
        self._runs: dict[bytes, re.Pattern[bytes]] = {}
        # the flood the last buffer ended in (its key, row, marker): the next buffer continues it first
        self.flood: tuple[bytes, int | None, int | None] | None = None

    # -- the Context the events use ---------------------------------------------------------------
    def match_text(self, text: str) -> int | None:
        return self.m.match_text(text)

    def tokens(self, text: str) -> dict[str, str]:
        return line_tokens(text)

    # -- feeding ------------------------------------------------------------------------------------
    def feed(self, data: bytes) -> list[Finding]:
        """Findings of ``data`` (complete lines, each ending in a newline) and of events it closes."""
        base = self.lines
        self.last_feed = self.clock()
        buf, origin = self.unwrapper.feed(data)
        out: list[Finding] = []
        walk = _Walk(self, buf, base, origin, out)
        flood, self.flood = self.flood, None
        if flood is not None and not self.open:
            walk.resume(*flood)
        if self.open:
            walk.run(0)
        pending, i = walk.pending, 0
        while i < len(pending) or walk.scan_more():
            if i == len(pending):
                continue
            end = pending[i]
            i += 1
            if end <= walk.pos:
                continue
            mark = walk.marks.get(end)
            if mark is not None and mark < _EVENT_MARKS:
                walk.run(buf.rfind(b"\n", 0, end - 1) + 1)
            elif (f := walk.single(end, walk.rows.get(end), mark)) is not None:
                out.append(f)
            elif walk.folding:
                walk.fold(end)
        self.lines = base + (walk.total_lines() if origin is None else data.count(b"\n"))
        return self._done(out)

    def _done(self, out: list[Finding]) -> list[Finding]:
        """Findings in line order, a PCI id mapped to its GPU where NVML told us; lines a harmless row names
        are dropped (neither counted nor unclassified)."""
        out = [f for f in out if f.pattern is None or not f.pattern.harmless]
        if self.m.pci_gpu:
            for f in out:
                gpu = self.m.pci_gpu.get(f.tokens.get("pci", ""))
                if gpu is not None and "gpu" not in f.tokens:
                    f.tokens = {**f.tokens, "gpu": gpu}
        out.sort(key=lambda f: f.line)
        return out

    def flush(self) -> list[Finding]:
        """Finish every open event (end of input)."""
        out = [f for ev in self.open.values() if (f := ev.finish(self)) is not None]
        self.open.clear()
        return self._done(out)

    def due(self, now: float | None = None) -> list[Finding]:
        """Finish the open events when no line came for ``idle`` seconds."""
        if self.open and (self.clock() if now is None else now) - self.last_feed >= self.idle:
            return self.flush()
        return []

    @property
    def deadline(self) -> float | None:
        """When ``due`` will finish the open events (None: nothing open)."""
        return self.last_feed + self.idle if self.open else None

    def run_regex(self, key: bytes) -> re.Pattern[bytes]:
        """A regex for a run of lines that are ``key`` behind an optional dmesg stamp (cached, bounded)."""
        rx = self._runs.get(key)
        if rx is None:
            if len(self._runs) >= 256:
                self._runs.clear()
            rx = self._runs[key] = re.compile(b"(?:(?:" + _STAMP + b")?" + re.escape(key) + b"\n)+")
        return rx

    def memo_tokens(self, key: bytes, raw: bytes) -> dict[str, str]:
        """Tokens of a single line, remembered by ``key`` (the line without its dmesg stamp, which floods vary)."""
        got = self._memo.get(key)
        if got is None:
            got = line_tokens(raw.decode("utf-8", "replace"))
            if len(key) <= MEMO_LINE:
                if len(self._memo) >= MEMO_SIZE:
                    self._memo.clear()
                self._memo[key] = got
        return got


class _Walk:
    """One buffer's pass: line numbers, single-line findings and the line-by-line walk of events."""

    def __init__(
        self,
        sc: StreamScanner,
        buf: bytes,
        base: int,
        origin: list[int] | None,
        out: list[Finding],
    ) -> None:
        self.sc, self.buf, self.base, self.origin, self.out = sc, buf, base, origin, out
        # the engine's hits so far (line end -> row / marker), the hit line ends in order, the scanned prefix
        self.rows: dict[int, int] = {}
        self.marks: dict[int, int] = {}
        self.pending: list[int] = []
        self.scanned = 0
        self.pos = 0  # lines before this offset are done
        # collapse: the last single-line finding, which equal following lines add to
        self._prev: Finding | None = None
        self.folding = False  # the last line made a run long enough to fold the rest
        self._prev_key: bytes = b""
        self._prev_row: int | None = -1
        self._prev_mark: int | None = -1
        self._count_pos = 0
        self._count = 0

    def scan_more(self) -> bool:
        """Run the engine over the next segment (whole lines from the first not yet done); False at the end."""
        start = max(self.scanned, self.pos)
        if start >= len(self.buf):
            return False
        stop = self.buf.find(b"\n", start + SEGMENT - 1) + 1 or len(self.buf)
        rows, marks = self.sc.m.engine.scan(self.buf, start, stop)
        self.rows.update(rows)
        self.marks.update(marks)
        self.pending.extend(sorted(rows.keys() | marks.keys()))
        self.scanned = stop
        return True

    def total_lines(self) -> int:
        """Lines in the buffer (counting on from the last line number asked for)."""
        return self._count + count_newlines(self.buf, self._count_pos)

    def number(self, start: int) -> int:
        """1-based input line number of the line starting at ``start`` (queries in increasing order)."""
        if start < self._count_pos:
            self._count_pos, self._count = 0, 0
        self._count += count_newlines(self.buf, self._count_pos, start)
        self._count_pos = start
        index = self._count if self.origin is None else self.origin[self._count]
        return self.base + index + 1

    def single(self, end: int, row: int | None, mark: int | None) -> Finding | None:
        """The finding of one line; None when it only added to the previous one (``collapse``)."""
        start = self.buf.rfind(b"\n", 0, end - 1) + 1
        raw = self.buf[start : end - 1]
        key = raw[_stamp_end(raw) :] if raw[:1] == b"[" else raw
        prev = self._prev
        if prev is not None and key == self._prev_key and row == self._prev_row and mark == self._prev_mark:
            prev.count += 1
            self.folding = prev.count >= FOLD_AFTER
            return None
        named = self.sc.m.engine.resolve(row, raw) if row is not None else None
        text = raw.decode("utf-8", "replace").rstrip("\r")
        tokens = self.sc.memo_tokens(key, raw)
        # the tokens dict is shared by repeated lines: findings treat it as read-only
        pattern = self.sc.patterns[named] if named is not None else None
        f = Finding(self.number(start), pattern, text, tokens, None if pattern else _MARK_KIND[mark or 0])
        if self.sc.collapse:
            self._prev, self._prev_key, self._prev_row, self._prev_mark = f, key, row, mark
        return f

    def fold(self, end: int) -> None:
        """A flood: the lines after ``end`` that equal the last one (but for the dmesg stamp), in C."""
        self.folding = False
        assert self._prev is not None
        stop, lines = run_end(self.buf, end, self._prev_key, self.sc.run_regex(self._prev_key))
        self._prev.count += lines
        if lines and self._count_pos <= end:  # the line numbers count on past the run without a second pass
            self._count += count_newlines(self.buf, self._count_pos, end) + lines
            self._count_pos = stop
        self.pos = max(self.pos, stop)
        if lines and stop == len(self.buf):
            self.sc.flood = (self._prev_key, self._prev_row, self._prev_mark)

    def resume(self, key: bytes, row: int | None, mark: int | None) -> None:
        """Continue the flood the previous buffer ended in: its lines here are one finding, without the engine."""
        first = self.buf.find(b"\n") + 1
        if not first or self.sc.run_regex(key).match(self.buf, 0, first) is None:
            return
        f = self.single(first, row, mark)
        assert f is not None  # the first finding of this buffer
        self.out.append(f)
        self.pos = first
        self.fold(first)

    def _line(self, start: int, end: int) -> Line:
        data = self.buf[start : end - 1]
        raw = data.decode("utf-8", "replace").rstrip("\r")
        m = PREFIX.match(raw)
        mark = self.marks.get(end)
        row = self.rows.get(end)
        return Line(
            self.number(start),
            raw,
            m.group(0).rstrip() if m else "",
            raw[m.end() :] if m else raw,
            None if row is None else self.sc.m.engine.resolve(row, data),
            _MARK_KIND[mark] if mark is not None else None,
        )

    def run(self, start: int) -> None:
        """Walk lines from ``start`` while any event is open (or until the buffer ends)."""
        sc, pos = self.sc, start
        first = True
        self._prev = None
        while pos < len(self.buf) and (sc.open or first):
            end = self.buf.find(b"\n", pos) + 1 or len(self.buf)
            while self.scanned < end and self.scan_more():
                pass
            self._step(self._line(pos, end), end)
            first = False
            pos = end
        self.pos = max(self.pos, pos)

    def _event_mark(self, end: int) -> int | None:
        mark = self.marks.get(end)
        return mark if mark is not None and mark < _EVENT_MARKS else None

    def _step(self, line: Line, end: int) -> None:
        sc = self.sc
        taken = False
        for key, ev in list(sc.open.items()):
            if not taken and ev.feed(line):
                taken = True
            if ev.closed or (key == Nvrm.key and not taken):
                self._close(key)
        if taken:
            return
        mark = self._event_mark(end)
        if mark is not None:
            self._open(line, mark)
        elif (line.row is not None or line.mark is not None) and (
            f := self.single(end, self.rows.get(end), self.marks.get(end))
        ) is not None:
            self.out.append(f)

    def _open(self, line: Line, mark: int) -> None:
        sc = self.sc
        key = Nvrm.key if mark == 1 else line.key
        if key in sc.open:
            self._close(key)
        if mark == 0:
            sc.open[key] = Traceback(line)
        elif mark == 1:
            sc.open[key] = Nvrm(line)
        else:
            sc.open[key] = StandaloneElastic(line)

    def _close(self, key: str) -> None:
        ev = self.sc.open.pop(key, None)
        if ev is not None and (f := ev.finish(self.sc)) is not None:
            self.out.append(f)
