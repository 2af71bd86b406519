"""python_deadlock: the culprit's main thread is blocked on a Python lock, condition, queue or join
(or, in gdb/--native stacks, the GIL or a C mutex) outside any collective, and does not move.

Signal: main-thread activity ``lock`` (threading/queue/multiprocessing waits; with native frames
also a bare ``lock.acquire()``, ``take_gil``, ``pthread_mutex_lock``, a futex, glibc's atexit
lock) in every sample, no CPU. Cites: the main thread and every other thread of that rank that
also waits on a lock (the likely other side of a lock-order inversion). Where the lock is one that
does not survive ``fork()`` (OpenMP's runtime, glibc's list of exit handlers, a ``_after_fork``
frame), the summary says so. A thread waiting for the GIL (or a lock) with no other thread of the
process in the evidence gets lower confidence (0.4 for the GIL, 0.5 for a lock): its holder is not
in the paste. False positives: a main thread that legitimately joins a worker thread that is
itself busy (its thread is then ``compute``, which the summary shows); a queue get on a producer
that is slow; a GIL wait sampled once while another thread runs long C code holding it.
Away from the job's source (a raw py-spy dump), the lock is told from the carried source lines,
a function name, the wchan or the shape of the other threads (``rank_state.refine_idle``); by
shape alone the confidence is at most 0.75.
"""

from __future__ import annotations

import re

from hangscope.analysis.context import Context
from hangscope.analysis.rank_state import INFERRED_LOCK, RankStackState
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_do

# locks that a forked child inherits in whatever state another thread of the parent left them
_FORK_UNSAFE = re.compile(r"^(__kmp_|__kmpc_|GOMP_|gomp_)|^(__internal_atexit|__new_exitfn|"
                          r"(__GI_)?_*cxa_atexit|_after_fork|_at_fork_reinit|__libc_fork|"
                          r"_Fork|__run_fork_handlers)$")
_FORK_HINT = ("; the lock belongs to code that is not fork-safe ({}): a process forked while "
              "another thread of its parent held it inherits it held, with no thread left to "
              "release it (start DataLoader workers or subprocesses with "
              "multiprocessing_context='spawn' or 'forkserver')")


def detect(ctx: Context) -> list[Finding]:
    waited_on = {r for _, (_, targets) in ctx.graph.waits.items() for r in targets}
    findings = []
    for rank, state in sorted(ctx.stacks.items()):
        main = state.main
        if main is None or main.kind != "lock" or state.progress == "moving":
            continue
        others = [t for t in state.threads if t.thread_id != main.thread_id]
        blocked = [t for t in others if t.kind in ("lock", "idle")]
        evidence: list[EvidenceItem] = []
        item = ctx.stack_evidence(rank, "main thread: ")
        if item is not None:
            evidence.append(item)
        for thread in blocked[:6]:
            where = thread.user_frame.where() if thread.user_frame else state.sample_path or ""
            name = thread.thread_name or thread.thread_id
            evidence.append(EvidenceItem("py-spy", rank, f"thread {name}: {thread.describe()}",
                                         where))
        names = ", ".join(f"'{t.thread_name or t.thread_id}' ({t.describe()})"
                          for t in blocked[:4])
        waiting = sorted({r for _, (sources, targets) in ctx.graph.waits.items()
                          if rank in targets for r in sources} - {rank})
        summary = (f"rank {rank}'s main thread is blocked on {main.op or 'a lock'} "
                   f"{main.place()}")
        confidence = 0.9 if rank in waited_on and blocked else 0.7
        if (main.op or "").startswith(INFERRED_LOCK):  # by shape only: no line, name or wchan
            confidence = min(confidence, 0.75)
        # any thread not itself waiting for the GIL may be the one that holds it
        gil_holder_missing = main.op == "GIL" and all(
            t.kind == "lock" and t.op == "GIL" for t in others)
        if gil_holder_missing:
            summary += ("; the thread that holds the GIL is not in the evidence (only "
                        f"{'this thread' if not others else 'threads waiting for it'}): dump "
                        "every thread (gdb `thread apply all bt` and `thread apply all py-bt`, "
                        "or `py-spy dump --native`) to see which thread holds it and what it "
                        "waits for")
            confidence = 0.4
        elif names:
            summary += f"; other blocked threads: {names}"
        elif not others:
            summary += ("; it is the only thread in the evidence, so the lock's holder is not: "
                        "dump every thread (gdb `thread apply all bt`) to see it")
            confidence = 0.5
        else:
            summary += "; no other thread of the rank is blocked (a lock held and never released?)"
        summary += _fork_hint(state)
        if waiting:
            summary += f"; {ranks_do(waiting, 'wait')} for it"
        findings.append(Finding(kind=Kind.PYTHON_DEADLOCK, culprit_ranks=[rank],
                                waiting_ranks=waiting, confidence=confidence,
                                summary=summary, evidence=evidence))
    return findings


def _fork_hint(state: RankStackState) -> str:
    unsafe = list(dict.fromkeys(f.name for f in state.main_frames if _FORK_UNSAFE.search(f.name)))
    return _FORK_HINT.format(", ".join(unsafe[:3])) if unsafe else ""
