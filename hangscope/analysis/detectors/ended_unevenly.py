"""Rule ``ended-unevenly``: most ranks tore NCCL down at the end of training, the rest did not.

Reading: ``nccl_comm_end`` lines (``Abort COMPLETE`` / ``Destroy COMPLETE``, NCCL INFO) from
some ranks of a communicator, all after the log's last progress line, and that progress line
short of its own total (a bar at 13907/13908); nothing in the log fails (no warning, error,
timeout or exception) and the ranks with no teardown line are fewer than those with one.
Basis: torch aborts or destroys its communicators when a process leaves its program; ranks that
tear down without an error ran out of work and exited, while a rank whose loop still has a step
left runs that step's collectives with nobody to join them: uneven data per rank (a dataset not
divisible by the world size, no padding or ``drop_last``), the same hang ``uneven-work`` reads
from the ranks' counts. The ranks left in are named (they call the collective the others never
join). Confidence 0.4: a trimmed paste can leave out the rest's own teardown, and a rank whose
last work has no collective (a final evaluation of its own) ends later by design.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

RULE = "ended-unevenly"
CONFIDENCE = 0.4
# cues that are no failure: a phase or a progress bar under way
_QUIET_CUES = frozenset({"busy-phase"})


def detect(ctx: Context) -> list[Finding]:
    events = list(ctx.evidence.all_logs())
    ends = [e for e in events if e.kind == "nccl_comm_end"]
    if not ends or any(_fails(e) for e in events):
        return []
    size = max(int(e.fields["nranks"]) for e in ends)
    ends = [e for e in ends if int(e.fields["nranks"]) == size]
    torn = {int(e.fields["comm_rank"]) for e in ends}
    left = sorted(set(range(size)) - torn)
    if size < 2 or not left or len(left) >= len(torn):
        return []
    path = ends[0].path
    bars = [e for e in events if e.kind == "progress" and e.path == path]
    last = max(bars, key=lambda e: e.line_no, default=None)
    if last is None or not _short(last) or any(e.line_no <= last.line_no for e in ends):
        return []
    how = str(ends[0].fields["how"]).title()
    summary = (f"rule {RULE}: {ranks_phrase(sorted(torn))} tore their NCCL communicator down "
               f"({len(ends)} '{how} COMPLETE' line(s)) with no error "
               f"after the last progress line, which stops short of its total (step "
               f"{last.fields['step']} of {last.fields['total']}); {ranks_phrase(left)} of the "
               f"{size} did not: those ranks ran out of work and exited while "
               f"{'these' if len(left) > 1 else 'this one'} still had a step to run, whose "
               "collectives nobody joins (uneven data per rank: pad the sampler, drop_last, or "
               "DDP's join())")
    return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=left, waiting_ranks=[],
                    confidence=CONFIDENCE, summary=summary,
                    evidence=[log_evidence(last), *(log_evidence(e) for e in ends[:3])],
                    measures={"rule": RULE})]


def _fails(event: LogEvent) -> bool:
    if event.kind == "cue":
        return event.fields.get("cue") not in _QUIET_CUES
    return event.severity in ("warning", "error", "fatal")


def _short(progress: LogEvent) -> bool:
    step, total = progress.fields.get("step"), progress.fields.get("total")
    return isinstance(step, int) and isinstance(total, int) and 0 < step < total
