"""Bundle file kinds -> the loader that reads them. One place, so a bundle and a bare file of the
same format always go through the same code. A new source adds its kind here."""

from __future__ import annotations

from collections.abc import Callable

from hangscope.collect.procstate import load_proc_file
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence
from hangscope.sources import flight_recorder
from hangscope.sources.logs.loader import load_log_file
from hangscope.sources.nvsmi import KIND as GPU_KIND
from hangscope.sources.nvsmi import load_gpu_file
from hangscope.sources.oswaits import KIND as OSWAITS_KIND
from hangscope.sources.oswaits import load_oswaits
from hangscope.sources.probe import RECORD_KIND as PROBE_KIND
from hangscope.sources.probe import load_probe_record
from hangscope.sources.pyspy import RECORD_KIND, load_pyspy_record
from hangscope.sources.runtime import RECORD_KIND as RUNTIME_KIND
from hangscope.sources.runtime import load_runtime_file
from hangscope.sources.source_lines import KIND as SOURCE_LINES_KIND
from hangscope.sources.source_lines import load_source_lines

# loader(path, rank, evidence, problems). ``rank`` is None for job-level files (the launcher's
# log), which say their ranks themselves.
FileLoader = Callable[[str, int | None, JobEvidence, list[str]], None]


def load_fr_file(path: str, rank: int | None, evidence: JobEvidence,
                 problems: list[str]) -> None:
    if rank is None:
        problems.append(f"{path}: a flight-recorder dump must belong to a rank")
        return
    try:
        dump, entry_problems = flight_recorder.load_dump(path, rank)
    except BadInputError as exc:
        problems.append(str(exc))
        return
    problems.extend(entry_problems[:20])
    evidence.rank(rank).fr = dump


FILE_LOADERS: dict[str, FileLoader] = {
    "fr": load_fr_file,
    "proc": load_proc_file,
    RECORD_KIND: load_pyspy_record,
    "log": load_log_file,
    PROBE_KIND: load_probe_record,
    SOURCE_LINES_KIND: load_source_lines,
    OSWAITS_KIND: load_oswaits,
    GPU_KIND: load_gpu_file,
    RUNTIME_KIND: load_runtime_file,
}
