"""What differs between ranks: runtime records, NCCL/torch banners, the comparison and the verdict.

The log fixtures (fixtures/logs/config_skew/) are built in the exact formats NCCL's init.cc,
param.cc, net_ib.cc/net_socket.cc and torch's ProcessGroupNCCL.cpp print; the live job is in
tests/test_config_skew_live.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from verdict_schema import problems

from hangscope.analysis.config_skew import UNSET, compare, explain, gather, odd_ranks, signatures
from hangscope.analysis.engine import analyze, build_context
from hangscope.analysis.verdict import EvidenceItem, Finding, Kind
from hangscope.cli import main
from hangscope.collect.runtime import mapped_libraries, nccl_version, torch_version
from hangscope.model import ConfigFact, JobEvidence, LogEvent
from hangscope.report.text import format_verdict
from hangscope.sources.load import LoadOptions, load_paths
from hangscope.sources.logs import scan_log

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "logs"
SKEW = LOGS / "config_skew"


@pytest.mark.parametrize("line,pairs", [
    ("NCCL version 2.21.5+cuda12.4", [("nccl_version", "2.21.5"), ("nccl_cuda", "12.4")]),
    ("n1:12:12 [0] NCCL INFO NCCL version 2.18.1+cuda12.1",
     [("nccl_version", "2.18.1"), ("nccl_cuda", "12.1")]),
    ("n1:12:12 [0] NCCL INFO cudaDriverVersion 12040", [("cuda_driver_version", "12040")]),
    ("n1:12:12 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0",
     [("env:NCCL_SOCKET_IFNAME", "eth0")]),
    ("n1:12:12 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.",
     [("env:NCCL_IB_DISABLE", "1")]),
    ("n1:12:12 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", [("nccl_bootstrap_if", "eth0")]),
    ("n1:12:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:10.0.0.1<0>",
     [("nccl_net_devices", "IB mlx5_0:1/IB mlx5_1:1/RoCE; OOB ib0")]),
    ("n1:12:40 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.1.1<0>",
     [("nccl_net_devices", "Socket eth0 eth1")]),
    ("n1:12:40 [0] NCCL INFO Using network Socket", [("nccl_network", "Socket")]),
    # torch's NCCL error text quotes the version too, but it is no banner
    ("RuntimeError: NCCL error: remote process exited or there was a network error, "
     "NCCL version 2.21.5", []),
])
def test_nccl_banner_formats(line: str, pairs: list[tuple[str, str]]) -> None:
    events = [e for e in scan_log("x.log", data=(line + "\n").encode())
              if e.kind == "runtime_config"]
    assert [(e.fields["key"], e.fields["value"]) for e in events] == pairs


def test_torch_environments_line_gives_the_rank_and_its_settings() -> None:
    events = [e for e in scan_log(str(SKEW / "nccl_version_skew_rank1.log"))
              if e.kind == "runtime_config" and e.line_no == 2]
    found = {e.fields["key"]: e.fields["value"] for e in events}
    assert {e.rank for e in events} == {1}
    assert found["nccl_version"] == "2.18.1"
    assert found["torch:TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    assert found["torch:TORCH_DISTRIBUTED_DEBUG"] == "OFF"


def _analyze(paths: list[Path]):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    return analyze(evidence)[0]


def test_skewed_logs_name_config_skew_with_both_versions() -> None:
    # GIVEN two ranks that time out in their first all_reduce, one on NCCL 2.21.5 over IB and
    # one on NCCL 2.18.1 over sockets (issue 22's case: missing_rank, culprit unknown, 0.30)
    verdict = _analyze(sorted(SKEW.glob("nccl_version_skew_rank*.log")))
    root = verdict.findings[0]
    # THEN the skew is the root cause, with each version cited where it was printed
    assert (root.kind, root.culprit_ranks) == (Kind.CONFIG_SKEW, [])
    assert root.confidence > max(f.confidence for f in verdict.findings[1:])
    assert "NCCL version: 2.21.5 (rank 0), 2.18.1 (rank 1)" in root.summary
    cited = {(e.rank, e.detail.split(" (")[0], e.where.rsplit("/", 1)[-1]) for e in root.evidence}
    assert (0, "NCCL version 2.21.5", "nccl_version_skew_rank0.log:2") in cited
    assert (1, "NCCL version 2.18.1", "nccl_version_skew_rank1.log:2") in cited
    keys = [d.key for d in verdict.config_differences]
    assert keys[0] == "nccl_version"
    assert {"cuda_driver_version", "nccl_network", "nccl_net_devices"} <= set(keys)
    # NCCL_IB_DISABLE is in rank 1's log only: unknown for rank 0, not a difference
    assert "env:NCCL_IB_DISABLE" not in keys
    assert not problems(verdict.to_json())
    text = "\n".join(format_verdict(verdict))
    assert "What differs between ranks:" in text
    assert "2.21.5 (rank 0) | 2.18.1 (rank 1)" in text


def test_homogeneous_logs_give_no_skew() -> None:
    verdict = _analyze(sorted(SKEW.glob("homogeneous_rank*.log")))
    assert verdict.config_differences == []
    assert all(f.kind is not Kind.CONFIG_SKEW for f in verdict.findings)
    assert "config_differences" not in verdict.to_json()
    assert "What differs" not in "\n".join(format_verdict(verdict))


def test_real_log_corpus_has_no_skew() -> None:
    """No false skew: only the logs whose thread says the ranks were set up differently."""
    for log in sorted((LOGS / "real").glob("*.log")):
        expected = json.loads(log.with_suffix(".json").read_text())["expected"]
        if "config_skew" in [expected.get("kind"),
                             *(expected.get("also_acceptable") or {}).get("category", [])]:
            continue
        verdict = _analyze([log])
        assert verdict.config_differences == [], log.name
        assert all(f.kind is not Kind.CONFIG_SKEW for f in verdict.findings), log.name


def _evidence(per_rank: dict[int, dict[str, str]], env_read: bool = True) -> JobEvidence:
    evidence = JobEvidence(world_size=len(per_rank))
    for rank, facts in per_rank.items():
        ev = evidence.rank(rank)
        ev.config = [ConfigFact(k, v, "runtime", f"ranks/{rank}/runtime.json")
                     for k, v in facts.items()]
        ev.config_env_read = env_read
    return evidence


def test_unset_counts_only_where_the_environment_was_read_whole() -> None:
    per_rank = {0: {"env:NCCL_P2P_DISABLE": "1"}, 1: {"env:OMP_NUM_THREADS": "4"}}
    diffs = compare(gather(_evidence(per_rank)))
    assert [(d.key, [(g.value, g.ranks) for g in d.groups]) for d in diffs] == [
        ("env:NCCL_P2P_DISABLE", [("1", [0]), (UNSET, [1])]),
        ("env:OMP_NUM_THREADS", [(UNSET, [0]), ("4", [1])])]  # ties: lowest rank first
    assert compare(gather(_evidence(per_rank, env_read=False))) == []


def test_what_never_matters_is_not_compared() -> None:
    per_rank = {r: {"env:CUDA_VISIBLE_DEVICES": str(r), "env:NCCL_DEBUG_FILE": f"/tmp/n.{r}",
                    "env:TORCH_FR_DUMP_TEMP_FILE": f"/tmp/fr{r}_", "env:MASTER_PORT": "29500",
                    "torch_version": "2.13.0"} for r in range(4)}
    assert compare(gather(_evidence(per_rank))) == []


def test_a_value_of_its_own_on_every_rank_is_an_identity_not_a_skew() -> None:
    # GIVEN each rank states its own NCCL_HOSTID (a host's name for NCCL) and its own interface
    # address, and rank 3 alone another NCCL_IB_HCA
    per_rank = {r: {"env:NCCL_HOSTID": f"node{r}", "env:NCCL_SOCKET_IFNAME": f"eth{r}",
                    "env:NCCL_IB_HCA": "mlx5_0"} for r in range(4)}
    per_rank[3]["env:NCCL_IB_HCA"] = "mlx5_1"
    # THEN only the setting that some ranks share and one rank lacks is a difference
    diffs = compare(gather(_evidence(per_rank)))
    assert [d.key for d in diffs] == ["env:NCCL_IB_HCA"]
    # AND two ranks that differ are still a difference (nothing to tell a skew from an identity)
    two = {0: {"env:NCCL_SOCKET_IFNAME": "eth0"}, 1: {"env:NCCL_SOCKET_IFNAME": "ib0"}}
    assert [d.key for d in compare(gather(_evidence(two)))] == ["env:NCCL_SOCKET_IFNAME"]


def test_the_odd_group_is_the_minority_and_ties_have_none() -> None:
    per_rank = {r: {"lib:libnccl": "/usr/lib/libnccl.so.2.21.5"} for r in range(4)}
    per_rank[3] = {"lib:libnccl": "/venv/site-packages/nvidia/nccl/lib/libnccl.so.2"}
    facts = gather(_evidence(per_rank))
    diffs = compare(facts)
    assert odd_ranks(signatures(facts, diffs)) == [3]
    per_rank[2] = per_rank[3]
    facts = gather(_evidence(per_rank))
    assert odd_ranks(signatures(facts, compare(facts))) == []


def test_a_rank_whose_logs_lack_a_banner_is_not_odd_for_it() -> None:
    # GIVEN ranks 0-3 agree on their network, rank 3 alone on another NCCL; rank 2 printed no
    # version banner at all
    evidence = JobEvidence()
    for rank, version in ((0, "2.21.5"), (1, "2.21.5"), (3, "2.18.1")):
        evidence.rank(rank).config.append(ConfigFact("nccl_version", version, "log"))
    for rank in range(4):
        evidence.rank(rank).config.append(ConfigFact("nccl_network", "IB" if rank != 3 else
                                                     "Socket", "log"))
    facts = gather(evidence)
    # THEN rank 3 alone is odd: rank 2's silence about the version makes it no group of its own
    assert odd_ranks(signatures(facts, compare(facts))) == [3]


def test_a_culprit_alone_in_its_configuration_gets_a_context_line() -> None:
    # GIVEN rank 3 runs another NCCL build and a finding already names it
    per_rank = {r: {"nccl_version": "2.21.5"} for r in range(4)}
    per_rank[3] = {"nccl_version": "2.18.1"}
    ctx = build_context(_evidence(per_rank))
    died = Finding(kind=Kind.RANK_DIED, culprit_ranks=[3], waiting_ranks=[0, 1, 2],
                   confidence=0.9, summary="rank 3 died", evidence=[
                       EvidenceItem(source="log", rank=3, detail="exit 1")])
    # WHEN the configurations are compared
    findings, diffs = explain(ctx, [died])
    # THEN no new finding: the death stays the cause, with the difference cited beside it
    assert findings == [died] and len(diffs) == 1
    assert "rank 3 also runs a configuration no other rank has (NCCL version: 2.21.5 (ranks " \
           "0-2), 2.18.1 (rank 3))" in died.summary
    assert [(e.source, e.rank) for e in died.evidence[1:]] == [("config", 0), ("config", 3)]
    # a culprit that shares its configuration with a waiting rank gets nothing
    other = Finding(kind=Kind.RANK_DIED, culprit_ranks=[1], waiting_ranks=[0, 2, 3],
                    confidence=0.9, summary="rank 1 died", evidence=[])
    assert explain(ctx, [other])[0] == [other] and other.summary == "rank 1 died"


def test_runtime_of_this_process_from_proc() -> None:
    torch = pytest.importorskip("torch")
    libs = mapped_libraries(os.getpid())
    assert os.path.basename(libs["libc"]).startswith("libc")
    assert torch_version(libs.get("libtorch_cpu")) == torch.__version__
    assert nccl_version("/usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5") == "2.21.5"
    assert mapped_libraries(2 ** 22 + 1) == {}


def test_report_shows_the_table_only_when_ranks_differ(tmp_path) -> None:
    for name, differs in (("nccl_version_skew", True), ("homogeneous", False)):
        out = tmp_path / name
        main(["analyze", *map(str, sorted(SKEW.glob(f"{name}_rank*.log"))), "--out", str(out),
              "--quiet"])
        html = (out / "report.html").read_text()
        data = html.split('<script id="report-data" type="application/json">')[1].split(
            "</script>")[0]
        rows = json.loads(data)["config"]
        assert bool(rows) is differs
        if differs:
            assert rows[0]["setting"] == "NCCL version"
            assert [(v["value"], v["ranks"]) for v in rows[0]["values"]] == [
                ("2.21.5", "0"), ("2.18.1", "1")]


def test_log_events_keep_their_citation() -> None:
    event = LogEvent(kind="runtime_config", message="", path="r0.log", line_no=7, rank=0,
                     fields={"key": "nccl_network", "value": "IB"})
    evidence = JobEvidence()
    evidence.rank(0).logs.append(event)
    evidence.rank(1).logs.append(LogEvent(kind="runtime_config", message="", path="r1.log",
                                          line_no=9, rank=1,
                                          fields={"key": "nccl_network", "value": "Socket"}))
    (diff,) = compare(gather(evidence))
    assert [(g.value, g.where) for g in diff.groups] == [("IB", "r0.log:7"), ("Socket", "r1.log:9")]


def test_issue_case_two_nccl_banners_and_first_all_reduce_timeouts(tmp_path) -> None:
    # GIVEN each rank's log: its NCCL banner, then the watchdog timeout in the first all_reduce
    watchdog = ("[rank{r}]:[E412 09:24:03.412093118 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
                "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 milliseconds before "
                "timing out.\n")
    for rank, version in ((0, "2.21.5+cuda12.4"), (1, "2.18.1+cuda12.1")):
        (tmp_path / f"rank{rank}.log").write_text(
            f"[rank{rank}]:node{rank}:4{rank}:4{rank} [0] NCCL INFO NCCL version {version}\n"
            + watchdog.format(r=rank))
    verdict = _analyze(sorted(tmp_path.glob("rank*.log")))
    root = verdict.findings[0]
    # THEN the versions are the root cause, above what the timeouts alone read as (every rank
    # in the first all_reduce: the transport stalled, or an unnamed missing rank)
    assert root.kind is Kind.CONFIG_SKEW, root.summary
    assert [d.key for d in verdict.config_differences] == ["nccl_version", "nccl_cuda"]
    assert len(verdict.findings) == 2
    assert verdict.findings[1].kind in (Kind.NETWORK_FAULT, Kind.MISSING_RANK)
    assert root.confidence > verdict.findings[1].confidence


def test_hosts_naming_their_out_of_band_nic_differently_is_no_skew() -> None:
    # GIVEN two hosts on the same RoCE device, each with its own name for the NIC NCCL's
    # out-of-band connection uses (as NCCL's "NET/IB : Using [0]bnxt_re0:1/RoCE ; OOB ens7np0")
    same = {0: {"nccl_net_devices": "IB bnxt_re0:1/RoCE; OOB ens52np0"},
            1: {"nccl_net_devices": "IB bnxt_re0:1/RoCE; OOB ens7np0"}}
    assert compare(gather(_evidence(same))) == []
    # AND hosts on different devices still differ
    other = {0: {"nccl_net_devices": "IB mlx5_0:1/IB; OOB ib0"},
             1: {"nccl_net_devices": "IB mlx5_2:1/RoCE; OOB ib0"}}
    diffs = compare(gather(_evidence(other)))
    assert [d.key for d in diffs] == ["nccl_net_devices"]
    # AND the values are shown as the logs wrote them
    assert sorted(g.value for g in diffs[0].groups) == ["IB mlx5_0:1/IB; OOB ib0",
                                                       "IB mlx5_2:1/RoCE; OOB ib0"]
