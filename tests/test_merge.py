"""Merging bundles from several nodes by global rank (hangscope/sources/merge.py).

Each test builds per-node bundles the way ``hangscope collect`` writes them (BundleWriter, with the
manifest fields collect/identity.py records), from the recorded missing_rank job's FR dumps and
logs: 4 ranks, 2 per node, rank 2 (node n2) never entered the all_reduce the others wait in.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hangscope.bundle import MANIFEST, BundleWriter
from hangscope.errors import BadInputError
from hangscope.model import JobEvidence, LogEvent
from hangscope.options import LoadOptions, OutputOptions
from hangscope.pipeline import analyze_paths
from hangscope.sources.load import load_paths

REC = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "missing_rank"
NODES = ["n1", "n2"]


def node_bundle(root: Path, node: str, ranks: list[int], *, host: str | None = None,
                world_size: int = 4, job_id: str = "4242", window: tuple[float, float] = (
                    1000.0, 1002.0), meta: dict[str, Any] | None = None,
                launcher_log: str | None = None) -> Path:
    """One node's bundle holding ``ranks``' FR dumps and stdout logs."""
    path = root / node
    writer = BundleWriter(str(path))
    writer.world_size = world_size
    writer.hosts.append(host or node)
    writer.meta.update({"host": host or node, "node": node, "job_id": job_id,
                        "expected_nodes": NODES, "local_world_size": 2,
                        "group_rank": NODES.index(node) if node in NODES else 0,
                        "clock": {"wall_start": window[0], "wall_end": window[1],
                                  "monotonic_start": 5.0, "monotonic_end": 7.0},
                        **(meta or {})})
    for rank in ranks:
        entry = writer.rank_entry(rank)
        entry.host, entry.pid, entry.local_rank = host or node, 1000 + rank, rank % 2
        writer.add_file(rank, "fr", f"nccl_trace_rank_{rank}",
                        (REC / "fr" / "pickle" / f"nccl_trace_rank_{rank}").read_bytes())
        writer.add_file(rank, "log", f"rank{rank}.stdout.log",
                        (REC / "logs" / f"rank{rank}.stdout.log").read_bytes())
    if launcher_log is not None:
        writer.add_job_file("log", "launcher.log", launcher_log.encode(), "/jobs/torchrun.log")
    writer.close()
    return path


def verdict_of(paths: list[Path], out: Path) -> dict[str, Any]:
    result = analyze_paths([str(p) for p in paths], LoadOptions(),
                           OutputOptions(out_dir=str(out), write_html=False), str(out))
    result.summary()
    return json.loads((out / "verdict.json").read_text())


def test_two_nodes_merge_by_global_rank_and_name_the_culprit(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3])
    verdict = verdict_of([n1, n2], tmp_path / "out")
    assert verdict["ranks_seen"] == [0, 1, 2, 3]
    assert verdict["ranks_missing"] == []
    root = verdict["findings"][0]
    assert (root["kind"], root["culprit_ranks"]) == ("missing_rank", [2])


def test_a_folder_of_bundles_is_merged_like_the_bundles_themselves(tmp_path: Path) -> None:
    node_bundle(tmp_path / "bundles", "n1", [0, 1])
    node_bundle(tmp_path / "bundles", "n2", [2, 3])
    evidence, report = load_paths([str(tmp_path / "bundles")], LoadOptions())
    assert sorted(evidence.ranks) == [0, 1, 2, 3]
    assert report.merge is not None and [b.name for b in report.merge.bundles] == NODES


def test_a_rank_held_by_two_bundles_is_one_line_naming_both(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    again = node_bundle(tmp_path / "c", "n1", [1])
    with pytest.raises(BadInputError) as caught:
        load_paths([str(n1), str(again)], LoadOptions())
    message = str(caught.value)
    assert "\n" not in message
    assert str(n1) in message and str(again) in message and "rank 1" in message


def test_the_same_bundle_given_twice_is_read_once(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    evidence, report = load_paths([str(n1), str(tmp_path / "b" / ".." / "b" / "n1")],
                                  LoadOptions())
    assert report.merge is not None and len(report.merge.bundles) == 1
    assert sorted(evidence.ranks) == [0, 1]


def test_a_node_that_sent_no_bundle_is_named_with_its_ranks(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    verdict = verdict_of([n1], tmp_path / "out")
    assert verdict["ranks_missing"] == [2, 3]
    gaps = [g for g in verdict["evidence_gaps"] if "in no bundle" in g]
    assert gaps == ["ranks 2,3 (local ranks 0,1 of node 1) are in no bundle: expected on n2, "
                    "which sent none"], verdict["evidence_gaps"]


def test_a_rank_lost_on_a_node_that_answered_points_at_that_bundle(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    n2 = node_bundle(tmp_path / "b", "n2", [2])
    evidence, report = load_paths([str(n1), str(n2)], LoadOptions())
    assert report.merge is not None and report.merge.ranks_missing == [3]
    gap = next(g for g in evidence.gaps if g.startswith("rank 3 "))
    assert f"expected on n2, whose bundle {n2} holds ranks 2" in gap


def test_ranks_not_in_torchrun_blocks_are_missing_without_a_node_guess(tmp_path: Path) -> None:
    odd = node_bundle(tmp_path / "b", "n1", [0, 2], meta={"local_world_size": 2})
    evidence, _ = load_paths([str(odd)], LoadOptions())
    gap = next(g for g in evidence.gaps if "in no bundle" in g)
    assert gap.startswith("ranks 1,3 of 4 are in no bundle (n1: ranks 0,2)")
    assert "which node should hold them is not known" in gap
    assert "nodes of the job without a bundle: n2" in gap


def test_collections_far_apart_in_time_are_said(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1], window=(1000.0, 1002.0))
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3], window=(1010.5, 1011.0))
    evidence, _ = load_paths([str(n1), str(n2)], LoadOptions())
    gap = next(g for g in evidence.gaps if "apart by their hosts' clocks" in g)
    assert "n1 and n2 are 8.5 s apart" in gap and "hosts' clocks disagree" in gap


def test_overlapping_collections_say_nothing_about_clocks(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1], window=(1000.0, 1002.0))
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3], window=(1001.0, 1003.0))
    evidence, _ = load_paths([str(n1), str(n2)], LoadOptions())
    assert not [g for g in evidence.gaps if "clocks" in g]


def test_bundles_of_different_jobs_are_merged_but_said(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1], job_id="11")
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3], job_id="12")
    evidence, _ = load_paths([str(n1), str(n2)], LoadOptions())
    assert any(g.startswith("the bundles name different jobs (n1: 11; n2: 12)")
               for g in evidence.gaps)


def test_gaps_carried_by_a_bundle_name_its_node(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    manifest = json.loads((n1 / MANIFEST).read_text())
    manifest["gaps"] = ["rank 1: permission denied"]
    (n1 / MANIFEST).write_text(json.dumps(manifest))
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3])
    evidence, _ = load_paths([str(n1), str(n2)], LoadOptions())
    assert "[n1] rank 1: permission denied" in evidence.gaps


def launcher_events(evidence: JobEvidence) -> list[LogEvent]:
    return [e for e in evidence.unattributed_logs + [
        e for ev in evidence.ranks.values() for e in ev.logs] if "launcher.log" in e.path]


def test_a_launcher_log_two_bundles_of_one_host_hold_is_read_once(tmp_path: Path) -> None:
    # two collections on one host (virtual nodes) both took the shared launcher output; the
    # second copy, taken later, is longer
    log = "[default1]:RuntimeError: boom\n"
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1], host="h", launcher_log=log)
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3], host="h",
                     launcher_log=log + "[default3]:ValueError: bang\n")
    merged, _ = load_paths([str(n1), str(n2)], LoadOptions())
    lines = sorted((e.path, e.line_no) for e in launcher_events(merged))
    assert lines and all(str(n2) in path for path, _ in lines), lines
    assert sorted({no for _, no in lines}) == [1, 2]  # (a line may give a record and a cue)


def test_launcher_logs_of_two_hosts_are_both_read(tmp_path: Path) -> None:
    log = "[default1]:RuntimeError: boom\n"
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1], launcher_log=log)
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3], launcher_log=log)
    merged, _ = load_paths([str(n1), str(n2)], LoadOptions())
    assert {str(n1) in e.path for e in launcher_events(merged)} == {True, False}


def test_a_manifest_that_is_not_json_is_one_line_naming_it(tmp_path: Path) -> None:
    n1 = node_bundle(tmp_path / "b", "n1", [0, 1])
    n2 = node_bundle(tmp_path / "b", "n2", [2, 3])
    (n2 / MANIFEST).write_text("{not json")
    with pytest.raises(BadInputError) as caught:
        load_paths([str(n1), str(n2)], LoadOptions())
    assert str(n2 / MANIFEST) in str(caught.value) and "\n" not in str(caught.value)


def test_a_copied_bundle_tree_merges_the_same(tmp_path: Path) -> None:
    node_bundle(tmp_path / "b", "n1", [0, 1])
    node_bundle(tmp_path / "b", "n2", [2, 3])
    shutil.copytree(tmp_path / "b", tmp_path / "copy")
    verdict = verdict_of([tmp_path / "copy"], tmp_path / "out")
    assert verdict["findings"][0]["culprit_ranks"] == [2]


def test_torchruns_placeholder_run_id_is_no_job_id() -> None:
    from hangscope.collect.identity import describe
    from hangscope.discover import JobProcesses, RankProcess

    ranks = [RankProcess(pid=999_999_999, rank=r, local_rank=r, world_size=2,
                         local_world_size=2, group_rank=0, run_id="none", master_addr=None,
                         master_port=None, env={"TORCHELASTIC_RUN_ID": "none",
                                                "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"},
                         cmdline=[], workers=[], create_time=0.0) for r in range(2)]
    fields, notes = describe(JobProcesses(launchers=[], ranks=ranks, searched="", host="h"),
                             own_env={})
    assert "job_id" not in fields and notes == []
    assert fields["local_world_size"] == 2 and fields["node"] == "h"


def fanned(root: Path, node: str, ranks: list[int], node_clock: float,
           sent_at: float, back_at: float) -> Path:
    """A bundle as a fan-out gathers it: collected 1000.5-1002 s by the node's clock, which
    runs ``node_clock`` s ahead of the gathering host's; its client lived sent_at-back_at."""
    from hangscope.cluster.clocks import record_clock_offsets
    from hangscope.cluster.runner import FanoutResult, NodeResult

    path = node_bundle(root, node, ranks, window=(1000.5 + node_clock, 1002.0 + node_clock))
    record_clock_offsets(FanoutResult("ssh", "host", [NodeResult(
        node, str(path), "ok", sent_at=sent_at, back_at=back_at)]))
    return path


def test_the_fan_out_measures_each_nodes_clock_offset_into_its_manifest(tmp_path: Path) -> None:
    n2 = fanned(tmp_path / "b", "n2", [2, 3], node_clock=5.0, sent_at=1000.0, back_at=1002.5)
    measured = json.loads((n2 / MANIFEST).read_text())["clock_offset_s"]
    # between (its end - our end) and (its start - our start)
    assert (measured["low"], measured["high"]) == (4.5, 5.5) and measured["reference"]


def test_a_node_whose_clock_is_off_is_said_and_windows_compare_corrected(tmp_path: Path
                                                                         ) -> None:
    n1 = fanned(tmp_path / "b", "n1", [0, 1], node_clock=0.0, sent_at=1000.0, back_at=1002.5)
    n2 = fanned(tmp_path / "b", "n2", [2, 3], node_clock=5.0, sent_at=1000.0, back_at=1002.5)
    evidence, _ = load_paths([str(n1), str(n2)], LoadOptions())
    clocks = [g for g in evidence.gaps if "clock" in g]
    assert clocks == ["n2's clock is 4.5-5.5 s ahead of the clock of the host that gathered "
                      "the bundles (measured around its collection): times from n2 compare "
                      "with other nodes' only after that correction"], evidence.gaps
    # the two collections ran at once: by raw clocks they look 3.5 s apart, corrected they are not
    assert not any("apart" in g for g in evidence.gaps)


def test_an_impossible_window_measures_nothing(tmp_path: Path) -> None:
    from hangscope.cluster.clocks import offset_bounds

    assert offset_bounds({"wall_start": 10.0, "wall_end": 20.0}, 100.0, 102.0) is None
    assert offset_bounds({"wall_start": True, "wall_end": 1.0}, 0.0, 2.0) is None
    assert offset_bounds(None, 0.0, 2.0) is None
    assert offset_bounds({"wall_start": 1.0, "wall_end": 1.5}, 0.5, 2.5) == (-1.0, 0.5)
