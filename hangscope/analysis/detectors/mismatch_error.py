"""size_mismatch from an error: a rank raised or aborted because the data it received had another
size or type than its own, so the rank that raised is a symptom and the culprit is elsewhere.

Signal: a rank's own failure (``log_causes``) that is gloo's enforce failure "Received data size
doesn't match expected size ... Is there a distributed collective mismatch", NCCL's
``ncclInvalidUsage`` about a size, count or type, or NCCL's socket transport's "message truncated :
receiving N bytes instead of M" (rule truncated-is-size: NCCL says it means a mismatch in
collective sizes or NCCL_PROTO/NCCL_ALGO between ranks when the network is healthy; a network fault
is the other reading, and the finding says so). Where the flight recorder shows the mismatch
(``size_mismatch`` / ``collective_mismatch`` from FR), this detector says nothing: FR's sizes name
the culprit. Otherwise the culprit is the odd one out of a size the ranks' own logs state
(``analysis/log_sizes.py``: ``vocabulary: 32 tokens`` on one rank, 31 on the others); without such
a line the finding names no culprit, says the raising rank is a victim and what would name it.
Cites: the error line(s) and the size lines of both sides. False positives: a log line whose
number differs per rank by design, on a job that also hit a size error.
"""

from __future__ import annotations

import re
from collections import Counter

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import RANKS_DISAGREE, Failure, describe, failures, unranked
from hangscope.analysis.log_sizes import size_diffs
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase
from hangscope.sources.logs.shape_checks import parse_shapes

_NCCL_SIZE = re.compile(r"(?i)\b(size|count|type|dtype|numel|bytes)\b")


def size_error(event: LogEvent) -> bool:
    """A rank's error that says the data it received differed in size or type from its own."""
    if event.kind == "gloo_enforce_fail":
        return bool(event.fields.get("size_mismatch"))
    if event.kind == "nccl_transport_error":
        return bool(event.fields.get("truncated"))  # "message truncated : receiving 8 bytes
        # instead of 4": the sender's size is not the receiver's
    if event.kind == "nccl_error":
        return "InvalidUsage" in str(event.fields.get("code", "")) + event.message \
            and _NCCL_SIZE.search(event.message) is not None
    return False


def detect(ctx: Context) -> list[Finding]:
    symptoms: dict[int, Failure] = {}
    for rank, items in failures(ctx.evidence).items():
        hit = next((f for f in items if f.what == "collective_error" and size_error(f.event)),
                   None)
        if hit is not None:
            symptoms[rank] = hit
    if not symptoms:
        return _unranked_truncation(ctx) or _disagreement(ctx)
    if any(ctx.divergence(group) is not None for group in ctx.picture.groups.values()):
        return []  # the flight recorder's sizes name the culprit (size/collective_mismatch)
    raised = sorted(symptoms)
    evidence = [EvidenceItem("log", r, symptoms[r].describe(), symptoms[r].event.where())
                for r in raised[:4]]
    error = (f"{ranks_phrase(raised)} aborted on "
             f"'{_short(symptoms[raised[0]].event.message)}'")
    diffs = size_diffs(ctx.evidence)
    if diffs:
        diff = diffs[0]
        odd_values = ", ".join((f"rank {r}: " if len(diff.odd) > 1 else "")
                               + f"'{diff.lines[r].message.strip()[:120]}'" for r in diff.odd[:4])
        agree = diff.lines[diff.majority[0]].message.strip()[:120]
        summary = (f"{ranks_phrase(diff.odd)} built a tensor of another size than the others: "
                   f"its log says {odd_values} where {ranks_phrase(diff.majority)} say '{agree}'; "
                   f"{error}, a symptom of the data {ranks_phrase(diff.odd)} sent, not the cause")
        for rank in [*diff.odd[:4], diff.majority[0]]:
            line = diff.lines[rank]
            evidence.append(EvidenceItem("log", rank, line.message.strip()[:240], line.where()))
        culprits, waiting, confidence = diff.odd, diff.majority, 0.8
    else:
        summary = (f"{error}: data received had another size or type than expected, so a "
                   "rank sent a tensor the others did not expect; a rank that raised is a "
                   "victim, and the evidence does not show whose tensor differs (flight-recorder "
                   "dumps of every rank, TORCH_FR_BUFFER_SIZE=2000 and a dump, or the hangscope "
                   "probe, record each rank's sizes)")
        culprits, waiting, confidence = [], sorted(ctx.evidence.ranks), 0.65
    return [Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=culprits, waiting_ranks=waiting,
                    confidence=confidence, summary=summary, evidence=evidence,
                    measures={"outcome": "failed"})]


def _unranked_truncation(ctx: Context) -> list[Finding]:
    """NCCL's "message truncated" on a line no rank is known for (a host:pid head with no ``Init
    COMPLETE`` line to map it): the size disagreement is known, its ranks are not."""
    events = [e for e in unranked(ctx.evidence, frozenset({"collective_error"}))
              if size_error(e)]
    if not events:
        return []
    first = events[0]
    fields = first.fields
    summary = (f"rule truncated-is-size: NCCL received {fields.get('got_bytes')} bytes where "
               f"{fields.get('want_bytes')} were posted, from peer {fields.get('peer', '?')} "
               f"({describe(first, 160)}): the two sides of one transfer disagree on its size, "
               "a collective or send/recv called with other sizes (or NCCL_PROTO/NCCL_ALGO set "
               "differently) on the two ranks; a faulty network is the other reading NCCL gives, "
               "likelier only if other transport errors appear. The line maps to no rank (its "
               "host:pid, with the NCCL_DEBUG=INFO Init COMPLETE lines, would)")
    evidence = [EvidenceItem("log", None, describe(e), e.where()) for e in events[:3]]
    return [Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=[], waiting_ranks=[], confidence=0.6,
                    summary=summary, evidence=evidence,
                    measures={"outcome": "failed", "rule": "truncated-is-size"})]


def _short(message: str) -> str:
    found = re.search(r"Received data size doesn't match expected size|ncclInvalidUsage[^.]*"
                      r"|message truncated : receiving \d+ bytes instead of \d+", message)
    return found.group(0) if found else message.strip()[:120]


def _disagreement(ctx: Context) -> list[Finding]:
    """Rule ``ranks-disagree``: a rank raised a framework's cross-rank check. DeepSpeed's
    ("disagreement between rank0 and rank6: rank0: [...]"): ZeRO-3 gathers the same parameters in
    the same order on every rank, and here two ranks' orders differ, so the ranks ran different
    modules (a data-dependent branch: a text-only batch skipping the vision tower, MoE routing,
    evaluation on some ranks). Accelerate's debug mode ("Cannot apply desired operation due to
    shape mismatches", with each process's input shape: ``sources/logs/shape_checks.py``): the
    ranks' tensors for one operation have other shapes. Either way the collectives no longer pair
    up: a collective mismatch. DDP's constructor ("params[0] in this process with sizes [...]
    appears not to match sizes of the same param in process 0"): the ranks built different
    models. A check raised on a line no rank is known for counts too. Which side is odd the check
    does not say; where Accelerate's list
    shows most processes with one shape and a few with others, those few are named (0.7)."""
    # each check raised: its rank (None: a line no rank is known for, the paste of one
    # process's traceback), its event, the words of its check
    raising: list[tuple[int | None, LogEvent, str]] = [
        (f.rank, f.event, f.describe()) for items in failures(ctx.evidence).values()
        for f in items if f.what == "collective_error"]
    raising += [(None, e, describe(e))
                for e in unranked(ctx.evidence, frozenset({"collective_error"}))]
    checks = [(rank, event, text, found.group(0)) for rank, event, text in raising
              if (found := RANKS_DISAGREE.search(event.message + str(event.fields)))]
    checks.sort(key=lambda check: (check[1].path, check[1].line_no))
    tables = [e for e in ctx.evidence.all_logs() if e.kind == "shape_check"]
    if not checks and not tables:
        return []
    odd = _odd_shapes(tables[0]) if tables else []
    cited = checks[0][1] if checks else tables[0]
    said = checks[0][3] if checks else ""
    if said.startswith("disagreement"):
        what = ("DeepSpeed's cross-rank check found the ranks' sequences of gathered parameters "
                f"differ ({said}): the ranks ran different modules, so their ZeRO-3 all-gathers "
                "do not pair up")
    elif said.startswith("appears"):
        what = ("DDP's constructor compared each parameter with process 0's and found one of "
                f"another shape ({said}): the ranks built different models (a config, vocabulary "
                "or checkpoint that differs per rank), so their broadcasts and all-reduces do "
                "not pair up")
    else:
        what = ("Accelerate's debug-mode check found the ranks called one operation with "
                "tensors of other shapes: the collective would not pair up")
    if odd:
        shapes = parse_shapes(str(tables[0].fields["shapes"]))
        common = next(shape for rank, shape in shapes.items() if rank not in odd)
        which = (f"; its list of input shapes shows {ranks_phrase(odd)} with "
                 f"{', '.join(sorted({shapes[r] for r in odd}))} where the other "
                 f"{len(shapes) - len(odd)} processes have {common} ({tables[0].where()}): "
                 f"{ranks_phrase(odd)} took another path")
    else:
        which = "; which rank is odd the check does not say"
    usual = "" if said.startswith("appears") else (
        ". A data-dependent branch is the usual cause (text-only and image batches on a "
        "multimodal model, MoE routing, evaluation or a last uneven batch on some ranks only)")
    summary = (f"rule `ranks-disagree`: {describe(cited, 160)} ({cited.where()}): "
               f"{what}{usual}{which}")
    evidence = [EvidenceItem("log", rank, text, event.where())
                for rank, event, text, _ in checks[:3]]
    evidence += [log_evidence(e) for e in tables[:1]]
    raised = sorted({rank for rank, *_ in checks if rank is not None} |
                    {e.rank for e in tables if e.rank is not None})
    return [Finding(kind=Kind.COLLECTIVE_MISMATCH, culprit_ranks=odd,
                    waiting_ranks=[r for r in raised if r not in odd],
                    confidence=0.7 if odd else 0.65, summary=summary, evidence=evidence,
                    measures={"outcome": "failed", "rule": "ranks-disagree"})]


def _odd_shapes(table: LogEvent) -> list[int]:
    """The processes whose shape differs from a shape more than half of them share, where they
    are at most a quarter of the list (at least one): the few that took another path. None
    where no shape has a majority (every process its own shape, or two processes)."""
    shapes = parse_shapes(str(table.fields.get("shapes", "")))
    if len(shapes) < 3:
        return []
    common, count = Counter(shapes.values()).most_common(1)[0]
    odd = sorted(rank for rank, shape in shapes.items() if shape != common)
    if count * 2 <= len(shapes) or not odd or len(odd) > max(1, len(shapes) // 4):
        return []
    return odd
