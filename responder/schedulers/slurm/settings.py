"""``SlurmSettings``: how trainguard reaches one Slurm cluster and what it may do there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from responder.schedulers.slurm.commands import Transport
from trainguard.identity import validate_host, validate_optional_cluster

_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


class SlurmSettings(BaseModel):
    """How trainguard reaches one Slurm cluster and what it may do there."""

    kind: Literal["slurm"] = Field("slurm", description="The adapter: slurm.")

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str | None = Field(
        None, description="Cluster name (docs/interfaces.md §1); requests for another cluster are refused. None: any."
    )
    transport: Literal["local", "ssh"] = Field(
        "local", description="local: run squeue/scontrol here; ssh: on ssh_host through the forced command."
    )
    slurm_conf: Path | None = Field(
        None, description="SLURM_CONF for the local transport (default: Slurm's own, /etc/slurm/slurm.conf)."
    )
    command_timeout_s: float = Field(10.0, gt=0, le=300, description="Timeout of one Slurm command.")
    ssh_host: str | None = Field(None, description="Head node for the ssh transport.")
    ssh_user: str | None = Field(None, description="Remote user (an operator account of Slurm).")
    ssh_port: int = Field(22, ge=1, le=65535, description="sshd port of the head node.")
    ssh_key: Path | None = Field(None, description="Private key; its public half is the forced-command key.")
    ssh_known_hosts: Path | None = Field(
        None, description="known_hosts holding the head node's key (host keys are always checked)."
    )
    min_spare_nodes: int = Field(
        0,
        ge=0,
        description="Exclusions are pruned (oldest first) until node_count + this many usable "
        "nodes remain in the job's partitions.",
    )
    opt_in_token: str = Field(
        "trainguard:policy=",
        min_length=3,
        description="A job opts in when its comment contains this token (sbatch --comment=trainguard:policy=default).",
    )
    opt_in_partitions: tuple[str, ...] = Field((), description="Every job in these partitions is opted in.")
    require_opt_in: bool = Field(
        True, description="Refuse (skip) job actions on jobs that did not opt in; release is always allowed."
    )
    max_drained_fraction: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Circuit breaker: at most this fraction of nodes (at least 1) drained "
        "by trainguard at once; further drains are skipped.",
    )
    settle_timeout_s: float = Field(
        15.0, ge=0, le=300, description="How long to keep looking while a job is between states (COMPLETING)."
    )
    verify_timeout_s: float = Field(
        5.0, ge=0, le=120, description="How long to poll squeue/sinfo for an action's effect to show."
    )

    _cluster = field_validator("cluster")(validate_optional_cluster)

    @field_validator("ssh_host")
    @classmethod
    def _host(cls, v: str | None) -> str | None:
        return None if v is None else validate_host(v)

    @field_validator("ssh_user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not _USER.fullmatch(v):
            raise ValueError(f"ssh_user {v!r} is not a user name")
        return v

    @model_validator(mode="after")
    def _ssh_needs_host(self) -> SlurmSettings:
        if self.transport == "ssh" and not self.ssh_host:
            raise ValueError("transport=ssh needs ssh_host")
        return self

    def transport_config(self) -> Transport:
        return Transport(
            kind=self.transport,
            ssh_host=self.ssh_host,
            ssh_user=self.ssh_user,
            ssh_port=self.ssh_port,
            ssh_key=str(self.ssh_key) if self.ssh_key else None,
            ssh_known_hosts=str(self.ssh_known_hosts) if self.ssh_known_hosts else None,
        )
