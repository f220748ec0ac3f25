"""The log-pattern catalog and its scanner: the names other modules import.

One job per module: ``catalog`` loads and validates the rows, ``rowregex`` defines the row dialect,
``engines`` runs rows over buffers (Hyperscan or ``re``), ``scanner`` and ``events`` turn engine hits into
findings (multi-line events included), ``tokens`` reads rank, host, PCI and GPU, ``unwrap`` opens JSON and
CRI log records, ``unknown`` mines templates of lines no row names.
"""

from __future__ import annotations

from exporters.catalog import default_catalog_path, load_catalog, parse_catalog
from exporters.events import Finding
from exporters.rows import CATALOG_VERSION, CATEGORIES, COLUMNS, HARMLESS, SEVERITIES, CatalogError, Pattern
from exporters.scanner import KINDS, Matcher, StreamScanner
from exporters.tokens import line_host, line_rank, line_tokens

__all__ = [
    "CATALOG_VERSION",
    "CATEGORIES",
    "COLUMNS",
    "HARMLESS",
    "KINDS",
    "SEVERITIES",
    "CatalogError",
    "Finding",
    "Matcher",
    "Pattern",
    "StreamScanner",
    "default_catalog_path",
    "line_host",
    "line_rank",
    "line_tokens",
    "load_catalog",
    "parse_catalog",
]
