"""Work counts: a rank's own line saying how many batches or steps it will run.

Synchronous data-parallel training runs one set of collectives per step, so every rank must run
the same number of steps. Uneven data (a shard or a sampler without padding, ``drop_last`` off,
a filter applied per rank) gives the ranks different counts, and the rank with more steps waits in
a collective the others never join (DDP's ``join()`` exists for it). Users print the counts when
they chase such a hang::

    Rank = 2, Number of batches 8                    # a user's print (microsoft/DeepSpeed#2223)
    [rank1]: num_batches: 1250
    rank 3 len(train_loader)=980
    steps per epoch: 311

``work_count`` event per line that names a count of work (fields: ``what``, the counted thing;
``value``), with the line's rank from its prefix or from its text, where it has one (a print of
one line per rank that names none, ``... and the number of steps are: 72``, is read by its run of
lines). ``analysis/detectors/
uneven_work.py`` compares them across ranks.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import TEXT_RANK, Context, Line, make_event
from hangscope.sources.logs.tail import LogicalTail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)number of|num_|batches|steps per|iters per|iterations per|"
                        rb"len\(")
_WHAT = r"(?P<what>batch(?:es)?|steps?|iter(?:ation)?s?|samples)"
_COUNT = re.compile(
    r"(?i)(?:\bnumber of " + _WHAT + r"|\bnum_" + _WHAT.replace("?P<what>", "?P<what2>")
    + r"|\b" + _WHAT.replace("?P<what>", "?P<what3>") + r" per (?:epoch|rank|process|gpu)"
    r"|\blen\((?P<what4>\w*(?:loader|dataset|sampler))\))"
    r"\s*(?:(?:is|are|was|were)\b\s*)?[=:]?\s*(?P<value>\d+)\b")


def scan_work_counts(path: str, rank_hint: int | None = None,
                     tail: LogicalTail | None = None) -> list[LogEvent]:
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None:
        return []
    ctx, lines = read
    out: list[LogEvent] = []
    for line in lines:
        found = _COUNT.search(line.body)
        if found is None:
            continue
        what = next(found.group(g) for g in ("what", "what2", "what3", "what4") if found.group(g))
        out.append(_event(line, ctx, _noun(what), int(found.group("value"))))
    return out


def _noun(what: str) -> str:
    word = what.lower()
    for stem, noun in (("batch", "batches"), ("step", "steps"), ("iter", "iterations"),
                       ("sample", "samples")):
        if word.startswith(stem):
            return noun
    return f"len({word})"


def _event(line: Line, ctx: Context, what: str, value: int) -> LogEvent:
    fields: dict[str, str | int | float] = {"what": what, "value": value}
    if line.rank is None and (m := TEXT_RANK.search(line.body)):
        return make_event("work_count", line, ctx, "info", fields,
                          rank=int(m.group("r")), rank_source="content")
    return make_event("work_count", line, ctx, "info", fields)
