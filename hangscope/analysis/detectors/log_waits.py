"""missing_rank from log lines: who the others wait for, or an honest "unknown" with next steps.

Signals: the ``log-*`` waits of the wait graph (``analysis/log_waits.py``): a desync report's
lagging ranks, a monitored barrier's failed ranks, ranks whose watchdog timed out at a lower
sequence number of one group than the others. Strength: a monitored barrier names the ranks that
did not arrive (0.9); a desync report is torch's own cross-rank analysis (0.85); watchdog SeqNums
that differ within a named group, 0.75 (0.55 when the lines name no group: two groups may count
alike). When ranks time out and nothing names who they wait for, the finding has no culprit
(0.3), says which collective they wait in and what to fetch or set to find the rank; except where
rank 0 is the one rank the evidence leaves (rule ``rank0-silent``: every other rank waits, a
rank-0 phase was left unfinished, the wait is the set-up barrier, or, weakest and said to be a
prior, one rank's timeout is all there is), or ranks around one block timed out and that block
logged nothing (``hole-in-timeouts``), or the waits are a broadcast rank 0 roots
(``broadcast-root-absent``), or in a job of two ranks one timed out and the other logged no wait
(``sole-other``), or the launcher stopped ranks that never timed out. A monitored barrier whose
waiting ranks say the connection to the absent rank closed (gloo's "Connection closed by peer"
as the barrier's original exception) is that rank's death (``barrier-peer-closed``:
rank_died). Neither rank-0 rule holds where a launcher says rank 0's process ended in SIGABRT
(-6, status 134): how the watchdog ends a rank whose collective timed out, not a rank alive
elsewhere.
False positives: a report of one group read as another's (a desync report's ranks are group
ranks; they are global only in the default group).
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import describe, torn_down
from hangscope.analysis.observations import PEER_CLOSED, WAITING_STATES, Observation
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.analysis.waitgraph import WaitReason
from hangscope.model import LogEvent, is_default_pg
from hangscope.ranges import format_ranks, ranks_phrase

_STRENGTH = {"barrier": 0.9, "desync": 0.85, "watchdog": 0.75, "work_status": 0.75}

_NEXT_STEPS = (
    "to name it next time, set TORCH_NCCL_DUMP_ON_TIMEOUT=1 and TORCH_FR_BUFFER_SIZE=2000 "
    "(flight-recorder dumps of every rank, then `hangscope analyze` them) and "
    "TORCH_NCCL_DESYNC_DEBUG=1 (the timed-out rank names the lagging ones), or run "
    "`hangscope attach` on the live job before the watchdog fires")


def detect(ctx: Context) -> list[Finding]:
    findings = _named(ctx)
    waiting_named = {r for f in findings for r in f.waiting_ranks}
    unexplained = [o for o in ctx.picture.observations if o.state in WAITING_STATES
                   and o.numbering != "store" and o.rank not in waiting_named]
    if unexplained and not findings:
        findings.append(_silent(ctx, unexplained) or _root_absent(ctx, unexplained)
                        or _hole(ctx, unexplained) or _rank0_silent(ctx, unexplained)
                        or _sole_other(ctx, unexplained) or _unknown(ctx, unexplained))
    return findings


def _silent(ctx: Context, seen: list[Observation]) -> Finding | None:
    """Ranks that timed out, and ranks the launcher stopped afterwards that never timed out:
    alive, not in the collective the others gave up on, so the ones they waited for."""
    waiting = sorted({o.rank for o in seen})
    stopped = {r: e for r, e in torn_down(ctx.evidence).items() if r not in waiting}
    if not stopped:
        return None
    culprits = sorted(stopped)
    first = min(seen, key=lambda o: (o.seq is None, o.where))
    verb = "were" if len(culprits) > 1 else "was"
    summary = (f"{ranks_phrase(waiting)} {first.describe()}, while {ranks_phrase(culprits)} "
               f"logged no timeout of {'their' if len(culprits) > 1 else 'its'} own and {verb} "
               "only stopped by the launcher afterwards: alive, and not in that collective")
    evidence = [observation_item(o) for o in one_per_rank(seen)[:2]]
    evidence += [EvidenceItem("log", r, f"launcher stopped rank {r}: {describe(e)}", e.where())
                 for r, e in stopped.items()][:6]
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=culprits, waiting_ranks=waiting,
                   confidence=0.5, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering))


def _root_absent(ctx: Context, seen: list[Observation]) -> Finding | None:
    """Rule ``broadcast-root-absent``: every rank that timed out did so in a broadcast, none of
    them is rank 0, and rank 0 logged no wait of its own (default group, or none named). A
    broadcast in a training loop is rooted at rank 0 (``src=0``) nearly always, and a root that
    is inside it would have timed out too: rank 0 was elsewhere (a rank-0-only phase:
    validation, a checkpoint save, logging).
    0.45: the root is not named by the lines, and rank 0's log may simply be missing."""
    waiting = sorted({o.rank for o in seen})
    if 0 in waiting or ctx.picture.observed(0) or _aborted(ctx, 0) or \
            not all("broadcast" in o.op.lower() and is_default_pg(o.pg)
                    for o in seen):  # another group's rank 0 is not global rank 0
        return None
    first = min(seen, key=lambda o: o.where)
    if any(e.kind == "nccl_work_status" and e.fields.get("seq") == first.seq
           and not is_default_pg(str(e.fields.get("pg", "")))
           for e in [*ctx.evidence.unattributed_logs,
                     *(e for r in ctx.evidence.ranks.values() for e in r.logs)]):
        return None  # the status line beside it names another group: its root is not rank 0
    summary = (f"rule broadcast-root-absent: {ranks_phrase(waiting)} {first.describe()}, and "
               "rank 0 logged no wait of its own: a training loop's broadcast is rooted at rank 0, "
               "so rank 0 was likely elsewhere (a rank-0-only phase such as validation or a "
               "checkpoint save) while the others waited for it")
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=[0], waiting_ranks=waiting,
                   confidence=0.45, summary=summary, evidence=[observation_item(o) for o in
                                                               one_per_rank(seen)[:4]],
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering),
                   measures={"rule": "broadcast-root-absent"})


def _hole(ctx: Context, seen: list[Observation]) -> Finding | None:
    """Rule ``hole-in-timeouts``: three ranks or more timed out in one collective (one op, one
    seq), rank 0 among them, and the ranks between 0 and the highest of them that did not are one
    block that logged nothing at all: ranks count from 0 with no gaps, so those exist and were
    not in it. 0.45: their lines may just be missing from the paste."""
    waiting = sorted({o.rank for o in seen})
    spots = {(o.op.lower(), o.seq) for o in seen if o.op}
    if len(waiting) < 3 or waiting[0] != 0 or len(spots) != 1 or \
            {o.seq for o in seen} != {next(iter(spots))[1]}:
        return None
    hole = sorted(set(range(waiting[-1] + 1)) - set(waiting))
    if not hole or len(hole) >= len(waiting) or hole[-1] - hole[0] != len(hole) - 1 \
            or any(ctx.picture.observed(r) for r in hole) or _ranks_logged(ctx) & set(hole):
        return None
    first = min((o for o in seen if o.op), key=lambda o: o.where)
    summary = (f"rule hole-in-timeouts: {ranks_phrase(waiting)} {first.describe()}, and "
               f"{ranks_phrase(hole)}, between them, logged nothing: ranks count from 0 with no "
               f"gaps, so {ranks_phrase(hole)} existed and was not in that collective; the others "
               "waited for it (its lines may also just be missing from the paste: fetch its log)")
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=hole, waiting_ranks=waiting,
                   confidence=0.45, summary=summary,
                   evidence=[observation_item(o) for o in one_per_rank(seen)[:4]],
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering),
                   measures={"rule": "hole-in-timeouts"})


def _rank0_silent(ctx: Context, seen: list[Observation]) -> Finding | None:
    """Rule ``rank0-silent``: ranks timed out in one collective of the default group (or of
    none named), rank 0 logged no wait, and either every rank from 1 up to the highest that
    logged anything timed out (two at least: one rank's paste is the commonest paste of all), or
    a phase of rank 0's or of no rank (evaluation, saving, a dataset scan, a progress bar) was
    left unfinished before the timeout, or the collective is an early barrier
    (``_early_barrier``): ranks count from 0, so rank 0 exists and was not in that collective.
    0.4: rank 0's lines may just be missing from the paste.
    Its weakest form, ``lone``: one rank's timeout is all there is and rank 0 logged nothing at
    all. Which rank that one waits for, the lines do not say; rank 0 is the likeliest (the one
    rank that runs rank-0-only work: evaluation, checkpoint saves, data preparation, logging,
    and in the threads users file, the absent rank far more often than any other), so it is
    named at 0.3 as a prior, with the logs to fetch to confirm it."""
    waiting = sorted({o.rank for o in seen})
    if 0 in waiting or ctx.picture.observed(0) or _aborted(ctx, 0):
        return None
    # (a work-status line, "Timeout at NCCL work: 15037", names the seq and not the op)
    spots = {(o.op.lower(), o.seq) for o in seen if o.op}
    if len(spots) != 1 or {o.seq for o in seen} != {next(iter(spots))[1]} or \
            not all(is_default_pg(o.pg) for o in seen):
        return None
    first = min((o for o in seen if o.op), key=lambda o: o.where)
    phase = _phase_before(ctx, seen)
    every = len(waiting) >= 2 and \
        waiting == list(range(1, max(_ranks_logged(ctx) | set(waiting)) + 1))
    early = _early_barrier(seen)
    lone = len(waiting) == 1 and 0 not in _ranks_logged(ctx)
    if not every and phase is None and not early and not lone:
        return None
    why = ("every rank but rank 0 timed out in it, and rank 0 logged no wait of its own"
           if every else "rank 0 logged no wait of its own")
    if not (every or early or phase is not None):
        summary = (f"rule rank0-silent (lone): {ranks_phrase(waiting)} {first.describe()}, and "
                   "its timeout is the only one here: rank 0 logged nothing. The lines do not "
                   "say whom it waited for; rank 0 is the likeliest (it alone runs rank-0-only "
                   "work: evaluation, checkpoint saves, data preparation), a prior and not a "
                   "proof: fetch rank 0's log, or set TORCH_NCCL_DUMP_ON_TIMEOUT=1 for FR dumps")
        return Finding(kind=Kind.MISSING_RANK, culprit_ranks=[0], waiting_ranks=waiting,
                       confidence=0.3, summary=summary, evidence=[observation_item(seen[0])],
                       collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                                numbering=first.numbering),
                       measures={"rule": "rank0-silent", "form": "lone"})
    if early and not every:
        size = "a one-element" if first.numel == 1 else "an"
        why = (f"it is a barrier ({size} {first.op} at the job's collective "
               f"#{first.seq}, before any training step's), where ranks wait for rank 0 to "
               "finish its rank-0-only set-up (tokenizing or downloading the data, a "
               "main-process-first block), and " + why)
    if phase is not None:
        why += (", and the log shows a phase left unfinished before the timeout "
                f"(\u201c{phase.message[:100]}\u201d, {phase.where()})")
    summary = (f"rule rank0-silent: {ranks_phrase(waiting)} {first.describe()}, {why}: rank 0 "
               "was likely elsewhere (a rank-0-only phase such as evaluation, a checkpoint save "
               "or dataset preparation) while the others waited for it")
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=[0], waiting_ranks=waiting,
                   confidence=0.4, summary=summary,
                   evidence=[observation_item(o) for o in one_per_rank(seen)[:4]],
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering),
                   measures={"rule": "rank0-silent"})


def _sole_other(ctx: Context, seen: list[Observation]) -> Finding | None:
    """Rule ``sole-other``: a job of two ranks (its communicator's ``nranks 2``, or a launcher's
    stated size), one of them timed out in a collective of the default group (or of none named)
    and the other logged no wait: a collective of two completes when both are in it, so the one
    waited for is the other. 0.4: its lines may just be missing from the paste, and whether it
    died or is elsewhere its own log says."""
    waiting = sorted({o.rank for o in seen})
    if ctx.evidence.stated_world_size() != 2 or len(waiting) != 1 or waiting[0] not in (0, 1):
        return None
    other = 1 - waiting[0]
    if ctx.picture.observed(other) or _aborted(ctx, other) or \
            not all(is_default_pg(o.pg) for o in seen):
        return None
    first = min(seen, key=lambda o: o.where)
    summary = (f"rule sole-other: rank {waiting[0]} {first.describe()} in a job of two ranks, and "
               f"rank {other} logged no wait of its own: a collective of two completes when both "
               f"are in it, so rank {other} is the one it waited for (died, or elsewhere: its own "
               "log says which)")
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=[other], waiting_ranks=waiting,
                   confidence=0.4, summary=summary, evidence=[observation_item(first)],
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering),
                   measures={"rule": "sole-other"})


EARLY_SEQ = 8  # a job's first collectives: set-up barriers, before any gradient all-reduce


def _early_barrier(seen: list[Observation]) -> bool:
    """Every timeout is in one of the job's first collectives and it is a barrier (torch's NCCL
    barrier is a one-element all-reduce; a ``BARRIER`` op name; an all-reduce whose size a
    torch older than 2.0 did not print counts too: DDP's own first collectives are broadcasts,
    so an early all-reduce is a barrier or a flag far more often than a gradient): the set-up
    barrier of ``main_process_first`` / ``wait_for_everyone``, which ranks reach long before
    rank 0 when rank 0 alone prepares the data."""
    return all(o.seq is not None and 0 < o.seq <= EARLY_SEQ and o.numbering == "watchdog"
               and ("barrier" in o.op.lower()
                    or (o.numel in (None, 1) and o.op.lower().replace("_", "") == "allreduce"))
               for o in seen)


def _phase_before(ctx: Context, seen: list[Observation]) -> LogEvent | None:
    """A ``busy-phase`` cue of rank 0 or of no rank (a launcher's one stream, where rank 0
    prints) on or before the first timeout line of its file."""
    first_at: dict[str, int] = {}
    for o in seen:
        path, _, line = o.where.rpartition(":")
        if line.isdigit():
            first_at[path] = min(first_at.get(path, int(line)), int(line))
    phases = [e for e in ctx.evidence.all_logs()
              if e.kind == "cue" and e.fields.get("cue") == "busy-phase" and e.rank in (None, 0)
              and e.path in first_at and e.line_no <= first_at[e.path]]
    return max(phases, key=lambda e: e.line_no) if phases else None


def _aborted(ctx: Context, rank: int) -> bool:
    """The rank's process ended in SIGABRT (a launcher's -6 or 134): how torch's watchdog ends
    a rank whose collective timed out, so no sign of a rank that was elsewhere, alive."""
    return any(e.rank == rank and e.kind == "cue" and e.fields.get("cue") == "abort"
               for e in ctx.evidence.all_logs())


def _ranks_logged(ctx: Context) -> set[int]:
    ranks = {r for r, ev in ctx.evidence.ranks.items() if ev.logs}
    return ranks | {e.rank for e in ctx.evidence.unattributed_logs if e.rank is not None}


def _named(ctx: Context) -> list[Finding]:
    sinks = set(ctx.graph.ranks_of(ctx.graph.sinks()))
    by_culprits: dict[tuple[int, ...], list[tuple[WaitReason, set[int]]]] = defaultdict(list)
    for reason, (waiting, waited_on) in ctx.graph.waits.items():
        if not reason.kind.startswith("log-"):
            continue
        culprits = tuple(sorted(waited_on & sinks)) or tuple(sorted(waited_on - waiting))
        if culprits:
            by_culprits[culprits].append((reason, waiting))
    return [_finding(ctx, list(culprits), waits) for culprits, waits in by_culprits.items()]


def _cite(ctx: Context, ranks: list[int], limit: int = 4) -> list[EvidenceItem]:
    items = []
    for rank in ranks[:limit]:
        seen = ctx.picture.observed(rank)
        if seen:
            items.append(observation_item(seen[0]))
    return items


def observation_item(obs: Observation) -> EvidenceItem:
    about = f"per rank {obs.reporter}'s log: " if obs.reporter not in (None, obs.rank) else ""
    return EvidenceItem("log", obs.rank, about + obs.describe(), obs.where)


def _finding(ctx: Context, culprits: list[int],
             waits: list[tuple[WaitReason, set[int]]]) -> Finding:
    waits.sort(key=lambda item: (-len(item[1]), item[0].seq))
    reason = waits[0][0]
    waiting = sorted(set().union(*(w for _, w in waits)) - set(culprits))
    where = _where(reason)
    evidence = _cite(ctx, waiting, 2) + _cite(ctx, culprits, 8)
    numberings = {r.numbering for r, _ in waits}
    confidence = max(_STRENGTH.get(n, 0.6) for n in numberings)
    if numberings <= {"watchdog", "work_status"} and not reason.pg:
        confidence = 0.55
    kind = Kind.MISSING_RANK
    if reason.numbering == "barrier" and _closed_on(ctx, culprits):
        # rule barrier-peer-closed: the waiting ranks' exception is that the connection to the
        # rank closed, not that it timed out: its process went away while they waited
        kind = Kind.RANK_DIED
        text = (f"{ranks_phrase(culprits)} went away during the monitored barrier that "
                f"{ranks_phrase(waiting)} waited in: their connection to it closed (its "
                "process exited or was killed; its own log says why)")
    elif reason.numbering == "barrier":
        text = (f"{ranks_phrase(culprits)} failed to pass the monitored barrier that "
                f"{ranks_phrase(waiting)} waited in")
    elif reason.numbering == "desync":
        reporters = sorted({o.reporter for r in culprits for o in ctx.picture.observed(r)
                            if o.reporter is not None})
        by = f" (rank {format_ranks(reporters)}'s desync report)" if reporters else ""
        text = (f"{ranks_phrase(culprits)} lag{'' if len(culprits) > 1 else 's'} behind{by}: "
                + "; ".join(_lag(ctx, r) for r in culprits[:4])
                + f"; {ranks_phrase(waiting) if waiting else 'the others'} "
                f"wait{'s' if len(waiting) == 1 else ''} in {where}")
    else:
        text = (f"{ranks_phrase(culprits)} {'are' if len(culprits) > 1 else 'is'} behind in "
                f"{where}: " + "; ".join(_lag(ctx, r) for r in culprits[:4])
                + f", while {ranks_phrase(waiting)} timed out further on")
        if not reason.pg:
            text += " (the lines name no process group: if these are different groups, the " \
                    "numbers do not compare)"
    return Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=waiting,
                   confidence=confidence, summary=text, evidence=evidence,
                   collective=_ref(reason))


def _closed_on(ctx: Context, culprits: list[int]) -> bool:
    """Every report of the culprits' absence from a monitored barrier says the connection to
    them closed (``observations.PEER_CLOSED``)."""
    seen = [o for r in culprits for o in ctx.picture.observed(r) if o.numbering == "barrier"]
    return bool(seen) and all(o.detail == PEER_CLOSED for o in seen)


def _lag(ctx: Context, rank: int) -> str:
    seen = ctx.picture.observed(rank)
    return f"rank {rank} {seen[0].describe()}" if seen else f"rank {rank}"


def _where(reason: WaitReason) -> str:
    seq = f" #{reason.seq}" if reason.seq >= 0 else ""
    pg = f" on pg {reason.pg}" if reason.pg else ""
    return f"{reason.op or 'a collective'}{seq}{pg} ({reason.numbering} numbering)"


def _ref(reason: WaitReason) -> CollectiveRef | None:
    if reason.numbering == "barrier":
        return CollectiveRef(pg=reason.pg or None, seq=None, op=reason.op)
    return CollectiveRef(pg=reason.pg or None, seq=reason.seq, op=reason.op,
                         numbering=reason.numbering)


def _unknown(ctx: Context, seen: list[Observation]) -> Finding:
    """Ranks timed out and no line says who they wait for: say where, and how to find out."""
    seen.sort(key=lambda o: (o.numbering != "watchdog", o.seq is None, o.where))
    first = seen[0]
    waiting = sorted({o.rank for o in seen})
    world = ctx.picture.world_size
    silent = sorted(set(range(world)) - set(waiting)) if world > len(waiting) else []
    fetch = (f"the logs or flight-recorder dumps of {ranks_phrase(silent)}" if silent
             else "the logs or flight-recorder dumps of the ranks not shown here")
    dumped = sorted({str(e.fields["dump_path"]) for r in ctx.evidence.ranks.values()
                     for e in r.logs if e.kind == "fr_dump_notice" and e.fields.get("dump_path")})
    if dumped:
        fetch += f" (this job wrote flight-recorder dumps: {', '.join(dumped[:2])} on each host)"
    seqs = sorted({o.seq for o in seen if o.seq is not None and o.numbering == first.numbering})
    spread = (f"; they wait at {first.numbering} seqs {', '.join(map(str, seqs[:6]))}"
              if len(seqs) > 1 else "")
    summary = (f"{ranks_phrase(waiting)} {first.describe()}{spread}: some rank never joined, and "
               f"these lines do not say which. Fetch {fetch}; {_NEXT_STEPS}")
    evidence = [observation_item(o) for o in one_per_rank(seen)[:6]]
    return Finding(kind=Kind.MISSING_RANK, culprit_ranks=[], waiting_ranks=waiting,
                   confidence=0.3, summary=summary, evidence=evidence,
                   collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                            numbering=first.numbering))


def one_per_rank(seen: list[Observation]) -> list[Observation]:
    out: dict[int, Observation] = {}
    for obs in seen:
        out.setdefault(obs.rank, obs)
    return list(out.values())
