"""Subcommands of the node-side exporter (filled in by the exporter issue)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the exporter's subcommands to the ``trainguard`` parser (none yet)."""
    del sub


def _unused(args: argparse.Namespace) -> int:  # pragma: no cover
    return 0
