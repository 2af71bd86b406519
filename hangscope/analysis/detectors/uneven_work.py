"""Rule ``uneven-work``: ranks that say they will run different numbers of batches or steps.

Synchronous training runs the same collectives on every rank, step for step. Where the ranks' own
lines (``sources/logs/work_counts.py``) give them different counts of the same thing (batches,
steps, iterations, a loader's length), the rank with more steps calls a collective the others
never join: a collective mismatch that hangs at the shortest rank's last step (the reason for
DDP's ``join()`` and for samplers that pad). The odd ones out of a majority are named; where no
count has a majority (two ranks, or all differ), the ranks with the most steps are, since they are
the ones left waiting. Confidence 0.5: a count can differ by design (an evaluation loader, a rank
that logs only its own shard), which the finding says.

Where the lines name no rank, a run of at least ``MIN_RUN`` of them in a row, one print of one
count per process as a job's ranks print it together (the same words but for its numbers and
one word), with a majority and odd ones out, is read
the same way with no culprit named (0.4): one process printing its loaders' counts one after
another gives as many values as lines, no majority.
"""

from __future__ import annotations

import re
from collections import defaultdict

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase

RULE = "uneven-work"
CONFIDENCE = 0.5
CONFIDENCE_UNNAMED = 0.4
MIN_RUN = 4  # rank-less count lines in a row that are read as one print per process
# what uneven counts mean and what to do, said by both forms of the rule
_WHY = ("call collectives the others never join: uneven data per rank (pad the sampler, "
        "drop_last, or DDP's join()).")
_MASK = re.compile(r"0x[0-9a-fA-F]+|\d+")  # what differs between two processes' lines of one print


def detect(ctx: Context) -> list[Finding]:
    counts: dict[str, dict[int, LogEvent]] = defaultdict(dict)
    for rank, event in rank_events(ctx.evidence):
        if event.kind == "work_count":
            counts[str(event.fields["what"])][rank] = event  # the rank's latest line
    for what, lines in sorted(counts.items(), key=lambda item: -len(item[1])):
        values = {rank: int(e.fields["value"]) for rank, e in lines.items()}
        if len(values) < 2 or len(set(values.values())) < 2:
            continue
        odd = odd_ones_out(values)
        if odd is not None:
            culprits, others = odd.odd, odd.majority
            said = (f"{ranks_phrase(others)} {what} {odd.value}, while "
                    + "; ".join(f"rank {r}: {values[r]}" for r in culprits[:4]))
        else:
            most = max(values.values())
            culprits = sorted(r for r, v in values.items() if v == most)
            others = sorted(set(values) - set(culprits))
            said = "; ".join(f"rank {r}: {v}" for r, v in sorted(values.items())[:6])
        summary = (f"rule `{RULE}`: the ranks' own lines give them different numbers of {what} "
                   f"({said}). Every step runs the same collectives on every rank, so "
                   f"{ranks_phrase(culprits)} will {_WHY} Unless these counts differ by design "
                   "(an evaluation loader)")
        evidence = [log_evidence(lines[r]) for r in (culprits[:3] + others[:1])]
        return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=culprits,
                        waiting_ranks=others, confidence=CONFIDENCE, summary=summary,
                        evidence=evidence, measures={"rule": RULE, "what": what})]
    return _unnamed(ctx)


def _unnamed(ctx: Context) -> list[Finding]:
    """The rank-less form: a run of count lines in a row whose values have a majority."""
    for run in _runs([e for e in ctx.evidence.all_logs()
                      if e.kind == "work_count" and e.rank is None]):
        values = {index: int(e.fields["value"]) for index, e in enumerate(run)}
        odd = odd_ones_out(values)
        if odd is None:
            continue
        what = str(run[0].fields["what"])
        summary = (f"rule `{RULE}`: {len(run)} lines in a row, one per process, give different "
                   f"numbers of {what}: {len(odd.majority)} say {odd.value}, "
                   + ", ".join(str(values[i]) for i in odd.odd[:4])
                   + f" ({run[odd.odd[0]].path}:{run[odd.odd[0]].line_no}). Every step runs the "
                   f"same collectives on every rank, so the processes whose counts differ {_WHY} "
                   "The lines name no rank; unless these counts differ by design")
        evidence = [log_evidence(run[i]) for i in odd.odd[:3] + odd.majority[:1]]
        return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=[], waiting_ranks=[],
                        confidence=CONFIDENCE_UNNAMED, summary=summary, evidence=evidence,
                        measures={"rule": RULE, "what": what, "form": "unnamed"})]
    return []


def _one_print(a: str, b: str) -> bool:
    """Whether two lines are one print's: the same words but for numbers, addresses and one
    word (what the process counts: its data set's name)."""
    words_a, words_b = (_MASK.sub("#", line).replace("`", " ").split() for line in (a, b))
    return len(words_a) == len(words_b) and sum(x != y for x, y in zip(words_a, words_b)) <= 1


def _runs(events: list[LogEvent]) -> list[list[LogEvent]]:
    """Runs of at least ``MIN_RUN`` count lines of one print (the same text but for its numbers
    and addresses), each on the line after the one before (a blank between allowed), in one
    file."""
    out: list[list[LogEvent]] = []
    run: list[LogEvent] = []
    for event in sorted(events, key=lambda e: (e.path, e.line_no)):
        if run and (event.path != run[-1].path or event.line_no - run[-1].line_no > 2
                    or not _one_print(event.message, run[-1].message)):
            if len(run) >= MIN_RUN:
                out.append(run)
            run = []
        run.append(event)
    if len(run) >= MIN_RUN:
        out.append(run)
    return out
