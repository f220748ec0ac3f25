"""What a catalog row is: the row type, its error and the constants every exporter module shares.

Kept apart from ``catalog`` (which loads and validates rows with the engines) so that the engines can
use the row type without importing the loader that calls them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from trainguard.vocabulary import LOG_CATEGORIES, SEVERITIES

CATEGORIES: Final = LOG_CATEGORIES
# A row of this category names a line that is known to be harmless (the docs or the thread say so): the line
# is then no finding at all, neither counted nor unclassified. It is never a metric label value.
HARMLESS: Final = "harmless"
ROW_CATEGORIES: Final = (HARMLESS, *CATEGORIES)
COLUMNS: Final = ("id", "category", "severity", "regex", "description", "example", "counterexample")
XID_COLUMNS: Final = ("code", "name", "category", "severity", "action", "description")
CATALOG_VERSION: Final = 2
XID_DIRECTIVE: Final = "#@xid_catalog.csv"
XID_OTHER: Final = "xid_other"
# The kernel's Xid line, with or without "PCI:" in the parentheses; group 1 is the code.
XID_LINE_RE: Final = r"NVRM: Xid \([^)]*\): (\d+)"


class CatalogError(ValueError):
    """The catalog file is malformed; the message names the row and the column."""


@dataclass(frozen=True, slots=True)
class Pattern:
    id: str
    category: str
    severity: str
    regex: re.Pattern[str]  # the line-bounded form, ASCII semantics (as the engines run it on bytes)
    description: str
    example: str
    counterexample: str
    source: str = ""  # the regex as written in the catalog
    literals: frozenset[bytes] | None = None  # one of these is in every match (None: not known)
    action: str = ""  # Xid rows: NVIDIA's recommended resolution
    xid: int | None = None  # Xid rows: the code (-1 for xid_other)

    @property
    def pages(self) -> bool:
        """Whether a match pages at once: the log-pattern rules raise a critical alert for every match of
        an infrastructure category, so the exporter's fast path posts those (alert_rules/log_patterns.yml)."""
        return self.category.startswith("infra_")

    @property
    def harmless(self) -> bool:
        return self.category == HARMLESS


__all__ = [
    "CATALOG_VERSION",
    "CATEGORIES",
    "COLUMNS",
    "HARMLESS",
    "ROW_CATEGORIES",
    "SEVERITIES",
    "XID_COLUMNS",
    "XID_DIRECTIVE",
    "XID_LINE_RE",
    "XID_OTHER",
    "CatalogError",
    "Pattern",
]
