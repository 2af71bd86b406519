"""rank_died: a rank's process died (or its main thread did) while others wait or fail after it.

Signals, strongest first: the launcher's ChildFailedError table giving the rank's exit signal
(SIGKILL, SIGSEGV, SIGABRT); the rank's own exception in its log (a traceback whose message is not
the echo of a peer's failure, see ``log_causes``); /proc state ``gone`` or ``Z``; a main thread in
``threading._shutdown`` (the main module raised or returned; non-daemon threads keep the process
alive). Ranks are ordered by the time of their first failure where logs carry one. Cites: the log
line or process state, and the stack. False positives: a rank that finished its work normally;
a gloo enforce failure on the rank that *received* mismatched data (a symptom of another rank's
size mismatch: cited with low confidence so the mismatch outranks it).
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import Failure, describe, failures
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_phrase

_STRENGTH = {"signal": 0.9, "exception": 0.9, "collective_error": 0.55}


def detect(ctx: Context) -> list[Finding]:
    logged = {rank: [f for f in items if f.what in _STRENGTH]
              for rank, items in failures(ctx.evidence).items()}
    logged = {rank: items for rank, items in logged.items() if items}
    from_stacks = {rank for rank, state in ctx.stacks.items()
                   if state.gone or state.main_finished}
    dead = sorted(set(logged) | from_stacks,
                  key=lambda r: (_first_time(logged.get(r, [])) is None,
                                 _first_time(logged.get(r, [])) or 0.0, r))
    if not dead:
        return []
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                      if targets & set(dead) for r in sources} - set(dead))
    evidence: list[EvidenceItem] = []
    parts = []
    confidence = 0.6
    for rank in dead[:8]:
        items = logged.get(rank, [])
        how = []
        symptom = any(item.what == "collective_error" for item in items)
        for item in items[:2]:
            how.append(describe(item.event, 160))
            evidence.append(EvidenceItem("log", rank, describe(item.event), item.event.where()))
            # a rank that aborted on a gloo/NCCL error about the data it received is a symptom
            confidence = max(confidence, 0.55 if symptom else _STRENGTH[item.what])
        state = ctx.stacks.get(rank)
        if state is not None and (state.gone or state.main_finished):
            how.append(state.describe())
            proc = ctx.evidence.ranks[rank].proc
            if proc:
                last = proc[-1]
                evidence.append(EvidenceItem("proc", rank, f"pid {last.pid} status {last.status}"
                                             + _exit_text(last.exit_code, last.exit_signal)))
            cited = ctx.stack_evidence(rank, "main thread: ")
            if cited is not None and not state.gone:
                evidence.append(cited)
            confidence = max(confidence, 0.9 if rank in waited_on else 0.7)
        parts.append(f"rank {rank}: " + "; ".join(dict.fromkeys(how)))
    others = sorted(set(ctx.evidence.ranks) - set(dead))
    tail = f"; {ranks_phrase(waiting)} wait for {'them' if len(dead) > 1 else 'it'}" \
        if waiting else (f"; the errors of {ranks_phrase(others)} follow from it"
                         if others and logged else "")
    summary = f"{ranks_phrase(dead)} died first: " + " | ".join(parts) + tail
    return [Finding(kind=Kind.RANK_DIED, culprit_ranks=dead[:1] if len(dead) > 1 and
                    _first_time(logged.get(dead[0], [])) is not None else dead,
                    waiting_ranks=waiting or others, confidence=confidence, summary=summary,
                    evidence=evidence)]


def _first_time(items: list[Failure]) -> float | None:
    times = [f.event.time for f in items if f.event.time is not None]
    return min(times) if times else None


def _exit_text(code: int | None, signal: int | None) -> str:
    if signal is not None:
        return f", killed by signal {signal}"
    return f", exit code {code}" if code is not None else ""
