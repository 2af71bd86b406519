"""Turn a :class:`Divergence` (FR) or DETAIL fingerprints (logs) into a finding that states both
sides (expected vs found)."""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.divergence import Divergence
from hangscope.analysis.observations import Observation
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.model import FrEntry
from hangscope.ranges import ranks_phrase


def describe(entry: FrEntry) -> str:
    sizes = [list(shape) for shape in entry.input_sizes]
    dtypes = ",".join(entry.input_dtypes)
    return f"{entry.op} with {sizes}{' ' + dtypes if dtypes else ''}"



def mismatch_finding(ctx: Context, div: Divergence, kind: Kind) -> Finding:
    expected_entry, majority = div.sides[0]
    culprits = sorted(r for _, ranks in div.sides[1:] for r in ranks)
    group = div.group
    found = "; ".join(f"{ranks_phrase(ranks)} entered {describe(entry)}"
                      for entry, ranks in div.sides[1:])
    verb = "expect" if len(majority) > 1 else "expects"
    summary = (f"{found} at seq {div.seq} of pg {group.label}; {ranks_phrase(majority)} {verb} "
               f"{describe(expected_entry)}")
    confidence = 0.9
    if not div.majority_is_clear:
        confidence = 0.55
        summary += " (no majority: either side may be the wrong one)"
    evidence = [ctx.fr_evidence(ranks[0], entry, group, "entered")
                for entry, ranks in div.sides]
    return Finding(
        kind=kind, culprit_ranks=culprits, waiting_ranks=sorted(majority),
        confidence=confidence, summary=summary, evidence=evidence,
        collective=CollectiveRef(pg=group.name, seq=div.seq, op=div.sides[-1][0].op,
                                 pg_desc=group.desc))


def log_mismatch_findings(ctx: Context, kind: Kind) -> list[Finding]:
    """Mismatches that logs show, per sequence number of one numbering and group, ranks grouped
    by what they ran; the largest side is what the group expected:

    - ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` fingerprints (op, shape, dtype);
    - watchdog timeouts of one group at one SeqNum (or, in torch before 1.11, with no SeqNum) that
      name different ops or element counts: the ranks timed out in different collectives.

    Different ops give ``collective_mismatch``, the same op with other shapes, dtypes or numel
    ``size_mismatch``; only findings of ``kind`` are returned."""
    by_key: dict[tuple[str, str, int | None], dict[int, Observation]] = {}
    for obs in ctx.picture.observations:
        if obs.numbering == "detail" or (obs.numbering == "watchdog" and obs.op):
            key = (obs.numbering, obs.pg if obs.numbering == "watchdog" else "", obs.seq)
            by_key.setdefault(key, {}).setdefault(obs.rank, obs)
    findings = []
    for (_, _, seq), per_rank in sorted(by_key.items(), key=lambda item: item[0][2] or 0):
        sides: dict[tuple[str, str, str, int | None], list[Observation]] = {}
        for obs in per_rank.values():
            sides.setdefault((obs.op, obs.shape, obs.dtype, obs.numel), []).append(obs)
        if len(sides) < 2:
            continue
        ordered = sorted(sides.values(), key=lambda side: (-len(side), _rank0_last(side)))
        found_kind = (Kind.COLLECTIVE_MISMATCH if len({side[0].op for side in ordered}) > 1
                      else Kind.SIZE_MISMATCH)
        if found_kind is kind and ordered[0][0].op not in UNEVEN_LOG_OPS:
            findings.append(_log_mismatch_finding(kind, seq, ordered))
    return findings


# Ops whose per-rank sizes legitimately differ (as the watchdog and DETAIL spell them).
UNEVEN_LOG_OPS = frozenset({"ALLTOALL", "ALLTOALL_BASE", "GATHER", "SCATTER", "_ALLTOALL_BASE"})


def _rank0_last(side: list[Observation]) -> tuple[bool, int]:
    """Tie-break between equal sides: rank 0's side last, so that it is the one named. With no
    majority, rank-0-only code (checkpointing, logging, evaluation under ``if rank == 0``) is the
    usual reason two ranks run different collectives."""
    ranks = [o.rank for o in side]
    return (0 in ranks, min(ranks))


def _log_mismatch_finding(kind: Kind, seq: int | None,
                         sides: list[list[Observation]]) -> Finding:
    expected, rest = sides[0], sides[1:]
    majority = sorted(o.rank for o in expected)
    culprits = sorted(o.rank for side in rest for o in side)
    clear = len(expected) > len(rest[0])
    source = ("TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprints" if expected[0].numbering == "detail"
              else "the ranks' watchdog timeouts")

    def ran(side: list[Observation]) -> str:
        obs = side[0]
        numel = f" numel {obs.numel}" if obs.numel is not None else ""
        return f"{obs.op} {obs.shape} {obs.dtype}{numel}".replace("  ", " ").strip()

    at = f"sequence number {seq}" if seq is not None else "the same point (no sequence number)"
    found = "; ".join(f"{ranks_phrase([o.rank for o in side])} ran {ran(side)}" for side in rest)
    summary = f"{found} at {at}, where {ranks_phrase(majority)} ran {ran(expected)} ({source})"
    if not clear:
        summary += ("; with no majority either side may be the odd one: the side with rank 0 is "
                    "named, as rank-0-only code (checkpoint, logging, eval) is the usual cause")
    evidence = [EvidenceItem("log", side[0].rank, f"rank {side[0].rank} ran {ran(side)} at {at}",
                             side[0].where) for side in sides]
    return Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=majority,
                   confidence=0.85 if clear else 0.55, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=sides[0][0].pg or None, seq=seq,
                                            op=rest[0][0].op, numbering=expected[0].numbering))
