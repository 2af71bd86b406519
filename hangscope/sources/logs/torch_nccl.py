# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""torch ProcessGroupNCCL / c10d messages (``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``,
``ProcessGroupWrapper.cpp``, ``ProcessGroupGloo.cpp``, ``TraceUtils.h``).

Accepted raw formats (glog/c10 and ``[rankN]:`` prefixes are peeled first, see ``common``):

``nccl_watchdog_timeout`` -- ``WorkNCCL::checkTimeout``::

    # torch 1.x-2.0: no SeqNum/Numel, optional TensorShape
    [E ProcessGroupNCCL.cpp:821] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800510 milliseconds before timing out.
    # torch 2.0-2.1
    [E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 25624887 milliseconds before timing out.
    # torch 2.2-2.3 ([rankN]: line prefix, NumelIn/NumelOut)
    [rank7]:[E ProcessGroupNCCL.cpp:563] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600017 milliseconds before timing out.
    # torch 2.4+ (c10 timestamp); the neighbouring lines carry [PG ID 0 PG GUID 0(default_pg) Rank 1]
    [rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.

  The same text is repeated inside "Process group watchdog thread terminated with exception: ..."
  and the DistBackendError; each occurrence is one event (``fields['repeat']=1`` on the repeats).

``nccl_work_status`` -- ``[PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at
work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.`` and ``Timeout at NCCL
work: ...`` and (torch 2.6+) `` failure detected by watchdog at work sequence id: 20585 PG status: last
enqueued work: 20589, last completed work: 20584``.

``nccl_desync`` -- ``TORCH_NCCL_DESYNC_DEBUG=1`` report, ``retrieveDesyncReport`` in TraceUtils.h,
logged as ``LOG(ERROR) << logPrefix() << desyncMsg`` (one glog line, then tab-indented lines)::

    \t - [0] Timeout at collective: ALLREDUCE, #5
    \t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:
    \t   - [1] joined but didn't finish collective #5 (count from 1)
    \t     [2, 3] finished collective #5, but didn't join collective #6 (count from 1)
    \t - To our best knowledge, ranks [1, 2] are the lagging ranks that caused this timeout. They never joined any collectives

``collective_fingerprint_mismatch`` -- ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` (ProcessGroupWrapper.cpp),
recorded here with gloo: ``Detected mismatch between collectives on ranks. Rank 0 is running
collective: CollectiveFingerPrint(SequenceNumber=1, OpType=ALLREDUCE, TensorShape=[20, 10],
TensorDtypes=Float, TensorDeviceTypes=TensorOptions(...)), but Rank 1 is running collective:
CollectiveFingerPrint(...).Collectives differ in the following aspects: ...``

``monitored_barrier_failure`` -- ProcessGroupGloo.cpp ``monitoredBarrier``: ``[Rank 0]: Rank 1 failed
to pass monitoredBarrier in 2000 ms`` (``Ranks 1, 3 failed ...`` with ``wait_all_ranks=True``).

``nccl_heartbeat_stuck`` -- heartbeat monitor (torch 2.2+): ``Heartbeat monitor timed out! Process
will be terminated after dumping debug info. workMetaList_.size()=2`` and ``ProcessGroupNCCL's
watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives.``

``nccl_error`` -- ``NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process
exited or there was a network error, NCCL version 2.20.5`` and the ``ncclRemoteError: ...`` /
``ncclSystemError: ...`` / ``ncclInternalError`` / ``ncclUnhandledCudaError`` lines that follow it.

``fr_dump_notice`` -- flight-recorder dump activity: ``Received a dump signal due to a collective
timeout from this local rank|rank N and we will try our best to dump the debug info. Last enqueued
NCCL work: 5, last completed NCCL work: 4.``, ``ProcessGroupNCCL preparing to dump debug info.``,
``Observed flight recorder dump signal from another rank via TCPStore.``, ``Finished writing NCCLPG
debug info to /tmp/nccl_trace_rank_0``, ``First PG on this rank to signal dumping.``
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import (
    Context,
    Line,
    join_ints,
    make_event,
    pg_info,
    resolve_rank,
)

_WATCHDOG = re.compile(
    # another process's output may cut the record mid-word ("collective operat<its text>ion
    # timeout"): up to a few hundred characters in between are skipped; a terminal's cut inside
    # "collective", rejoined with a blank ("colle ctive"), is the word too
    r"(?:Watchdog caught|Caught) (?:collective|(?=\w{1,9} \w{1,9} )(?:[clotive]+ [clotive]+))"
    r" operat(?:ion |.{1,400}?ion )?timeout: "
    r"WorkNCCL\((?P<work>(?:[^()]|\(ms\))*)\)"
    r"(?: ran for (?P<ran>\d+) milliseconds before timing out)?")
_CUT_BLANK = re.compile(r"(?<=[\w=]) (?=[\w=(])")
_KV = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\)|TensorShape)=(\[[^\]]*\]|[^,)\s]+)")


def _pg_fields(line: Line, ctx: Context, fields: dict[str, str | int | float]
               ) -> tuple[int | None, str]:
    pg, group_rank = pg_info(line.body)
    if pg is not None:
        fields["pg"] = pg
    if group_rank is not None:
        fields["group_rank"] = group_rank
    return resolve_rank(line, ctx, group_rank, pg)


def _work_fields(record: str, fields: dict[str, str | int | float]) -> None:
    """The fields of a ``WorkNCCL(SeqNum=.., OpType=.., NumelIn=.., ...)`` record."""
    work = _CUT_BLANK.sub("", record)
    for key, value in _KV.findall(work):
        value = value.strip()
        if key == "SeqNum":
            fields["seq"] = int(value)
        elif key == "OpType":
            fields["op"] = value
        elif key == "NumelIn":
            fields["numel_in"] = int(value)
        elif key == "NumelOut":
            fields["numel_out"] = int(value)
        elif key == "Timeout(ms)":
            fields["timeout_ms"] = int(value)
        else:
            fields["tensor_shape"] = value


def watchdog(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _WATCHDOG.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"pg": ""}
    if m.group("ran"):  # an elided or cut record ("WorkNCCL(... OpType=BROADCAST ...)") keeps the rest
        fields["ran_ms"] = int(m.group("ran"))
    # a paste's wrap, rejoined where the cut's width was not known, may leave a blank inside a
    # word ("OpTy pe=", "Numel Out="): the record's own blanks all follow a comma
    _work_fields(m.group("work"), fields)
    if m.start() > 0 and "terminated with exception" in line.body[:m.start()] \
            or "DistBackendError" in line.body[:m.start()]:
        fields["repeat"] = 1
    span = _CONDENSED.search(line.body[:m.start()])
    if span is not None and 0 <= int(span.group("lo")) < int(span.group("hi")) <= MAX_CONDENSED:
        # a person's summary of many ranks' identical lines ("[Rank 1-7] Watchdog caught ..."):
        # each rank of the range timed out
        return [make_event("nccl_watchdog_timeout", line, ctx, "error", dict(fields), rank=r,
                           rank_source="content")
                for r in range(int(span.group("lo")), int(span.group("hi")) + 1)]
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("nccl_watchdog_timeout", line, ctx, "error", fields, rank=rank,
                       rank_source=source)]


# no program writes a range of ranks as a line's head; people condensing eight ranks' copies of
# one line do ("[Rank 1-7]", "[Ranks 8-15]")
_CONDENSED = re.compile(r"\[Ranks? (?P<lo>\d+) ?[-\u2013] ?(?P<hi>\d+)\]")
MAX_CONDENSED = 4095


_STATUS = re.compile(
    r"(?:detected by watchdog at work|Timeout at NCCL work|detected by watchdog at work sequence id)"
    r":? (?P<seq>-?\d+)[,.]? (?:PG status: )?last enqueued (?:NCCL )?work: (?P<enq>-?\d+), "
    r"last completed (?:NCCL )?work: (?P<done>-?\d+)")


def _completed(done: int, enqueued: int) -> dict[str, int]:
    """``last_completed`` as the line states it, or nothing where no rank could have completed
    it: past the last work it enqueued (torch 2.3 printed its counter unset before any work
    completed: ``last enqueued NCCL work: 1, last completed NCCL work: 1225212205848461568``)."""
    return {"last_completed": done} if done <= max(enqueued, 0) else {}


def work_status(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _STATUS.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {
        "seq": int(m.group("seq")), "last_enqueued": int(m.group("enq")),
        "timeout": 1 if "Timeout at" in line.body else 0}
    fields.update(_completed(int(m.group("done")), int(m.group("enq"))))
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("nccl_work_status", line, ctx, "error", fields, rank=rank,
                       rank_source=source)]


_DESYNC_HEAD = re.compile(r"- \[(?P<rank>\d+)\] Timeout at collective: (?P<op>[^,]*), #(?P<seq>\d+)")
_JOINED = re.compile(r"\[(?P<ranks>[\d, ]+)\] joined but didn't finish collective #(?P<seq>\d+)")
_FINISHED = re.compile(
    r"\[(?P<ranks>[\d, ]+)\] finished collective #(?P<seq>\d+), but didn't join collective")
_NEVER = re.compile(r"ranks \[(?P<ranks>[\d, ]+)\] are the lagging ranks that caused this timeout")


def desync(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _DESYNC_HEAD.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {
        "timed_out_rank": int(m.group("rank")), "op": m.group("op"), "seq": int(m.group("seq"))}
    lagging: list[int] = []
    for nxt in follow.lines():
        if nxt.key != line.key:
            continue
        text = nxt.body
        if not text.startswith(("\t", " ")) or "Timeout at collective" in text:
            break
        follow.consume(nxt.line_no)
        j = _JOINED.search(text)
        if j:
            ranks = [int(x) for x in j.group("ranks").split(",")]
            fields["joined_not_finished"] = join_ints(ranks)
            fields["joined_seq"] = int(j.group("seq"))  # their own seq, not the timed-out one
            lagging += ranks
        f = _FINISHED.search(text)
        if f:
            ranks = [int(x) for x in f.group("ranks").split(",")]
            fields["finished_not_joined_next"] = join_ints(ranks)
            fields["finished_seq"] = int(f.group("seq"))
            lagging += ranks
        n = _NEVER.search(text)
        if n:
            ranks = [int(x) for x in n.group("ranks").split(",")]
            fields["never_joined"] = join_ints(ranks)
            lagging += ranks
    fields["lagging_ranks"] = join_ints(sorted(set(lagging)))
    rank, source = resolve_rank(line, ctx, int(m.group("rank")))
    return [make_event("nccl_desync", line, ctx, "error", fields, rank=rank, rank_source=source)]


_FP_MISMATCH = re.compile(
    # (the blanks as a paste that broke the report into lines leaves them once rejoined)
    r"Detected mismatch between collectives on ranks\.\s+Rank (?P<r1>\d+) is running collective: "
    r"CollectiveFingerPrint\((?P<fp1>.*?)\),?\s+but Rank (?P<r2>\d+) is running collective: "
    r"CollectiveFingerPrint\((?P<fp2>.*?)\)(?:\.|$|,)")
_FP_KV = re.compile(
    r"(SequenceNumber|OpType|TensorShape|TensorDtypes|TensorDeviceTypes|CollectiveSequenceNumber)"
    r"=(\[[^\]]*\]|\d+(?=[A-Z,)\s]|$)|[^,]+)")  # "SequenceNumber=17OpType=BARRIER": no comma
_FP_SHORT = {"SequenceNumber": "seq", "CollectiveSequenceNumber": "seq", "OpType": "op",
             "TensorShape": "shape", "TensorDtypes": "dtype"}


def fingerprint_mismatch(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _FP_MISMATCH.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"rank_a": int(m.group("r1")),
                                            "rank_b": int(m.group("r2"))}
    for tag, group in (("a", "fp1"), ("b", "fp2")):
        for key, value in _FP_KV.findall(m.group(group)):
            short = _FP_SHORT.get(key)
            if short is None:
                continue
            value = value.strip()
            fields[f"{short}_{tag}"] = int(value) if short == "seq" and value.isdigit() else value
    differ = line.body.find("Collectives differ in the following aspects:")
    if differ >= 0:
        fields["differ"] = " ".join(line.body[differ + 44:].split())[:300]
    rank, source = resolve_rank(line, ctx, int(m.group("r1")))
    return [make_event("collective_fingerprint_mismatch", line, ctx, "error", fields, rank=rank,
                       rank_source=source)]


_DDP_PARAMS = re.compile(r"DDP expects same model across all ranks, but Rank (?P<r1>\d+) has (?P<n1>\d+) "
                         r"params, while rank (?P<r2>\d+) has inconsistent (?P<n2>\d+) params")


def ddp_param_mismatch(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """DDP's constructor (``_verify_param_shape_across_processes``) compares the ranks' parameter
    counts: ``DDP expects same model across all ranks, but Rank 1 has 212 params, while rank 0 has
    inconsistent 0 params.`` Read as a fingerprint pair: the second rank is the one torch calls
    inconsistent."""
    m = _DDP_PARAMS.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {
        "rank_a": int(m.group("r1")), "op_a": "verify_params", "shape_a": f"{m.group('n1')} params",
        "rank_b": int(m.group("r2")), "op_b": "verify_params", "shape_b": f"{m.group('n2')} params",
        "differ": "parameter count", "inconsistent": int(m.group("r2"))}
    rank, source = resolve_rank(line, ctx)
    return [make_event("collective_fingerprint_mismatch", line, ctx, "error", fields, rank=rank,
                       rank_source=source)]


_BARRIER = re.compile(
    r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier in (?P<ms>\d+) ms")


# A non-zero rank's side of the same barrier: it passed, and rank 0's send/recv failed.
_BARRIER_PEER = re.compile(r"(?:Rank (?P<me>\d+) )?successfully reached monitoredBarrier, but "
                           r"received errors while "
                           r"waiting for send/recv from rank (?P<ranks>\d+)")
_BARRIER_MS = re.compile(r"Timed out waiting (\d+)ms")
# what the peer side's "Original exception:" says when rank 0's connection went away, not timed
# out: gloo's "Connection closed by peer [10.0.0.1]:22693", "Connection reset by peer"
_BARRIER_CLOSED = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe")


def monitored_barrier(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    m = _BARRIER.search(line.body) or _BARRIER_PEER.search(line.body)
    if not m:
        return []
    ranks = [int(x) for x in m.group("ranks").split(",")]
    fields: dict[str, str | int | float] = {"failed_ranks": join_ints(ranks)}
    if "ms" in m.groupdict():
        fields["timeout_ms"] = int(m.group("ms"))
    else:
        for count, nxt in enumerate(follow.lines()):
            ms = _BARRIER_MS.search(nxt.body)
            if _BARRIER_CLOSED.search(nxt.body):
                fields["peer_closed"] = 1  # the rank it waited on closed its connection
            if ms or count > 3 or "peer_closed" in fields:
                if ms:
                    fields["timeout_ms"] = int(ms.group(1))
                break
    rank, source = _pg_fields(line, ctx, fields)
    if m.re is _BARRIER_PEER:
        fields["peer_side"] = 1  # a non-zero rank echoing that rank 0's barrier failed
        if rank is None and m.group("me"):  # "Rank 1 successfully reached ...": its own rank
            rank, source = int(m.group("me")), "content"
    return [make_event("monitored_barrier_failure", line, ctx, "error", fields, rank=rank,
                       rank_source=source)]


_HEARTBEAT = re.compile(r"workMetaList_\.size\(\)=(\d+)")
_STUCK = re.compile(r"watchdog (?:thread )?got stuck for (\d+) seconds")


def heartbeat(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    if "Heartbeat monitor timed out" not in body and not _STUCK.search(body) \
            and "due to ProcessGroupNCCL watchdog hang" not in body:
        return []
    fields: dict[str, str | int | float] = {}
    hm = _HEARTBEAT.search(body)
    if hm:
        fields["work_list_size"] = int(hm.group(1))
    st = _STUCK.search(body)
    if st:
        fields["stuck_s"] = int(st.group(1))
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("nccl_heartbeat_stuck", line, ctx, "fatal", fields, rank=rank,
                       rank_source=source)]


_NCCL_ERR_IN = re.compile(
    r"NCCL error in: (?P<file>[^,]+), (?P<what>.*?)(?:, NCCL version (?P<ver>[\w.\-+]+))?$")
_NCCL_CODE = re.compile(
    r"\b(ncclRemoteError|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|"
    r"ncclInvalidUsage|ncclInvalidArgument|ncclInProgress)\b:?\s*(?P<text>.*)")


def nccl_error(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {}
    m = _NCCL_ERR_IN.search(body)
    if m:
        fields["where"] = m.group("file").strip()
        fields["error"] = m.group("what").strip()[:200]
        if m.group("ver"):
            fields["nccl_version"] = m.group("ver")
    code = _NCCL_CODE.search(body)
    if code:
        fields["code"] = code.group(1)
        if not m:
            fields["error"] = code.group("text").strip()[:200]
    if not fields:
        return []
    _follow_code(line, follow, fields)
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("nccl_error", line, ctx, "error", fields, rank=rank, rank_source=source)]


# torch 2.x: "[Rank 3] Collective WorkNCCL(SeqNum=26, OpType=_ALLGATHER_BASE, NumelIn=16, ...)
# raised the following async exception: NCCL error: invalid usage (...), NCCL version 2.28.9",
# then "ncclInvalidUsage: ...", "Last error:" and NCCL's WARN text on the lines below
_ASYNC = re.compile(r"WorkNCCL\((?P<work>(?:[^()]|\(ms\))*)\) raised the following async "
                    r"exception: (?P<error>.*?)(?:, NCCL version (?P<ver>[\w.\-+]+))?\s*$")


def async_error(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A collective of this rank failed with an NCCL error: the record says which collective
    (seq, op, sizes), so the rank's place is known as a watchdog timeout's would be."""
    m = _ASYNC.search(line.body)
    if not m:
        return []
    fields: dict[str, str | int | float] = {"error": m.group("error").strip()[:200],
                                            "async": 1}
    if m.group("ver"):
        fields["nccl_version"] = m.group("ver")
    _work_fields(m.group("work"), fields)
    code = _NCCL_CODE.search(m.group("error"))
    if code:
        fields["code"] = code.group(1)
    _follow_code(line, follow, fields)
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("nccl_error", line, ctx, "error", fields, rank=rank, rank_source=source)]


def _follow_code(line: Line, follow: Follow, fields: dict[str, str | int | float]) -> None:
    # "Last error:" is followed by the NCCL WARN text that caused it, on the next line
    for nxt in follow.lines():
        if nxt.key != line.key:
            continue
        body = nxt.body.lstrip()  # (a launcher's head may leave the blank it was followed by)
        c2 = _NCCL_CODE.match(body) if body.startswith("nccl") else None
        if c2 is not None:  # the error's code on a line of its own (not "ncclSocketInit: ...")
            if "code" not in fields:
                fields["code"] = c2.group(1)
            follow.consume(nxt.line_no)
            continue
        if nxt.body.strip() == "Last error:":
            follow.consume(nxt.line_no)
            continue
        if nxt.raw and nxt.line_no - line.line_no <= 3 and "NCCL" not in body[:5]:
            fields.setdefault("last_error", body.strip()[:300])
        break


_DUMP_SIGNAL = re.compile(
    r"Received a dump signal due to a collective timeout from\s+(?P<src>this local rank|rank\s+\d+)"
    r".*?Last enqueued \w+ work: (?P<enq>-?\d+), last completed \w+ work: (?P<done>-?\d+)")
_DUMP_WRITTEN = re.compile(r"Finished writing NCCLPG debug info to (?P<path>\S+)")


def fr_dump(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    fields: dict[str, str | int | float] = {}
    m = _DUMP_SIGNAL.search(body)
    if m:
        src = m.group("src")
        fields["action"] = "signal"
        fields["from"] = "local" if src.startswith("this") else src.split()[-1]
        fields["last_enqueued"] = int(m.group("enq"))
        fields.update(_completed(int(m.group("done")), int(m.group("enq"))))
    elif (w := _DUMP_WRITTEN.search(body)) is not None:
        fields["action"] = "written"
        fields["dump_path"] = w.group("path")
    elif "preparing to dump debug info" in body:
        fields["action"] = "preparing"
    elif "Observed flight recorder dump signal" in body:
        fields["action"] = "signal_observed"
    elif "First PG on this rank to signal dumping" in body:
        fields["action"] = "first_to_signal"
    elif "light" in body and "ecorder" in body and "ump" in body:
        fields["action"] = "mention"
    else:
        return []
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("fr_dump_notice", line, ctx, "info", fields, rank=rank, rank_source=source)]


_CUDA_ERROR = re.compile(r"CUDA error: (?P<error>[^.\n]+)")
_EXC_LINE = re.compile(r"[A-Za-z_][\w.]*(?:Error|Exception): CUDA error")


def cuda_error(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """A CUDA error on the rank's own GPU: its NCCL watchdog hit it (``Process group watchdog
    thread terminated with exception: CUDA error: an illegal memory access was encountered``), the
    CUDA runtime raised it (``RuntimeError: CUDA error: unspecified launch failure`` outside a
    traceback block, ``what():  CUDA error: uncorrectable ECC error encountered`` after ``terminate
    called``): that rank failing first, not a timeout's echo. NCCL's own ``Cuda failure '...'`` WARN
    is ``nccl_debug``'s."""
    m = _CUDA_ERROR.search(line.body)
    if not m or "Watchdog caught" in line.body or m.group("error").startswith("out of memory"):
        return []  # an OOM is ``oom.cuda_oom``'s
    if _EXC_LINE.match(line.body):
        return []  # a Python exception's last line: the traceback event is that rank's failure
    fields: dict[str, str | int | float] = {"error": m.group("error").strip()[:200]}
    rank, source = _pg_fields(line, ctx, fields)
    return [make_event("cuda_error", line, ctx, "error", fields, rank=rank, rank_source=source)]


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"terminated with exception: CUDA error", cuda_error),
    (b"CUDA error: ", cuda_error),
    # the sentence whole, cut by another process's text ("collective operat<...>ion"), or cut by
    # a terminal inside "collective" (the regex decides)
    (b"Watchdog caught ", watchdog),
    (b"Caught collective operation timeout", watchdog),  # torch <= 1.12 exception text
    (b"detected by watchdog at work", work_status),
    (b"Timeout at NCCL work", work_status),
    (b"Timeout at collective: ", desync),
    (b"Detected mismatch between collectives", fingerprint_mismatch),
    (b"failed to pass monitoredBarrier", monitored_barrier),
    (b"DDP expects same model across all ranks", ddp_param_mismatch),
    (b"successfully reached monitoredBarrier", monitored_barrier),
    (b"Heartbeat monitor timed out", heartbeat),
    (b"got stuck for", heartbeat),
    # "[PG ID 6 PG GUID  Rank 0] Terminating the process after attempting to dump debug info, due
    # to ProcessGroupNCCL watchdog hang" (the heartbeat monitor's own end)
    (b"due to ProcessGroupNCCL watchdog hang", heartbeat),
    (b"NCCL error in:", nccl_error),
    (b"raised the following async exception", async_error),
    (b"ncclRemoteError", nccl_error),
    (b"ncclSystemError", nccl_error),
    (b"ncclInternalError", nccl_error),
    (b"ncclUnhandledCudaError", nccl_error),
    (b"Received a dump signal", fr_dump),
    (b"preparing to dump debug info", fr_dump),
    (b"Finished writing NCCLPG debug info", fr_dump),
    (b"flight recorder dump", fr_dump),
    (b"Flight Recorder", fr_dump),
    (b"First PG on this rank to signal dumping", fr_dump),
]
