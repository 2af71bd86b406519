"""The verdict: findings with evidence, ordered root cause first. Schema ``hangscope.verdict/1``.

This is the contract scripts depend on (documented in ``docs/verdict.md``). ``to_json`` is built
from these dataclasses only, so the JSON, the terminal summary and the HTML report never disagree.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "hangscope.verdict/1"


class Kind(str, enum.Enum):
    COLLECTIVE_MISMATCH = "collective_mismatch"
    SIZE_MISMATCH = "size_mismatch"
    MISSING_RANK = "missing_rank"
    RANK_DIED = "rank_died"
    RANK_OOM = "rank_oom"
    DATALOADER_STALL = "dataloader_stall"
    PYTHON_DEADLOCK = "python_deadlock"
    P2P_DEADLOCK = "p2p_deadlock"
    PG_ORDER_DEADLOCK = "pg_order_deadlock"
    STRAGGLER = "straggler"
    NETWORK_FAULT = "network_fault"
    INIT_HANG = "init_hang"
    CONFIG_SKEW = "config_skew"


class Status(str, enum.Enum):
    HANG = "hang"
    CRASHED = "crashed"
    SLOW = "slow"
    HEALTHY = "healthy"
    INCONCLUSIVE = "inconclusive"


# Which status a finding implies when it is the root cause.
STATUS_OF_KIND = {
    Kind.RANK_DIED: Status.CRASHED,
    Kind.RANK_OOM: Status.CRASHED,
    Kind.STRAGGLER: Status.SLOW,
}

# Tie-break when confidences are equal: the more specific explanation first. A cycle explains
# the missing ranks it contains; a mismatch explains why the others wait.
KIND_PRIORITY = {
    Kind.RANK_OOM: 0, Kind.RANK_DIED: 1, Kind.P2P_DEADLOCK: 2, Kind.PG_ORDER_DEADLOCK: 2,
    Kind.PYTHON_DEADLOCK: 3, Kind.DATALOADER_STALL: 3, Kind.COLLECTIVE_MISMATCH: 4,
    Kind.SIZE_MISMATCH: 4, Kind.INIT_HANG: 5, Kind.NETWORK_FAULT: 6, Kind.MISSING_RANK: 7,
    Kind.STRAGGLER: 8, Kind.CONFIG_SKEW: 9,
}


@dataclass(frozen=True, slots=True)
class EvidenceItem:
    """One cited fact. ``where`` is ``file:line`` (or a file and an FR record id)."""

    source: str  # flight_recorder | py-spy | log | proc | probe | gpu
    rank: int | None
    detail: str
    where: str = ""


@dataclass(frozen=True, slots=True)
class CollectiveRef:
    """The collective a finding is about. From stacks alone the group and seq are unknown (None)."""

    pg: str | None
    seq: int | None
    op: str
    pg_desc: str = ""
    numbering: str = ""  # set when ``seq`` is not FR's collective_seq_id (a log's own counter)


@dataclass(slots=True)
class Finding:
    kind: Kind
    culprit_ranks: list[int]
    waiting_ranks: list[int]
    confidence: float
    summary: str
    evidence: list[EvidenceItem]
    collective: CollectiveRef | None = None
    # Numbers a runbook may act on, by name (``slowdown``: a straggler's compute time over the
    # fastest rank's). Only in the JSON when there are some.
    measures: dict[str, float | str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        collective = None
        if self.collective is not None:
            # a log line that gives a seq but not its op (torch's work-status lines): "unknown",
            # as the schema wants a name
            collective = {"pg": self.collective.pg, "seq": self.collective.seq,
                          "op": self.collective.op or "unknown"}
            if self.collective.pg_desc:
                collective["pg_desc"] = self.collective.pg_desc
            if self.collective.numbering:
                collective["seq_numbering"] = self.collective.numbering
        return {
            "kind": self.kind.value,
            "culprit_ranks": sorted(self.culprit_ranks),
            "waiting_ranks": sorted(self.waiting_ranks),
            "collective": collective,
            "confidence": round(self.confidence, 2),
            "summary": self.summary,
            "evidence": [asdict(item) for item in self.evidence],
        } | ({"measures": dict(self.measures)} if self.measures else {})


@dataclass(slots=True)
class RankClass:
    """Ranks whose state is identical (LLNL STAT-style equivalence class)."""

    id: str
    ranks: list[int]
    state: str  # one line: "waiting in all_reduce seq 17 on pg 0", "never entered ..."
    role: str  # culprit | waiting | ok | unknown


@dataclass(frozen=True, slots=True)
class ConfigGroup:
    """Ranks that share one value of a setting; ``where`` cites one of them (file or file:line)."""

    value: str
    ranks: list[int]
    where: str = ""


@dataclass(slots=True)
class ConfigDifference:
    """A setting the ranks disagree on (``env:NCCL_SOCKET_IFNAME``, ``nccl_version``,
    ``lib:libnccl``), its groups largest first. ``unknown`` lists ranks nothing said it for."""

    key: str
    groups: list[ConfigGroup]
    unknown: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Verdict:
    status: Status
    world_size: int | None
    ranks_seen: list[int]
    ranks_missing: list[int]
    findings: list[Finding] = field(default_factory=list)
    evidence_gaps: list[str] = field(default_factory=list)
    rank_classes: list[RankClass] = field(default_factory=list)
    tool_version: str = ""
    # rank -> its GPU as nvidia-smi or NCCL showed it (``analysis/gpu_ranks.py``); in the JSON
    # only when some rank has one
    gpus: dict[int, str] = field(default_factory=dict)
    config_differences: list[ConfigDifference] = field(default_factory=list)

    @property
    def root(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "status": self.status.value,
            "world_size": self.world_size,
            "ranks_seen": sorted(self.ranks_seen),
            "ranks_missing": sorted(self.ranks_missing),
            "findings": [finding.to_json() for finding in self.findings],
            "evidence_gaps": list(self.evidence_gaps),
            "rank_classes": [asdict(cls) for cls in self.rank_classes],
            "hangscope_version": self.tool_version,
        }
        if self.gpus:
            out["gpus"] = {str(r): g for r, g in sorted(self.gpus.items())}
        if self.config_differences:
            out["config_differences"] = [asdict(d) for d in self.config_differences]
        return out


def order_findings(findings: list[Finding]) -> list[Finding]:
    """Root cause first: most confident, then the more specific kind, then fewer culprits."""
    return sorted(findings, key=lambda f: (-round(f.confidence, 2), KIND_PRIORITY[f.kind],
                                           len(f.culprit_ranks)))
