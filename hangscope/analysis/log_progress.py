"""How far each rank's own log got, and which rank's log went quiet while the others reported
losing a peer.

A rank killed from outside (SIGKILL, as the kernel's OOM killer sends) leaves no traceback: its log
just stops. The others go on until they need it, and then report that they lost it: gloo's
"Connection closed by peer" / "Connection reset by peer", a watchdog or gloo timeout. Without the
launcher's log (which would give the exit signal), what points at the killed rank is that its log
ends without any error while the others' end in such reports, and, where the logs print progress
(``sources/logs/progress.py``), that its last step is behind theirs or its last line older.

:func:`quiet_ranks` returns that reading with how much each part supports it; ``detectors/
quiet_death.py`` turns it into a ``rank_died`` finding. Nothing here applies when some rank's log
shows a failure of its own (an exception, an OOM, an exit signal): those detectors explain it.
False positives: a rank whose own stderr was not collected (its error is elsewhere), a rank that
is hung rather than dead (timeouts alone cannot tell the two apart: the reading says so).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from hangscope.analysis.log_causes import ECHO_KINDS, classify, failures
from hangscope.model import JobEvidence, LogEvent
from hangscope.sources.logs.perf_reports import THRESHOLD, parse_scores
from hangscope.sources.logs.progress import position

# Echoes that say a peer went away or stopped answering (not teardown, not a dump notice).
PEER_LOST_KINDS = frozenset({"gloo_connection_closed", "gloo_timeout", "nccl_watchdog_timeout",
                             "nccl_heartbeat_stuck", "nccl_work_status", "nccl_desync",
                             "monitored_barrier_failure"}) & ECHO_KINDS
_CLOSED_WORDS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                 "remote process exited")


@dataclass(slots=True)
class RankLog:
    """What one rank's logs say about its progress and its end."""

    rank: int
    progress: LogEvent | None = None  # its latest progress line
    ends: list[LogEvent] = field(default_factory=list)  # the last line of each of its logs
    lost_peer: list[LogEvent] = field(default_factory=list)  # its reports of a lost peer
    echoed: bool = False  # it logged an echo of some other failure (a dump signal, ...)

    @property
    def last_time(self) -> float | None:
        times = [e.time for e in [*self.ends, *([self.progress] if self.progress else [])]
                 if e.time is not None]
        return max(times) if times else None

    @property
    def peer_closed(self) -> bool:
        """It says the peer's connection closed (a process gone), not only that it timed out."""
        return any(e.kind == "gloo_connection_closed"
                   or any(word in e.message for word in _CLOSED_WORDS) for e in self.lost_peer)


@dataclass(slots=True)
class QuietReading:
    """Ranks whose logs end with no error while the others' end reporting a lost peer."""

    quiet: list[int]  # the suspects, furthest behind first
    reporters: list[int]  # ranks that reported losing a peer
    logs: dict[int, RankLog]
    behind: bool  # every suspect's last progress is behind every reporter's
    earlier: bool  # every suspect's log ends before every reporter's report (timestamps)
    closed: bool  # the reports say a connection closed (the peer process went away)
    measured: list[str] = field(default_factory=list)  # what supports it, as clauses


def rank_logs(evidence: JobEvidence) -> dict[int, RankLog]:
    """Per rank: its latest progress line, the end of each log and its lost-peer reports."""
    found: dict[int, RankLog] = {}
    for rank, event in _ranked(evidence):
        log = found.setdefault(rank, RankLog(rank))
        if event.kind == "progress":
            if log.progress is None or _later(event, log.progress):
                log.progress = event
        elif event.kind == "log_end":
            log.ends.append(event)
        elif event.kind in PEER_LOST_KINDS or (event.kind == "traceback" and classify(event) is None
                                               and _says_lost(event)):
            log.lost_peer.append(event)
        elif event.kind in ECHO_KINDS or (event.kind == "traceback" and classify(event) is None):
            log.echoed = True
    for log in found.values():
        log.lost_peer.sort(key=lambda e: (e.time is None, e.time or 0.0))
    return found


def quiet_ranks(evidence: JobEvidence) -> QuietReading | None:
    """The ranks whose logs went quiet while others reported losing a peer; None when no rank
    did, when every rank reported, or when some rank's own failure is in the logs."""
    if failures(evidence):
        return None
    logs = rank_logs(evidence)
    reporters = sorted(r for r, log in logs.items() if log.lost_peer)
    quiet = [r for r, log in logs.items()
             if not log.lost_peer and not log.echoed and (log.ends or log.progress)]
    if not reporters or not quiet:
        return None
    behind = all(_behind(logs[q], logs[r]) for q in quiet for r in reporters)
    if len(quiet) > len(reporters) and not behind:
        return None  # most ranks quiet: one of them may only have reported where we cannot see
    quiet.sort(key=lambda r: (_key(logs[r]), r))
    earlier = all(_ended_before(logs[q], logs[r]) for q in quiet for r in reporters)
    reading = QuietReading(quiet=quiet, reporters=reporters, logs=logs, behind=behind,
                           earlier=earlier,
                           closed=any(logs[r].peer_closed for r in reporters))
    if behind:
        reading.measured.append("its last progress line is behind theirs")
    if earlier:
        reading.measured.append("its log ends before their reports")
    return reading


def log_states(evidence: JobEvidence) -> dict[int, str]:
    """One line per rank known from its logs' ends: ranks with the same line share a wait-graph
    class (so a quiet rank is not lumped with the ranks that reported losing it)."""
    states = {}
    own = failures(evidence)
    for rank, log in rank_logs(evidence).items():
        after = f" after {describe_progress(log.progress)}" if log.progress else ""
        if own.get(rank) and own[rank][0].what in ("gpu", "oom", "exception", "signal"):
            states[rank] = f"its log shows its own failure: {own[rank][0].describe(120)}"
        elif log.lost_peer:
            what = ("lost the connection to a peer" if log.peer_closed
                    else "timed out waiting for a peer")
            states[rank] = f"its log says it {what}{after}"
        elif log.ends or log.progress:
            states[rank] = f"its log ends with no error{after}"
    return states


def lost_phrase(event: LogEvent) -> str:
    """The words of a lost-peer report that say what happened (``Connection closed by peer``)."""
    message = f"{event.fields.get('exc_message', '')} {event.message}"
    for word in (*_CLOSED_WORDS, "timed out", "Timed out", "Timeout"):
        if word in message:
            return word
    return event.kind.replace("_", " ")


def logs_advance(evidence: JobEvidence) -> str | None:
    """Where the logs are all there is: a note when they show training advancing (a progress
    line on some rank) and no rank logged a failure, a lost peer or any other echo; else None.
    Not a verdict: a job that hangs before any watchdog fires reads the same."""
    logs = rank_logs(evidence)
    if not logs or failures(evidence) or any(log.lost_peer or log.echoed
                                             for log in logs.values()):
        return None
    stepped = {rank: log.progress for rank, log in logs.items() if log.progress is not None}
    if not stepped:
        return None
    where = "; ".join(f"rank {rank}: {describe_progress(event)}"
                      for rank, event in sorted(stepped.items())[:6])
    return (f"from the logs alone: training advanced ({where}) and no rank logged an error, a "
            "lost peer or a timeout; a healthy job stopped from outside and a job that hung "
            "before any watchdog fired read the same: attach to it live, or keep its FR dumps "
            "and stacks, to tell them apart")


@dataclass(frozen=True, slots=True)
class Lagging:
    """Rule ``stream-behind``'s reading: one rank's last progress behind every other's."""

    rank: int
    log: RankLog
    others: dict[int, RankLog]


def _gap(low: tuple[float, ...], high: tuple[float, ...]) -> float:
    """How far ``high`` is ahead of ``low`` (epochs first, then steps)."""
    return (high[0] - low[0]) * 1e9 + (high[1] - low[1]) if high[0] != low[0] \
        else high[1] - low[1]


def lagging_stream(evidence: JobEvidence) -> Lagging | None:
    """Rule ``stream-behind``: at least three ranks' logs report progress in one wording, and the
    one furthest behind is behind every other by more than the others differ among themselves (all
    but one at the same step; or, where prints run a few steps apart, one far behind the pack);
    None otherwise, or where some rank logged a failure, an echo or a lost peer (``quiet_death``
    reads those). Basis: in
    synchronous training every rank prints each step; the others printing a step the lagging
    rank never printed means they passed a collective it has not joined (or were about to)."""
    logs = rank_logs(evidence)
    stepped = {rank: log for rank, log in logs.items() if log.progress is not None}
    if len(stepped) < 3 or failures(evidence) or \
            any(log.lost_peer or log.echoed for log in logs.values()):
        return None
    if len({log.progress.fields.get("unit") for log in stepped.values()  # type: ignore[union-attr]
            }) != 1:
        return None
    where = {rank: tuple(-1.0 if v is None else float(v)
                         for v in position(log.progress))  # type: ignore[arg-type]
             for rank, log in stepped.items()}
    # the rank furthest behind, behind the others by more than they differ among themselves
    # (ranks print a few steps apart where prints are not synchronised)
    lag = min(where, key=lambda rank: where[rank])
    others = [at for rank, at in where.items() if rank != lag]
    if where[lag] >= min(others) or _gap(where[lag], min(others)) <= _gap(min(others),
                                                                           max(others)):
        return None
    return Lagging(lag, stepped[lag], {r: log for r, log in stepped.items() if r != lag})


def logs_moving(evidence: JobEvidence) -> str | None:
    """Rule ``logs-advance``: where the logs are all there is, a note when a stream of them shows
    training move (two of its progress lines, or two drawings of its bar, at different positions:
    ``sources/logs/progress.py``'s ``advanced``) and nothing in any of them is a fault: no
    failure, no echo of one, no error line, no word of a fault (``cue``), no step times that
    swing by ``ERRATIC`` or more; where the lines name
    ranks, every rank of a job of known size left a log. Basis: a job that
    advanced to the last line of its log and logged nothing wrong was running when the log was
    taken; a hang begins after a log's last line leaves no trace in it, which the note says."""
    every = list(evidence.all_logs())
    moving = [e for e in every if e.kind == "progress" and e.fields.get("advanced")]
    if not moving or _failed_or_echoed(evidence, every):
        return None
    if any(e.severity in ("error", "fatal") or (e.kind == "cue" and e.fields.get("cue") not in
                                                 _NOT_A_FAULT) for e in every):
        return None
    logs = rank_logs(evidence)
    if any(log.lost_peer or log.echoed for log in logs.values()):
        return None
    if any(_erratic(e) for e in every if e.kind == "step_times"):
        return None  # its steps took wildly different times: moving, but not evenly
    if logs and evidence.world_size and len(logs) < evidence.world_size:
        return None  # the logs name ranks, and some ranks of the job left none: they may hang
    if lagging_stream(evidence) is not None:
        return None  # one rank's log stops a step behind all the others': rule stream-behind
    latest = max(moving, key=lambda e: (e.time or 0.0, e.line_no))
    return (f"rule logs-advance: the log shows training moving ({describe_progress(latest)} at "
            f"{latest.where()}) and nothing failing: no error, no timeout, no lost peer. Logs "
            "cannot show a hang that began after their last line: if the job is stuck now, "
            "attach to it (hangscope attach) or keep its stacks and FR dumps")


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
_NOT_A_FAULT = frozenset({"busy-phase"})


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
                          "nccl_comm_ready", "nccl_init_timing", "nccl_connected", "log_end",
                          "size_line"})
# NCCL WARNs of set-up that it recovers from on its own: without the IB verbs library it uses its
# socket transport (ibvwrap.cc, then "NET/Socket : Using ...")
_SETUP_FALLBACK = re.compile(r"^Failed to open libibverbs\.so")


def _setup_line(event: LogEvent) -> bool:
    if event.kind == "nccl_tests":  # nccl-tests' header (devices, sizes) before any result row
        return not event.fields.get("rows") and not event.fields.get("wrong")
    return event.kind in _SETUP_KINDS or (event.kind == "nccl_warn" and _SETUP_FALLBACK.match(
        str(event.fields.get("text", ""))) is not None)


def logs_tests_clean(evidence: JobEvidence) -> str | None:
    """Rule ``tests-finished``: where the logs are all there is, a note when nccl-tests (or
    rccl-tests) printed its closing bandwidth line with no result row counted wrong and nothing
    failed; else None. Basis: the test ran every size to the end and checked every result.
    Whether its bandwidth is what the hardware should give is not judged here."""
    every = list(evidence.all_logs())
    done = [e for e in every if e.kind == "nccl_tests_done" or (
        e.kind == "nccl_tests" and e.fields.get("finished"))]
    if not done or any(e.kind == "nccl_tests" and e.fields.get("wrong") for e in every):
        return None
    if _failed_or_echoed(evidence, every):
        return None
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
    if not any(e.kind not in ("log_end", "size_line", "nccl_warn") and (
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


def describe_progress(event: LogEvent | None) -> str:
    """``step 41/600 (epoch 3)`` for a progress event."""
    if event is None:
        return "no progress line"
    epoch, step = position(event)
    unit = str(event.fields.get("unit", "step"))
    text = ""
    if step is not None:
        total = event.fields.get("total")
        text = f"{'step' if unit in ('bar', 'sample') else unit} {step}" + \
            (f"/{total}" if total else "")
    if epoch is not None:
        shown = int(epoch) if epoch == int(epoch) else epoch
        text = f"{text} (epoch {shown})" if text else f"epoch {shown}"
    return text


def _ranked(evidence: JobEvidence) -> Iterator[tuple[int, LogEvent]]:
    for rank, rank_ev in evidence.ranks.items():
        for event in rank_ev.logs:
            yield (event.rank if event.rank is not None else rank), event
    hosts = {ev.host for ev in evidence.ranks.values() if ev.host}
    for event in evidence.unattributed_logs:
        if event.rank is not None:
            yield event.rank, event
        elif isinstance(local := event.fields.get("local_rank"), int) and len(hosts) <= 1:
            yield local, event  # one host: a launcher's local rank is the global rank


def _says_lost(event: LogEvent) -> bool:
    message = f"{event.fields.get('exc_message', '')} {event.message}"
    return any(word in message for word in (*_CLOSED_WORDS, "timed out", "Timed out", "Timeout"))


def _later(a: LogEvent, b: LogEvent) -> bool:
    if a.time is not None and b.time is not None:
        return a.time > b.time
    return (a.path, a.line_no) > (b.path, b.line_no) if a.path == b.path else False


def _key(log: RankLog) -> tuple[float, float, float]:
    epoch, step = position(log.progress) if log.progress else (None, None)
    when = log.last_time
    return (epoch if epoch is not None else -1.0, float(step) if step is not None else -1.0,
            when if when is not None else 0.0)


def _behind(quiet: RankLog, reporter: RankLog) -> bool:
    """The quiet rank's last progress is strictly behind the reporter's (same wording only)."""
    if quiet.progress is None or reporter.progress is None:
        return False
    if quiet.progress.fields.get("unit") != reporter.progress.fields.get("unit"):
        return False
    (q_epoch, q_step), (r_epoch, r_step) = position(quiet.progress), position(reporter.progress)
    if q_epoch is not None and r_epoch is not None and q_epoch != r_epoch:
        return q_epoch < r_epoch
    return q_step is not None and r_step is not None and q_step < r_step


def _ended_before(quiet: RankLog, reporter: RankLog) -> bool:
    """The quiet rank's last timestamped line is older than the reporter's first report (or,
    where reports carry no time, than the progress line the reporter printed before it)."""
    ended = quiet.last_time
    reported = [e.time for e in reporter.lost_peer if e.time is not None]
    if not reported and reporter.progress is not None and reporter.progress.time is not None:
        reported = [reporter.progress.time]
    return ended is not None and bool(reported) and ended < min(reported)
