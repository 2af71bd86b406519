"""Turn the paths a user gave into one :class:`JobEvidence`: find, sniff, dispatch, collect gaps.

Every file is classified by its first bytes, not its name, and handed to the one loader for its
format. Bundles (``hangscope collect``/``attach`` output), given as paths or found in a folder,
are merged by global rank in ``sources.merge``. A file that fails to load becomes a one-line
problem (naming it) and the rest is still analyzed; only when nothing at all is usable does
loading fail.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

from hangscope import timing
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, StackSample
from hangscope.options import LoadOptions
from hangscope.sources import (
    flight_recorder,
    fr_stream,
    merge,
    nvsmi,
    oswaits,
    pyspy,
    runtime,
    source_lines,
    stack_pastes,
)
from hangscope.sources.logs import loader as log_loader
from hangscope.sources.logs import pool as log_pool
from hangscope.sources.logs.normalize import logical_bytes
from hangscope.sources.logs.scan import is_text, sniff_log
from hangscope.sources.special import not_a_file

MAX_FILES = 200_000
SNIFF_BYTES = 4096


@dataclass(slots=True)
class LoadReport:
    """What happened to each input: shown to the user, and kept as evidence gaps."""

    loaded: dict[str, list[str]] = field(default_factory=dict)  # kind -> paths
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    merge: merge.MergeReport | None = None  # when bundles were given

    def count(self) -> int:
        return sum(len(paths) for paths in self.loaded.values())


def load_paths(paths: list[str], options: LoadOptions) -> tuple[JobEvidence, LoadReport]:
    evidence = JobEvidence(world_size=options.world_size, inputs=list(paths))
    report = LoadReport()
    with timing.phase("read"):
        found = _find(paths, evidence, report)
    bundles = found.bundles
    if bundles:
        report.merge = merge.merge_bundles(bundles, evidence, report.problems)
        report.loaded["bundle"] = bundles
    _load_fr(found.fr, options, evidence, report)
    _load_stacks(found.stacks, evidence, report)
    _load_pastes(found.pastes, evidence, report)
    for path, events, problem in log_pool.scan_files(found.logs, options.jobs):
        if problem is not None:
            report.problems.append(problem)
            continue
        log_loader.attribute(events, None, evidence)
        report.loaded.setdefault("log", []).append(path)
    for path in found.runtime:
        runtime.load_runtime_file(path, None, evidence, report.problems)
        report.loaded.setdefault("runtime", []).append(path)
    evidence.gaps.extend(report.problems)
    if not report.count() and not evidence.ranks:
        if report.problems:
            raise BadInputError(paths[0] if len(paths) == 1 else " ".join(paths),
                                f"nothing usable ({report.problems[0]})")
        raise BadInputError(" ".join(paths), "no flight-recorder dumps, logs, stacks or bundles "
                                             "found here")
    return evidence, report


def _files_under(path: str, skip: set[str]) -> list[tuple[str, bool]]:
    """The files to sniff at ``path``, leaving out the bundles in ``skip`` (merged whole)."""
    if not os.path.isdir(path):
        return [(path, True)]
    found: list[tuple[str, bool]] = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in skip)
        for name in sorted(files):
            found.append((os.path.join(root, name), False))
            if len(found) > MAX_FILES:
                raise BadInputError(path, f"more than {MAX_FILES} files; point at the dumps")
    return found


def _head(path: str, size: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return b""


def _sniff(path: str, named: bool = False) -> tuple[str | None, bool]:
    """The file's kind from its first bytes, and whether it (also) holds a gdb or faulthandler
    stack paste: a rank's log may carry a faulthandler dump beside its watchdog lines."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return None, False
    if flight_recorder.looks_like_fr_dump(head):
        return "fr", False
    if pyspy.sniff_pyspy(head):
        return "pyspy", False
    if head.lstrip().startswith(b"{") and f'"{oswaits.SCHEMA}"'.encode() in head:
        return oswaits.KIND, False
    if head.lstrip().startswith(b"{") and f'"{source_lines.SCHEMA}"'.encode() in head:
        return source_lines.KIND, False  # a bundle's cited lines, beside its stacks
    if nvsmi.sniff(head) and not (nvsmi.is_table(head) and nvsmi.in_a_log(
            _head(path, nvsmi.TABLE_LOOK_BYTES))):
        return nvsmi.KIND, False  # (a log that opens with a table is read as the log it is)
    if runtime.sniff_runtime(head):
        return "runtime", False
    logical = logical_bytes(head)  # a paste behind a tool's head, or hard-wrapped
    if logical is not head and pyspy.sniff_pyspy(logical):
        return "pyspy", False
    # a text file the user named is read as a log whatever its name; files met in a folder
    # only when their content or name says so
    kind = "log" if sniff_log(head, path) or (named and is_text(head)) else None
    return kind, stack_pastes.sniff_stack_paste(logical)



@dataclass(slots=True)
class _Found:
    """The files of each kind that are read after the walk, in the order met."""

    bundles: list[str] = field(default_factory=list)
    fr: list[str] = field(default_factory=list)
    stacks: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    pastes: list[str] = field(default_factory=list)
    runtime: list[str] = field(default_factory=list)


def _find(paths: list[str], evidence: JobEvidence, report: LoadReport) -> _Found:
    """Walk the paths and sniff every file, sorting it by kind (small files, OS waits and
    nvidia-smi output, are read here)."""
    found = _Found()
    bundles = found.bundles
    for path in paths:
        if not os.path.exists(path):
            raise BadInputError(path, "no such file or directory")
        if os.path.isdir(path):
            inside, whole = merge.find_bundles(path)
            bundles.extend(inside)
            if whole:
                continue
        for file_path, explicit in _files_under(path, set(bundles)):
            if (special := not_a_file(file_path)) is not None:
                report.problems.append(special)  # opening it could block forever
                continue
            kind, paste = _sniff(file_path, explicit)
            if paste:
                found.pastes.append(file_path)
                if kind is None:
                    continue
            if kind == "fr":
                found.fr.append(file_path)
            elif kind == "pyspy":
                found.stacks.append(file_path)
            elif kind == "log":
                found.logs.append(file_path)
            elif kind == oswaits.KIND:
                oswaits.load_oswaits(file_path, None, evidence, report.problems)
                report.loaded.setdefault(oswaits.KIND, []).append(file_path)
            elif kind == source_lines.KIND:
                source_lines.load_source_lines(file_path, None, evidence, report.problems)
                report.loaded.setdefault(source_lines.KIND, []).append(file_path)
            elif kind == nvsmi.KIND:
                nvsmi.load_gpu_file(file_path, None, evidence, report.problems)
                report.loaded.setdefault(nvsmi.KIND, []).append(file_path)
            elif kind == "runtime":
                found.runtime.append(file_path)
            elif explicit:
                report.problems.append(f"{file_path}: not a recognised evidence file")
            else:
                report.skipped.append(file_path)
    return found


def _load_fr(files: list[str], options: LoadOptions, evidence: JobEvidence,
             report: LoadReport) -> None:
    if not files:
        return
    by_rank = flight_recorder.assign_ranks(files, options.prefix)
    # Thousands of dumps allocate millions of small objects that all stay alive: the cyclic
    # collector would rescan the growing heap again and again for nothing. Restored after.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _load_fr_files(by_rank, evidence, report, options.jobs)
    finally:
        if was_enabled:
            gc.enable()


def _load_fr_files(by_rank: dict[int, str], evidence: JobEvidence, report: LoadReport,
                   jobs: int | None) -> None:
    for rank, path, dump, problems in fr_stream.load_dumps(by_rank, jobs):
        report.problems.extend(problems)
        if dump is None:
            continue
        evidence.rank(rank).fr = dump
        report.loaded.setdefault("flight_recorder", []).append(path)


def _load_stacks(files: list[str], evidence: JobEvidence, report: LoadReport) -> None:
    """Saved py-spy dumps: the rank comes from the file (``[rankN]:`` prefixes, a bundle record)
    or its name (``rank3.json``); ``rank3.worker0.json`` is one of rank 3's DataLoader workers.
    When one dump was saved as JSON and as text (``rank3.json``, ``rank3.txt``), the JSON, which
    has full paths, is used."""
    names = set(files)
    for path in files:
        stem, ext = os.path.splitext(path)
        if ext != ".json" and stem + ".json" in names:
            continue
        try:
            samples = pyspy.load_pyspy_file(path)
        except BadInputError as exc:
            report.problems.append(str(exc))
            continue
        _place_samples(path, samples, evidence, report)


def _load_pastes(files: list[str], evidence: JobEvidence, report: LoadReport) -> None:
    """gdb and faulthandler pastes (``stack_pastes``), placed like py-spy dumps."""
    for path in files:
        try:
            with open(path, "rb") as handle:
                data = handle.read(stack_pastes.MAX_BYTES + 1)
            text = logical_bytes(data).decode("utf-8", "replace")
            samples = stack_pastes.parse_stack_paste(text, path, os.path.getmtime(path))
        except OSError as exc:
            report.problems.append(f"{path}: cannot read ({exc.strerror or exc})")
            continue
        except BadInputError as exc:
            report.problems.append(str(exc))
            continue
        _place_samples(path, samples, evidence, report, "stacks")


def _place_samples(path: str, samples: list[tuple[int | None, StackSample]],
                   evidence: JobEvidence, report: LoadReport, what: str = "py-spy") -> None:
    """File each sample under its rank: from the file's content, else its name. Processes of no
    known rank are analyzed anyway, each as the next rank number free, and the gap says so."""
    name_rank = flight_recorder.rank_from_name(path)
    is_worker = "worker" in os.path.basename(path)
    placed = 0
    unranked: dict[int, int] = {}  # pid -> the rank number it is analyzed under
    for rank, sample in samples:
        rank = rank if rank is not None else name_rank
        worker = is_worker and rank is not None  # a worker of no known rank is read as a process
        if rank is None:
            if sample.pid not in unranked:
                unranked[sample.pid] = max(evidence.ranks, default=-1) + 1
                evidence.rank(unranked[sample.pid])
            rank = unranked[sample.pid]
        rank_ev = evidence.rank(rank)
        if worker:
            rank_ev.worker_samples.setdefault(sample.pid, []).append(sample)
            if sample.pid not in rank_ev.worker_pids:
                rank_ev.worker_pids.append(sample.pid)
        else:
            rank_ev.samples.append(sample)
            rank_ev.pid = rank_ev.pid or sample.pid or None
        placed += 1
    if placed:
        report.loaded.setdefault(what, []).append(path)
    else:
        report.problems.append(f"{path}: cannot tell which rank these stacks belong to "
                               "(name the file rankN.json or prefix lines with [rankN]:)")
    for pid, rank in unranked.items():
        evidence.gaps.append(f"{path}: the stacks of {f'pid {pid}' if pid else 'one process'} "
                             f"name no rank; analyzed as rank {rank} (rank numbers of unranked "
                             "processes follow file order, not the job's ranks)")
