"""missing_rank from the fingerprints torch's ProcessGroupWrapper logs before each collective.

Rule ``fingerprint-behind`` (0.6): with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every rank logs
``Running collective: CollectiveFingerPrint(SequenceNumber=N, ...)`` before each collective
(``sources/logs/pg_wrapper.py``). Where most ranks' latest fingerprint is at sequence number M and
a minority's latest is below it, the minority never issued collective M: the others wait in it for
them. Basis: the wrapper logs in issue order on every rank of the group, so the last line of each
rank is where it stopped issuing. The minority is named (a data-dependent branch, an extra or
missing collective on those ranks, or a rank stuck before M); with no minority (a tie) no finding.
False positive: a paste that cut a rank's lines early (the finding cites each rank's last line).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import CollectiveRef, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_do, ranks_phrase


def detect(ctx: Context) -> list[Finding]:
    latest: dict[int, LogEvent] = {}
    for event in ctx.evidence.all_logs():
        if event.kind != "fingerprint_running" or event.rank is None:
            continue
        seq = int(event.fields.get("seq", -1))
        if event.rank not in latest or seq >= int(latest[event.rank].fields.get("seq", -1)):
            latest[event.rank] = event
    if len(latest) < 2:
        return []
    top = max(int(e.fields["seq"]) for e in latest.values())
    behind = sorted(r for r, e in latest.items() if int(e.fields["seq"]) < top)
    ahead = sorted(r for r in latest if r not in behind)
    if not behind or len(behind) >= len(ahead):
        return []
    lead = latest[ahead[0]]
    where = f"{lead.fields.get('op')} #{top}"
    trail = ", ".join(f"rank {r} at #{latest[r].fields['seq']} ({latest[r].fields.get('op')})"
                      for r in behind[:6])
    summary = (f"rule fingerprint-behind: {ranks_do(ahead, 'log')} running {where} "
               f"(TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints), while the latest of "
               f"{ranks_phrase(behind)} trails ({trail}): they never issued {where}, which the "
               "others wait in (a collective skipped or added on those ranks, or a rank stuck "
               "before it)")
    evidence = [log_evidence(e)
                for e in [latest[r] for r in behind[:4]] + [lead]]
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=behind, waiting_ranks=ahead,
                    confidence=0.6, summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=top, op=str(lead.fields.get("op", ""))),
                    measures={"rule": "fingerprint-behind"})]
