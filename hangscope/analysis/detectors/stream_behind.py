"""Rule ``stream-behind``: every rank's log prints its steps, and one rank's stops a step behind.

Reading (``analysis/log_progress.lagging_stream``): at least three ranks' progress lines in one
wording, all but one ending at the same position and that one strictly behind, with no failure,
echo or lost peer anywhere (then ``quiet_death`` and the failure rules speak). Basis: in
synchronous training each step ends in collectives every rank joins; ranks that printed a step
the lagging rank never printed were already past, or waiting in, a collective it had not reached.
Confidence 0.4: a paste cut in the middle of one round of prints reads the same, which the
finding says; it is a missing_rank only if the job was stuck when the log ended.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_progress import describe_progress, lagging_stream
from hangscope.analysis.verdict import Finding, Kind
from hangscope.ranges import ranks_phrase

RULE = "stream-behind"
CONFIDENCE = 0.4


def detect(ctx: Context) -> list[Finding]:
    lag = lagging_stream(ctx.evidence)
    if lag is None or lag.log.progress is None:
        return []
    others = sorted(lag.others)
    ahead = next(iter(lag.others.values())).progress
    summary = (f"rule `{RULE}`: rank {lag.rank}'s log stops at "
               f"{describe_progress(lag.log.progress)} while {ranks_phrase(others)} reached "
               f"{describe_progress(ahead)}, and no rank logged an error. If the job was stuck "
               f"when this log ended, the others wait in a collective rank {lag.rank} has not "
               "joined: its stack (py-spy dump) says where it is. A log cut in the middle of "
               "one round of prints reads the same")
    evidence = [log_evidence(lag.log.progress)] + \
        [log_evidence(lag.others[r].progress) for r in others[:2]  # type: ignore[arg-type]
         ]
    return [Finding(kind=Kind.MISSING_RANK, culprit_ranks=[lag.rank], waiting_ranks=others,
                    confidence=CONFIDENCE, summary=summary, evidence=evidence,
                    measures={"rule": RULE})]
