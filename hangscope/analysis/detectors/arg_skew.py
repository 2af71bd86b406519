"""size_mismatch from the format-agnostic tier: ranks that called one collective with other
arguments.

Rule ``odd-arguments-at-same-op``: ``collective_line`` events (``sources/logs/collective_lines.py``:
any line naming a rank, a collective and its count/shape/dtype) are grouped by the op and its
sequence number as the line writes it (NCCL's opCount, a SeqNum), or, where the line has none, by
the line's template (one print statement). Where at least three ranks logged one group and a strict
majority agree on (count, shape, dtype), the others called the same collective with other
arguments: NCCL then reads past the smaller buffer or waits forever. Confidence 0.6 with a sequence
number, 0.5 without (a print's template can repeat over steps with other sizes); 0.05 less when the
ranks were read from NCCL's GPU index (one host: local rank = rank) or from the file alone.
False positives: prints whose sizes differ per rank by design (a rank's shard of a buffer).

Rule ``arguments-differ-at-same-op``, where no majority stands out (two ranks, or every rank
alone): ranks logged one collective at one sequence number with other arguments. The collective
was called with other sizes, so it cannot complete; which rank is odd the lines cannot say.
Confidence 0.45; sequence-numbered lines only (a print statement's template repeats over steps).
"""

from __future__ import annotations

from collections import defaultdict

from hangscope.analysis.context import Context
from hangscope.analysis.log_causes import rank_events
from hangscope.analysis.majority import odd_ones_out
from hangscope.analysis.verdict import CollectiveRef, EvidenceItem, Finding, Kind
from hangscope.model import LogEvent
from hangscope.ranges import ranks_phrase


def _args(event: LogEvent) -> tuple[str, str, str]:
    f = event.fields
    return (str(f.get("count", "")), str(f.get("shape", "")), str(f.get("dtype", "")))


def _say(args: tuple[str, str, str]) -> str:
    parts = [f"count {args[0]}" if args[0] else "", f"shape {args[1]}" if args[1] else "",
             f"dtype {args[2]}" if args[2] else ""]
    return " ".join(p for p in parts if p) or "no arguments"


def detect(ctx: Context) -> list[Finding]:
    groups: dict[tuple[str, str], dict[int, LogEvent]] = defaultdict(dict)
    for rank, event in rank_events(ctx.evidence):
        if event.kind != "collective_line" or event.fields.get("p2p"):
            continue  # a send's and a receive's counts differ per peer by design
        f = event.fields
        key = (str(f.get("op", "")), f"seq {f['seq']}" if "seq" in f else str(f.get("template")))
        groups[key].setdefault(rank, event)
    best = None
    for key, lines in groups.items():
        if len(lines) < 3:
            continue
        odd = odd_ones_out({r: _args(e) for r, e in lines.items()})
        if odd is None:
            continue
        rank_key = (len(lines), -min(e.line_no for e in lines.values()))
        if best is None or rank_key > best[0]:
            best = (rank_key, key, lines, odd)
    if best is None:
        return _differ_no_majority(groups)
    _, (op, where), lines, odd = best
    sample = lines[odd.majority[0]]
    weak = any(lines[r].fields.get("rank_from") in ("device", "hint") for r in odd.odd)
    confidence = (0.6 if where.startswith("seq ") else 0.5) - (0.05 if weak else 0.0)
    said = "; ".join(f"rank {r}: {_say(_args(lines[r]))}" for r in odd.odd[:4])
    at = where if where.startswith("seq ") else "one print"
    summary = (f"rule odd-arguments-at-same-op: at {op} ({at})"
               f" {ranks_phrase(odd.majority)} logged {_say(odd.value)}, while {said}: the same "
               "collective called with other arguments")
    evidence = [EvidenceItem("log", r, lines[r].message[:300], lines[r].where())
                for r in odd.odd[:4] + odd.majority[:1]]
    seq = sample.fields.get("seq")
    return [Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=odd.odd, waiting_ranks=odd.majority,
                    confidence=round(confidence, 2), summary=summary, evidence=evidence,
                    collective=CollectiveRef(pg=None, seq=_seq(seq), op=op, numbering="log line"),
                    measures={"rule": "odd-arguments-at-same-op"})]


def _seq(value: object) -> int | None:
    return int(str(value)) if str(value).isdigit() else None


def _differ_no_majority(groups: dict[tuple[str, str], dict[int, LogEvent]]) -> list[Finding]:
    """Rule ``arguments-differ-at-same-op`` (module docstring)."""
    for (op, where), lines in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        if not where.startswith("seq ") or len(lines) < 2:
            continue
        args = {rank: _args(event) for rank, event in lines.items()}
        if len(set(args.values())) < 2 or not all(a[0] or a[1] for a in args.values()):
            continue
        ranks = sorted(lines)
        said = "; ".join(f"rank {r}: {_say(args[r])}" for r in ranks[:4])
        summary = (f"rule arguments-differ-at-same-op: at {op} ({where}) {said}: the same "
                   "collective called with other arguments on each side, so it cannot "
                   "complete; with no majority the lines do not say which rank is odd (a "
                   "data-dependent branch on one side is the usual cause)")
        evidence = [EvidenceItem("log", r, lines[r].message[:300], lines[r].where())
                    for r in ranks[:4]]
        return [Finding(kind=Kind.SIZE_MISMATCH, culprit_ranks=[], waiting_ranks=ranks,
                        confidence=0.45, summary=summary, evidence=evidence,
                        collective=CollectiveRef(pg=None, seq=_seq(where[4:]), op=op,
                                                 numbering="log line"),
                        measures={"rule": "arguments-differ-at-same-op"})]
    return []
