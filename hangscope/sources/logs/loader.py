# ruff: noqa: E501
"""The bundle loader for file kind ``"log"``.

Attribution: a line's own prefix (``[rank3]:``, Lightning's ``[rank: 3]``, NCCL ``host:pid`` mapped
through ``Init COMPLETE``) and table content (torchrun's failure table names the failed rank) win over
the rank the bundle filed the log under; events that only carry an in-message rank (``[Rank N]`` of
a process-group log prefix) that disagrees with the bundle's rank go to
``evidence.unattributed_logs``; everything else belongs to the bundle's rank.
"""

from __future__ import annotations

from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, LogEvent
from hangscope.sources.logs.benign import scan_benign
from hangscope.sources.logs.collective_lines import scan_collective_lines
from hangscope.sources.logs.cues import scan_cues
from hangscope.sources.logs.finish import scan_finish
from hangscope.sources.logs.host_memory import scan_host_memory
from hangscope.sources.logs.last_shapes import scan_last_shapes
from hangscope.sources.logs.marks import scan_marks
from hangscope.sources.logs.progress import scan_progress
from hangscope.sources.logs.progress_template import scan_template_progress
from hangscope.sources.logs.rank_positions import scan_rank_positions
from hangscope.sources.logs.rank_rounds import scan_rank_rounds
from hangscope.sources.logs.rank_timings import scan_rank_timings
from hangscope.sources.logs.scan import scan_log
from hangscope.sources.logs.sizes import scan_sizes
from hangscope.sources.logs.stated_sizes import scan_stated_sizes
from hangscope.sources.logs.step_skips import scan_step_skips
from hangscope.sources.logs.step_times import scan_step_times
from hangscope.sources.logs.tail import logical_tail
from hangscope.sources.logs.work_counts import scan_work_counts
from hangscope.sources.logs.world_size import scan_world_size

_CERTAIN = ("prefix", "pid", "content", "launcher")


def attribute(events: list[LogEvent], rank: int | None, evidence: JobEvidence) -> None:
    """File ``events`` (scanned from a log the bundle filed under ``rank``) into ``evidence``."""
    for event in events:
        source = event.fields.get("rank_source")
        if event.rank is None or event.rank == rank:
            if rank is None:
                evidence.unattributed_logs.append(event)
            else:
                evidence.rank(rank).logs.append(event)
        elif source in _CERTAIN or rank is None:
            evidence.rank(event.rank).logs.append(event)
        else:
            evidence.unattributed_logs.append(event)


def load_log_file(path: str, rank: int | None, evidence: JobEvidence, problems: list[str]) -> None:
    try:
        events = scan_log_file(path, rank)
    except BadInputError as exc:
        problems.append(str(exc))
        return
    attribute(events, rank, evidence)


def scan_log_file(path: str, rank: int | None) -> list[LogEvent]:
    """Every event of one log, unattributed: a function of the file alone (``logs.pool`` runs
    it in worker processes). Raises BadInputError where the file cannot be read as a log."""
    events = scan_log(path, rank_hint=rank)
    events += scan_progress(path, rank_hint=rank)  # where each rank's log got to, and ends
    events += scan_sizes(path, rank_hint=rank)  # the sizes it says it built
    tail = logical_tail(path, rank)  # read and its wraps rebuilt once, for every scan of the tail
    events += scan_collective_lines(path, rank_hint=rank, tail=tail)  # rank + collective lines
    events += scan_marks(path, rank_hint=rank, tail=tail)  # a user's before/after prints around a call
    events += scan_step_times(path, rank_hint=rank, tail=tail)  # what each step took, in order
    events += scan_host_memory(path, rank_hint=rank, tail=tail)  # its own host memory reports
    events += scan_finish(path, rank_hint=rank, tail=tail)  # the run said it finished
    events += scan_world_size(path, rank_hint=rank, tail=tail)  # the job's size, stated
    if not any(event.kind == "progress" for event in events):
        events += scan_template_progress(tail)  # a repeated metric line counting up
    events += scan_work_counts(path, rank_hint=rank, tail=tail)  # how many steps each rank runs
    events += scan_rank_positions(path, tail)  # a summary of where each rank's stack sits
    events += scan_rank_rounds(tail)  # a per-rank probe print with one rank missing
    events += scan_step_skips(path, rank_hint=rank, tail=tail)  # a rank skipped a non-finite step
    events += scan_stated_sizes(path, rank_hint=rank, tail=tail)  # per-rank sizes written out
    events += scan_rank_timings(tail)  # one timer printed by every rank
    events += scan_last_shapes(path, tail)  # the shapes printed last, if they differ
    events += scan_cues(path, rank_hint=rank, tail=tail)  # words that point at a kind: last tier
    events += scan_benign(path, tail)  # the file is known-harmless warnings and nothing else
    return events
