"""Named rules that read partial evidence in pasted logs (issue 18): each on wordings other than
the corpus case it was written for, and each with a healthy log that must not trip it."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.model import LogEvent
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log


def _verdict(tmp_path: Path, **files: str):  # type: ignore[no-untyped-def]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return analyze(load_paths([str(tmp_path)], LoadOptions())[0])[0]


def _events(text: str) -> list[LogEvent]:
    return scan_log("pasted.log", data=text.encode())


# --- nvlink-xid -------------------------------------------------------------------------------

# Xid 74 as NVIDIA's NVSentinel docs quote it (syslog-health-monitor, "Message Format").
XID74 = ("[449410.332316] NVRM: Xid (PCI:0003:00:00): 74, pid='<unknown>', name=<unknown>, "
         "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n")
# An NVLink5 Xid in the shape NVSentinel's reXidNVL5Pattern parses (subcode, severity, link).
XID149 = ("kernel: NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 07 "
          "(0x004ba5c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)\n")
WATCHDOG = ("[rank1]:[E1124 10:32:41.7 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
            "Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 "
            "milliseconds before timing out.\n")


def test_nvlink_xid_fields() -> None:
    got = [(e.fields.get("xid"), e.fields.get("nvlink"), e.fields.get("cause_xid"),
            e.fields.get("pci")) for e in _events(
        XID74 + XID149 + "NVRM: Xid (PCI:...): 146, TLW Nonfatal XC0 i0 Link 03 (...)\n"
        "NVRM: Xid (PCI:0000:ca:00): 45, pid=3210, name=python, Ch 00000008\n"
        "NVRM: Xid (PCI:0000:ca:00): 45, pid=3210, name=python, Ch 00000008 caused by previous "
        "Xid 74\n")]
    assert got == [(74, 1, None, "0003:00:00"), (149, 1, None, "0008:01:00"),
                   (146, 1, None, None),  # bus id elided as posted: still read
                   (45, None, None, "0000:ca:00"),  # a plain teardown: an echo
                   (45, 1, 74, "0000:ca:00")]


def test_nvlink_xid_is_a_fabric_fault_not_a_rank_death(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, **{"dmesg.log": XID74, "rank1.log": WATCHDOG})
    assert verdict.root is not None and verdict.root.kind.value == "network_fault"
    assert verdict.root.measures["rule"] == "nvlink-xid"
    assert "NVLink" in verdict.root.summary and "74" in verdict.root.summary


def test_nvl5_xid_alone_is_a_fabric_fault(tmp_path: Path) -> None:
    verdict = _verdict(tmp_path, **{"dmesg.log": XID149})
    assert verdict.root is not None and verdict.root.kind.value == "network_fault"
    assert verdict.root.culprit_ranks == []


def test_nonfatal_nvlink_xid_then_training_goes_on_is_no_fault(tmp_path: Path) -> None:
    steps = "".join(f"step {n}/1000 loss 2.{n}\n" for n in range(40, 44))
    verdict = _verdict(tmp_path, **{"train.log": "NVRM: Xid (PCI:0000:1b:00): 145, RLW_RXPIPE "
                                    "Nonfatal XC0 i0 Link 11 (0x0 0x0)\n" + steps})
    assert not any(f.kind.value == "network_fault" for f in verdict.findings), verdict.findings
