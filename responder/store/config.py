"""``store:`` settings: SQLite at ``db_path`` (the default), or a PostgreSQL URL that replicas share.

With ``store.url`` set, every replica ingests into the one database and one of them, the holder of a
PostgreSQL advisory-lock lease, decides and acts (``responder.lease``, docs/ha.md). The password never
sits in the URL (the configuration is not a secret store): libpq reads it from ``PGPASSFILE`` or
``PGPASSWORD``.
"""

from __future__ import annotations

from typing import Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class StoreSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None, description="postgresql://user@host:port/db shared by the replicas; none: SQLite at db_path"
    )
    lease_s: float = Field(
        10.0, ge=2, le=300, description="a leader that stops renewing loses the lease after this long"
    )
    renew_s: float = Field(2.0, gt=0, le=100, description="how often the leader renews its lease")
    poll_s: float = Field(1.0, gt=0, le=60, description="how often a follower tries to take the lease")
    connect_timeout_s: float = Field(5.0, gt=0, le=60, description="longest wait to connect to PostgreSQL")

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        return None if value is None else postgres_url(value)

    @model_validator(mode="after")
    def _renew_within_lease(self) -> Self:
        if self.poll_s * 2 > self.lease_s:
            raise ValueError(f"store.poll_s ({self.poll_s:g}) must be at most half of store.lease_s ({self.lease_s:g})")
        if self.renew_s * 3 > self.lease_s:
            raise ValueError(f"store.renew_s ({self.renew_s:g}) must be at most a third of store.lease_s "
                             f"({self.lease_s:g}): a renewal may fail twice before the lease is lost")  # fmt: skip
        return self


def postgres_url(value: str, name: str = "store.url") -> str:
    """``value`` if it is a PostgreSQL URL that names a database and holds no password; else ValueError."""
    parts = urlsplit(value)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ValueError(f"{name} must be postgresql://..., not {parts.scheme or value!r}")
    if parts.password:
        raise ValueError(f"{name} must not hold a password: set PGPASSFILE or PGPASSWORD")
    if not parts.path.strip("/"):
        raise ValueError(f"{name} must name the database: postgresql://user@host:port/DBNAME")
    return value
