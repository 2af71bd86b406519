# ruff: noqa: E501  (the docstring and patterns quote raw log lines)
"""The format-agnostic tier: any line that names a rank and a collective, with its arguments.

Below the family parsers, users' own prints (``Rank 7 tensor before allreduce: torch.Size([32768000])``),
``NCCL_DEBUG_SUBSYS=COLL`` lines (``host:pid:tid [0] NCCL INFO Broadcast: opCount 0 sendbuff ... count
53 datatype 4 op 0 root 0 comm 0x... [nranks=8] stream ...``), RCCL's same format and any wrapper's
log all say the same thing: this rank called this collective with these arguments. For each line of
the log's tail (``tail.tail_lines``) naming a collective in any spelling (``all_reduce``,
``AllReduce``, ``ALLREDUCE``, ``nccl:all_reduce``, ``allreduce``, ...) and at least one of
count/numel/shape/dtype, a ``collective_line`` event: ``op`` (canonical: ``allreduce``), ``seq``
(opCount/SeqNum/seq, as written), ``count``, ``shape``, ``dtype``, ``template`` (the line with its
numbers replaced: lines of one template are one print statement), ``rank_from`` (prefix | message |
device | hint: how the rank is known; ``device``: the NCCL ``[cuda dev]`` of a log with one host,
where local and global ranks coincide). NCCL's point-to-point COLL lines (``Send: opCount ...
root P comm C ... stream S``) give ``op`` send or recv, ``p2p`` 1, ``peer`` (the peer's rank in
the communicator), ``comm`` and ``stream``.

Low precision by construction: these are never read alone as a hang, only compared across ranks
(``analysis/detectors/arg_skew.py``). Lines the family parsers read (watchdog ``WorkNCCL(...)``, DETAIL
fingerprints) are skipped here.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.casefold import twin
from hangscope.sources.logs.common import Line, make_event, parse_line
from hangscope.sources.logs.tail import LogicalTail, logical_tail

MAX_EVENTS = 4096
_OPS = re.compile(rb"(?i)all[_-]?reduce|all[_-]?gather|reduce[_-]?scatter|broadcast|all[_-]?to[_-]?all"
                  rb"|\bbarrier\b|\breduce\b|(?:send|recv): opcount")  # (_P2P: cased)
_OPS_FOLDED = twin(_OPS)
# NCCL_DEBUG_SUBSYS=COLL's point-to-point calls (``enqueue.cc``, 2.7+; RCCL alike): ``Send: opCount 1
# sendbuff ... count 1572864 datatype 7 op 0 root 1 comm 0x5574e8f68900 [nranks=2] stream 0x...``;
# ``root`` is the peer
_P2P = re.compile(r"\b(?P<op>Send|Recv): opCount (?P<seq>[0-9a-fx]+)\b.*?\bcount (?P<count>\d+)"
                  r"(?:.*?\bdatatype (?P<dtype>\d+))?.*?\b(?:root|peer) (?P<peer>\d+)"
                  r"(?:.*?\bcomm (?P<comm>0x[0-9a-fA-F]+))?(?:.*?\bstream (?P<stream>0x[0-9a-fA-F]+))?")
_OP = re.compile(r"(?i)\b(?:nccl:|c10d::|Horovod)?(all[_-]?reduce|all[_-]?gather(?:_into_tensor)?"
                 r"|reduce[_-]?scatter(?:_tensor)?|broadcast|all[_-]?to[_-]?all(?:_single)?|barrier"
                 r"|reduce)(?=\b|_|\d|[A-Z(:])")
_SKIP = ("WorkNCCL(", "CollectiveFingerPrint(", "File \"", "Stalled ops", "ranks: ")
_SEQ = re.compile(r"(?i)\b(?:opCount|SeqNum|seq(?:uence)?(?:[ _]?(?:number|num|id))?)\s*[=: ]\s*"
                  r"(?P<v>[0-9a-fx]+)\b")
_COUNT = re.compile(r"(?i)\b(?:count|numel(?:_?in)?|NumelIn|num_?elements|elements)\s*[=: ]\s*(?P<v>\d+)")
_SHAPE = re.compile(r"(?i)(?:torch\.Size\(|\bshape\s*[=: ]\s*|\bsize\s*[=: ]\s*)"
                    r"(?P<v>[\[(][\d, ]*[\])])")
_DTYPE = re.compile(r"(?i)\b(?:datatype|dtype)\s*[=: ]\s*(?:torch\.)?(?P<v>\w+)")
_MSG_RANK = re.compile(r"(?i)\b(?:global[_ ])?rank\s*[=:#]?\s*\[?(?P<r>\d+)\]?")
_DEV = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\] N?CCL INFO")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+")


def canonical_op(op: str) -> str:
    """One spelling per collective: ``all_reduce``, ``AllReduce``, ``ALLREDUCE`` -> allreduce;
    ``all_gather_into_tensor`` -> allgather."""
    op = op.lower().replace("_", "").replace("-", "")
    for base in ("allgather", "reducescatter", "alltoall", "broadcast"):
        if op.startswith(base):
            return base
    return op


def scan_collective_lines(path: str, rank_hint: int | None = None,
                          tail: LogicalTail | None = None) -> list[LogEvent]:
    """``tail``: the log's logical tail where the caller already has it (hard-wrapped COLL
    lines are read rebuilt, as the event scan reads them)."""
    tail = tail or logical_tail(path, rank_hint)
    if tail is None:
        return []
    ctx = tail.ctx
    found: list[tuple[Line, dict[str, str | int | float], str, str | None]] = []
    for index in range(len(tail.lines)):
        if index in tail.skip or not _OPS_FOLDED.search(tail.lowered[index]):
            continue
        number = tail.line_no(index)
        line = parse_line(tail.text(index), number, ctx)
        body = line.body
        if len(body) > 600 or any(mark in body for mark in _SKIP):
            continue
        p2p = _P2P.search(body)
        op = None if p2p else _OP.search(body)
        if p2p is not None:
            fields: dict[str, str | int | float] = {
                "op": p2p.group("op").lower(), "seq": p2p.group("seq"),
                "count": p2p.group("count"), "peer": int(p2p.group("peer")), "p2p": 1}
            for name in ("dtype", "comm", "stream"):
                if p2p.group(name):
                    fields[name] = p2p.group(name)
            op = p2p
        elif op is None:
            continue
        else:
            fields = {"op": canonical_op(op.group(1))}
        for name, pattern in (("seq", _SEQ), ("count", _COUNT), ("shape", _SHAPE),
                              ("dtype", _DTYPE)):
            m = None if name in fields else pattern.search(body)
            if m:
                fields[name] = m.group("v").replace(" ", "")
        if not any(k in fields for k in ("count", "shape", "dtype")):
            continue
        dev = _DEV.search(line.stream_text or body)
        fields["template"] = _NUMBER.sub("#", body[op.start():])[:200]
        found.append((line, fields, dev.group("host") if dev else "", dev.group("dev") if dev
                      else None))
        if len(found) >= MAX_EVENTS:
            break
    hosts = {host for _, _, host, _ in found if host}
    out = []
    for line, fields, _host, gpu in found:
        rank, source = line.rank, line.rank_source and "prefix"
        if rank is None and (m := _MSG_RANK.search(line.body)):
            rank, source = int(m.group("r")), "message"
        if rank is None and gpu is not None and len(hosts) == 1:
            rank, source = int(gpu), "device"
        if rank is None and ctx.rank_hint is not None:
            rank, source = ctx.rank_hint, "hint"
        if rank is None:
            continue
        fields["rank_from"] = source
        out.append(make_event("collective_line", line, ctx, "info", fields, rank=rank,
                              rank_source="content" if source != "hint" else "hint"))
    return out
