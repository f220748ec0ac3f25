"""Subcommands of the responder: serve, decisions, mode (filled in below as they land)."""

from __future__ import annotations

from typing import Any


def register(sub: Any) -> None:
    """Add the responder's subcommands to the ``trainguard`` parser."""
    del sub
