"""Rule ``stopped-after-finish``: the run said its training finished, and then someone pressed
Ctrl-C.

Reading: a ``run_finished`` event (``sources/logs/finish.py``: the loop's own words that it is
done) and, later in the same file, the process interrupted by hand: a line that begins with the
terminal's ``^C`` echo, or a ``KeyboardInterrupt`` traceback. Basis: nobody interrupts a job that
exits by itself; one that finished its work and was then stopped by hand was still there, held
at exit by something that never returned: a non-daemon thread, a child process joined forever
(``mp.spawn(join=True)``, DataLoader workers), an experiment tracker's flush (wandb without
``finish()``), a process group's teardown. Kind ``python_deadlock`` (the process hangs in its own
code, no collective), confidence 0.5: that the run did not exit is the user's act, read from a
mark; its stack (py-spy dump) shows what held it.
"""

from __future__ import annotations

import re

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import interrupted
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

RULE = "stopped-after-finish"
CONFIDENCE = 0.5
_INTERRUPT = re.compile(r"^\s*\^C|\bKeyboardInterrupt\b")


def detect(ctx: Context) -> list[Finding]:
    events = list(ctx.evidence.all_logs())
    finished = [e for e in events if e.kind == "run_finished"]
    if not finished:
        return []
    for done in finished:
        stop = _interrupt_after(done, events)
        if stop is not None:
            return [_finding(done, stop)]
    return []


def _interrupt_after(done: LogEvent, events: list[LogEvent]) -> LogEvent | None:
    later = sorted((e for e in events if e.path == done.path and e.line_no > done.line_no
                    and (e.kind == "cue" or e.kind == "traceback")), key=lambda e: e.line_no)
    for event in later:
        if _INTERRUPT.search(event.message) or interrupted(event):
            return event
    return None


def _finding(done: LogEvent, stop: LogEvent) -> Finding:
    who = ranks_phrase([done.rank]) if done.rank is not None else "the run"
    summary = (f"rule `{RULE}`: {who} logged that training finished "
               f"({done.where()}), and then the process was interrupted by hand "
               f"({stop.where()}): it did its work but never exited. Something held it at exit: "
               "a non-daemon thread, a child process joined forever (mp.spawn, DataLoader "
               "workers), an experiment tracker's flush (wandb without finish()), a process "
               "group's teardown; a py-spy dump of the process shows which")
    evidence = [EvidenceItem("log", done.rank, done.message.strip()[:200], done.where()),
                EvidenceItem("log", stop.rank, stop.message.strip()[:200], stop.where())]
    return Finding(kind=Kind.PYTHON_DEADLOCK, culprit_ranks=[] if done.rank is None
                   else [done.rank], waiting_ranks=[], confidence=CONFIDENCE, summary=summary,
                   evidence=evidence, measures={"rule": RULE})
