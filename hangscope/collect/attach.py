"""Live collection: discover a job's processes, gather every source in parallel, write a bundle.

Never harms the job: nothing is signalled or killed; py-spy pauses a rank only for one stack dump
per sample (``nonblocking`` avoids even that); each source runs with its own timeout and a failure
on one rank becomes an evidence gap, never an exception that stops the others. With a
``deadline`` (``--timeout``) the whole collection is bounded: see ``collect.budget``. The manifest
records where it ran (``collect.identity``: host, node, job id) and its wall and monotonic clocks
at start and end, so that bundles from several nodes can be merged and compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from hangscope.bundle import BundleWriter, CollectionRecord
from hangscope.collect import (
    fr_trigger,
    gpu,
    identity,
    logs,
    nccl_ras,
    oswaits,
    permissions,
    procstate,
    pyspy,
    runtime,
    sampling,
)
from hangscope.collect import probe as probe_client
from hangscope.collect.budget import Budget
from hangscope.cores import usable_cores
from hangscope.discover import JobProcesses, RankProcess, discover
from hangscope.model import ProcessState
from hangscope.options import AttachOptions
from hangscope.progress import Progress
from hangscope.sources import source_lines
from hangscope.sources.pyspy import RECORD_KIND

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CollectSummary:
    """What was collected from whom; the CLI prints its tally line."""

    job: JobProcesses
    bundle_dir: str
    ok: dict[str, list[int]] = field(default_factory=dict)  # source -> ranks collected
    failed: dict[int, list[str]] = field(default_factory=dict)  # rank -> one line per failure
    gaps: list[str] = field(default_factory=list)
    seconds: float = 0.0
    cut_short: list[str] = field(default_factory=list)  # what --timeout stopped
    files: int = 0  # evidence files in the bundle
    node: str = ""
    job_id: str = ""

    def tally(self) -> str:
        ranks = sorted(r.rank for r in self.job.ranks)
        stacks = len(set(self.ok.get("py-spy", [])))
        parts = [f"{len(ranks)} rank{'' if len(ranks) == 1 else 's'} found, stacks from {stacks}"]
        if self.ok.get("probe"):
            parts.append(f"in-job probe answered in {len(set(self.ok['probe']))}")
        if self.failed:
            parts.append(f"{len(self.failed)} with problems (" + "; ".join(
                f"rank {rank}: {msgs[0]}" for rank, msgs in sorted(self.failed.items())[:3])
                + (", ..." if len(self.failed) > 3 else "") + ")")
        if self.cut_short:
            parts.append("cut short: " + "; ".join(self.cut_short))
        return ", ".join(parts)


def collect(options: AttachOptions, bundle_dir: str,
            meanwhile: Callable[[], object] | None = None, *, deadline: float | None = None,
            progress: Progress | None = None) -> CollectSummary:
    """Discover the job and write everything into ``bundle_dir``; returns what happened.

    py-spy starts as soon as the ranks are known, before anything else is set up: on a small job
    its dumps are the longest part of the collection. ``meanwhile`` (the caller's own
    preparation, such as importing the analysis) then runs in this thread while the collectors
    wait on py-spy, /proc and the file system in theirs. ``deadline`` (a ``time.monotonic()``
    instant) bounds the whole collection: the bundle is written by then with what was
    collected, and ``cut_short`` says what was not. ``progress`` hears what each collector is at.
    """
    started, wall_start = time.monotonic(), time.time()
    budget = Budget(deadline, options.timeout, progress)
    budget.report("ranks", "discovering")
    job = discover(pid_group=options.pid_group, pids=options.pids, match=options.match,
                   slurm_job=options.slurm_job, slurm_node=options.slurm_node)
    summary = CollectSummary(job=job, bundle_dir=bundle_dir)
    summary.gaps.extend(job.notes)
    rank_of_pid = {r.pid: r.rank for r in job.ranks}
    worker_of = {w: r.rank for r in job.ranks for w in r.workers}
    traceable, workers = _traceable(job, rank_of_pid, worker_of, summary, options.probe)
    budget.report("ranks", str(len(job.ranks)))
    writer = BundleWriter(bundle_dir, redact=options.redact)
    pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="collect")
    pending: set[Future[None]] = set()
    try:
        futures = {"stacks": pool.submit(_collect_stacks_and_state, traceable + workers,
                                         rank_of_pid, worker_of, writer, summary, options,
                                         budget),
                   "flight recorder": pool.submit(_collect_fr, job, writer, summary, options,
                                                  budget),
                   "logs": pool.submit(_collect_logs, job, writer, summary, budget),
                   "NCCL RAS": pool.submit(_collect_ras, job, writer, summary, options, budget),
                   "GPU readings": pool.submit(gpu.collect, writer, summary.gaps, budget,
                                               job.ranks)}
        _describe_job(writer, job)
        oswaits.collect_into(writer, rank_of_pid, worker_of)
        summary.gaps.extend(_describe_node(writer, job, summary, wall_start, started))
        if meanwhile is not None:
            meanwhile()
        left = budget.left()
        _, pending = wait(futures.values(), timeout=None if left == float("inf")
                          else max(0.0, left))
        for name, future in futures.items():
            if future in pending:
                budget.cut(f"{name} still running at the limit")
            else:
                future.result()
    finally:
        pool.shutdown(wait=not pending, cancel_futures=True)
    summary.cut_short = list(budget.cuts)
    if summary.cut_short:
        summary.gaps.append(f"collection cut short by {budget.describe()}: "
                            + "; ".join(summary.cut_short))
    writer.cut_short.extend(summary.cut_short)
    writer.gaps.extend(summary.gaps)
    summary.seconds = time.monotonic() - started
    writer.job["collect_seconds"] = round(summary.seconds, 3)
    writer.meta["clock"].update(wall_end=time.time(), monotonic_end=time.monotonic())
    writer.close()
    summary.files = writer.file_count()
    return summary


def _describe_node(writer: BundleWriter, job: JobProcesses, summary: CollectSummary,
                   wall_start: float, monotonic_start: float) -> list[str]:
    """Where this ran and which job it saw (``collect.identity``), into the manifest; returns
    notes about what could not be told."""
    fields, notes = identity.describe(job)
    writer.meta.update(fields)
    writer.meta["collected_at"] = wall_start
    writer.meta["clock"] = {"wall_start": wall_start, "monotonic_start": monotonic_start}
    summary.node = str(fields.get("node", ""))
    summary.job_id = str(fields.get("job_id", ""))
    return notes


def _traceable(job: JobProcesses, rank_of_pid: dict[int, int], worker_of: dict[int, int],
               summary: CollectSummary, probe: bool = False) -> tuple[list[int], list[int]]:
    """Rank and worker pids we may trace; the others become failures and gaps, each with its fix.
    Raises PtraceDenied when no rank at all can be read, unless (``probe``) some rank runs an
    in-job probe, which answers without ptrace."""
    problems = permissions.check_access(list(rank_of_pid) + list(worker_of))
    for pid, problem in problems.items():
        rank = rank_of_pid.get(pid, worker_of.get(pid))
        line = f"{problem.cause} ({problem.fix})" if problem.fix else problem.cause
        if pid in rank_of_pid:
            summary.failed.setdefault(rank_of_pid[pid], []).append(line)
        summary.gaps.append(f"rank {rank} (pid {pid}): {line}")
    traceable = [pid for pid in rank_of_pid if pid not in problems]
    if job.ranks and not traceable and not (
            probe and any(probe_client.has_probe(rank) for rank in job.ranks)):
        raise permissions.PtraceDenied(
            f"cannot read any rank: {next(iter(problems.values())).cause}")
    return traceable, [pid for pid in worker_of if pid not in problems]


def describe_ranks(writer: BundleWriter, job: JobProcesses) -> None:
    """The bundle's host, world size and each rank's entry (host, pid, local rank): what any
    bundle of this job says about its ranks (``watch`` writes one when the job ends under it)."""
    writer.hosts.append(job.host or socket.gethostname())
    sizes = {r.world_size for r in job.ranks if r.world_size}
    writer.world_size = max(sizes) if sizes else None
    for rank in job.ranks:
        entry = writer.rank_entry(rank.rank)
        entry.host, entry.pid, entry.local_rank = job.host, rank.pid, rank.local_rank


def _describe_job(writer: BundleWriter, job: JobProcesses) -> None:
    describe_ranks(writer, job)
    run_ids = sorted({r.run_id for r in job.ranks if r.run_id})
    writer.job.update({
        "searched": job.searched,
        "launchers": [{"pid": p.pid, "kind": p.kind, "cmdline": p.cmdline[:8]}
                      for p in job.launchers],
        "run_id": run_ids[0] if len(run_ids) == 1 else run_ids,
        "missing_local_ranks": job.missing_local_ranks,
    })
    for rank in job.ranks:
        # libraries, versions and settings, compared across ranks by analysis.config_skew
        writer.add_file(rank.rank, runtime.KIND, runtime.FILE_NAME,
                        runtime.to_bytes(runtime.describe(rank)))
    for rank_no, told in sorted(job.exited_ranks.items()):
        # gone before the look: the state an orphan of it tells, its pid unknown (0)
        writer.rank_entry(rank_no).host = job.host
        gone = ProcessState(pid=0, sampled_at=time.time(), status="gone", told_by=told)
        writer.add_file(rank_no, "proc", "proc-exited.json", procstate.to_json(0, [gone]))
    for rank_no, (pid, told) in sorted(job.zombie_ranks.items()):
        # exited, not yet reaped: its exit status is still there to read
        writer.rank_entry(rank_no).host = job.host
        writer.rank_entry(rank_no).pid = pid
        state = dataclasses.replace(procstate.sample_process(pid), told_by=told)
        writer.add_file(rank_no, "proc", f"proc-{pid}.json", procstate.to_json(pid, [state]))
    if job.missing_local_ranks:
        writer.gaps.append(f"local ranks {job.missing_local_ranks} should run on {job.host} "
                           "but have no process (exited or never started)")


def _collect_stacks_and_state(pids: list[int], rank_of_pid: dict[int, int],
                              worker_of: dict[int, int], writer: BundleWriter,
                              summary: CollectSummary, options: AttachOptions,
                              budget: Budget) -> None:
    """py-spy samples and /proc states at the same cadence, so CPU growth lines up with stacks."""
    states: dict[int, list[ProcessState]] = {pid: [] for pid in pids}
    began = time.time()
    done = threading.Event()
    rank_pids = [pid for pid in pids if pid in rank_of_pid]
    workers = max(1, min(32, len(pids), usable_cores()))
    # py-spy runs `workers` dumps at a time: a round is up to this many dumps long
    batches = -(-len(pids) // workers) if pids else 1
    dump_timeout = budget.cap(options.dump_timeout, batches)

    def more(so_far: dict[int, list[pyspy.DumpResult]]) -> bool:
        """The first round is always taken; then up to --samples rounds, and more while the
        ranks move differently, each only when it can end before the deadline."""
        rounds = max((len(results) for results in so_far.values()), default=0)
        budget.report("stacks", f"{rounds}/{options.samples} samples")
        wanted = rounds < options.samples or (
            rounds < options.max_samples and sampling.worth_more(so_far, states, rank_pids))
        if wanted and not budget.room_for(options.interval + dump_timeout * batches):
            budget.cut(f"stack samples: {rounds} round{'s' if rounds != 1 else ''} of "
                       f"{options.samples} taken")
            return False
        return wanted

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="procstate") as pool:
        proc_future = pool.submit(_sample_states, pids, states, options, done)
        try:
            dumps = pyspy.sample_many(
                pids, samples=1, interval=options.interval, timeout=dump_timeout,
                native=options.native, nonblocking=options.nonblocking,
                max_samples=options.max_samples, more=more)
        except pyspy.PySpyMissing as exc:
            summary.gaps.append(f"no stacks: {exc}")
            dumps = {}
        finally:
            done.set()
        proc_future.result()
    budget.report("stacks", "done")
    if not options.native and not options.nonblocking:
        if budget.room_for(2.0):
            _native_followup(dumps, rank_of_pid, options, budget)
        else:
            budget.cut("no native follow-up dumps")
    for pid, results in dumps.items():
        rank = rank_of_pid.get(pid, worker_of.get(pid))
        if rank is None:
            continue
        is_worker = pid in worker_of
        for index, result in enumerate(results):
            writer.collection.append(CollectionRecord(
                source="py-spy", rank=rank, status=result.status,
                detail=(f"worker pid {pid}: " if is_worker else "") + result.detail,
                started_at=result.taken_at, seconds=round(result.seconds, 4)))
            if result.target_note:  # py-spy left it stopped (resumed), or could not be killed
                summary.gaps.append(f"rank {rank}: {result.target_note}")
            if result.ok:
                writer.add_file(rank, RECORD_KIND, pyspy.bundle_name(result, index),
                                pyspy.bundle_record(result, worker=is_worker, rank=rank))
        good = [r for r in results if r.ok]
        cited = source_lines.record(r.sample for r in good)
        if cited is not None:  # the verdict may need them where these files are not
            writer.add_file(rank, source_lines.KIND, f"source-lines-{pid}.json", cited)
        if good and not is_worker:
            summary.ok.setdefault("py-spy", []).append(rank)
        elif results and not good:
            failure = results[-1]
            what = f"worker pid {pid}: " if is_worker else ""
            summary.gaps.append(f"rank {rank}: no stacks from {what}py-spy: {failure.detail}")
            if not is_worker:
                summary.failed.setdefault(rank, []).append(f"py-spy {failure.status}")
    for pid, pid_states in states.items():
        rank = rank_of_pid.get(pid, worker_of.get(pid))
        if rank is None or not pid_states:
            continue
        writer.add_file(rank, "proc", f"proc-{pid}.json",
                        procstate.to_json(pid, pid_states, worker_of=worker_of.get(pid)))
        gone = [s for s in pid_states if s.status == "gone"]
        if gone and pid in rank_of_pid:
            summary.gaps.append(f"rank {rank} (pid {pid}) exited during collection")
    writer.collection.append(CollectionRecord(source="proc", rank=None, status="ok",
                                              started_at=began,
                                              seconds=round(time.time() - began, 3)))


NATIVE_FOLLOWUP_MAX = 8


def _native_followup(dumps: dict[int, list[pyspy.DumpResult]], rank_of_pid: dict[int, int],
                     options: AttachOptions, budget: Budget) -> None:
    """One ``--native`` dump of ranks whose main thread is blocked in a C call nothing names.

    Without native frames a C call made straight from the job's code leaves the stack ending at
    the job's line. Where that line says what it waits on (``lock.acquire()``, ``time.sleep``, a
    socket read) the analysis names the wait from it; otherwise a native dump does. It costs
    about half a second per torch process, so it is taken once, only for such ranks, one per
    distinct stack.
    """
    from hangscope.analysis.rank_state import refine_idle  # imported by then: see collect()
    from hangscope.analysis.stacks import classify_thread, main_thread
    from hangscope.analysis.stacktree import stack_key

    chosen: dict[object, int] = {}
    for pid, results in dumps.items():
        if pid not in rank_of_pid or not results or not results[-1].ok:
            continue
        sample = results[-1].sample
        main = main_thread(sample) if sample is not None else None
        if main is None or refine_idle(classify_thread(main)).kind != "idle":
            continue
        chosen.setdefault(stack_key(main.frames), pid)
    pids = list(chosen.values())[:NATIVE_FOLLOWUP_MAX]
    if not pids:
        return
    timeout = budget.cap(max(options.dump_timeout, 10.0))
    with ThreadPoolExecutor(max_workers=len(pids), thread_name_prefix="py-spy-native") as pool:
        native = list(pool.map(lambda pid: pyspy.dump_once(
            pid, timeout=timeout, native=True), pids))
    for result in native:
        dumps[result.pid].append(result)


def _sample_states(pids: list[int], states: dict[int, list[ProcessState]],
                   options: AttachOptions, done: threading.Event) -> None:
    """/proc at the stacks' cadence for as long as py-spy samples, and once more when it stops,
    so that the CPU time measured spans every stack sample."""
    start = time.monotonic()
    index = 0
    while True:
        for pid, state in procstate.sample_many(pids).items():
            states[pid].append(state)
        index += 1
        if done.wait(max(0.0, start + index * options.interval - time.monotonic())):
            break
    for pid, state in procstate.sample_many(pids).items():
        states[pid].append(state)


def _collect_logs(job: JobProcesses, writer: BundleWriter, summary: CollectSummary,
                  budget: Budget) -> None:
    began = time.time()
    budget.report("logs", "reading")
    try:
        files, notes = logs.collect_job_logs(job)
    except Exception as exc:  # noqa: BLE001 - a collector failure is a gap, never fatal
        summary.gaps.append(f"log discovery failed: {exc}")
        return
    summary.gaps.extend(notes)
    used: set[tuple[int | None, str]] = set()
    for item in files:
        name = item.bundle_name()
        stem, dot, ext = name.rpartition(".")
        suffix = 1
        while (item.rank, name) in used:
            suffix += 1
            name = f"{stem}-{suffix}{dot}{ext}"
        used.add((item.rank, name))
        if item.rank is None:
            writer.add_job_file("log", name, item.data, source_path=item.path)
        else:
            writer.add_file(item.rank, "log", name, item.data)
        summary.ok.setdefault("log", []).append(item.rank if item.rank is not None else -1)
    budget.report("logs", f"{len(files)} files")
    writer.collection.append(CollectionRecord(source="log", rank=None, status="ok",
                                              detail=f"{len(files)} files",
                                              started_at=began,
                                              seconds=round(time.time() - began, 3)))


def _collect_fr(job: JobProcesses, writer: BundleWriter, summary: CollectSummary,
                options: AttachOptions, budget: Budget) -> None:
    asked = []
    for rank in job.ranks:
        if options.probe and _from_probe(rank, writer, summary, options.dump_timeout):
            continue  # the rank's own probe sent its FR trace: as fresh as it gets
        asked.append(rank)
    if not asked:
        return
    if not budget.room_for(0.0):
        left = [r.rank for r in asked]
        budget.cut(f"flight recorder: rank{'s' if len(left) > 1 else ''} "
                   f"{', '.join(map(str, left))} not read")
        return
    budget.report("flight recorder", f"asking {len(asked)} rank(s) at once")
    began = time.time()
    try:  # every pipe poked before any wait: the dumps are as close to one moment as can be
        results = fr_trigger.collect_frs(asked, trigger=options.trigger_fr,
                                         timeout_s=budget.cap(options.dump_timeout))
    except Exception as exc:  # noqa: BLE001 - a failure is a gap, not the end of the attach
        summary.gaps.append(f"flight-recorder dumps failed: {exc}")
        return
    for rank, result in zip(asked, results):
        summary.gaps.extend(result.notes)  # each already names its rank
        if not result.files:
            continue
        newest = max(result.files, key=lambda f: f.mtime)
        copy = writer.add_file(rank.rank, "fr", "fr_dump", newest.data)
        if copy:  # the copy keeps the time torch wrote the dump: when its records were taken
            with contextlib.suppress(OSError):
                os.utime(copy, (newest.mtime, newest.mtime))
        summary.ok.setdefault("flight_recorder", []).append(rank.rank)
        writer.collection.append(CollectionRecord(
            source="flight_recorder", rank=rank.rank, status="ok",
            detail=("triggered " if newest.triggered else "found ") + newest.path,
            started_at=began, seconds=round(max(newest.mtime - began, 0.0), 3)))


def _collect_ras(job: JobProcesses, writer: BundleWriter, summary: CollectSummary,
                 options: AttachOptions, budget: Budget) -> None:
    """NCCL's job-wide RAS status (NCCL >= 2.24), kept as a job-level log the RAS parser reads."""
    if not options.query_ras:
        return
    if not budget.room_for(0.5):
        budget.cut("no NCCL RAS query")
        return
    began = time.time()
    try:
        result = nccl_ras.collect(job, timeout_s=budget.cap(options.dump_timeout))
    except Exception as exc:  # noqa: BLE001 - a collector failure is a gap, never fatal
        summary.gaps.append(f"NCCL RAS query failed: {exc}")
        return
    if result.data:
        writer.add_job_file("log", result.bundle_name(), result.data,
                            source_path=f"ncclras {result.where}")
        summary.ok.setdefault("nccl_ras", []).append(-1)
    if result.gap:
        summary.gaps.append(result.gap)
    writer.collection.append(CollectionRecord(source="nccl_ras", rank=None, status=result.status,
                                              detail=result.detail, started_at=began,
                                              seconds=round(time.time() - began, 3)))



def _from_probe(rank: RankProcess, writer: BundleWriter, summary: CollectSummary,
                timeout_s: float) -> bool:
    """Ask the rank's in-job probe and store its answer (``collect.probe``); True when it sent
    an FR trace. A probe that does not answer is a gap; one rank's failure never stops others."""
    try:
        got = probe_client.collect_into(rank, writer, timeout_s)
    except Exception as exc:  # noqa: BLE001 - one rank's failure is a gap
        summary.gaps.append(f"rank {rank.rank}: asking its probe failed: {exc}")
        return False
    if got is None:
        return False  # no probe in this rank
    if got.note:
        summary.gaps.append(f"rank {rank.rank}: {got.note}")
    for source, ok in (("probe", got.answered), ("flight_recorder", bool(got.fr))):
        if ok:
            summary.ok.setdefault(source, []).append(rank.rank)
    return bool(got.fr)
