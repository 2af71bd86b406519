"""network_fault: a collective that every rank entered and none finished.

Where some rank is missing, dead or in another collective, the detectors of those kinds explain the
wait. These rules read evidence that rules all of them out, so what did not complete is the
collective itself: the transport between the ranks (NVLink/PCIe P2P, IOMMU or ACS in the way of
GPU peer access, the NIC or the fabric) or a GPU hung inside the kernel. No culprit rank; the
finding says what to check. Rules, named in ``measures["rule"]``:

* ``ras-clean-timeout`` (0.45): NCCL's RAS report lists every communicator RUNNING with no error,
  and nothing under Errors or Warnings (no operation-count MISMATCH, no missing or dead rank),
  while a rank's watchdog says its collective timed out. Basis: RAS compares the operations each
  rank launched; equal counts mean every rank entered the collective that timed out.
* ``tests-no-result`` (0.45): nccl-tests / rccl-tests printed its device list and result header
  and no result row, or stopped after some rows without its closing bandwidth line. Basis: one
  test process drives every GPU listed through the same sizes in lock-step; no row means the
  first collective of all of them never completed. 0.35 when rows were printed (a later size hung,
  or the paste was cut).
* ``tests-wrong-results`` (0.45): nccl-tests counted results wrong (its ``#wrong`` columns) on
  some sizes. Basis: the test checks every element against the expected sum; wrong elements with
  every rank running mean data changed between the GPUs (a transport, PCIe/NIC setting or
  protocol problem between unlike nodes), not a rank that is missing.
* ``every-rank-timed-out`` (0.35): the watchdogs of ranks 0 to N (two at least, none missing
  between) all timed out in the same collective (one op and sequence number, the same sizes) of
  one group (the default group whether a line names it or not), no other rank or device is
  named anywhere, and either a stated world size (a launcher's line, NCCL's ``nranks``) is
  N + 1 or the collective is among the job's first ``EARLY_SEQ`` (where NCCL first connects its
  peers, so where a broken peer path, PCIe ACS or an IOMMU stalls a job). Basis: the ranks the
  logs know all entered it and none finished; the transport under them stalled. A paste of some
  ranks of a larger job reads the same (then the ranks not shown are the ones waited for), which
  the finding says; deep in training with no declared size it is read as such, not as this.
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.log_causes import failures
from hangscope.analysis.log_health import clean_rows
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent, is_default_pg

_TIMEOUTS = ("nccl_watchdog_timeout", "nccl_work_status")
_CHECK = ("check GPU peer access (NCCL_P2P_LEVEL / NCCL_P2P_DISABLE=1 as a test; IOMMU "
          "passthrough 'iommu=pt' and PCIe ACS off on bare metal), the NICs and links "
          "(NCCL_DEBUG=INFO WARN lines, ibstat), and each GPU's state (nvidia-smi / rocm-smi)")


def detect(ctx: Context) -> list[Finding]:
    every = sorted(ctx.evidence.all_logs(), key=lambda e: (e.path, e.line_no))
    if any(failures(ctx.evidence).values()):
        return []  # a rank's own failure (an OOM, a signal, an exception) explains the wait
    return _ras_clean(every) or _tests_wrong(every) or _tests(every) or \
        _every_rank(ctx, every)


EARLY_SEQ = 8


def _every_rank(ctx: Context, every: list[LogEvent]) -> list[Finding]:
    """Rule ``every-rank-timed-out`` (module docstring)."""
    timeouts = [e for e in every if e.kind == "nccl_watchdog_timeout" and e.rank is not None]
    ranks = sorted({e.rank for e in timeouts if e.rank is not None})
    if len(ranks) < 2 or ranks != list(range(len(ranks))):
        return []
    # (the default group named or not: torch's timeout line names none, the lines after it do)
    spots = {(str(e.fields.get("op", "")).upper(), e.fields.get("seq"),
              e.fields.get("numel_in"), _group(str(e.fields.get("pg", "")))) for e in timeouts}
    if len(spots) != 1:
        return []
    op, seq, _numel, pg = spots.pop()
    named = {e.rank for e in every if e.rank is not None} | set(ctx.evidence.ranks)
    named |= {int(e.fields[k]) for e in every for k in ("local_rank", "cuda_dev", "gpu")
              if isinstance(e.fields.get(k), int)}  # another process's device on the host
    declared = ctx.evidence.stated_world_size() or 0
    if not is_default_pg(pg) or not isinstance(seq, int) or not op or named - set(ranks) \
            or declared > len(ranks) or (declared != len(ranks) and seq > EARLY_SEQ):
        return []
    summary = (f"rule every-rank-timed-out: ranks {ranks[0]}-{ranks[-1]}, every rank these "
               f"logs name, timed out in the same collective ({op} #{seq}, the same sizes): "
               "all of them entered it and none finished, so the transport under it stalled "
               "rather than a rank staying away" + (" (it was the job's first collective, "
                                                    "where NCCL first connects its peers)"
                                                    if seq == 1 else "")
               + (f". The job's stated size is {declared}: no rank is missing. Else "
                  if declared == len(ranks) else
                  ". If the job has more ranks than these, the ones not shown are the ones "
                  "waited for: fetch their logs. Else ") + _CHECK)
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=ranks,
                    confidence=0.35, summary=summary,
                    evidence=[log_evidence(e, fold=True) for e in timeouts[:2]],
                    measures={"rule": "every-rank-timed-out"})]


def _group(pg: str) -> str:
    return "" if is_default_pg(pg) else pg


def _ras_clean(every: list[LogEvent]) -> list[Finding]:
    clean = [e for e in every if e.kind == "ras_clean"]
    timeouts = [e for e in every if e.kind in _TIMEOUTS]
    if not clean or not timeouts or any(e.kind == "nccl_ras" for e in every):
        return []
    first = timeouts[0]
    where = f"{first.fields.get('op', 'a collective')} #{first.fields.get('seq', '?')}"
    summary = (f"rule ras-clean-timeout: NCCL's RAS report shows all {clean[0].fields.get('size')} "
               "ranks of every communicator RUNNING with no error and lists no missing, dead or "
               "mismatched rank (they launched the same operations), yet "
               f"{'rank ' + str(first.rank) if first.rank is not None else 'a rank'} timed out "
               f"in {where}: every rank entered it, so the collective stalled in flight. "
               + _CHECK[0].upper() + _CHECK[1:])
    waiting = sorted({e.rank for e in timeouts if e.rank is not None})
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=waiting,
                    confidence=0.45, summary=summary,
                    evidence=[log_evidence(clean[0], fold=True), log_evidence(first, fold=True)],
                    measures={"rule": "ras-clean-timeout"})]


def _tests(every: list[LogEvent]) -> list[Finding]:
    runs = [e for e in every if e.kind == "nccl_tests" and e.fields.get("header")
            and not e.fields.get("finished") and not clean_rows(e)]
    if not runs:
        return []
    run = runs[-1]
    rows = int(run.fields.get("rows", 0))
    devices = int(run.fields.get("devices", 0))
    gpus = f"{devices} GPUs" if devices else "its GPUs"
    if rows:
        what = (f"stopped after {rows} result row(s) (last size {run.fields.get('last_size')} B) "
                "without its closing bandwidth line: a larger size hung, or the paste was cut")
    else:
        what = ("printed its result header and no result row: the first collective of all "
                f"{gpus} never completed")
    summary = (f"rule tests-no-result: nccl-tests {what}. One test drives every listed GPU in "
               "lock-step, so no rank is missing: the transport between them stalled. " +
               _CHECK[0].upper() + _CHECK[1:])
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.35 if rows else 0.45, summary=summary,
                    evidence=[log_evidence(run, fold=True)],
                    measures={"rule": "tests-no-result"})]


def _tests_wrong(every: list[LogEvent]) -> list[Finding]:
    runs = [e for e in every if e.kind == "nccl_tests" and e.fields.get("wrong")]
    if not runs:
        return []
    run = runs[-1]
    summary = (f"rule tests-wrong-results: nccl-tests counted wrong results on "
               f"{run.fields.get('wrong')} size(s): every GPU ran the collective and the data "
               "that arrived differs from what was sent, so the transport between them (or the "
               "protocol chosen between unlike nodes) corrupts it. " + _CHECK[0].upper() +
               _CHECK[1:] + "; also try NCCL_PROTO=Simple and compare NCCL versions across nodes")
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.45, summary=summary, evidence=[log_evidence(run, fold=True)],
                    measures={"rule": "tests-wrong-results"})]
