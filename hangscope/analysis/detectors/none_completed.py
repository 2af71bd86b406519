"""network_fault from logs: every rank of the job timed out in its group's first collective.

Rule ``none-completed``: the job's size is stated (``sources/logs/world_size.py``), every one of
its ranks logged a watchdog timeout in the same collective (one group, one sequence number, one
op), that collective is the group's first or its status says nothing of the group ever completed
(``last completed work: -1``), and no rank logged a failure of its own. Basis: a rank that never
joined would not time out in it, and a rank that died first would have said so; with all of them
in it and not one collective of the group through, the data path itself never moved a byte (a
GPU peer-to-peer path the host does not support, IB/RoCE or sockets misconfigured). 0.4: a GPU
hung in its very first kernel on every rank reads the same. A later collective that every rank
times out in is not read here: after collectives went through, the path worked.
"""

from __future__ import annotations

from hangscope.analysis.context import Context
from hangscope.analysis.detectors.log_waits import observation_item, one_per_rank
from hangscope.analysis.log_causes import failures
from hangscope.analysis.observations import WAITING_STATES
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.ranges import ranks_phrase

RULE = "none-completed"
CONFIDENCE = 0.4


def detect(ctx: Context) -> list[Finding]:
    # the job's size as its launcher states it; NCCL's nranks may be a subgroup's
    stated = ctx.evidence.declared_worlds()
    if not stated:
        return []
    world = max(int(e.fields["world"]) for e in stated)
    seen = [o for o in ctx.picture.observations
            if o.state in WAITING_STATES and o.numbering == "watchdog"]
    ranks = {o.rank for o in seen}
    if world < 2 or ranks != set(range(world)) or failures(ctx.evidence):
        return []
    spots = {(o.pg, o.seq, o.op.lower()) for o in seen}
    if len(spots) != 1 or len({o.seq for o in seen}) != 1:
        return []
    first = min(seen, key=lambda o: o.where)
    statuses = [e for e in ctx.evidence.all_logs()
                if e.kind == "nccl_work_status" and e.fields.get("seq") == first.seq]
    never = bool(statuses) and all(e.fields.get("last_completed") == -1 for e in statuses)
    if not (first.seq == 1 or never):
        return []
    done = ("and the group's status says none of its collectives ever completed (last "
            "completed work: -1)" if never else "the first collective of its group")
    summary = (f"rule `{RULE}`: every rank of the job ({ranks_phrase(sorted(ranks))}, of "
               f"{world} stated at {stated[0].where()}) {first.describe()}, {done}, and no rank "
               "logged a failure of its own: no rank stayed out of it, so the data path itself "
               "never moved data (a GPU peer-to-peer path the host does not support: try "
               "NCCL_P2P_DISABLE=1; IB/RoCE or socket interfaces: NCCL_DEBUG=INFO shows the "
               "transport each channel uses). A GPU hung in its first kernel reads the same")
    evidence = [observation_item(o) for o in one_per_rank(seen)[:4]]
    evidence += [EvidenceItem("log", e.rank, e.message.strip()[:300], e.where())
                 for e in statuses[:1] + stated[:1]]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=sorted(ranks),
                    confidence=CONFIDENCE, summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=first.pg or None, seq=first.seq, op=first.op,
                                             numbering=first.numbering),
                    measures={"rule": RULE})]
