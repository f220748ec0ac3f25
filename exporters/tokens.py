"""Where a log line points: rank, host, PCI bus id, GPU.

Rank: ``[rankN]:`` prefix, ``[Rank N]`` / ``[PG ... Rank N]`` in c10d text, torchelastic's
``rank : N (local_rank: M)``, an ``srun --label`` prefix ``N: `` when nothing better is there. Host: NCCL's
``host:pid:tid [gpu]`` prefix, UCX's ``[time] [host:pid:tid]``, torchelastic's ``host : NAME``, srun's
``Node failure on NAME``. PCI: the kernel's ``PCI:0000:3b:00`` and the full ``0000:3b:00.0``. GPU: NCCL's
``[N]`` (the local device index).
Every value is validated (``trainguard.identity``); an invalid token is ignored.
"""

from __future__ import annotations

import re
from typing import Final

from trainguard.identity import IdentityError, validate_decimal, validate_host

_LABEL_PREFIX = r"^(?:\s{0,6}\d{1,7}: )?"
_HOST = r"([A-Za-z0-9][A-Za-z0-9.-]{0,252})"
_RANK_RES: Final = (
    re.compile(_LABEL_PREFIX + r"\[rank(\d{1,7})\]:"),
    re.compile(r"\bRank (\d{1,7})\]"),
    re.compile(r"^\s*rank\s*:\s*(\d{1,7}) \(local_rank"),
    re.compile(r"^\s{0,6}(\d{1,7}): "),
)
_NCCL_PREFIX: Final = re.compile(_LABEL_PREFIX + r"(?:\[rank\d+\]:\s?)?" + _HOST + r":\d+:\d+ \[(\d{1,3})\]")
_HOST_RES: Final = (
    re.compile(_LABEL_PREFIX + r"\s*host\s*:\s*" + _HOST + r"\s*$"),
    re.compile(r"^(?:\S+ )?\[\d+\.\d+\] \[" + _HOST + r":\d+:\d+\]"),  # UCX
    # srun names the node that failed, not the one whose log prints it (the batch host)
    re.compile(r"\b[Nn]ode failure on ([A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"),
)
_PCI: Final = re.compile(
    r"(?:\bPCI:|\b(?=[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b))"
    r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?\b"
)
# Per-line prefixes that launchers add: srun --label "N: ", PyTorch "[rankN]:", torchrun --tee
# "[default0]:", mpirun --tag-output "[1,0]<stderr>:". Multi-line events group lines by this prefix.
PREFIX: Final = re.compile(
    r"^(?:\s{0,6}\d{1,7}: )?(?:\[rank\d{1,7}\]: ?|\[default\d{1,7}\]: ?|\[\d{1,7},\d{1,7}\]<std(?:out|err)>: ?)?"
)


def line_rank(text: str) -> str | None:
    for rx in _RANK_RES:
        m = rx.search(text)
        if m:
            try:
                return validate_decimal("rank", str(int(m.group(1))))
            except IdentityError:
                return None
    return None


def line_host(text: str) -> str | None:
    for rx in (_NCCL_PREFIX, *_HOST_RES):
        m = rx.search(text)
        if m:
            try:
                return validate_host(m.group(1))
            except IdentityError:
                return None
    return None


def pci_bus_id(text: str) -> str | None:
    """The first PCI bus id, normalised as NVML's legacy form: ``0000:3b:00.0`` (lower case)."""
    m = _PCI.search(text)
    if m is None:
        return None
    domain, bus, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}.{fn or '0'}"


def line_tokens(text: str) -> dict[str, str]:
    """Every token the line names: ``rank``, ``host``, ``pci``, ``gpu`` (NCCL's local device)."""
    out: dict[str, str] = {}
    rank, host, pci = line_rank(text), line_host(text), pci_bus_id(text)
    if rank is not None:
        out["rank"] = rank
    if host is not None:
        out["host"] = host
    if pci is not None:
        out["pci"] = pci
    m = _NCCL_PREFIX.search(text)
    if m is not None:
        out["gpu"] = str(int(m.group(2)))
    return out
