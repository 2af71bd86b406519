"""What every detector gets: the evidence, its FR picture and the wait graph, built once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from hangscope import timing
from hangscope.analysis.correlate import GroupView, Picture
from hangscope.analysis.divergence import Divergence, first_divergence
from hangscope.analysis.rank_state import RankStackState
from hangscope.analysis.stacks import user_frame
from hangscope.analysis.verdict import EvidenceItem, Finding
from hangscope.analysis.waitgraph import WaitGraph
from hangscope.model import FrEntry, JobEvidence, LogEvent


@dataclass(slots=True)
class Context:
    evidence: JobEvidence
    picture: Picture
    graph: WaitGraph
    stacks: dict[int, RankStackState] = field(default_factory=dict)
    _divergences: dict[str, Divergence | None] = field(default_factory=dict)

    def divergence(self, group: GroupView) -> Divergence | None:
        """The group's first mismatch, computed once for all detectors that ask."""
        if group.name not in self._divergences:
            with timing.phase("match"):
                self._divergences[group.name] = first_divergence(group)
        return self._divergences[group.name]

    def fr_evidence(self, rank: int, entry: FrEntry, group: GroupView, what: str) -> EvidenceItem:
        """Cite one FR entry: the user's call site when the dump has frames, else the record."""
        dump = self.picture.dumps[rank]
        frame = user_frame(entry.frames)
        where = frame.where() if frame else f"{dump.path}#record_id={entry.record_id}"
        detail = (f"{what} {entry.op} seq {entry.seq} on pg {group.label}"
                  f"{_args(entry)} [record {entry.record_id} in {dump.path}]")
        return EvidenceItem(source="flight_recorder", rank=rank, detail=detail, where=where)


    def stack_evidence(self, rank: int, what: str = "") -> EvidenceItem | None:
        """Cite the rank's main thread as py-spy saw it last."""
        state = self.stacks.get(rank)
        if state is None or (state.main is None and not state.gone):
            return None
        main = state.main
        where = main.user_frame.where() if main and main.user_frame else (state.sample_path or "")
        detail = f"{what}{state.describe()}"
        return EvidenceItem(source="py-spy", rank=rank, detail=detail, where=where)


    def log_events(self, kind: str) -> list[LogEvent]:
        """Every log event of one kind, in file order: the order a reader of the logs meets them."""
        found = [e for e in self.evidence.all_logs() if e.kind == kind]
        return sorted(found, key=lambda e: (e.path, e.line_no))


def log_evidence(event: LogEvent, fold: bool = False) -> EvidenceItem:
    """Cite one log event, cut at 300 characters; ``fold`` puts a block (or a line padded with
    runs of blanks) on one line."""
    text = " ".join(event.message.split()) if fold else event.message.strip()
    return EvidenceItem("log", event.rank, text[:300], event.where())


def _args(entry: FrEntry) -> str:
    if not entry.input_sizes and not entry.input_dtypes:
        return ""
    sizes = [list(shape) for shape in entry.input_sizes]
    return f" with sizes {sizes} {','.join(entry.input_dtypes)}".rstrip()


class Detector(Protocol):
    """A detector reads the context and returns findings; it never prints or logs conclusions."""

    def __call__(self, ctx: Context) -> list[Finding]: ...
