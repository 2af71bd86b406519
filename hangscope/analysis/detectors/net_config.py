"""network_fault from NCCL's choice of interface: loopback on a job that spans hosts.

Rule ``loopback-interface``: NCCL's socket code says it uses a loopback interface (``lo``,
127.0.0.0/8, ``::1``: the ``nccl_interface`` events of ``sources/logs/runtime_lines.py``) while
the NCCL lines come from more than one host. Basis: an address on a loopback interface is
reachable only from its own host, so a peer on another host that is handed it cannot connect
(``Connection refused`` or a connect timeout); the communicator's setup hangs or fails on every
rank alike, and no rank is the culprit. The fix is the interface selection
(``NCCL_SOCKET_IFNAME=eth0`` or ``^lo,docker0``). 0.6; 0.7 when a connect failure is in the
logs too. Not a finding on one host (loopback then works), nor when training went on after the
lines (the job got past setup).
"""

from __future__ import annotations

from hangscope.analysis.context import Context, log_evidence
from hangscope.analysis.verdict import Finding, Kind
from hangscope.model import LogEvent

_REFUSED = ("Connection refused", "connect timeout", "Connection timed out", "No route to host")


def detect(ctx: Context) -> list[Finding]:
    every = [e for r in ctx.evidence.ranks.values() for e in r.logs] + \
        ctx.evidence.unattributed_logs
    loops = [e for e in every if e.kind == "nccl_interface"]
    hosts = {str(e.fields["host"]) for e in every if e.fields.get("host")
             and (e.kind.startswith("nccl") or e.kind == "runtime_config")}
    if not loops or len(hosts) < 2 or _went_on(loops, every):
        return []
    refused = [e for e in every if e.kind.startswith("nccl")
               and any(word in e.message for word in _REFUSED)]
    on = sorted({str(e.fields.get("host", "?")) for e in loops})
    addr = loops[0].fields.get("addr")
    summary = (f"rule loopback-interface: NCCL on {', '.join(on[:4])} uses the loopback "
               f"interface {loops[0].fields.get('iface')} ({addr}) while the job spans "
               f"{len(hosts)} hosts: a peer on another host cannot reach a loopback address, so "
               "connections between hosts are refused or time out and setup stalls on every "
               "rank alike" + (f" (the logs show it: {refused[0].message.strip()[:160]})"
                               if refused else "")
               + "; set NCCL_SOCKET_IFNAME to the routable interface (e.g. eth0, or ^lo,docker0)")
    evidence = [log_evidence(e)
                for e in (loops[:3] + refused[:2])]
    return [Finding(kind=Kind.NETWORK_FAULT, culprit_ranks=[], waiting_ranks=[],
                    confidence=0.7 if refused else 0.6, summary=summary, evidence=evidence,
                    measures={"rule": "loopback-interface"})]


def _went_on(loops: list[LogEvent], every: list[LogEvent]) -> bool:
    """Some progress line comes after the interface lines (same file, later line)."""
    last = {e.path: e.line_no for e in sorted(loops, key=lambda e: e.line_no)}
    return any(e.kind == "progress" and e.path in last and e.line_no > last[e.path]
               for e in every)
