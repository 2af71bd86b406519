"""Rule ``cue-words``: where nothing else was read, the words of the log still point somewhere.

A verdict of "no usable evidence" on a paste that says ``Segmentation fault`` or ``transport retry
counter exceeded`` helps nobody. Where no detector found anything, the cue lines of
``sources/logs/cues.py`` are weighed: the strongest class of cue names the kind (an out-of-memory
line outweighs the exits it causes, a crash outweighs the timeouts of those who waited for it), at
low confidence, quoting the lines. A cue the job went on after (a later progress line of the same
rank in the same file) is a warning it survived, not its fault, and does not count; nor is one
the whole job ended well after (rule ``ended-after``: a later line of the same file in which a
trainer, launcher or nccl-tests says the run finished: Lightning's ``max_steps=100 reached``,
every worker exiting 0, nccl-tests' closing bandwidth line; not torch's exit-time warning of a
process group never destroyed, which a process that raised prints too); nor an NCCL WARN of a
process whose communicator came up after it (rule ``warn-then-ready``: its ``Init COMPLETE``
later in the file; a net plugin that failed to load, and NCCL fell back to its own sockets).

Culprits only where the lines say whose fault it is: the ranks the cause lines name, where they
are fewer than the ranks the log shows (a log of one rank names none: its prefix may be
the launcher's); rule ``sole-peer``: in a job of two ranks, a rank that
reports its peer gone names the other one; rule ``traceback-after``: a fault line no prefix names
(a CUDA kernel's assert) followed at once by one rank's traceback is that rank's.

The engine keeps this finding only when it is the only one (``engine._weak_alone``).
"""

from __future__ import annotations

import dataclasses
import re

from hangscope.analysis.context import Context
from hangscope.analysis.fault_context import came_up_after, comms_ready
from hangscope.analysis.log_causes import WATCHDOG_WAITS, interrupted
from hangscope.analysis.log_progress import stopped_by_scheduler, teardown_of_stop, went_on
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import is_block, ranks_phrase
from hangscope.sources.logs.common import one_line

RULE = "cue-words"
# measures["rule"] of this detector's findings
RULES = (RULE, "sole-peer", "traceback-after", "cause-over-symptom", "store-wait",
         "setup-missing-ranks")
CONFIDENCE = 0.3
# How strongly each class of words points at its kind, over the others in the same log: a cause
# outweighs the exits and timeouts it brings; a named place (a DataLoader, init) outweighs a
# generic exit.
STRENGTH = {
    "duplicate-gpu": 11,
    "out-of-memory": 10, "gpu-fault": 9, "fabric-fault": 8, "signal-death": 7, "node-dead": 6.8,
    "abort": 6.5,
    "data-loading": 6, "zombie-children": 5.8,
    "gloo-loopback": 8.5, "gloo-connect": 8.4, "init": 5.5, "store-timeout": 5.4, "p2p-words": 5,
    "thread-deadlock": 5, "watchdog-stuck": 1.5, "mismatch-words": 4,
    "version-skew": 4,
    "virtual-interface": 4.5, "loopback-interface": 5.6, "network-words": 4, "peer-gone": 3,
    "slow-words": 3,
    "horovod-stall": 2,
    "exit-nonzero": 2.5, "exception": 2.4, "wait-timeout": 1,
    "setup-stops": 0.8, "busy-phase": 0.5,
}
BASIS = {
    "duplicate-gpu": "two ranks were placed on one GPU (a launch setting wrong on some processes)",
    "out-of-memory": "a process ran out of memory",
    "gpu-fault": "a GPU or CUDA fault stopped a process",
    "fabric-fault": "the interconnect failed (NVLink, InfiniBand or the network)",
    "signal-death": "a process died on a signal or crashed",
    "node-dead": "Ray marked a node dead (its heartbeats stopped) or a worker died mid-task",
    "abort": "a process aborted",
    "data-loading": "the data loading stopped or failed",
    "zombie-children": ("child processes of the job died and were never reaped (ps: state Z, "
                        "<defunct>); in a training job these are most often DataLoader workers "
                        "(killed by the OOM killer or a full /dev/shm), whose batches the "
                        "parent then waits for"),
    "init": "process-group set-up (rendezvous, store, init) did not complete",
    "gloo-loopback": ("gloo could not resolve the host's name and bound to the loopback address, "
                      "which peers on other hosts cannot reach, so the process group's set-up "
                      "cannot complete (set GLOO_SOCKET_IFNAME to the real interface)"),
    "gloo-connect": ("gloo's set-up could not connect to a peer's address, or found no address "
                     "for a host name, so the process group never formed: the address a host "
                     "name resolves to is wrong or unreachable from the other hosts (set "
                     "GLOO_SOCKET_IFNAME to the real interface, or fix the name's entry in "
                     "/etc/hosts)"),
    "store-timeout": ("a rank timed out waiting on the rendezvous store (c10d's, gloo's) before "
                      "the job had begun: process-group set-up (rendezvous, store) did not "
                      "complete"),
    "store-wait": ("a rank timed out waiting on the rendezvous store (c10d's, gloo's) after the "
                   "job had begun (training or a phase of one rank's own came first): the store "
                   "is a barrier here, and the rank that should have written its key is "
                   "elsewhere"),
    "p2p-words": "point-to-point sends and receives hang",
    "thread-deadlock": "threads deadlock on a lock",
    "watchdog-stuck": ("torch's watchdog thread itself is blocked in a NCCL or CUDA call: most "
                       "often a collective that never completes because a peer is not in it "
                       "(its abort or event query waits on the peer), less often another "
                       "thread holding the GIL (py-spy dump --native on the rank tells which)"),
    "mismatch-words": "ranks disagree on what they run (a mismatch)",
    "version-skew": "versions differ between processes",
    "network-words": "a network operation failed",
    "virtual-interface": ("NCCL's socket transport uses a container bridge or a veth, an address "
                          "peers on other hosts cannot reach (set NCCL_SOCKET_IFNAME to the real "
                          "NIC)"),
    "loopback-interface": ("NCCL lists the loopback (lo, 127.0.0.1) among the interfaces its "
                           "socket transport uses: an address peers on other hosts cannot "
                           "reach, so a multi-host job's set-up cannot complete (set "
                           "NCCL_SOCKET_IFNAME to the real NIC)"),
    "peer-gone": "a peer's connection closed under a rank (the peer went away)",
    "slow-words": "some ranks are slower than the others",
    "horovod-stall": ("Horovod's stall inspector saw some ranks submit a tensor 60 s or more "
                      "before the rest (a rank behind, or ranks submitting different tensors); "
                      "the paste has no per-rank list that says which"),
    "exit-nonzero": "a process exited with an error",
    "exception": "a process raised an exception (the paste holds its last line)",
    "wait-timeout": "ranks timed out waiting in a collective",
    "setup-stops": ("the log stops in process-group set-up (its last lines start the store, the "
                    "rendezvous or init_process_group, or print a rank's init address, and "
                    "nothing after says set-up completed)"),
    "busy-phase": "a process was in a long phase of its own (evaluation, saving, a data scan)",
}
_NAMES_CULPRIT = {"out-of-memory", "gpu-fault", "signal-death", "abort", "data-loading",
                  "exit-nonzero", "exception", "slow-words", "fabric-fault", "gloo-loopback"}
# a traceback whose exception is the rank's own wait running out (gloo's "Read timeout", a
# collective's or the store's timeout): what aborts after it is its teardown
_TIMED_OUT = re.compile(r"(?i)\btimed? ?out\b|\bTimeout\b")
# Deaths a process states of itself (a signal, a fatal interpreter error, its GPU): where its lines
# carry its rank in their prefix and it is the only rank here, the line names it
_TRACEBACK_HEAD = "Traceback (most recent call last)"
_WRAPPED_SPAN = 8  # physical lines a fault line and the traceback after it may be apart
_OWN_DEATH = {"signal-death", "abort", "gpu-fault", "out-of-memory", "exit-nonzero", "exception"}
# Cues that only support another rule (log_waits' rank0-silent), never a finding of their own
SUPPORT_ONLY = {"busy-phase", "scheduler-stop"}
# Lines that are the cause whatever else was found: NCCL says "Duplicate GPU detected" and then
# every rank fails with "invalid usage"
DEFINITIVE = {"duplicate-gpu"}
# Causes that explain why ranks wait for a rank no record names: the wait is their symptom
EXPLAINS_WAIT = {"out-of-memory", "gpu-fault", "fabric-fault", "signal-death", "data-loading"}


def detect(ctx: Context) -> list[Finding]:
    events = list(ctx.evidence.all_logs())
    # Ray's summaries of its workers' repeats, printed after the fact (``_RAY_SUMMARY``); read
    # on any event of the line (a wrapped one keeps the marker only where it was rebuilt)
    relayed = {(e.path, e.line_no) for e in events if _RAY_SUMMARY.search(e.message)}
    progress = [e for e in events if e.kind == "progress" and (e.path, e.line_no) not in relayed]
    # a traceback whose exception is the rank's own wait running out
    timed_out = [e for e in events if e.kind == "traceback"
                 and _TIMED_OUT.search(str(e.fields.get("exc_message")))]
    waits = [e for e in events if e.kind in WATCHDOG_WAITS
             or (e.kind == "cue" and e.fields.get("cue") in ("wait-timeout", "store-timeout"))
             ] + timed_out
    # a file made only of warnings known to be harmless (sources/logs/benign.py) carries no cue
    benign = {e.path for e in events if e.kind == "benign_only"}
    # a launcher's own traceback when it was signalled from outside (torchrun's SignalException,
    # a Ctrl-C's KeyboardInterrupt), one from a main-process-first block, one whose exception is
    # the rank's wait timing out: the stop of the job or a wait, not a rank's failure
    stopped = {(e.path, e.line_no) for e in events if interrupted(e) or e.kind == "traceback"
               and str(e.fields.get("exc_type", "")).endswith("SignalException")
               or e.kind in ("traceback", "collective_wait") and e.fields.get("main_first")}
    stopped |= {(e.path, e.line_no) for e in timed_out}
    stopped |= _wait_in_detail(events, waits)
    # a line that is itself a wait running out (gloo's "Timed out waiting 1800000ms for recv",
    # the watchdog's), whatever else it says ("Exception in worker ... while processing"): its
    # words of a death are the wait's, filed as the wait
    own_wait = {(e.path, e.line_no) for e in events
                if e.kind in WATCHDOG_WAITS or e.kind == "gloo_timeout"}
    events = [_as_wait(e) if e.kind == "cue" and (e.path, e.line_no) in own_wait
              and e.fields.get("cue") in _DEATH_WORDS else e for e in events]
    cancelled = stopped_by_scheduler(events)
    ended = [(e, line) for e in events if (line := _job_ended(e))]
    ready = comms_ready(events)
    cues = [e for e in events if e.kind == "cue" and e.fields.get("cue") not in SUPPORT_ONLY
            and not any(end.path == e.path and end_line > e.line_no for end, end_line in ended)
            and e.path not in benign and (e.path, e.line_no) not in stopped
            and "SignalException" not in e.message and not teardown_of_stop(e, cancelled)
            and not went_on(e, progress) and not _after_own_wait(e, waits)
            and not came_up_after(e, ready)]
    if not cues:
        return []
    best = max(cues, key=lambda e: STRENGTH.get(str(e.fields["cue"]), 0))
    name = str(best.fields["cue"])
    kind = Kind(str(best.fields["suggests"]))
    lines = [e for e in cues if e.fields["cue"] == name]
    if name == "store-timeout" and _job_begun(best, events):
        name, kind = "store-wait", Kind.MISSING_RANK  # rule `store-wait`
    seen = _ranks_seen(ctx)
    culprits, rule = _culprits(name, lines, seen)
    if not culprits and name in _OWN_DEATH:
        culprits, rule = _traceback_after(lines, events, seen)
    waiting = sorted(seen - set(culprits)) if culprits else []
    agree = len({(e.path, e.line_no) for e in cues if e.fields["suggests"] == kind.value})
    quote = one_line(best.message, 160)
    said = f"{len(lines)} line{'s say' if len(lines) > 1 else ' says'}"
    rule = rule or ("store-wait" if name == "store-wait" else None)
    summary = (f"weak evidence only (rule `{rule or RULE}`): no record here was read in full, but "
               f"{said} {BASIS[name]}: \u201c{quote}\u201d ({best.path}:{best.line_no})")
    if culprits:
        why = {
            "sole-peer": "is the other rank of two (rule `sole-peer`)",
            "setup-missing-ranks": "never logged set-up while the others did, in a job of "
                                   f"{lines[0].fields.get('world')} ranks "
                                   "(rule `setup-missing-ranks`)",
            "traceback-after": "printed the traceback right after it (rule `traceback-after`)",
        }
        summary += f"; {ranks_phrase(culprits)} " + why.get(
            rule or "", f"{'is' if len(culprits) == 1 else 'are'} named on those lines")
    summary += (f". Read as {kind.value.replace('_', ' ')}, not proven: confirm with the ranks' "
                "stacks (py-spy) or a flight-recorder dump")
    evidence = [EvidenceItem(source="log", rank=e.rank, detail=one_line(e.message, 200),
                             where=f"{e.path}:{e.line_no}") for e in lines[:4]]
    return [Finding(kind=kind, culprit_ranks=culprits, waiting_ranks=waiting,
                    confidence=CONFIDENCE + (0.05 if agree > 1 else 0.0), summary=summary,
                    evidence=evidence, measures={"rule": rule or RULE, "cue": name})]


def weigh(findings: list[Finding]) -> list[Finding]:
    """A cue finding stands alone where nothing else was found. Beside findings that only say
    ranks wait for a rank no record names (missing_rank without culprits, or with rank 0 as
    rank0-silent's prior for a lone timeout), a cause that explains
    such a wait comes first at their confidence (rule ``cause-over-symptom``), as does a
    definitive cause beside anything; otherwise it goes."""
    weak = [f for f in findings if f.measures.get("rule") in RULES]
    strong = [f for f in findings if f.measures.get("rule") not in RULES]
    if not strong or not weak:
        return findings
    cause = weak[0]
    if cause.measures.get("cue") in DEFINITIVE:
        cause.confidence = max(0.7, *(f.confidence for f in strong))
        cause.measures["rule"] = "cause-over-symptom"
        cause.summary += (" (rule `cause-over-symptom`: this line is the cause the errors and "
                          "waits around it follow from)")
        return [cause, *strong]
    if cause.measures.get("cue") in EXPLAINS_WAIT and all(_names_no_one(f) for f in strong):
        cause.confidence = max(f.confidence for f in strong)
        cause.measures["rule"] = "cause-over-symptom"
        cause.summary += (" (rule `cause-over-symptom`: it explains why the other ranks wait for a "
                          "rank no record names)")
        return [cause, *strong]
    return strong


_DEATH_WORDS = {"exit-nonzero", "exception", "abort", "signal-death"}


def _as_wait(cue: LogEvent) -> LogEvent:
    return dataclasses.replace(cue, fields={**cue.fields, "cue": "wait-timeout",
                                            "suggests": Kind.MISSING_RANK.value,
                                            "role": "symptom"})


def _names_no_one(finding: Finding) -> bool:
    """A missing rank no record names: none at all, or rank 0 by rule rank0-silent's prior alone
    (one rank's lone timeout: rank 0 is the likeliest, not a proof)."""
    return finding.kind is Kind.MISSING_RANK and (
        not finding.culprit_ranks or (finding.measures.get("rule") == "rank0-silent"
                                      and finding.measures.get("form") == "lone"))


def _after_own_wait(cue: LogEvent, waits: list[LogEvent]) -> bool:
    """Rule ``kill-after-own-timeout`` (as ``log_causes`` applies it to read records): a death
    cue after the same rank's own watchdog timeout in the file (any rank's, where the cue names
    none: a launcher stopping the job) is how the job was torn down, not why it waited; so is a
    traceback or non-zero exit after the same rank's own line that its wait timed out (the
    timeout raised it)."""
    name = cue.fields.get("cue")
    if name not in ("signal-death", "abort", "exit-nonzero", "exception"):
        return False
    if name in ("exit-nonzero", "exception"):  # the same stream: the same rank, or both unnamed
        return any(w.path == cue.path and w.line_no < cue.line_no and w.rank == cue.rank
                   and w.kind in ("cue", "traceback") for w in waits)
    if any(w.path == cue.path and w.line_no < cue.line_no
           and (cue.rank is None or w.rank == cue.rank) for w in waits):
        return True
    # C++'s "terminate called after throwing an instance of ..." states its exception on the
    # "what():" line that follows (a few physical lines on where a terminal wrapped them): a
    # wait there is what the abort ends
    return bool(_TERMINATE.search(cue.message)) and any(
        w.path == cue.path and cue.line_no < w.line_no <= cue.line_no + _WHAT_REACH
        and "what()" in w.message for w in waits)


def _wait_in_detail(events: list[LogEvent], waits: list[LogEvent]) -> set[tuple[str, int]]:
    """Exceptions whose message goes on to say a wait ran out, and the tracebacks they end: the
    wait's, not a failure of their own. Ascend's CANN prints the exception's one line
    ("RuntimeError: ACL stream synchronize failed.") and its detail after it ("EI9999: ... hccl
    ... task timeout occurred ..."), as C++'s terminate does its what() line."""
    out: set[tuple[str, int]] = set()
    for cue in events:
        if cue.kind != "cue" or cue.fields.get("cue") != "exception":
            continue
        if not any(w.path == cue.path and w.rank == cue.rank
                   and cue.line_no < w.line_no <= cue.line_no + _WHAT_REACH for w in waits):
            continue
        out.add((cue.path, cue.line_no))
        # the traceback this exception ends: the nearest one above it that names it
        above = [t for t in events if t.kind == "traceback" and t.path == cue.path
                 and t.rank == cue.rank and t.line_no < cue.line_no
                 and str(t.fields.get("exc_message", "\0")) in cue.message]
        if above:
            out.add((cue.path, max(t.line_no for t in above)))
    return out


_TERMINATE = re.compile(r"terminate called after throwing")
_WHAT_REACH = 6  # physical lines from the terminate line to its what() line


def _job_begun(cue: LogEvent, events: list[LogEvent]) -> bool:
    """Rule ``store-wait``: a progress line or a phase of one rank's own (evaluation, saving,
    tokenizing) earlier in the same file: the store timed out after set-up, as a barrier."""
    return any(e.path == cue.path and (
        (e.kind == "progress" and e.line_no < cue.line_no)
        # a progress bar the terminal glued the timeout to counts on the same line
        or (e.kind == "cue" and e.fields.get("cue") == "busy-phase" and e.line_no <= cue.line_no))
        for e in events)


# Ray's driver relays its workers' repeats as a summary (``... [repeated 6x across cluster]``),
# buffered for seconds and printed after the fact: where such a line stands in the file says
# nothing of when the workers printed it, so it is no sign the job went on past a cue
_RAY_SUMMARY = re.compile(r"\[repeated \d+x across cluster\]")


def _ranks_seen(ctx: Context) -> set[int]:
    ranks = set(ctx.evidence.ranks)
    ranks.update(e.rank for e in ctx.evidence.unattributed_logs if e.rank is not None)
    if ctx.picture.world_size:
        ranks.update(range(ctx.picture.world_size))
    return ranks


def _culprits(name: str, lines: list[LogEvent], seen: set[int]) -> tuple[list[int], str | None]:
    named = sorted({e.rank for e in lines if e.rank is not None})
    if name == "peer-gone":
        if len(seen) == 2 and len(named) == 1:
            return sorted(seen - set(named)), "sole-peer"
        return [], None
    if name in _NAMES_CULPRIT and named and len(seen) > 1 and len(named) < len(seen):
        return named, None
    if name in _OWN_DEATH and seen == set(named) and len(named) == 1 \
            and all(e.fields.get("rank_source") in ("prefix", "launcher")
                    for e in lines if e.rank is not None):
        # rule own-death: the one rank here, by its own prefix or its launcher's word, died
        return named, None
    if name == "setup-stops":
        return _not_set_up(lines)
    return [], None


def _traceback_after(lines: list[LogEvent], events: list[LogEvent], seen: set[int]
                     ) -> tuple[list[int], str | None]:
    """Rule ``traceback-after``: a fault line no rank prefix names (a CUDA kernel's assert, a
    C++ abort: printed by the runtime, not through the launcher's prefix) followed at once by
    the head of one rank's traceback is that rank's: the process that faulted raises next.
    "At once": within the next few lines (a long line a paste wrapped spans several), with no
    line of another rank that was read in between."""
    if len(seen) < 2 or any(e.rank is not None for e in lines):
        return [], None
    ranked = sorted(((e.path, e.line_no, e.rank, _TRACEBACK_HEAD in e.message) for e in events
                     if e.rank is not None), key=lambda item: (item[0], item[1]))
    ranks = set()
    for line in lines:
        after = [item for item in ranked if item[0] == line.path
                 and line.line_no < item[1] <= line.line_no + _WRAPPED_SPAN]
        first = after[0] if after else None
        if first is None or not any(head and rank == first[2] for _, no, rank, head in after
                                    if no == first[1]):
            return [], None
        ranks.add(first[2])
    if len(ranks) == 1:
        return sorted(r for r in ranks if r is not None), "traceback-after"
    return [], None


def _not_set_up(lines: list[LogEvent]) -> tuple[list[int], str | None]:
    """Rule ``setup-missing-ranks``: where the set-up lines name their ranks and state the job's
    size, and both the ranks that logged theirs and the ones that did not are contiguous blocks
    (ranks go to nodes in blocks: a node that never came up), the ranks that never logged are the
    ones the others wait for. Ranks scattered across the job say the paste was trimmed, not who
    is missing."""
    for event in lines:
        world = int(event.fields.get("world", 0) or 0)
        done = {int(r) for r in str(event.fields.get("set_up", "")).split(",") if r.isdigit()}
        missing = sorted(set(range(world)) - done)
        if done and missing and len(missing) < world and max(done) < world \
                and is_block(sorted(done)) and is_block(missing):
            return missing, "setup-missing-ranks"
    return [], None


# run_finished wordings that speak for the whole job (sources/logs/finish.py); not
# "pg_destructed_at_exit" (printed by a process leaving after an exception too) nor
# "ranks_seen" (some ranks only)
_JOB_ENDED = frozenset({"hf_trainer", "lightning", "megatron", "elastic", "fairseq", "script",
                        "bar_then_done", "last_epoch", "every_rank", "nccl_destroyed",
                        "launcher_exits"})


def _job_ended(event: LogEvent) -> int:
    """Rule ``ended-after`` (module docstring): the line where ``event`` says the whole run
    ended well (nccl-tests: its closing line, with no result counted wrong), else 0."""
    if event.kind == "run_finished":
        return event.line_no if event.fields.get("how") in _JOB_ENDED else 0
    if event.kind == "nccl_tests_done":
        return event.line_no
    if event.kind == "nccl_tests" and event.fields.get("finished") \
            and not event.fields.get("wrong"):
        return int(event.fields.get("done_line", event.line_no) or 0)
    return 0
