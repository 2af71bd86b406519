"""rank_died: a rank's process died (or its main thread did) while others wait or fail after it.

Signals, strongest first: the launcher's ChildFailedError table giving the rank's exit signal
(SIGKILL, SIGSEGV, SIGABRT); the rank's own exception in its log (a traceback whose message is not
the echo of a peer's failure, see ``log_causes``); an NCCL RAS report that considers the rank's
process dead (NCCL's own job-wide view: unreachable over the RAS network for long enough that NCCL
gave up on it); /proc state ``gone`` or ``Z`` while another rank lived on (``died_first``: where
the whole job went between two looks, /proc names no one); a main thread in
``threading._shutdown`` (the main module raised or returned; non-daemon threads keep the process
alive). Ranks are ordered by the
time of their first failure where logs carry one (a RAS report carries none: its time is when it was
asked). RAS alone gives 0.85, 0.9 when the wait graph shows others waiting on the rank, +0.05 when a
log or /proc agrees. A rank that exited with status 0 while no live rank waits finished its work
(the job ended while it was looked at): no finding. Cites: the log or RAS report line or process
state, and the stack. False positives: a gloo enforce failure on the rank that
*received* mismatched data (a symptom of another rank's size mismatch: cited with low confidence so
the mismatch outranks it); a RAS "dead" process whose node or link went away while it lived on
(when its stacks show it alive, RAS is not believed here and missing_rank reports it unresponsive).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.gpu_ranks import rank_gpus
from hangscope.analysis.log_causes import Failure, describe, failures, unranked
from hangscope.analysis.observations import WAITING_STATES
from hangscope.analysis.rank_state import died_first, exited_cleanly, outlived_by
from hangscope.analysis.ras_facts import seen_alive
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent, ProcessState
from hangscope.ranges import ranks_do, ranks_phrase

_STRENGTH = {"gpu": 0.92, "signal": 0.9, "exception": 0.9, "dead": 0.85, "exit": 0.5,
             "collective_error": 0.55}


def detect(ctx: Context) -> list[Finding]:
    logged = {rank: [f for f in items if f.what in _STRENGTH
                     and not (f.what == "dead" and seen_alive(ctx.stacks, rank))]
              for rank, items in failures(ctx.evidence).items()}
    logged = {rank: items for rank, items in logged.items() if items}
    from_stacks = {rank for rank, state in ctx.stacks.items()
                   if died_first(ctx.stacks, rank) or state.main_finished}
    finished = {rank for rank in from_stacks - set(logged) if exited_cleanly(ctx.evidence, rank)}
    if finished and not any(r not in from_stacks for _, (sources, _) in ctx.graph.waits.items()
                            for r in sources):
        from_stacks -= finished  # done, with nobody left waiting for them: the job finished
    # a rank whose GPU failed went first: the others' errors follow from losing it
    gpu = {r for r, items in logged.items() if any(f.what == "gpu" for f in items)}
    dead = sorted(set(logged) | from_stacks,
                  key=lambda r: (r not in gpu, _first_time(logged.get(r, [])) is None,
                                 _first_time(logged.get(r, [])) or 0.0, r))
    if not dead:
        return _unranked_gpu(ctx) or _unranked(ctx) or _agent_signalled(ctx)
    gpus = rank_gpus(ctx.evidence) if gpu else {}
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                      if targets & set(dead) for r in sources} - set(dead))
    evidence: list[EvidenceItem] = []
    parts = []
    # a bare non-zero exit code is what every rank that raised an echo shows too: weakest
    only_exits = not from_stacks and all(f.what == "exit" for v in logged.values() for f in v)
    confidence = 0.5 if only_exits else 0.6
    died = False  # else only collective errors: the process may live on ("failed", not "died")
    for rank in dead[:8]:
        items = logged.get(rank, [])
        how = []
        symptom = any(item.what == "collective_error" for item in items)
        for item in _cited(items):
            how.append(item.describe(160))
            evidence.append(EvidenceItem("log", rank, item.describe(), item.event.where()))
            # a rank that aborted on a gloo/NCCL error about the data it received is a symptom
            strength = 0.55 if symptom and item.what != "dead" else _STRENGTH[item.what]
            confidence = max(confidence, strength)
        state = ctx.stacks.get(rank)
        gone = state is not None and (state.gone or state.main_finished)
        died = died or gone or any(item.what != "collective_error" for item in items)
        if any(item.what == "dead" for item in items):
            # NCCL's own verdict; others seen waiting on the rank, or a log or /proc agreeing,
            # make it stronger
            ras = 0.9 if rank in waited_on else _STRENGTH["dead"]
            if gone or any(item.what in ("signal", "exception", "gpu") for item in items):
                ras += 0.05
            confidence = max(confidence, min(ras, 0.95))
        if state is not None and gone:
            alive = outlived_by(ctx.stacks, rank)  # (none where only the main thread ended)
            how.append(state.describe() + (f" while {ranks_phrase(alive)} still ran"
                                           if alive else ""))
            proc = ctx.evidence.ranks[rank].proc
            if proc:
                evidence.append(EvidenceItem("proc", rank, _proc_text(proc[-1])))
            cited = ctx.stack_evidence(rank, "main thread: ")
            if cited is not None and not state.gone:
                evidence.append(cited)
            confidence = max(confidence, 0.9 if rank in waited_on else 0.7)
        gpu_of = gpus.get(rank)
        if gpu_of is not None and rank in gpu:
            how.append(f"on {gpu_of.label()}")
            evidence.append(EvidenceItem("gpu", rank, gpu_of.describe(),
                                         gpu_of.readings[-1].where if gpu_of.readings else ""))
        parts.append(f"rank {rank}: " + "; ".join(dict.fromkeys(how)))
    others = sorted(set(ctx.evidence.ranks) - set(dead))
    tail = f"; {ranks_do(waiting, 'wait')} for {'them' if len(dead) > 1 else 'it'}" \
        if waiting else (f"; the errors of {ranks_phrase(others)} follow from it"
                         if others and logged else "")
    summary = (f"{ranks_phrase(dead)} {'died' if died else 'failed'} first: "
               + " | ".join(parts) + tail)
    culprits = dead[:1] if len(dead) > 1 and (len(gpu) == 1 or _first_time(
        logged.get(dead[0], [])) is not None) else dead
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=culprits,
                    waiting_ranks=waiting or others, confidence=confidence, summary=summary,
                    evidence=evidence)]


def _unranked_gpu(ctx: Context) -> list[Finding]:
    """A GPU failed (a kernel Xid line) and nothing ties that GPU to a rank: say so, and what ties
    them, rather than nothing."""
    events = [e for e in unranked(ctx.evidence, frozenset({"gpu"})) if e.fields.get("fatal")]
    if not events:
        return []
    first = events[0]
    summary = (f"a GPU failed ({describe(first, 160)}) but no evidence ties GPU "
               f"{first.fields.get('pci') or first.fields.get('gpu', '?')} to a rank: give "
               "hangscope the ranks' "
               "NCCL_DEBUG=INFO logs (their Init COMPLETE lines name each rank's busId) or an "
               "nvidia-smi output taken while the job ran (its processes table names each GPU's "
               "pids)")
    cited = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:3]]
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=[],
                    waiting_ranks=sorted(ctx.evidence.ranks), confidence=0.6, summary=summary,
                    evidence=cited)]


def _cited(items: list[Failure]) -> list[Failure]:
    """The first two failures, and a RAS verdict among the rest (it is the only one with no time
    and may come last)."""
    cited = items[:2]
    cited += [item for item in items[2:] if item.what == "dead"][:1]
    return cited


def _first_time(items: list[Failure]) -> float | None:
    times = [f.event.time for f in items if f.event.time is not None]
    return min(times) if times else None


def _proc_text(last: ProcessState) -> str:
    """The rank's last /proc state, with what told it where that was not its own entry (an
    orphan of a rank gone before the look: pid 0; a zombie numbered by elimination)."""
    status = f"pid {last.pid} status {last.status}" + _exit_text(last.exit_code, last.exit_signal)
    if not last.told_by:
        return status
    if not last.pid:
        return f"its process had exited before the look: {last.told_by}"
    return f"{status}: {last.told_by}"


def _exit_text(code: int | None, signal: int | None) -> str:
    if signal is not None:
        return f", killed by signal {signal}"
    return f", exit code {code}" if code is not None else ""


def _unranked(ctx: Context) -> list[Finding]:
    """A supervisor says a worker process died (Ray's raylet, an executor) and names no rank: the
    death is known, the rank is not (0.6; nothing says whether it was the first cause)."""
    events = [e for e in unranked(ctx.evidence, frozenset({"signal"}))
              if e.kind == "elastic_child_failed"]
    if not events:
        return []
    summary = (f"a worker process of the job died (the log names no rank): "
               f"{describe(events[0], 200)}")
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:4]]
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=[], waiting_ranks=[], confidence=0.6,
                    summary=summary, evidence=evidence)]


# A signal from outside that ends a node's agent; SIGINT is a person's Ctrl-C, usually of a job
# already stuck: not read as a cause.
_KILLS = frozenset({"SIGTERM", "SIGKILL", "SIGHUP"})


def _agent_signalled(ctx: Context) -> list[Finding]:
    """Rule ``agent-signalled``: a node's torchrun agent logged that it was signalled from outside
    ("Received 15 death signal, shutting down workers") and no rank logged a failure or a wait of
    its own before: that node's workers were stopped with it, so its ranks died first and the
    other nodes' errors (a closed rendezvous, a lost peer) follow. A scheduler's preemption or
    cancel, the host's OOM killer acting on the agent's cgroup, or a closed terminal (SIGHUP) sends
    it; which, the line does not say. 0.55: the node's ranks are not named. Not where the ranks'
    last progress line came more than a minute before the signal: the job had stalled, and the
    signal is a person's or a scheduler's stop of a hung job."""
    every = _all_events(ctx)
    events = [e for e in every if e.kind == "elastic_agent_signalled"
              and e.fields.get("signal") in _KILLS]
    if not events or any(o.state in WAITING_STATES for o in ctx.picture.observations):
        return []
    first = events[0]
    if _stalled_before(first, every):
        return []
    summary = (f"rule agent-signalled: a node's torchrun agent received "
               f"{first.fields['signal']} from outside and shut its workers down ({first.where()}),"
               " with no failure or timeout logged anywhere: that node's ranks died first (a "
               "scheduler's preemption or cancel, the host's OOM killer, or a closed terminal "
               "sends this signal); the other nodes' errors follow. The line names no rank: the "
               "node's ranks are those its agent started")
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:3]]
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=[], waiting_ranks=[], confidence=0.55,
                    summary=summary, evidence=evidence, measures={"rule": "agent-signalled"})]


STALL_S = 60.0  # no progress line for this long before the signal: the job had stopped moving


def _stalled_before(signalled: LogEvent, events: list[LogEvent]) -> bool:
    """The ranks' last progress line came long before the agent was signalled: the job had
    stalled, and the signal is a person's or a scheduler's stop of a hung job, not its cause."""
    if signalled.time is None:
        return False
    last = max((e.time for e in events if e.kind == "progress" and e.time is not None),
               default=None)
    return last is not None and signalled.time - last > STALL_S


def _all_events(ctx: Context) -> list[LogEvent]:
    return [*(e for r in ctx.evidence.ranks.values() for e in r.logs),
            *ctx.evidence.unattributed_logs]
