"""A throwaway real PostgreSQL for the tests that need one (``trainguard.lab.postgres``), and fresh databases on it.

Where PostgreSQL or psycopg is missing the tests skip with the reason, and fail instead under
TRAINGUARD_REQUIRE_SERVICES=1 (CI). A module's fixture is ``yield from server()``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from tests.services import unavailable

_databases = itertools.count()


def server() -> Iterator[Any]:
    """Start a server, yield it, stop it: the body of a module-scoped fixture."""
    try:
        import psycopg  # noqa: F401, PLC0415
    except ImportError:
        unavailable("psycopg not installed: pip install 'trainguard[postgres]'")
    from trainguard.lab.postgres import server_bin, start_postgres  # noqa: PLC0415

    if server_bin() is None:
        unavailable("PostgreSQL not found: apt-get install postgresql")
    running = start_postgres()
    yield running
    running.stop()


def fresh_database(running: Any) -> str:
    """The URL of a new, empty database on ``running``."""
    import psycopg  # noqa: PLC0415

    name = f"test_{next(_databases)}"
    with psycopg.connect(running.url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    url: str = running.url
    return url.rsplit("/", 1)[0] + f"/{name}"
