"""Loading the log-pattern catalog: ``patterns.csv`` plus the Xid table ``xid_catalog.csv``.

Both are data files beside this module (format in ``docs/patterns.md``). A row's position is its
precedence: when several rows match one line, the row nearest the top names it. The Xid table expands into
one row per code plus ``xid_other``, placed as one block where ``patterns.csv`` says ``#@xid_catalog.csv``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from exporters.engines import validate
from exporters.rowregex import RowSyntaxError, line_bounded, required_literals
from exporters.rows import (
    COLUMNS,
    ROW_CATEGORIES,
    SEVERITIES,
    XID_COLUMNS,
    XID_DIRECTIVE,
    XID_LINE_RE,
    XID_OTHER,
    CatalogError,
    Pattern,
)

_XID_ORDER = ("harmless", "infra_gpu", "infra_node", "infra_network", "collective_timeout", "app_error")
_ID = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
_NAME = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")
_ACTION = re.compile(r"[A-Z][A-Z0-9_]*")


def default_catalog_path() -> Path:
    return Path(str(resources.files("exporters").joinpath("patterns.csv")))


def _rows(text: str, columns: tuple[str, ...], source: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(where, row) per data row; ``#`` lines are comments except the Xid directive (yielded as such)."""
    numbered = [(n, line) for n, line in enumerate(text.splitlines(keepends=True), 1)]
    kept = [(n, line) for n, line in numbered if not line.startswith("#") or line.strip() == XID_DIRECTIVE]
    header = next((line for _, line in kept if not line.startswith("#")), "")
    if tuple(next(csv.reader([header]), [])) != columns:
        raise CatalogError(f"{source}: header must be {','.join(columns)}, got {header.strip()!r}")
    data = [(n, line) for n, line in kept if line is not header]
    for n, line in data:
        if line.strip() == XID_DIRECTIVE:
            yield f"{source} line {n}", {"id": XID_DIRECTIVE}
            continue
        values = next(csv.reader([line]), [])
        if len(values) != len(columns):
            raise CatalogError(f"{source} line {n}: expected {len(columns)} columns, got {len(values)}")
        yield f"{source} line {n}", dict(zip(columns, values, strict=True))


def make_pattern(where: str, row: dict[str, str], action: str = "", xid: int | None = None) -> Pattern:
    """One validated row; the error names the row and the column."""
    pid = row["id"].strip()
    where = f"{where} ({pid})"
    if not _ID.fullmatch(pid):
        raise CatalogError(f"{where}: id {pid!r} is not snake_case")
    if row["category"] not in ROW_CATEGORIES:
        raise CatalogError(f"{where}: category {row['category']!r} is not one of {ROW_CATEGORIES}")
    if row["severity"] not in SEVERITIES:
        raise CatalogError(f"{where}: severity {row['severity']!r} is not one of {SEVERITIES}")
    try:
        bounded = line_bounded(row["regex"])
        regex = re.compile(bounded, re.ASCII | re.MULTILINE)
        literals = required_literals(bounded)
    except (RowSyntaxError, re.error) as exc:
        raise CatalogError(f"{where}: regex {row['regex']!r} does not compile: {exc}") from exc
    if not row["example"]:
        raise CatalogError(f"{where}: example is empty")
    return Pattern(
        pid,
        row["category"],
        row["severity"],
        regex,
        row["description"],
        row["example"],
        row["counterexample"],
        row["regex"],
        literals,
        action,
        xid,
    )


def xid_rows(text: str, source: str = "xid table") -> list[Pattern]:
    """The Xid table as catalog rows, ``xid_other`` last."""
    out: list[Pattern] = []
    for where, row in _rows(text, XID_COLUMNS, source):
        code, name, action = row["code"].strip(), row["name"].strip(), row["action"].strip()
        if not code.isdigit() or not 0 < int(code) < 100_000:
            raise CatalogError(f"{where}: code {code!r} is not a decimal Xid")
        if not _NAME.fullmatch(name):
            raise CatalogError(f"{where}: name {name!r} is not snake_case")
        if action and not _ACTION.fullmatch(action):
            raise CatalogError(f"{where}: action {action!r} is not an upper-case bucket name")
        desc = f"XID {int(code)}: {row['description']}" + (f" (NVIDIA action: {action})" if action else "")
        fields = {
            "id": f"xid_{int(code)}_{name}",
            "category": row["category"],
            "severity": row["severity"],
            "regex": XID_LINE_RE.replace(r"(\d+)", str(int(code))) + r"\b",
            "description": desc,
            "example": f"NVRM: Xid (PCI:0000:10:1c): {int(code)}, pid=1896, name=python3, {row['description']}",
            "counterexample": f"NVRM: Xid (PCI:0000:10:1c): {int(code)}0, pid=1896",
        }
        out.append(make_pattern(where, fields, action, int(code)))
    # Hardware first: when one excerpt holds several Xids, a consequence (43 "stopped processing", 45
    # "preemptive cleanup, due to previous errors") must not outrank its hardware cause (62, 79, 94, ...).
    out.sort(key=lambda p: (_XID_ORDER.index(p.category), SEVERITIES.index(p.severity)))
    other = {
        "id": XID_OTHER,
        "category": "infra_gpu",
        "severity": "warning",
        "regex": XID_LINE_RE.replace(r"(\d+)", r"\d+"),
        "description": "an XID not in the Xid table (see NVIDIA's XID catalog)",
        "example": "NVRM: Xid (PCI:0000:10:1c): 9999, pid=1896, name=python3, something new",
        "counterexample": "NVRM: GPU at PCI:0000:10:1c: GPU-8a5f3f0c has fallen off the bus.",
    }
    out.append(make_pattern(f"{source} (generated)", other, "", -1))
    return out


def parse_catalog(text: str, source: str = "catalog", xid_text: str | None = None) -> list[Pattern]:
    """The rows of ``patterns.csv`` text, with the Xid table's rows at the directive (else at the end)."""
    patterns: list[Pattern] = []
    xids = xid_rows(xid_text, "xid table") if xid_text is not None else []
    placed = False
    for where, row in _rows(text, COLUMNS, source):
        if row["id"] == XID_DIRECTIVE:
            patterns.extend(xids)
            placed = True
            continue
        patterns.append(make_pattern(where, row))
    if not placed:
        patterns.extend(xids)
    seen: set[str] = set()
    for p in patterns:
        if p.id in seen:
            raise CatalogError(f"{source}: id {p.id!r} appears twice")
        seen.add(p.id)
    if not patterns:
        raise CatalogError(f"{source}: no patterns")

    validate(patterns)
    return patterns


def load_catalog(path: Path | None = None, xid_path: Path | None = None) -> list[Pattern]:
    """The catalog at ``path`` (default: the shipped one) with the Xid table beside it."""
    path = path or default_catalog_path()
    xid_path = xid_path or path.with_name("xid_catalog.csv")
    try:
        text = path.read_text(encoding="utf-8")
        xid_text = xid_path.read_text(encoding="utf-8") if xid_path.exists() else None
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {exc.filename}: {exc.strerror}") from exc
    return parse_catalog(text, str(path), xid_text)
