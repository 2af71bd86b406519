"""NCCL RAS reports in the verdict: what DEAD, INCOMPLETE, MISMATCH and ERROR entries do to it.

Reports come from the real-format samples ``fixtures/logs/ras_report.txt`` / ``.json`` (written from
NCCL's ``src/ras/client_support.cc``, see ``fixtures/logs/README.md``) and from hand-written
variants below, each labelled with the ``client_support.cc`` format it follows (``rasOutAppend``
strings of ``rasClientRunComms`` and ``rasClientBreakDownErrors``; the NCCL 2.24 docs example of
``docs/troubleshooting/ras.rst`` for the older "The missing rank: N" form). Evidence is loaded the
way ``hangscope analyze`` loads it (``load_paths`` on a folder), or built with
``tests/report_factories.py`` with the report added through the log loader.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import report_factories
from _logs_helpers import FIXTURES

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Finding, Kind, Status, Verdict
from hangscope.bundle import BundleWriter
from hangscope.cli import main
from hangscope.model import (
    Frame,
    JobEvidence,
    ProcessState,
    StackSample,
    ThreadStack,
)
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs.loader import load_log_file

HEADER = ("Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n"
          "    #  in group  per comm  per node  per comm  in group\n")


def table(*rows: tuple[int, int, int, str, int, int, str, str]) -> str:
    """The ``Communicators`` table as ``rasClientRunComms`` prints it (same printf format)."""
    lines = "".join("%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s\n" % row for row in rows)
    return "Communicators... (0.01s)\n=============\n\n" + HEADER + lines + "\n"


def world_table(size: int, errors: str, nodes: int = 1) -> str:
    return table((0, 1, nodes, str(size // nodes), size, size, "RUNNING", errors))


# hand-written (rasClientRunComms, NCCL >= 2.27 rank lines): rank 2 of a 4-rank job does not answer
INCOMPLETE_RANK2 = world_table(4, "INCOMPLETE") + """Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 1002 on node node0 managing GPU 2

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 2 -- GPU 2 managed by process 1002 on node node0

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data

"""

# the NCCL 2.24 docs example (troubleshooting/ras.rst), verbatim: rank 21 of 32 is missing
INCOMPLETE_DOCS_2_24 = """Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 21

Warnings
========

TIMEOUT
  Encountered 2 communication timeouts while gathering communicator data
"""

# the same docs example 60 s later: the process is now considered dead
DEAD_DOCS_2_24 = INCOMPLETE_DOCS_2_24.replace(
    "INCOMPLETE\n  Missing communicator data from 1 job process\n",
    "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n")


def dead_rank(rank: int, size: int = 4) -> str:
    """hand-written: rank ``rank``'s process is dead (pid 1000 + rank, as report_factories)."""
    return world_table(size, "INCOMPLETE") + f"""Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process {1000 + rank} on node node0 managing GPU {rank}

#0-0 (9e6f2a1c3b5d7f80) INCOMPLETE
  Missing communicator data from 1 rank
  Rank {rank} -- GPU {rank} managed by process {1000 + rank} on node node0

"""


def behind(rank: int, size: int = 4) -> str:
    """hand-written (MISMATCH, one rank one AllReduce behind): a Warnings entry only."""
    return world_table(size, "MISMATCH") + f"""Errors
======

Warnings
========

#0-0 (9e6f2a1c3b5d7f80) MISMATCH
  Communicator ranks have different AllReduce operation counts
  {size - 1} ranks have launched up to operation 1045
  Rank {rank} has launched up to operation 1044 -- GPU {rank} managed by process {1000 + rank} on node node0

"""


def error_entry(lines: str, errors: str = "ERROR") -> str:
    """hand-written (rasClientBreakDownErrors): an ERROR entry of the 4-rank world communicator."""
    return world_table(4, errors) + f"""Errors
======

#0-0 (9e6f2a1c3b5d7f80) ERROR
{lines}
"""


def load(tmp_path: Path, world: int | None = None, **files: str | Path) -> JobEvidence:
    """``hangscope analyze DIR`` on a folder holding ``files`` (name -> text or a fixture)."""
    folder = tmp_path / "evidence"
    folder.mkdir()
    for name, content in files.items():
        target = folder / name.replace("_", ".")
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_text(content)
    evidence, _ = load_paths([str(folder)], LoadOptions(world_size=world))
    return evidence


def with_report(evidence: JobEvidence, tmp_path: Path, text: str) -> JobEvidence:
    """Add a RAS report as ``analyze`` files a job-level one: through the log loader."""
    path = tmp_path / "nccl_ras.txt"
    path.write_text(text)
    problems: list[str] = []
    load_log_file(str(path), None, evidence, problems)
    assert problems == []
    return evidence


def verdict_of(evidence: JobEvidence) -> Verdict:
    return analyze(evidence)[0]


def naming(verdict: Verdict, rank: int) -> list[Finding]:
    return [f for f in verdict.findings if rank in f.culprit_ranks]


def ras_items(finding: Finding) -> list[tuple[str, int | None, str]]:
    return [(item.source, item.rank, item.where) for item in finding.evidence
            if item.detail.startswith("NCCL RAS")]


class TestDead:
    def test_text_sample_alone_names_the_dead_rank(self, tmp_path: Path) -> None:
        # GIVEN only the real-format text report (8-rank job: DEAD process 8813 = rank 6)
        evidence = load(tmp_path, ras_report_txt=FIXTURES / "ras_report.txt")
        # WHEN analysed
        verdict = verdict_of(evidence)
        # THEN rank 6 died, citing the DEAD line (with its pid and node) and the comm entry
        assert verdict.status is Status.CRASHED
        root = verdict.findings[0]
        assert (root.kind, root.culprit_ranks, root.confidence) == (Kind.RANK_DIED, [6], 0.85)
        where = str(tmp_path / "evidence" / "ras.report.txt")
        assert ras_items(root) == [("log", 6, f"{where}:20"), ("log", 6, f"{where}:23")]
        assert "process 8813 on node 10.0.0.2" in root.evidence[0].detail
        assert "considered dead" in root.summary
        # the lagging rank 5 (MISMATCH) is the dead rank's echo, not a finding of its own
        assert [f.culprit_ranks for f in verdict.findings] == [[6]]

    def test_attach_bundle_through_the_cli(self, tmp_path: Path) -> None:
        # GIVEN a bundle as ``hangscope attach`` on node 10.0.0.2 leaves it: its four ranks
        # (3-6, pids 8810-8813, as the report has them) and the live RAS report as
        # bundle/job/nccl_ras.txt
        writer = BundleWriter(str(tmp_path / "bundle"), world_size=8)
        for rank in range(3, 7):
            entry = writer.rank_entry(rank)
            entry.host, entry.pid, entry.local_rank = "10.0.0.2", 8807 + rank, rank - 3
        writer.add_job_file("log", "nccl_ras.txt", (FIXTURES / "ras_report.txt").read_bytes(),
                            source_path="ncclras 127.0.0.1:28028")
        writer.close()
        out = tmp_path / "out"
        # WHEN analysed through the CLI
        code = main(["analyze", writer.root, "--out", str(out), "--json"])
        # THEN a crash (exit 3) whose root cause is rank 6, citing the report in the bundle
        verdict = json.loads((out / "verdict.json").read_text())
        assert code == 3 and verdict["status"] == "crashed"
        root = verdict["findings"][0]
        assert (root["kind"], root["culprit_ranks"]) == ("rank_died", [6])
        assert root["evidence"][0]["where"].endswith("job/nccl_ras.txt:20")

    def test_json_sample_alone_names_the_dead_rank(self, tmp_path: Path) -> None:
        evidence = load(tmp_path, ras_report_json=FIXTURES / "ras_report.json")
        verdict = verdict_of(evidence)
        assert verdict.status is Status.CRASHED
        (root,) = verdict.findings
        assert (root.kind, root.culprit_ranks) == (Kind.RANK_DIED, [3])
        where = str(tmp_path / "evidence" / "ras.report.json")
        assert ras_items(root) == [("log", 3, f"{where}:9")]
        assert "process 8804 on node 10.0.0.2" in root.evidence[0].detail

    def test_nccl_2_24_report_without_pids_still_names_the_rank(self, tmp_path: Path) -> None:
        # GIVEN the docs' DEAD example: the communicator names rank 21 without its process, and
        # the report lost no process but the dead one
        verdict = verdict_of(load(tmp_path, ras_txt=DEAD_DOCS_2_24))
        root = verdict.findings[0]
        assert (root.kind, root.culprit_ranks, verdict.status) == (Kind.RANK_DIED, [21],
                                                                   Status.CRASHED)
        assert ras_items(root)[0][2].endswith("ras.txt:12")

    def test_agreeing_with_the_flight_recorder_is_one_finding(self, tmp_path: Path) -> None:
        # GIVEN FR dumps where ranks 0,1,3 wait for rank 2, no stacks, and RAS: rank 2 is dead
        evidence = with_report(report_factories.evidence(world=4, culprit=2, samples=False),
                               tmp_path, dead_rank(2))
        # WHEN analysed
        verdict = verdict_of(evidence)
        # THEN one finding names rank 2: it died, the others wait for it (no missing_rank twin)
        assert [f.kind for f in naming(verdict, 2)] == [Kind.RANK_DIED]
        root = verdict.findings[0]
        assert root.culprit_ranks == [2] and root.waiting_ranks == [0, 1, 3]
        assert root.confidence == 0.9
        assert {where.rsplit(":", 1)[1] for _, _, where in ras_items(root)} == {"12", "15"}

    def test_a_rank_whose_stacks_show_it_alive_is_not_dead(self, tmp_path: Path) -> None:
        # GIVEN the FR hang on rank 2, stacks of every rank, and RAS calling rank 2 dead
        evidence = with_report(report_factories.evidence(world=4, culprit=2), tmp_path,
                               dead_rank(2))
        # WHEN analysed
        verdict = verdict_of(evidence)
        # THEN the stacks win: rank 2 is the missing rank, and RAS (cut off from it) agrees
        (finding,) = naming(verdict, 2)
        assert finding.kind is Kind.MISSING_RANK and finding.confidence == 0.95
        assert ras_items(finding) and "NCCL RAS agrees" in finding.summary


class TestIncomplete:
    def test_alone_names_the_rank_that_does_not_answer(self, tmp_path: Path) -> None:
        verdict = verdict_of(load(tmp_path, ras_txt=INCOMPLETE_RANK2, world=4))
        assert verdict.status is Status.HANG
        (root,) = verdict.findings
        assert (root.kind, root.culprit_ranks, root.confidence) == (Kind.MISSING_RANK, [2], 0.7)
        assert root.collective is None  # RAS names no process group or sequence number
        lines = sorted(int(where.rsplit(":", 1)[1]) for _, _, where in ras_items(root))
        assert lines == [12, 15]
        assert "process 1002 on node node0" in root.summary

    def test_nccl_2_24_docs_example(self, tmp_path: Path) -> None:
        # GIVEN the docs' example alone: world size from the 32-rank communicator
        verdict = verdict_of(load(tmp_path, ras_txt=INCOMPLETE_DOCS_2_24))
        (root,) = verdict.findings
        assert (root.kind, root.culprit_ranks) == (Kind.MISSING_RANK, [21])
        assert ras_items(root) == [("log", 21, str(tmp_path / "evidence" / "ras.txt") + ":12")]

    def test_agreeing_with_the_flight_recorder_raises_it(self, tmp_path: Path) -> None:
        # GIVEN a missing-rank hang on rank 2 whose dump is missing (FR alone: 0.5)
        evidence = report_factories.evidence(world=4, culprit=2, samples=False)
        evidence.ranks[2].fr = None
        before = naming(verdict_of(evidence), 2)
        assert [(f.kind, f.confidence) for f in before] == [(Kind.MISSING_RANK, 0.5)]
        # WHEN RAS says rank 2 does not answer
        after = naming(verdict_of(with_report(evidence, tmp_path, INCOMPLETE_RANK2)), 2)
        # THEN the same one finding, citing RAS, at RAS's 0.7
        assert [(f.kind, f.culprit_ranks, f.confidence) for f in after] == [
            (Kind.MISSING_RANK, [2], 0.7)]
        assert len(ras_items(after[0])) == 2
        assert after[0].summary.startswith(before[0].summary)

    def test_agreeing_with_a_full_picture_adds_a_little(self, tmp_path: Path) -> None:
        evidence = with_report(report_factories.evidence(world=4, culprit=2), tmp_path,
                               INCOMPLETE_RANK2)
        verdict = verdict_of(evidence)
        assert [(f.kind, f.confidence) for f in naming(verdict, 2)] == [
            (Kind.MISSING_RANK, 0.95)]
        assert len(verdict.findings) == 1

    def test_disagreeing_with_the_flight_recorder_comes_second(self, tmp_path: Path) -> None:
        # GIVEN FR (rank 2 never entered, 0.9) and RAS saying rank 1 does not answer
        text = INCOMPLETE_RANK2.replace("Rank 2 -- GPU 2", "Rank 1 -- GPU 1").replace(
            "process 1002", "process 1001").replace("Process 1002", "Process 1001")
        evidence = with_report(report_factories.evidence(world=4, culprit=2), tmp_path, text)
        # WHEN analysed
        verdict = verdict_of(evidence)
        # THEN the FR culprit is the root cause; RAS's rank 1 follows, below it
        assert [(f.culprit_ranks, f.confidence) for f in verdict.findings] == [
            ([2], 0.9), ([1], 0.7)]

    def test_disagreeing_weak_fr_still_wins(self, tmp_path: Path) -> None:
        # GIVEN FR's weak culprit (rank 2 left no dump: 0.5) and RAS: rank 3 is dead
        evidence = report_factories.evidence(world=4, culprit=2, samples=False)
        evidence.ranks[2].fr = None
        verdict = verdict_of(with_report(evidence, tmp_path, dead_rank(3)))
        # THEN RAS does not outrank the dumps: its rank_died comes second, below 0.5
        assert [(f.kind, f.culprit_ranks) for f in verdict.findings] == [
            (Kind.MISSING_RANK, [2]), (Kind.RANK_DIED, [3])]
        assert verdict.findings[1].confidence < verdict.findings[0].confidence
        assert verdict.status is Status.HANG


C10D = "/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def stacks_in_all_reduce(world: int = 4) -> JobEvidence:
    """Every rank's main thread sits in all_reduce in two samples a second apart, no CPU: the
    stacks cannot tell which collective of which group anyone is behind in."""
    evidence = JobEvidence(world_size=world)
    main = ThreadStack(1, (Frame("all_reduce", C10D, 3245), Frame("train_step", "/job/train.py", 42),
                           Frame("<module>", "/job/train.py", 310)),
                       name="MainThread", is_main=True, active=False)
    for rank in range(world):
        rank_ev = evidence.rank(rank)
        rank_ev.host, rank_ev.pid = "node0", 1000 + rank
        for taken_at in (100.0, 101.0):
            rank_ev.samples.append(StackSample(pid=rank_ev.pid, taken_at=taken_at,
                                               threads=(main,), path=f"stacks/rank{rank}.json"))
            rank_ev.proc.append(ProcessState(pid=rank_ev.pid, sampled_at=taken_at, status="S",
                                             cpu_time_s=5.0))
    return evidence


class TestMismatch:
    def test_names_the_rank_behind_when_stacks_show_a_hang(self, tmp_path: Path) -> None:
        # GIVEN stacks alone (inconclusive: everyone in all_reduce) ...
        assert verdict_of(stacks_in_all_reduce()).status is Status.INCONCLUSIVE
        # ... and RAS: rank 1 launched one AllReduce fewer than the others
        evidence = with_report(stacks_in_all_reduce(), tmp_path, behind(1))
        verdict = verdict_of(evidence)
        # THEN rank 1 is where the others wait: a hint, at 0.5
        assert verdict.status is Status.HANG
        (root,) = verdict.findings
        assert (root.kind, root.culprit_ranks, root.waiting_ranks, root.confidence) == (
            Kind.MISSING_RANK, [1], [0, 2, 3], 0.5)
        assert "1044 AllReduce operations, most ranks 1045" in root.summary
        assert ras_items(root) == [("log", 1, f"{tmp_path / 'nccl_ras.txt'}:14")]

    def test_alone_is_no_verdict(self, tmp_path: Path) -> None:
        # a lag of one operation is normal in a running job: one report proves no hang
        verdict = verdict_of(load(tmp_path, ras_txt=behind(1), world=4))
        assert verdict.findings == [] and verdict.status is Status.INCONCLUSIVE
        # and the verdict says what it had, not "no usable evidence"
        assert any(gap.startswith("NCCL RAS says rank 1 launched fewer operations")
                   and "proves no hang" in gap for gap in verdict.evidence_gaps), verdict.evidence_gaps
        assert not any("no usable evidence" in gap for gap in verdict.evidence_gaps)

    def test_without_ras_a_quiet_log_is_said_to_be_quiet(self, tmp_path: Path) -> None:
        # the same gap's other case: logs read, no failure in them, nothing else
        log = "[rank1]:step 10 loss 0.5\n[rank1]:step 20 loss 0.4\n"
        verdict = verdict_of(load(tmp_path, rank1_stdout_log=log, world=4))
        assert verdict.status is Status.INCONCLUSIVE
        assert "no log line that names a failure" in " ".join(verdict.evidence_gaps), \
            verdict.evidence_gaps

    def test_corroborates_the_flight_recorder(self, tmp_path: Path) -> None:
        evidence = with_report(report_factories.evidence(world=4, culprit=2), tmp_path,
                               behind(2))
        verdict = verdict_of(evidence)
        (finding,) = verdict.findings
        assert (finding.culprit_ranks, finding.confidence) == ([2], 0.95)
        assert "NCCL RAS agrees: rank 2 (process 1002 on node node0) has launched 1044" \
            in finding.summary


class TestError:
    def test_own_cuda_error_is_a_failure_of_that_rank(self, tmp_path: Path) -> None:
        text = error_entry("  Asynchronous error on 1 rank\n"
                           "  Rank 3 reported Unhandled CUDA error -- GPU 3 managed by process "
                           "1003 on node node0\n")
        verdict = verdict_of(load(tmp_path, ras_txt=text, world=4))
        (root,) = verdict.findings
        # a symptom-strength failure: rank_died's floor of 0.6, below any direct evidence
        assert (root.kind, root.culprit_ranks, root.confidence) == (Kind.RANK_DIED, [3], 0.6)
        assert "asynchronous error(s): Unhandled CUDA error" in root.evidence[0].detail
        # nothing says the process is gone: it failed, it did not (yet) die
        assert root.summary.startswith("rank 3 failed first: "), root.summary

    def test_remote_errors_are_echoes(self, tmp_path: Path) -> None:
        text = error_entry("  Asynchronous errors on 2 ranks\n"
                           "  2 ranks reported Remote process error\n"
                           "  Rank 1 -- GPU 1 managed by process 1001 on node node0\n"
                           "  Rank 3 -- GPU 3 managed by process 1003 on node node0\n")
        assert verdict_of(load(tmp_path, ras_txt=text, world=4)).findings == []

    def test_errors_next_to_a_dead_process_are_echoes(self, tmp_path: Path) -> None:
        text = dead_rank(2) + error_entry(
            "  Asynchronous error on 1 rank\n"
            "  Rank 3 reported System error -- GPU 3 managed by process 1003 on node node0\n"
        ).split("Errors\n======\n\n", 1)[1]
        verdict = verdict_of(load(tmp_path, ras_txt=text, world=4))
        assert [(f.kind, f.culprit_ranks) for f in verdict.findings] == [(Kind.RANK_DIED, [2])]


class TestRankMapping:
    def test_sub_communicator_rank_is_mapped_by_pid(self, tmp_path: Path) -> None:
        # GIVEN a 2-rank communicator (ranks 1 and 3 of the job) whose rank 1 does not answer:
        # its process 1003 is global rank 3
        text = table((0, 2, 1, "2", 2, 4, "RUNNING", "INCOMPLETE")) + (
            "Errors\n======\n\n#0-1 (77aa01c4d9e7b311) INCOMPLETE\n"
            "  Missing communicator data from 1 rank\n"
            "  Rank 1 -- GPU 3 managed by process 1003 on node node0\n\n")
        evidence = with_report(stacks_in_all_reduce(), tmp_path, text)
        verdict = verdict_of(evidence)
        assert [f.culprit_ranks for f in verdict.findings] == [[3]]
        assert "where it is rank 1" in verdict.findings[0].evidence[0].detail

    def test_sub_communicator_rank_without_a_known_process_names_nobody(
            self, tmp_path: Path) -> None:
        text = table((0, 2, 1, "2", 2, 4, "RUNNING", "INCOMPLETE")) + (
            "Errors\n======\n\n#0-1 (77aa01c4d9e7b311) INCOMPLETE\n"
            "  Missing communicator data from 1 rank\n"
            "  Rank 1 -- GPU 3 managed by process 4242 on node node0\n\n")
        verdict = verdict_of(load(tmp_path, ras_txt=text, world=4))
        assert verdict.findings == []  # not global rank 1: a communicator rank is not a job rank
        # but it is not dropped in silence: the gap says what RAS blamed and why nobody is named
        (gap,) = [g for g in verdict.evidence_gaps if g.startswith("NCCL RAS INCOMPLETE")]
        assert "names rank 1 of communicator 77aa01c4d9e7b311 (process 4242 on node node0)" \
            in gap and "no global rank is certain for it" in gap, gap

    def test_pid_on_another_node_is_not_a_local_rank(self, tmp_path: Path) -> None:
        # GIVEN a job-level entry only, naming pid 1002 on another node than the evidence's ranks
        text = ("Errors\n======\n\nDEAD\n"
                "  1 job process is considered dead (unreachable via the RAS network)\n"
                "  Process 1002 on node 10.0.0.9 managing GPU 2\n"
                "  Process 1001 on node 10.0.0.8 managing GPU 1\n\n")
        evidence = with_report(report_factories.evidence(world=4, culprit=2, samples=False),
                               tmp_path, text)
        verdict = verdict_of(evidence)
        assert [f.kind for f in verdict.findings] == [Kind.MISSING_RANK]
        (gap,) = [g for g in verdict.evidence_gaps if g.startswith("NCCL RAS DEAD")]
        assert "names process 1002 on node 10.0.0.9, process 1001 on node 10.0.0.8:" in gap, gap


GARBLED = [
    pytest.param("#0-0 (9e6f2a1c3b5d7f80) INCOMPLETE\n  Rank 99999999999999999999 -- GPU x\n",
                 id="rank-out-of-range"),
    pytest.param(world_table(4, "INCOMPLETE") + "#0-0 (9e6f) INCOMPLETE\n  Rank 7 -- GPU 7\n"
                 "  Rank -3 -- GPU 1\n", id="rank-beyond-world"),
    pytest.param("#0-0 (zzzz) DEAD\n  Rank 1\nDEAD\n  considered dead\n  Process x on node\n",
                 id="wrong-state-and-fields"),
    pytest.param("\x00\xff" * 500 + "\nMissing communicator data from 1 job process\n"
                 "  Process 1002 on node </script><img src=x onerror=alert(1)>\n", id="binary"),
    pytest.param(world_table(4, "MISMATCH") + "#0-0 (9e6f2a1c3b5d7f80) MISMATCH\n"
                 "  Communicator ranks have different AllReduce operation counts\n"
                 "  3 ranks have launched up to operation 1045\n"
                 "  Rank 2 has launched up to operation 99999999999999999999999 -- GPU 2\n",
                 id="rank-ahead-not-behind"),
    pytest.param(Status.HANG.value * 1000 + "Status  Errors\n" * 300, id="headers-only"),
]


class TestHostile:
    @pytest.mark.parametrize("text", GARBLED)
    def test_garbled_text_changes_nothing(self, tmp_path: Path, text: str) -> None:
        baseline = verdict_of(report_factories.evidence(world=4, culprit=2))
        evidence = with_report(report_factories.evidence(world=4, culprit=2), tmp_path, text)
        verdict = verdict_of(evidence)
        assert [f.to_json() for f in verdict.findings] == [f.to_json()
                                                           for f in baseline.findings]

    @pytest.mark.parametrize("doc", [
        {"nccl_version": "2.28.3", "communicators": [None, 3, "x", {"hash": 5}]},
        {"nccl_version": "2.28.3", "communicators": [{"hash": "0x1", "size": "4", "missing_ranks": [
            {"rank": "2", "pid": [], "status": {"considered_dead": "yes"}},
            {"rank": True, "status": {"unresponsive": 1}}], "ranks": [
            {"rank": 1, "status": {"init_state": "x", "async_error": None},
             "collective_counts": {"AllReduce": "9"}}]}]},
        {"nccl_version": "2.28.3", "communicators": [{"hash": "0x1", "size": 4, "missing_ranks": [
            {"rank": 1 << 40, "status": {"considered_dead": True}},
            {"rank": -1, "status": {"unresponsive": True}}]}]},
    ], ids=["wrong-types", "strings-for-numbers", "ranks-out-of-range"])
    def test_garbled_json_names_nobody(self, tmp_path: Path, doc: object) -> None:
        verdict = verdict_of(load(tmp_path, ras_json=json.dumps(doc), world=4))
        assert verdict.findings == []

    def test_json_missing_rank_that_answered_is_not_incomplete(self, tmp_path: Path) -> None:
        # a missing rank whose process answered left the communicator (text: status NOCOMM)
        doc = json.loads((FIXTURES / "ras_report.json").read_text())
        doc["communicators"][0]["missing_ranks"][0]["status"] = {
            "unresponsive": False, "considered_dead": False}
        verdict = verdict_of(load(tmp_path, ras_json=json.dumps(doc), world=4))
        assert all(f.culprit_ranks != [3] for f in verdict.findings)
