"""``trainguard patterns unknown``: the error-looking lines no row names, grouped into templates.

drain3 (the Drain log-template miner) clusters lines whose fixed words agree and turns their variable parts
into ``<*>``; numbers, hex values, addresses, PCI ids and host:pid:tid prefixes are masked first so that one
failure printed by 64 ranks is one template. The output is what an operator reads to write new rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from exporters.events import Finding
from exporters.tokens import PREFIX

# (regex, mask) applied before mining, most specific first
_MASKS: Final = (
    (r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b", "PCI"),
    (r"\b\d{1,3}(?:\.\d{1,3}){3}(?:<\d+>|:\d+)?", "IP"),
    (r"\b[A-Za-z0-9][A-Za-z0-9.-]*:\d+:\d+ \[\d+\]", "NCCL_PREFIX"),
    (r"\b0x[0-9a-fA-F]+\b", "HEX"),
    (r"(?<![A-Za-z])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "NUM"),
)
MAX_LINE: Final = 2000  # longer lines are cut before mining


@dataclass
class Template:
    count: int
    kind: str
    template: str
    example: str
    first_line: int


def _miner() -> Any:
    from drain3 import TemplateMiner  # noqa: PLC0415 - drain3 is needed by this command only
    from drain3.masking import MaskingInstruction  # noqa: PLC0415
    from drain3.template_miner_config import TemplateMinerConfig  # noqa: PLC0415

    config = TemplateMinerConfig()
    config.masking_instructions = [MaskingInstruction(rx, name) for rx, name in _MASKS]
    config.drain_sim_th = 0.5
    config.drain_extra_delimiters = ["="]
    return TemplateMiner(config=config)


def mine(findings: list[Finding]) -> list[Template]:
    """Templates of the unclassified findings, most frequent first (ties: first seen first)."""
    miner = _miner()
    by_cluster: dict[int, Template] = {}
    for f in findings:
        if f.pattern is not None:
            continue
        m = PREFIX.match(f.text)
        text = (f.text[m.end() :] if m else f.text).strip()[:MAX_LINE] or f.text
        result = miner.add_log_message(text)
        cid = int(result["cluster_id"])
        t = by_cluster.get(cid)
        if t is None:
            by_cluster[cid] = Template(1, f.kind or "error", "", text, f.line)
        else:
            t.count += 1
    for cluster in miner.drain.clusters:
        if cluster.cluster_id in by_cluster:
            by_cluster[cluster.cluster_id].template = cluster.get_template()
    return sorted(by_cluster.values(), key=lambda t: (-t.count, t.first_line))


def render(templates: list[Template], as_json: bool = False) -> str:
    if as_json:
        return json.dumps([t.__dict__ for t in templates], indent=1) + "\n"
    if not templates:
        return ""
    return "".join(f"{t.count:6d}  {t.kind:9}  {t.template}\n" for t in templates)
