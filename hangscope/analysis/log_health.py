"""What logs alone say about a job that was fine: the notes that read them as healthy, each a
named rule with its basis (``logs-advance``, ``run-finished``, ``straggler-report-clean``,
``tests-finished``, ``nccl-setup-clean``, ``known-benign``). Each returns the note's text, or None
where any line of the logs says something went wrong; ``engine`` turns a note into a healthy
verdict where nothing else was found. Kept apart from ``log_progress`` (how far each rank got,
whose log went quiet, who lags), whose readings these rules use.
"""

from __future__ import annotations

import re

from hangscope.analysis.fault_context import outlived
from hangscope.analysis.log_causes import ECHO_KINDS, classify, failures
from hangscope.analysis.log_progress import (
    describe_progress,
    lagging_stream,
    rank_logs,
    stopped_by_scheduler,
    teardown_of_stop,
    went_on,
)
from hangscope.model import JobEvidence, LogEvent
from hangscope.sources.logs.perf_reports import THRESHOLD, parse_scores
from hangscope.sources.logs.progress import position


def logs_moving(evidence: JobEvidence) -> str | None:
    """Rule ``logs-advance``: where the logs are all there is, a note when a stream of them shows
    training move (two of its progress lines, or two drawings of its bar, at different positions:
    ``sources/logs/progress.py``'s ``advanced``) and nothing in any of them is a fault: no
    failure, no echo of one, no error line, no word of a fault (``cue``), no step times that
    swing by ``ERRATIC`` or more; where the lines name ranks, every rank of a job of known size
    left a log. One line is no movement: it is as often the line a stuck job stopped at. Basis: a
    job that
    advanced to the last line of its log and logged nothing wrong was running when the log was
    taken; a hang begins after a log's last line leaves no trace in it, which the note says."""
    every = list(evidence.all_logs())
    moving = [e for e in every if e.kind == "progress" and e.fields.get("advanced")]
    in_step = [] if moving else _in_step(evidence)
    if not (moving or in_step):
        return None
    past = _failed_or_echoed(evidence, every)  # what it went on past, if anything
    if any(not outlived(e, moving) for e in past):
        return None
    cancelled = stopped_by_scheduler(every)
    if any(e.severity in ("error", "fatal") or (e.kind == "cue" and e.fields.get("cue") not in
                                                 _NOT_A_FAULT and not went_on(e, moving or in_step)
                                                 and not teardown_of_stop(e, cancelled))
           for e in every):
        return None
    logs = rank_logs(evidence)
    if any(any(not outlived(e, moving) for e in log.lost_peer) or log.echoed
           for log in logs.values()):
        return None
    if any(_erratic(e) for e in every if e.kind == "step_times"):
        return None  # its steps took wildly different times: moving, but not evenly
    if logs and evidence.world_size and len(logs) < evidence.world_size:
        return None  # the logs name ranks, and some ranks of the job left none: they may hang
    if lagging_stream(evidence) is not None:
        return None  # one rank's log stops a step behind all the others': rule stream-behind
    limit = ("Logs cannot show a hang that began after their last line: if the job is stuck "
             "now, attach to it (hangscope attach) or keep its stacks and FR dumps")
    stop = next((e for e in every if e.kind == "cue" and e.fields.get("cue") == "scheduler-stop"),
                None)
    if stop is not None:  # rule scheduler-stop: the kills that follow are the stop's teardown
        limit = (f"The scheduler ended the job itself ({stop.message.strip()[:120]}, "
                 f"{stop.where()}): the SIGTERMs and kills around it are its teardown, not a "
                 "rank's fault. " + limit)
    if not moving:
        return (f"rule ranks-in-step: {len(in_step)} ranks' logs stand at the same place "
                f"({describe_progress(in_step[0])}, {', '.join(e.where() for e in in_step[:3])}) "
                "and nothing fails: no error, no timeout, no lost peer; ranks of a synchronous "
                "job that reached one step together were running in step. " + limit)
    latest = max(moving, key=lambda e: (e.time or 0.0, e.line_no))
    first = min(past, key=lambda e: (e.path, e.line_no), default=None)
    went_past = (f" (rule outlived-fault: it went on past {len(past)} earlier warning(s) or "
                 f"error(s), the first at {first.where()}: what they said was recovered from)"
                 if first is not None else "")
    return (f"rule logs-advance: the log shows training moving ({describe_progress(latest)} at "
            f"{latest.where()}){went_past} and nothing failing after that: no error, no timeout, "
            "no lost peer. " + limit)


def _in_step(evidence: JobEvidence) -> list[LogEvent]:
    """Rule ``ranks-in-step``: two ranks or more print progress in one wording, every one of
    them at the same position (each one line, so none is seen to move): the ranks' latest
    progress events, else []. Basis: ranks of a synchronous job at one step together passed its
    collectives together; with nothing failing, that is a job running in step (a snapshot)."""
    stepped = [log.progress for log in rank_logs(evidence).values() if log.progress is not None]
    if len(stepped) < 2 or len({(e.fields.get("unit"), position(e)) for e in stepped}) != 1:
        return []
    return sorted(stepped, key=lambda e: (e.rank is None, e.rank))


ERRATIC = 4.0  # slowest over fastest of a stream's recent step times, its first step left out


def _erratic(event: LogEvent) -> bool:
    """A stream's step times (``sources/logs/step_times.py``) that swing by ``ERRATIC`` or more:
    steps stalling and resuming (slow steps every few), which reads as a slow job, not an even
    one."""
    try:
        values = [float(v) for v in str(event.fields.get("values", "")).split(",") if v][1:]
    except ValueError:
        return False
    recent = values[-16:]
    return len(recent) >= 3 and min(recent) > 0 and max(recent) >= ERRATIC * min(recent)


# cue words that name no fault of their own (a phase one rank runs while the others wait)
_NOT_A_FAULT = frozenset({"busy-phase", "scheduler-stop"})


# finish wordings that every exit prints, a failed one's too (sources/logs/finish.py): NCCL's
# abort of every member's communicator (torch aborts at a process's exit, and its watchdog after a
# timeout or an error); an end only where no log shows a failure at all
_ENDS_ANY_EXIT = frozenset({"nccl_aborted"})


def logs_finished(evidence: JobEvidence) -> str | None:
    """Rule ``run-finished``: where the logs are all there is, a note when one says the run
    finished (``sources/logs/finish.py``: the trainer's own words, or the declared last epoch's
    bar full) and nothing after it failed or timed out; else None. Basis: a loop that reached its
    own end did not hang in training; a warning or error before that line is one the job
    outlived, and a hang at teardown would show in a line after it (or in a log whose order
    against it is unknown: that also keeps it from healthy)."""
    every = [e for ev in evidence.ranks.values() for e in ev.logs] + evidence.unattributed_logs
    shown = {rank for rank, ev in evidence.ranks.items() if ev.logs}
    done = [e for e in every if e.kind == "run_finished" and (
        e.fields.get("how") != "ranks_seen"  # some ranks said so: only if all the logs show
        or shown <= {int(r) for r in str(e.fields.get("ranks", "")).split(",") if r.isdigit()})]
    if not done:
        return None
    finish = max(done, key=lambda e: (e.time or 0.0, e.line_no))
    bad = _failed_or_echoed(evidence, every)
    if any(not _before(e, finish) for e in bad):
        return None
    if bad and finish.fields.get("how") in _ENDS_ANY_EXIT:
        return None  # an end that a failed process reaches too: the failure before it is why
    return (f"rule run-finished: the log says the run finished ({finish.message.strip()[:120]}, "
            f"{finish.where()}) and nothing after it failed or timed out: the training loop "
            "reached its end" + (f" ({len(bad)} earlier warning(s) or error(s) it outlived)"
                                 if bad else ""))


def logs_report_clean(evidence: JobEvidence) -> str | None:
    """Rule ``straggler-report-clean``: where the logs are all there is, a note when the job's own
    straggler detector reported and found nobody slow (``No stragglers detected``, or every rank's
    score at or above the threshold with no warning), and no log shows a failure or a timeout;
    else None. Basis: such a report is printed by a job whose ranks all reached the same step and
    were compared; the job was running, and at an even pace."""
    every = list(evidence.all_logs())
    reports = [e for e in every if e.kind == "straggler_report"]
    scored = [e for e in every if e.kind == "gpu_perf_scores"]
    if any(e.fields.get("verdict") == "found" for e in reports):
        return None
    clean = [e for e in reports if e.fields.get("verdict") == "none"]
    clean += [e for e in scored if (s := parse_scores(e.fields.get("scores")))
              and min(s.values()) >= THRESHOLD]
    if not clean or len(clean) < len(reports) + len(scored):
        return None
    bad = _failed_or_echoed(evidence, every)
    if bad:
        return None
    return (f"rule straggler-report-clean: the job's straggler detector compared the ranks and "
            f"found none slow ({clean[0].message.strip()[:100]}, {clean[0].where()}), and no "
            "log shows a failure or a timeout: the job was running at an even pace")


# what NCCL's INFO set-up lines give (sources/logs/nccl_debug.py, runtime_lines.py)
_SETUP_KINDS = frozenset({"runtime_config", "nccl_device", "nccl_init_done", "nccl_init_start",
                          "nccl_interface",
                          "nccl_comm_ready", "nccl_init_timing", "nccl_connected", "log_end",
                          "size_line", "declared_world"})
# NCCL WARNs of set-up that it recovers from on its own: without the IB verbs library it uses its
# socket transport (ibvwrap.cc, then "NET/Socket : Using ...")
_SETUP_FALLBACK = re.compile(r"^Failed to open libibverbs\.so")


def _setup_line(event: LogEvent) -> bool:
    if event.kind == "nccl_tests":  # nccl-tests' header (devices, sizes) before any result row
        return not event.fields.get("rows") and not event.fields.get("wrong")
    return event.kind in _SETUP_KINDS or (event.kind == "nccl_warn" and _SETUP_FALLBACK.match(
        str(event.fields.get("text", ""))) is not None)


# result rows that a paste of a finished test shows (a table cut before its closing line): the
# default sweep prints 27 sizes, 8 B to 1 GiB; a test that hangs stops at its first rows or at
# a large size
CLEAN_ROWS = 8
COMM_OPS = 3  # DeepSpeed's comms logger lines: each a collective that completed, with its time


def clean_rows(run: LogEvent) -> bool:
    """Rule ``tests-rows-clean``: at least :data:`CLEAN_ROWS` result rows, none counted wrong:
    that many sizes ran and checked out, so the paste is a table cut short, not a hang."""
    return int(run.fields.get("rows", 0) or 0) >= CLEAN_ROWS and not run.fields.get("wrong")


def logs_tests_clean(evidence: JobEvidence) -> str | None:
    """Rule ``tests-finished``: where the logs are all there is, a note when nccl-tests (or
    rccl-tests) printed its closing bandwidth line with no result row counted wrong and nothing
    failed; else None. Basis: the test ran every size to the end and checked every result.
    Whether its bandwidth is what the hardware should give is not judged here. Where the paste
    has no closing line, ``tests-rows-clean`` (:func:`clean_rows`); with no test at all,
    ``comm-ops-completed``: :data:`COMM_OPS` lines or more of a comms logger, each a collective
    timed as it completed; ``bench-rows-clean``: another benchmark's table of :data:`CLEAN_ROWS`
    measured sizes or more, or :data:`COMM_OPS` of its ``busbw:`` measurements."""
    every = list(evidence.all_logs())
    done = [e for e in every if e.kind == "nccl_tests_done" or (
        e.kind == "nccl_tests" and e.fields.get("finished"))]
    rows = [e for e in every if e.kind == "nccl_tests" and clean_rows(e)]
    ops = [e for e in every if e.kind == "comm_op_done"]
    tables = [e for e in every if e.kind == "bench_rows"
              and int(e.fields.get("rows", 0) or 0) >= CLEAN_ROWS]
    measures = [e for e in every if e.kind == "bench_measure"]
    if not (done or rows or tables or len(ops) >= COMM_OPS or len(measures) >= COMM_OPS) or any(
            e.kind == "nccl_tests" and e.fields.get("wrong") for e in every):
        return None
    if _failed_or_echoed(evidence, every):
        return None
    if not done and not rows and (tables or len(measures) >= COMM_OPS):
        seen = (f"a table of {tables[0].fields.get('rows')} measured sizes under "
                f"'{tables[0].fields.get('header')}' ({tables[0].where()})" if tables else
                f"{len(measures)} bandwidth measurements ({measures[0].where()} on)")
        return (f"rule bench-rows-clean: a benchmark of collectives printed {seen} and nothing "
                "failed: each row is a size it ran to the end (whether the bandwidth is what "
                "the links should give is for you to compare)")
    if not done and not rows:
        return (f"rule comm-ops-completed: a comms logger timed {len(ops)} collectives that "
                f"completed ({ops[0].where()} on) and nothing failed")
    if not done:
        run = rows[-1]
        return (f"rule tests-rows-clean: nccl-tests ran {run.fields.get('rows')} sizes (up to "
                f"{run.fields.get('last_size')} B, {run.where()}) with no result counted wrong "
                "and nothing failed; the paste ends before the closing bandwidth line, so a "
                "size after it is not seen (whether the bandwidth is what the links should give "
                "is for you to compare)")
    return ("rule tests-finished: nccl-tests ran to its closing bandwidth line "
            f"({done[-1].where()}) with no result counted wrong: the collectives completed "
            "and checked out (whether the bandwidth is what the links should give is for you "
            "to compare)")


def logs_setup_clean(evidence: JobEvidence) -> str | None:
    """Rule ``nccl-setup-clean``: where the logs are all there is, a note when all they hold is
    NCCL's INFO set-up lines (interfaces, plugins, versions, communicators) with no WARN but a
    fallback it recovers from (no libibverbs: sockets), no error,
    no timeout, no word of a failure and no communicator left between ``Init START`` and
    ``Init COMPLETE``; else None. Basis: NCCL reports every failure as WARN (and torch as an
    error); its INFO lines describe set-up, including lines that read like failures to a user
    ("NET/Plugin: Failed to find ncclNetPlugin_v8 symbol": it falls back to its own transport)."""
    every = list(evidence.all_logs())
    if not every or any(not _setup_line(e) for e in every):
        return None
    if not any(e.kind not in ("log_end", "size_line", "nccl_warn", "declared_world") and (
            e.kind != "runtime_config" or str(
            e.fields.get("key", "")).startswith(("nccl", "cuda"))) for e in every):
        return None
    ready = {(e.fields.get("host"), e.fields.get("pid"), e.fields.get("comm"))
             for e in every if e.kind == "nccl_comm_ready"}
    if any(e.kind == "nccl_init_start" and (e.fields.get("host"), e.fields.get("pid"),
                                            e.fields.get("comm")) not in ready for e in every):
        return None
    first = next(e for e in every if e.kind not in ("log_end", "size_line"))
    return ("rule nccl-setup-clean: the logs hold only NCCL's INFO set-up lines (from "
            f"{first.where()}) and no WARN, error, timeout or failure: NCCL reports failures as "
            "WARN, and lines such as 'Failed to find ncclNetPlugin symbol' are INFO about a "
            "fallback, not a fault. If the job did hang, its stacks (py-spy) or a flight-recorder "
            "dump would show where")


# Why each warning of ``sources/logs/benign.py`` is harmless, in a phrase
_BENIGN_BASIS = {
    "tokenizers-fork": ("huggingface/tokenizers turned its own parallelism off in the forked "
                        "process, which is how it avoids the deadlock it names"),
    "device-unknown": ("ProcessGroupNCCL guessed the rank's GPU from its rank; that hangs only "
                       "where the guess is wrong, which later collectives would show"),
    "ddp-grad-strides": "DDP copies gradients into its buckets: a cost in speed only",
    "ddp-unused-parameters": "DDP searches the graph for unused parameters: a cost in speed only",
    "deprecated-env": "torch still reads the deprecated variable's name",
    "pg-not-destroyed": ("ProcessGroupNCCL's destructor warns at the end of a program that "
                         "exited without destroy_process_group: the job had finished"),
    "deepspeed-nccl-backend": ("DeepSpeed falls back to torch.distributed's own NCCL backend, "
                               "which its next line (cdb=None) shows"),
    "no-nccl-build": ("a torch build without NCCL warns when torch.cuda.nccl is imported; a job "
                      "on gloo never uses it"),
}


def logs_benign(evidence: JobEvidence) -> str | None:
    """Rule ``known-benign``: where the logs are all there is, a note when every log holds only
    warnings known to be harmless (``sources/logs/benign.py``), their continuations and launcher
    banners; else None. Basis: each of them is printed by healthy runs and says what it did about
    the risk it names; a log with nothing else shows no fault."""
    every = list(evidence.all_logs())
    benign = [e for e in every if e.kind == "benign_only"]
    if not benign or {e.path for e in every if e.kind != "log_end"} != {e.path for e in benign}:
        return None
    if failures(evidence):
        return None
    names = list(dict.fromkeys(n for e in benign for n in str(e.fields["warnings"]).split(",")))
    why = "; ".join(_BENIGN_BASIS.get(n, n) for n in names)
    return (f"rule known-benign: the log holds only warnings known to be harmless ({why}; "
            f"{benign[0].where()}) and nothing failing, waiting or timing out. A warning alone "
            "shows no hang: if the job is stuck, its stacks (hangscope attach) or a "
            "flight-recorder dump would show where")


def _failed_or_echoed(evidence: JobEvidence, every: list[LogEvent]) -> list[LogEvent]:
    """What keeps a log from reading healthy: every rank's own failures, and the echoes of
    another's (a lost peer, a timeout, a traceback no failure class explains)."""
    bad = [f.event for items in failures(evidence).values() for f in items]
    return bad + [e for e in every if e.kind in ECHO_KINDS or (e.kind == "traceback"
                                                               and classify(e) is None)]


def _before(event: LogEvent, finish: LogEvent) -> bool:
    if event.time is not None and finish.time is not None:
        return event.time < finish.time
    return event.path == finish.path and event.line_no < finish.line_no
