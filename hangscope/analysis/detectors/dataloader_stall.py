"""dataloader_stall: the culprit's main thread waits for its DataLoader, and its workers are stuck.

Signal: a rank others wait on whose main thread sits in ``DataLoader`` (``_next_data`` /
``_try_get_data``) without progress. Cites: the main thread's stack and, for each DataLoader
worker, where it is (its own stack: the dataset code it blocks in), its process state (D = stuck on
I/O) or that it is gone. From logs: the DataLoader's own errors (worker killed, bus error,
``DataLoader timed out``). A helper thread of the rank that died of an exception, the usual reason
workers wait for input that never comes, is added by ``analysis.thread_causes``.
False positives: a slow but moving input pipeline sampled at a bad moment
(progress ``moving`` is excluded), and workers legitimately idle because the prefetch queue is full.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import describe, failures, unranked
from hangscope.analysis.stacks import classify_thread, main_thread
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_do, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    findings = []
    for rank, state in sorted(ctx.stacks.items()):
        if state.main is None or state.main.kind != "dataloader" or state.progress == "moving":
            continue
        evidence: list[EvidenceItem] = []
        main_item = ctx.stack_evidence(rank, "main thread: ")
        if main_item is not None:
            evidence.append(main_item)
        workers = _workers(ctx, rank, evidence)
        waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                          if rank in targets for r in sources} - {rank})
        where = state.main.user_frame.where() if state.main.user_frame else "its DataLoader"
        op = state.main.op or ""
        if " via " in op:  # another library's data iterator (stacks.py)
            summary = (f"rank {rank}'s main thread waits for its next batch in a data iterator "
                       f"({where}, blocked in {op.split(' via ')[1]}): the thread or "
                       "process that fills it delivers nothing")
        else:
            summary = (f"rank {rank}'s main thread waits for a batch from its DataLoader "
                       f"({where}); " + ("; ".join(workers) if workers else
                                         "no DataLoader worker was seen (num_workers=0 means the "
                                         "dataset itself blocks in the main process)"))
        if waiting:
            summary += f"; {ranks_do(waiting, 'wait')} for it"
        confidence = 0.9 if rank in waited_on else 0.6
        findings.append(Finding(kind=Kind.DATALOADER_STALL, culprit_ranks=[rank],
                                waiting_ranks=waiting, confidence=confidence, summary=summary,
                                evidence=evidence))
    return findings or _from_logs(ctx)


def _from_logs(ctx: Context) -> list[Finding]:
    """The DataLoader's own errors in a log: a worker killed (by a signal, or a bus error when
    /dev/shm is too small), or ``DataLoader timed out after N seconds``: the input pipeline, not
    the collective the other ranks then fail in, is what stopped the rank."""
    by_rank = {rank: [f.event for f in items if f.what == "dataloader"]
               for rank, items in failures(ctx.evidence).items()}
    by_rank = {rank: events for rank, events in by_rank.items() if events}
    loose = unranked(ctx.evidence, frozenset({"dataloader"}))
    if not by_rank and not loose:
        return []
    culprits = sorted(by_rank)
    events = [e for rank in culprits for e in by_rank[rank][:2]] + loose[:2]
    who = ranks_phrase(culprits) + "'s" if culprits else "a rank's (the log names no rank)"
    summary = (f"{who} DataLoader failed: " + "; ".join(dict.fromkeys(
        describe(e, 160) for e in events[:3])))
    evidence = [EvidenceItem("log", e.rank, describe(e), e.where()) for e in events[:6]]
    others = sorted(set(ctx.evidence.ranks) - set(culprits))
    if all(e.kind == "dataloader_wait" for e in events):
        # rule dataloader-wait-frames (sources/logs/traceback.py): the wait is seen, not its end
        summary = (f"rule dataloader-wait-frames: {who} main process was waiting for a batch from "
                   "its DataLoader workers when its traceback was printed (the paste ends before "
                   "the exception): the input pipeline, not a collective, is where it stood; "
                   "check the workers (py-spy dump of their pids, /dev/shm, the data source)")
        return [Finding(kind=Kind.DATALOADER_STALL, culprit_ranks=culprits, waiting_ranks=others,
                        confidence=0.55, summary=summary, evidence=evidence,
                        measures={"rule": "dataloader-wait-frames"})]
    return [Finding(kind=Kind.DATALOADER_STALL, culprit_ranks=culprits, waiting_ranks=others,
                    confidence=0.8, summary=summary, evidence=evidence)]


def _workers(ctx: Context, rank: int, evidence: list[EvidenceItem]) -> list[str]:
    rank_ev = ctx.evidence.ranks[rank]
    lines = []
    for pid in sorted(set(rank_ev.worker_pids) | set(rank_ev.worker_samples)
                      | set(rank_ev.worker_proc)):
        states = rank_ev.worker_proc.get(pid, [])
        status = states[-1].status if states else None
        samples = sorted(rank_ev.worker_samples.get(pid, []), key=lambda s: s.taken_at)
        if status in ("gone", "Z"):
            lines.append(f"worker pid {pid} is dead ({'exited' if status == 'gone' else 'zombie'})")
            evidence.append(EvidenceItem("proc", rank, f"DataLoader worker pid {pid}: {status}"))
            continue
        main = main_thread(samples[-1]) if samples else None
        if main is None:
            lines.append(f"worker pid {pid}: no stack" + (f", state {status}" if status else ""))
            continue
        activity = classify_thread(main)
        where = activity.user_frame.where() if activity.user_frame else ""
        d_state = " in uninterruptible I/O (D state)" if status == "D" else ""
        lines.append(f"worker pid {pid} is {activity.describe()}{d_state}")
        evidence.append(EvidenceItem("py-spy", rank, f"DataLoader worker pid {pid}: "
                                     f"{activity.describe()}{d_state}", where))
    return lines
