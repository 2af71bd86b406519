"""Rule ``stuck-in-different-groups``: the ranks' watchdogs are stuck, each in another process
group.

Signal: ``nccl_heartbeat_stuck`` events (ProcessGroupNCCL's heartbeat monitor: "watchdog got stuck
for N seconds", "Terminating the process ... due to ProcessGroupNCCL watchdog hang"), each headed
``[PG ID N ... Rank R]``, from two ranks or more, every rank in a group of its own. Basis: a
watchdog blocks inside its group's NCCL calls (an event query, a communicator's abort or
finalize) while that group's peers are not in them; ranks that each block in another group
entered the groups' operations, or tore the groups down, in different orders, and each waits for
a peer that is in another group (NVIDIA/Fuser's teardown hang, fixed by destroying the groups in
one order). 0.5; culprits none (no rank is the odd one). False positive: one rank's GIL or CUDA
hang that blocks its watchdog, echoed by the others' (their groups would then agree).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import Finding, Kind

CONFIDENCE = 0.5


def detect(ctx: Context) -> list[Finding]:
    # per reporting rank (its global rank, else its rank in the group the line names: ranks of
    # a sub-group the line does not map to global ranks), the group it is stuck in
    stuck: dict[tuple[str, int], str] = {}
    cited = []
    for event in ctx.evidence.all_logs():
        pg = event.fields.get("pg")
        who = event.rank if event.rank is not None else event.fields.get("group_rank")
        if event.kind != "nccl_heartbeat_stuck" or not isinstance(who, int) or not pg:
            continue
        key = ("rank" if event.rank is not None else "group rank", who)
        if key not in stuck:
            stuck[key] = str(pg)
            cited.append(event)
    groups = set(stuck.values())
    if len(stuck) < 2 or len(groups) != len(stuck):
        return []
    where = ", ".join(f"{what} {who} in PG {pg}" for (what, who), pg in sorted(stuck.items())[:6])
    ranks = sorted(who for (what, who) in stuck if what == "rank")
    summary = (f"rule stuck-in-different-groups: {len(stuck)} ranks' watchdogs "
               f"are stuck, each in another process group ({where}): a watchdog blocks in its "
               "group's NCCL calls while that group's peers are elsewhere, so the ranks entered "
               "the groups' collectives (or destroyed the groups) in different orders and each "
               "waits in a group the others are not in. Make every rank create, use and destroy "
               "the groups in one order")
    return [Finding(kind=Kind.PG_ORDER_DEADLOCK, culprit_ranks=[], waiting_ranks=ranks,
                    confidence=CONFIDENCE, summary=summary,
                    evidence=[log_evidence(e) for e in cited[:4]],
                    measures={"rule": "stuck-in-different-groups"})]
