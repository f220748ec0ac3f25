"""The matchers that run the catalog over whole buffers: Hyperscan where it imports, Python ``re`` else.

Both compute the same thing: for every line, the lowest-indexed row that matches it (its precedence) and
the lowest-indexed *marker* (patterns that start multi-line events or flag error-looking lines). Results are
keyed by the line's end offset (just past its newline), so no engine has to split the buffer into lines.
Rows are line-bounded (``exporters.rowregex``), so whole-buffer and per-line matching agree.

The Xid rows are one block: the engines search one expression for any Xid line and resolve the code by a
table lookup, so a catalog of hundreds of Xids costs what one row costs.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any, Final, Protocol

from exporters.rowregex import line_bounded, required_literals
from exporters.rows import XID_LINE_RE, CatalogError, Pattern

# A buffer's line results: line end offset -> index (row index, or marker index).
Hits = dict[int, int]
ENGINES: Final = ("hyperscan", "re")
_XID_CODE = re.compile(XID_LINE_RE.encode() + rb"\b")
_XID_ANY = re.compile(XID_LINE_RE.encode())


class Engine(Protocol):
    name: str

    def scan(self, data: bytes, start: int = 0, end: int | None = None) -> tuple[Hits, Hits]:
        """(rows, markers) per line of ``data[start:end]`` (whole lines: ``start`` begins a line, the last
        ends with a newline), keyed by offsets in ``data``; an Xid line's row is the Xid block's first index,
        which ``resolve`` turns into the row of its code (done after floods fold)."""
        ...

    def resolve(self, index: int, line: bytes) -> int | None:
        """The row a hit on ``line`` names."""
        ...

    def match(self, text: bytes) -> int | None:
        """The winning row for one text without newlines (a joined multi-line event)."""
        ...


class _Table:
    """What both engines share: the rows (Xid block folded), the markers, the Xid resolution."""

    def __init__(self, patterns: Sequence[Pattern], markers: Sequence[str]) -> None:
        self.patterns = list(patterns)
        self.nrows = len(patterns)
        xid_ids = [i for i, p in enumerate(patterns) if p.xid is not None]
        if xid_ids and xid_ids != list(range(xid_ids[0], xid_ids[-1] + 1)):
            raise CatalogError("the Xid rows must be one block")
        self.xid_block = xid_ids[0] if xid_ids else -1
        self.xid_by_code = {p.xid: i for i, p in enumerate(patterns) if p.xid is not None and p.xid >= 0}
        self.xid_other = next((i for i, p in enumerate(patterns) if p.xid == -1), -1)
        self._xid_memo: dict[bytes, int | None] = {}
        # (id, line-bounded regex source): the Xid block is one entry
        self.exprs: list[tuple[int, str]] = [(i, p.regex.pattern) for i, p in enumerate(patterns) if p.xid is None]
        if xid_ids:
            self.exprs.append((self.xid_block, XID_LINE_RE))
        self.exprs.extend((self.nrows + k, line_bounded(m)) for k, m in enumerate(markers))

    def match(self, text: bytes) -> int | None:
        rows, _ = self.scan(text + b"\n")  # type: ignore[attr-defined]  # both engines define scan
        row: int | None = rows.get(len(text) + 1)
        return None if row is None else self.resolve(row, text)

    def resolve(self, index: int, line: bytes) -> int | None:
        """The row a hit names: an Xid line's hit (the block's first index) resolves to its code's row."""
        if index != self.xid_block:
            return index
        # only the text from the first "NVRM: Xid" decides, and a flood repeats it: remember it
        key = line[line.find(b"NVRM: Xid") :]
        if key in self._xid_memo:
            return self._xid_memo[key]
        if len(self._xid_memo) >= 4096:
            self._xid_memo.clear()
        self._xid_memo[key] = got = self._resolve_xid(line)
        return got

    def _resolve_xid(self, line: bytes) -> int | None:
        best: int | None = None
        for m in _XID_CODE.finditer(line):
            row = self.xid_by_code.get(int(m.group(1)), self.xid_other)
            best = row if best is None else min(best, row)
        if best is None and _XID_ANY.search(line) and self.xid_other >= 0:
            best = self.xid_other
        return best


class ReEngine(_Table):
    """Python ``re``: literal needles found with ``bytes.find`` pick candidate lines; regexes confirm."""

    name = "re"

    def __init__(self, patterns: Sequence[Pattern], markers: Sequence[str] = ()) -> None:
        super().__init__(patterns, markers)
        self.regex: dict[int, re.Pattern[bytes]] = {}
        by_needle: dict[bytes, set[int]] = {}
        full: list[int] = []
        for index, source in self.exprs:
            self.regex[index] = re.compile(source.encode(), re.MULTILINE)
            literals = required_literals(source)
            if literals is None:
                full.append(index)
            for lit in literals or ():
                by_needle.setdefault(lit, set()).add(index)
        # a needle that contains a shorter needle is covered by it: one bytes.find pass fewer
        kept: dict[bytes, set[int]] = {}
        for needle in sorted(by_needle, key=len):
            cover = next((k for k in kept if k in needle), None)
            kept.setdefault(cover or needle, set()).update(by_needle[needle])
        self.needles = tuple((n, frozenset(ids)) for n, ids in sorted(kept.items(), key=lambda kv: -len(kv[0])))
        self.full = tuple(full)

    def _candidates(self, data: bytes, start: int, stop: int) -> dict[int, set[int]]:
        cand: dict[int, set[int]] = {}
        for needle, ids in self.needles:
            i = data.find(needle, start, stop)
            while i != -1:
                end = data.find(b"\n", i, stop) + 1 or stop
                got = cand.get(end)
                if got is None:
                    cand[end] = set(ids)
                else:
                    got.update(ids)
                i = data.find(needle, end, stop)
        for index in self.full:
            for m in self.regex[index].finditer(data, start, stop):
                end = data.find(b"\n", m.start(), stop) + 1 or stop
                cand.setdefault(end, set()).add(index)
        return cand

    def scan(self, data: bytes, start: int = 0, end: int | None = None) -> tuple[Hits, Hits]:
        rows: Hits = {}
        marks: Hits = {}
        stop = len(data) if end is None else end
        for line_end, ids in self._candidates(data, start, stop).items():
            first = data.rfind(b"\n", 0, line_end - 1) + 1
            last = line_end - 1 if data[line_end - 1 : line_end] == b"\n" else line_end
            for index in sorted(ids):
                target = rows if index < self.nrows else marks
                if line_end in target or not self.regex[index].search(data, first, last):
                    continue
                if index < self.nrows:
                    rows[line_end] = index
                else:
                    marks[line_end] = index - self.nrows
        return rows, marks


class HyperscanEngine(_Table):
    """Hyperscan: every row and marker in one database, one pass over the buffer, one callback per hit."""

    name = "hyperscan"

    def __init__(self, patterns: Sequence[Pattern], markers: Sequence[str] = ()) -> None:
        super().__init__(patterns, markers)
        self.hs: Any = importlib.import_module("hyperscan")
        # each expression runs on to the end of its line: one report per (expression, line), at the line end
        exprs = [b"(?:" + s.encode() + rb")[^\n]*\n" for _, s in self.exprs]
        self.db = self.hs.Database()
        self.db.compile(
            expressions=exprs,
            ids=[i for i, _ in self.exprs],
            flags=[self.hs.HS_FLAG_MULTILINE] * len(exprs),
        )

    def scan(self, data: bytes, start: int = 0, end: int | None = None) -> tuple[Hits, Hits]:
        rows: Hits = {}
        marks: Hits = {}
        nrows = self.nrows
        view = data if start == 0 and end is None else memoryview(data)[start:end]  # no copy

        def on_match(index: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            if index < nrows:
                got = rows.get(to)
                if got is None or index < got:
                    rows[to] = index
            else:
                got = marks.get(to)
                if got is None or index - nrows < got:
                    marks[to] = index - nrows

        self.db.scan(view, match_event_handler=on_match)
        if start:  # offsets in ``data``: shifted after the scan, not in the callback a flood calls per line
            rows = {k + start: v for k, v in rows.items()}
            marks = {k + start: v for k, v in marks.items()}
        return rows, marks


def hyperscan_available() -> bool:
    try:
        importlib.import_module("hyperscan")
    except ImportError:
        return False
    return True


def make_engine(patterns: Sequence[Pattern], markers: Sequence[str] = (), name: str | None = None) -> Engine:
    """The named engine, or the best available (Hyperscan, else ``re``)."""
    if name is None:
        name = "hyperscan" if hyperscan_available() else "re"
    if name == "hyperscan":
        return HyperscanEngine(patterns, markers)
    if name == "re":
        return ReEngine(patterns, markers)
    raise ValueError(f"unknown engine {name!r}; one of {ENGINES}")


def validate(patterns: Sequence[Pattern]) -> None:
    """Every row compiles in every available engine; the error names the first row that does not."""
    for p in patterns:
        try:
            re.compile(p.regex.pattern.encode(), re.MULTILINE)
        except re.error as exc:
            raise CatalogError(f"row {p.id}: regex does not compile in re: {exc}") from exc
    if not hyperscan_available():
        return
    try:
        HyperscanEngine(patterns)
    except Exception:
        for p in patterns:
            try:
                HyperscanEngine([p])
            except Exception as exc:
                raise CatalogError(f"row {p.id}: regex does not compile in hyperscan: {exc}") from exc
        raise
