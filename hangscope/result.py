"""What an analysis produced (:class:`Result`) and what a command tells its user
(:class:`Summary`). Apart from the pipeline so that the renderers, which read a Result, do not
import the pipeline that calls them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hangscope.analysis.verdict import Status, Verdict
from hangscope.errors import ExitCode

if TYPE_CHECKING:
    from hangscope.analysis.context import Context
    from hangscope.model import JobEvidence
    from hangscope.sources.load import LoadReport
    from hangscope.timing import Profile


@dataclass(slots=True)
class Summary:
    """What a command tells its user: the verdict, where the outputs went, how it went."""

    verdict: Verdict
    out_dir: str | None = None
    files: list[str] = field(default_factory=list)
    input_problems: list[str] = field(default_factory=list)  # inputs that could not be used
    seconds: float = 0.0
    collect_tally: str = ""
    profile: Profile | None = None  # with --profile: where the time went

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.verdict.status)


@dataclass(slots=True)
class Result:
    """An analysis done in this process: the verdict and what the report is drawn from."""

    verdict: Verdict
    context: Context
    evidence: JobEvidence
    out_dir: str | None = None
    files: list[str] = field(default_factory=list)
    load_report: LoadReport | None = None
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.verdict.status)

    def summary(self) -> Summary:
        problems = self.load_report.problems if self.load_report is not None else []
        return Summary(self.verdict, self.out_dir, self.files, problems, self.seconds)


def exit_code_for(status: Status) -> int:
    if status in (Status.HANG, Status.CRASHED):
        return ExitCode.HANG_FOUND
    if status is Status.INCONCLUSIVE:
        return ExitCode.INCONCLUSIVE
    return ExitCode.NO_HANG
