"""init_hang: ranks stuck in init_process_group / rendezvous / the c10d store, and who never joined.

Signal: main threads in process-group setup (stacks), waiting on ranks that are elsewhere (alive
but not in init: still loading, downloading) or absent (no process, no evidence). Cites: one
waiting rank's stack and each culprit's. False positives: a slow start where the late rank is
about to call init (sample again), and store waits of a healthy elastic re-rendezvous.

Group creation from stacks (``new_group``, ``init_device_mesh``, ``split_group``... leave no FR
entry): ranks stuck inside it while the others are elsewhere (a collective of the next step): the
finding names who is inside and who is not; the odd side (``analysis.majority``) is the culprit
(0.92: it outranks the FR view that the ranks inside are "missing" from the next collective),
both sides with 0.55 where neither is a majority. False positive: ranks sampled while group
creation is merely slow (its first call imports and connects for a second or two).

From logs: the store-based barrier of ``init_process_group`` ("Waiting in store based barrier ...
world_size=N, worker_count=M": M below N, ranks never arrived; M above N, more processes than ranks
used the key, a stale store or duplicate ranks), the TCPStore server's "M/N clients joined", a
client that cannot reach the store, a rendezvous timeout, and one GLOBAL_RANK printed by two
processes (Lightning). The rank that never joined prints nothing, so the culprit is named only
where the lines show which ranks did arrive.

Stacks of waiting ranks only (a gdb or py-spy paste of one process in ``TCPStore::get``, in NCCL
communicator creation, in DDP's constructor), with nobody else in the evidence: ``init_hang`` with
no culprit (0.4), what the wait needs from the others, and which ranks' stacks to fetch. False
positive: a store wait of a rank that was sampled while init was merely slow.

Rule ``nccl-init-never-completed``: the logs show NCCL setting a communicator up (its INFO lines:
bootstrap interface, network, plugin) and no process's ``Init COMPLETE``, no error, no timeout
and no training step after. Basis: NCCL prints ``Init COMPLETE`` for every rank whose communicator
is ready, and a job that hangs in communicator setup prints nothing more; no line says which rank
or link it waits for, so no culprit (0.4). Only where the lines show more than one process (two
pids, or a process on GPU N > 0: one process per GPU means N + 1 local ranks): one process's
setup has no peer to wait for, and is likelier an excerpt cut short. False positive: a paste cut
before its COMPLETE lines (the finding says so).
"""

from __future__ import annotations

import re

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.fault_context import setup_failure
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.stacks import short_where
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import is_block, ranks_do, ranks_phrase
from hangscope.sources.logs.common import one_line


def detect(ctx: Context) -> list[Finding]:
    findings = []
    for reason, (waiting, targets) in ctx.graph.waits.items():
        if reason.kind != "stack-init":
            continue
        culprits = sorted(targets - waiting)
        if not culprits:
            continue
        evidence = [item for rank in [min(waiting), *culprits[:8]]
                    if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
        doing = []
        for rank in culprits[:4]:
            state = ctx.stacks.get(rank)
            doing.append(f"rank {rank}: {state.describe() if state else 'no process or evidence'}")
        summary = (f"{ranks_do(waiting, 'wait')} in process-group setup for "
                   f"{ranks_phrase(culprits)}, which "
                   f"never joined ({'; '.join(doing)})")
        findings.append(Finding(kind=Kind.INIT_HANG, culprit_ranks=culprits,
                                waiting_ranks=sorted(waiting), confidence=0.85,
                                summary=summary, evidence=evidence,
                                collective=CollectiveRef(pg=None, seq=None, op=reason.op)))
    return findings or _group_creation(ctx) or _from_logs(ctx) or _lone(ctx) \
        or _never_completed(ctx) or _started_not_completed(ctx)


_SETUP_KEYS = ("nccl_bootstrap_if", "nccl_network", "nccl_net_devices")


def _never_completed(ctx: Context) -> list[Finding]:
    """Rule ``nccl-init-never-completed`` (module docstring)."""
    every = [e for ev in ctx.evidence.ranks.values() for e in ev.logs]
    every += ctx.evidence.unattributed_logs
    setup = [e for e in every if e.kind == "runtime_config" and e.fields.get("host")
             and e.fields.get("key") in _SETUP_KEYS]
    if not setup or ctx.stacks or ctx.picture.dumps or any(
            e.kind in ("nccl_device", "nccl_init_done")
            or (e.kind in ("progress", "run_finished") and not _before_setup(e, setup))
            or e.severity in ("error", "fatal") or e.kind.startswith(("nccl_w", "nccl_t"))
            for e in every):
        return []
    processes = {(e.fields.get("host"), e.fields.get("pid")) for e in setup}
    if len(processes) < 2 and not any(int(e.fields.get("cuda_dev", 0)) > 0 for e in setup):
        return []  # one process on GPU 0: no peer to wait for in its setup
    hosts = sorted({str(e.fields["host"]) for e in setup})
    summary = ("rule nccl-init-never-completed: NCCL's INFO lines show communicator setup "
               f"(bootstrap, network selection) on {len(hosts)} host(s) ({', '.join(hosts[:3])}"
               f"{', ...' if len(hosts) > 3 else ''}) and no process ever logged 'Init COMPLETE', "
               "an error or a step: setup never finished, waiting on a rank or a link these lines "
               "do not name (or the paste was cut before the COMPLETE lines). Next: "
               "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET on every node, and py-spy dump of a "
               "rank")
    evidence = [log_evidence(e)
                for e in setup[:3]]
    return [Finding(kind=Kind.INIT_HANG, culprit_ranks=[], waiting_ranks=[], confidence=0.4,
                    summary=summary, evidence=evidence,
                    measures={"rule": "nccl-init-never-completed"})]


def _before_setup(event: LogEvent, setup: list[LogEvent]) -> bool:
    """A progress line above the first set-up line of its own file: NCCL sets a communicator up
    at its first collective, so a training loop's first prints come before it and do not say
    set-up finished."""
    lines = [e.line_no for e in setup if e.path == event.path]
    return bool(lines) and event.line_no < min(lines)


def _started_not_completed(ctx: Context) -> list[Finding]:
    """Rule ``nccl-init-started-not-completed``: NCCL (>= 2.19) logged ``Init START`` for a
    communicator and never its ``Init COMPLETE``, with no error, timeout or step after. Basis: the
    two lines bracket one communicator's setup in each process; a START left open is a setup
    still waiting (for a peer's bootstrap or a transport's connection), whatever communicators
    completed before it. No culprit (0.4): the lines do not say whom it waits for; except where
    the START lines name their ranks in a communicator of N and the ranks missing from 0..N-1 are
    one block (0.6: those never began). A launcher stopped from outside after it (a person's
    Ctrl-C, a scheduler's limit) is the job's end, not a failure. False positive: a paste cut
    right after the START line."""
    every = list(ctx.evidence.all_logs())
    ready = {(e.fields.get("host"), e.fields.get("pid"), e.fields.get("comm"))
             for e in every if e.kind == "nccl_comm_ready"}
    open_ = [e for e in every if e.kind == "nccl_init_start" and
             (e.fields.get("host"), e.fields.get("pid"), e.fields.get("comm")) not in ready]
    stopped = _stopped_from_outside(every)
    if not open_ or ctx.stacks or ctx.picture.dumps or any(
            (e.kind in ("progress", "run_finished") and not _before_setup(e, open_))
            or (e.severity in ("error", "fatal") and not _after(e, stopped))
            or e.kind.startswith(("nccl_w", "nccl_t")) for e in every):
        return []
    first = open_[0]
    summary = (f"rule nccl-init-started-not-completed: NCCL began setting up communicator "
               f"{first.fields.get('comm')} ('Init START', {first.where()}) in "
               f"{len({(e.fields.get('host'), e.fields.get('pid')) for e in open_})} process(es) "
               "and never logged its 'Init COMPLETE', an error or a step: the setup still waits "
               "for a peer's bootstrap or a transport connection these lines do not name (or the "
               "paste was cut there)")
    if stopped:
        summary += (f"; the launcher was then stopped from outside ({stopped[0].where()}): the "
                    "job was ended while it waited, not by a rank's failure")
    culprits, waiting = _never_started(open_)
    if culprits:
        summary += (f". The START lines are of {ranks_phrase(waiting)} of a communicator of "
                    f"{first.fields.get('nranks')} ranks: {ranks_phrase(culprits)} never began "
                    "its setup, and the others wait for it there")
    summary += (". Next: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET on every node, and "
                "py-spy dump of a rank")
    return [Finding(kind=Kind.INIT_HANG, culprit_ranks=culprits, waiting_ranks=waiting,
                    confidence=0.6 if culprits else 0.4, summary=summary,
                    evidence=[log_evidence(e)
                              for e in open_[:3]],
                    measures={"rule": "nccl-init-started-not-completed"})]


def _stopped_from_outside(every: list[LogEvent]) -> list[LogEvent]:
    """The launcher's own report that it was signalled (a person's Ctrl-C, a scheduler's time
    limit): what it logs after is its teardown."""
    return [e for e in every if e.kind == "elastic_agent_signalled"]


def _after(event: LogEvent, stops: list[LogEvent]) -> bool:
    return any(event.path == s.path and event.line_no >= s.line_no for s in stops)


def _never_started(open_: list[LogEvent]) -> tuple[list[int], list[int]]:
    """Ranks of the largest open communicator that logged no START, where two processes or more
    logged theirs and the ranks that did and those that did not are each one contiguous block
    (ranks go to nodes and launches in blocks; ranks scattered across the job say the paste was
    trimmed, not who is missing)."""
    sizes = [int(e.fields["nranks"]) for e in open_ if isinstance(e.fields.get("nranks"), int)]
    if not sizes:
        return [], []
    world = max(sizes)
    mine = [e for e in open_ if e.fields.get("nranks") == world
            and isinstance(e.fields.get("comm_rank"), int)]
    if len({(e.fields.get("host"), e.fields.get("pid")) for e in mine}) < 2:
        return [], []  # one process's log says nothing of the others
    started = sorted({int(e.fields["comm_rank"]) for e in mine})
    missing = sorted(set(range(world)) - set(started))
    if not started or not missing or started[-1] >= world \
            or not is_block(started) or not is_block(missing):
        return [], []
    return missing, started


# process-group creation every rank of the job calls, in the same order (new_group and its
# kin count the calls: one a rank skipped or added shifts every later one)
_GROUP_CALLS = frozenset({"new_group", "new_subgroups", "new_subgroups_by_enumeration",
                          "_new_group_with_tag", "split_group", "init_device_mesh",
                          "init_process_group", "_store_based_barrier"})


def _group_creation(ctx: Context) -> list[Finding]:
    """Ranks stuck inside group creation while the others are somewhere else (a collective, the
    next step): who called it and who did not, the odd side by the one majority rule
    (``analysis.majority``); with no majority both sides are named and those outside are
    reported (lower confidence)."""
    inside = sorted(r for r, s in ctx.stacks.items() if s.main is not None
                    and s.main.kind == "init" and s.main.op in _GROUP_CALLS
                    and s.progress != "moving")
    outside = sorted(r for r, s in ctx.stacks.items() if r not in inside and not s.gone
                     and s.main is not None and s.progress != "moving")
    if not inside or not outside:
        return []
    odd = odd_ones_out({r: r in inside for r in [*inside, *outside]})
    main = ctx.stacks[inside[0]].main
    assert main is not None
    where = f" at {short_where(main.user_frame)}" if main.user_frame is not None else ""
    doing = "; ".join(f"rank {r}: {ctx.stacks[r].describe()}" for r in outside[:4])
    summary = (f"{ranks_phrase(inside)} {'is' if len(inside) == 1 else 'are'} inside "
               f"{main.op}{where}, which every rank of the job must call, in the same order; "
               f"{ranks_phrase(outside)} {'is' if len(outside) == 1 else 'are'} not in it "
               f"({doing}). Group creation counts the calls: a group created by some ranks only "
               "(a new_group under `if rank ...`), or one call more or less on a rank, makes "
               "every later one disagree")
    if odd is not None:
        # above missing_rank's 0.9: the ranks FR sees missing are inside group creation, and
        # group creation waits for the ranks that are not
        culprits, waiting, confidence = odd.odd, odd.majority, 0.92
        verb = "is" if len(culprits) == 1 else "are"
        summary += f"; {ranks_phrase(culprits)} {verb} the odd one out"
    else:
        culprits, waiting, confidence = outside, inside, 0.55
        summary += " (no majority: either side may have the extra or missing call)"
    evidence = [item for rank in [inside[0], outside[0], *culprits[:4]]
                if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return [Finding(kind=Kind.INIT_HANG, culprit_ranks=culprits, waiting_ranks=waiting,
                    confidence=confidence, summary=summary,
                    evidence=list({(e.rank, e.detail): e for e in evidence}.values()),
                    collective=CollectiveRef(pg=None, seq=None, op=main.op or "new_group"))]


# what each init wait needs from the other ranks (the op comes from analysis.stacks.is_init_wait)
_NEEDS = (
    ("store.", "a key of the c10d store that another rank (or the store's host, rank 0 at "
               "MASTER_ADDR:MASTER_PORT) has not written: a rank that never started, or a store "
               "that is unreachable or left over from an earlier run"),
    ("nccl_comm_init", "every rank of the group to create the NCCL communicator with it (torch "
                       "creates it at the group's first collective): a rank that never reaches "
                       "that collective, or cannot connect (NCCL_SOCKET_IFNAME, firewall)"),
    ("DistributedDataParallel", "every rank to construct DDP too (it checks parameter shapes and "
                                "broadcasts rank 0's parameters)"),
)


def _lone(ctx: Context) -> list[Finding]:
    """Ranks whose stacks sit in process-group setup, when no rank of the evidence is anywhere
    else: the ones they wait for are not in the evidence, so the culprit is unknown."""
    stuck = sorted(rank for rank, state in ctx.stacks.items()
                   if state.main is not None and state.main.kind == "init"
                   # torchrun's agent monitors its workers: it is no rank in setup
                   and state.main.op != "elastic_agent" and state.progress != "moving")
    if not stuck or set(stuck) != set(ctx.evidence.ranks) or ctx.evidence.world_size:
        return []  # a rank elsewhere, or ranks known not to be seen: the stack-init waits say who
    main = ctx.stacks[stuck[0]].main
    assert main is not None
    op = main.op or "init"
    needs = next((text for prefix, text in _NEEDS if op.startswith(prefix)),
                 "the other ranks of the group to join")
    summary = (f"{ranks_phrase(stuck)} {'wait' if len(stuck) > 1 else 'waits'} in process-group "
               f"setup ({main.describe()}), which needs {needs}. No other rank is in the "
               "evidence, so which one it waits for is unknown: fetch the stacks or logs of "
               "the other ranks (`hangscope attach` on every node, or their stderr with "
               "TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_CPP_LOG_LEVEL=INFO)")
    evidence = [item for rank in stuck[:8]
                if (item := ctx.stack_evidence(rank, "main thread: ")) is not None]
    return [Finding(kind=Kind.INIT_HANG, culprit_ranks=[], waiting_ranks=stuck, confidence=0.4,
                    summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=None, op=op))]


_INIT_KINDS = ("store_barrier_wait", "store_timeout", "rendezvous_timeout")


def _from_logs(ctx: Context) -> list[Finding]:
    events = [e for ev in ctx.evidence.ranks.values() for e in ev.logs]
    events += ctx.evidence.unattributed_logs
    init = [e for e in events if e.kind in _INIT_KINDS]
    raised = [e for e in events if setup_failure(e)]
    duplicates = _duplicate_ranks(events)
    if not init and not duplicates and not raised:
        return []
    reasons: list[str] = []
    culprits: list[int] = []
    waiting = sorted({e.rank for e in init if e.rank is not None})
    barrier = [e for e in init if e.kind == "store_barrier_wait"]
    if barrier:
        last = max(barrier, key=lambda e: (int(e.fields.get("joined", 0)), e.line_no))
        world, joined = int(last.fields.get("world_size", 0)), int(last.fields.get("joined", 0))
        if joined > world:
            reasons.append(f"{joined} processes joined the store barrier of a {world}-rank "
                           f"group (key {last.fields.get('key')}): a stale store from an earlier "
                           "run, or two processes with the same rank")
        else:
            silent = sorted(set(range(world)) - set(waiting)) if len(waiting) == joined else []
            culprits = silent
            who = f": {ranks_phrase(silent)} never arrived" if silent else ""
            reasons.append(f"only {joined} of {world} ranks joined the store barrier of "
                           f"init_process_group{who}")
    for event in init:
        if event.kind == "store_timeout" and "joined" in event.fields:
            joined, world = int(event.fields["joined"]), int(event.fields["world_size"])
            # the store's host (rank 0, MASTER_ADDR) counts itself: 1 joined means no one else
            absent = list(range(1, world)) if joined == 1 and world > 1 else []
            culprits += absent
            who = f": {ranks_phrase(absent)} never reached it" if absent else ""
            reasons.append(f"the TCPStore saw {joined} of {world} clients join{who}")
        elif event.kind == "store_timeout" and "waits_for" in event.fields:
            owner = int(event.fields["waits_for"])
            culprits.append(owner)
            reasons.append(f"rank {event.rank if event.rank is not None else '?'} waited for "
                           f"rank {owner} to publish the group's ncclUniqueId (store key "
                           f"{event.fields.get('key')}) and it never did: rank {owner} never "
                           "reached its first collective on that group")
        elif event.kind == "store_timeout":
            reasons.append(f"a rank could not reach the TCPStore at {event.fields.get('host')}:"
                           f"{event.fields.get('port')} (MASTER_ADDR/MASTER_PORT, firewall)")
        elif event.kind == "rendezvous_timeout":
            reasons.append("the elastic rendezvous timed out (not every node joined)")
    for event in raised[:2]:  # rule setup-exception (log_causes.setup_failure)
        who = f"rank {event.rank}'s" if event.rank is not None else "a process's"
        reasons.append(f"{who} process-group set-up raised {event.fields.get('exc_type')}: "
                       f"{one_line(str(event.fields.get('exc_message', '')), 120)} in "
                       f"{event.fields.get('last_function')} ({event.where()})")
    for rank, lines in duplicates.items():
        reasons.append(f"GLOBAL_RANK {rank} was taken by {len(lines)} processes "
                       f"({', '.join(lines[:3])}): duplicate ranks (check RANK/NODE_RANK/"
                       "LOCAL_RANK per node)")
        culprits.append(rank)
    cited = init[:4] + raised[:2] + [e for e in events if e.kind == "global_rank_init"
                        and e.fields.get("global_rank") in duplicates][:4]
    evidence = [EvidenceItem("log", e.rank, one_line(e.message, 200), e.where()) for e in cited]
    verb = "failed" if raised and not init and not duplicates else "hangs"
    summary = f"the job {verb} while forming its process group: " + "; ".join(
        dict.fromkeys(reasons))
    return [Finding(kind=Kind.INIT_HANG, culprit_ranks=sorted(set(culprits)),
                    waiting_ranks=sorted(set(waiting) - set(culprits)), confidence=0.7,
                    summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=None, op="init_process_group"))]


def _duplicate_ranks(events: list[LogEvent]) -> dict[int, list[str]]:
    """GLOBAL_RANK values printed by more than one process (distinct line prefixes or files).
    One process that logs the line through two handlers (Lightning's own ``INFO: Initializing
    distributed: ...`` and, on the next line, the Python logger's ``I0411 01:28:10.345 ...
    distributed.py:244] Initializing distributed: ...``) claims it once: a claim right after
    another of the same rank whose head has another shape is its echo."""
    seen: dict[int, dict[tuple[str, int], str]] = {}
    last: dict[int, LogEvent] = {}
    for event in sorted((e for e in events if e.kind == "global_rank_init"),
                        key=lambda e: (e.path, e.line_no)):
        rank = int(event.fields["global_rank"])
        before = last.get(rank)
        last[rank] = event
        if before is not None and _echo(before, event):
            continue
        local = event.fields.get("local_rank")
        # one process: its local rank where a prefix gives it, else its own line
        who = (event.path, local if isinstance(local, int) else event.line_no)
        seen.setdefault(rank, {}).setdefault(who, event.where())
    return {rank: list(lines.values()) for rank, lines in seen.items() if len(lines) > 1}


_DIGITS = re.compile(r"\d+")


def _echo(before: LogEvent, event: LogEvent) -> bool:
    """``event`` repeats ``before``'s claim through another log handler of the same process:
    the next line or the one after, its head (what precedes ``GLOBAL_RANK``) of another shape."""
    if event.path != before.path or not 0 < event.line_no - before.line_no <= 2:
        return False
    heads = [_DIGITS.sub("#", e.message.split("GLOBAL_RANK", 1)[0]) for e in (before, event)]
    return heads[0] != heads[1]
