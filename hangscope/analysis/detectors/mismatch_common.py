"""Turn a :class:`Divergence` (FR), a send/recv pair that disagrees (FR) or DETAIL fingerprints
(logs) into a finding that states both sides (expected vs found), and what became of the
collective: still pending (a hang), failed (the ranks raised and exited: the first rank to die is a
symptom), or completed with a wrong result."""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.divergence import Divergence
from hangscope.analysis.observations import Observation
from hangscope.analysis.p2p_match import P2pMismatch, received
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.model import FrEntry
from hangscope.ranges import ranks_phrase


def _sizes(sizes: tuple[tuple[int, ...], ...]) -> str:
    return str([list(shape) for shape in sizes])


def _tensor(sizes: tuple[tuple[int, ...], ...], dtypes: tuple[str, ...]) -> str:
    return f"{_sizes(sizes)}{' ' + ','.join(dtypes) if dtypes else ''}"


def describe(entry: FrEntry, what: str = "") -> str:
    """``all_reduce with [[4, 4]] Float``; outputs too where they differ from the inputs or are
    what differs (``-> [[5, 4]] Half``)."""
    dtypes = ",".join(entry.input_dtypes)
    text = f"{entry.op} with {_sizes(entry.input_sizes)}{' ' + dtypes if dtypes else ''}"
    out_dtypes = ",".join(entry.output_dtypes)
    if what.startswith("output") or entry.output_sizes != entry.input_sizes \
            or (out_dtypes and out_dtypes != dtypes):
        text += f" -> {_sizes(entry.output_sizes)}{' ' + out_dtypes if out_dtypes else ''}"
    return text


# What the collective became, said after the mismatch (see divergence.Outcome).
_OUTCOME_TEXT = {
    "failed": ("; the collective failed rather than hung: every rank that holds it retired it and "
               "recorded nothing after it (gloo raises on such a mismatch and the ranks exit), so "
               "the rank that raised or exited first is a symptom, not the cause"),
    "completed": "; every rank completed it: its result is wrong",
    "went_on": "; every rank completed it and went on: its result, and what followed, is wrong",
}


def mismatch_finding(ctx: Context, div: Divergence, kind: Kind) -> Finding:
    if div.what == "syntax":
        return _syntax_finding(ctx, div, kind)
    expected_entry, majority = div.sides[0]
    culprits = sorted(r for _, ranks in div.sides[1:] for r in ranks)
    group = div.group
    at = f"seq {div.seq}" + (f" (op {div.position + 1} of its coalesced block)"
                             if div.position else "")
    found = "; ".join(f"{ranks_phrase(ranks)} entered {describe(entry, div.what)}"
                      for entry, ranks in div.sides[1:])
    verb = "expect" if len(majority) > 1 else "expects"
    summary = (f"{found} at {at} of pg {group.label}; {ranks_phrase(majority)} {verb} "
               f"{describe(expected_entry, div.what)}")
    confidence = 0.9
    if div.invalid:
        confidence = 0.75
        summary += (f" (no majority; {ranks_phrase(culprits)}'s own record contradicts its op: "
                    f"{div.invalid})")
    elif not div.majority_is_clear:
        confidence = 0.55
        summary += " (no majority: either side may be the wrong one)"
    summary += _OUTCOME_TEXT.get(div.outcome, "")
    if div.outcome == "failed":
        # the mismatch explains the failure: it outranks the first rank that raised or died
        # (0.9), also where no majority says which side is wrong (ranks that died before their
        # dumps held the collective leave a tie; the summary says either side may be wrong)
        confidence = 0.95 if div.majority_is_clear else 0.92
    evidence = [ctx.fr_evidence(ranks[0], entry, group, "entered")
                for entry, ranks in div.sides if ranks]
    return Finding(
        kind=kind, culprit_ranks=culprits, waiting_ranks=sorted(majority),
        confidence=confidence, summary=summary, evidence=evidence,
        collective=CollectiveRef(pg=group.name, seq=div.seq, op=div.sides[-1][0].op,
                                 pg_desc=group.desc))


def _syntax_finding(ctx: Context, div: Divergence, kind: Kind) -> Finding:
    """Records that contradict their own op (torch's "syntax" mismatch)."""
    (sound, others), (entry, culprits) = div.sides
    group = div.group
    who = "every rank" if not others else ranks_phrase(culprits)
    summary = (f"{who} recorded {describe(entry)} at seq {div.seq} of pg {group.label}: "
               f"{div.invalid}")
    if others:
        summary += f"; {ranks_phrase(others)} recorded {describe(sound)}"
    summary += _OUTCOME_TEXT.get(div.outcome, "")
    evidence = [ctx.fr_evidence(culprits[0], entry, group, "recorded")]
    if others:
        evidence.append(ctx.fr_evidence(others[0], sound, group, "recorded"))
    return Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=others,
                   confidence=0.7 if others else 0.5, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=group.name, seq=div.seq, op=entry.op,
                                            pg_desc=group.desc))


def p2p_finding(ctx: Context, found: list[P2pMismatch]) -> Finding:
    """A send and the recv it feeds disagree. One pair cannot say which side is wrong: both ranks
    are named, unless one rank is in every mismatched pair of the group."""
    first = found[0]
    group = first.group
    shared = set.intersection(*({m.sender, m.receiver} for m in found)) if len(found) > 1 \
        else set()
    culprits = sorted(shared) if len(shared) == 1 else sorted({first.sender, first.receiver})
    sent = _tensor(first.send.input_sizes, first.send.input_dtypes)
    summary = (f"rank {first.sender} sent {sent} to rank {first.receiver} (send p2p seq "
               f"{first.send.p2p_seq_id}), which received "
               f"into {_tensor(*received(first.recv))} (recv p2p seq {first.recv.p2p_seq_id}) on "
               f"pg {group.label}")
    if len(found) > 1:
        summary += f"; {len(found) - 1} more send/recv pair(s) of the group differ"
    summary += (f": rank {culprits[0]} is in every mismatched pair" if len(culprits) == 1
                else ": one pair cannot say which side is wrong")
    evidence = [ctx.fr_evidence(first.sender, first.send, group, "posted"),
                ctx.fr_evidence(first.receiver, first.recv, group, "posted")]
    return Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=culprits,
                   waiting_ranks=sorted({first.sender, first.receiver} - set(culprits)),
                   confidence=0.75 if len(culprits) == 1 else 0.55, summary=summary,
                   evidence=evidence,
                   collective=CollectiveRef(pg=group.name, seq=first.send.p2p_seq_id, op="send",
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
    # rule same-seq-same-group: a watchdog line that names no group, in a log whose watchdog lines
    # name one group only, at a sequence number >= 100 that a line of that group also has, is
    # taken to be of that group (two groups at one large SeqNum by chance are unlikely)
    named = {o.pg for o in ctx.picture.observations if o.numbering == "watchdog" and o.pg}
    sole = next(iter(named)) if len(named) == 1 else ""
    grouped_seqs = {o.seq for o in ctx.picture.observations
                    if o.numbering == "watchdog" and o.pg == sole and sole}
    for obs in ctx.picture.observations:
        if obs.numbering == "detail" or (obs.numbering == "watchdog" and obs.op):
            pg = obs.pg
            if obs.numbering == "watchdog" and not pg and (obs.seq or 0) >= 100 \
                    and obs.seq in grouped_seqs:
                pg = sole
            key = (obs.numbering, pg if obs.numbering == "watchdog" else "", obs.seq)
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
    if not findings and kind is Kind.COLLECTIVE_MISMATCH:
        findings += _behind_in_sequence(ctx)
    return findings


def _behind_in_sequence(ctx: Context) -> list[Finding]:
    """Rule ``behind-in-sequence``: one DETAIL report (torch's own cross-rank check) whose two
    fingerprints carry different sequence numbers. torch compared the two ranks' current
    collectives on one group: the rank with the lower number has issued fewer collectives there
    (it skipped some, or issued them on another path), so it is the one out of step. 0.6: the
    report shows two ranks only, and a rank that ran extra collectives is the other reading."""
    by_line: dict[str, list[Observation]] = {}
    for obs in ctx.picture.observations:
        if obs.numbering == "detail" and obs.seq is not None:
            by_line.setdefault(obs.where, []).append(obs)
    for where, pair in sorted(by_line.items()):
        if len(pair) != 2 or pair[0].seq == pair[1].seq:
            continue
        low, high = sorted(pair, key=lambda o: o.seq or 0)
        summary = (f"rule behind-in-sequence: torch's DETAIL check found rank {low.rank} in "
                   f"{low.op or 'a collective'} at sequence number {low.seq} while rank "
                   f"{high.rank} is in {high.op or 'a collective'} at {high.seq}: rank {low.rank} "
                   "issued fewer collectives on this group (it skipped some, or runs another "
                   "code path) and is out of step")
        evidence = [EvidenceItem("log", o.rank, f"rank {o.rank} in {o.op} at seq {o.seq}", where)
                    for o in (low, high)]
        return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[low.rank],
                        waiting_ranks=[high.rank], confidence=0.6, summary=summary,
                        evidence=evidence, measures={"rule": "behind-in-sequence"},
                        collective=CollectiveRef(pg=low.pg or None, seq=low.seq, op=low.op,
                                                 numbering="detail"))]
    return []


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
    # analysis.majority's rule: more than half of the ranks shown agree
    clear = len(expected) * 2 > len(expected) + sum(len(side) for side in rest)
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
