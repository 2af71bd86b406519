"""What ``watch`` saw of the processes when the whole job ended under it: a rank that went a
check before the others died first; ranks that all went between the same two checks name no one,
and logs that only show training moving make no healthy verdict of a job that ended unannounced.
The logs here are built (plain timestamped training lines, four ranks), the states are what
``watch``'s checks keep (a last check alive, a first check gone)."""

from __future__ import annotations

import json
from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Status
from hangscope.cli import main
from hangscope.discover import JobProcesses, RankProcess
from hangscope.model import ProcessState
from hangscope.options import LoadOptions, OutputOptions
from hangscope.sources.load import load_paths
from hangscope.watch import LogTail, _analyze_leftovers

T0 = 1_790_000_000.0


def logs(folder: Path, last_line: str = "") -> Path:
    folder.mkdir()
    for rank in range(4):
        lines = [f"2026-11-29 10:00:{s:02d},000 INFO [train] rank {rank} step {s + 1}/5000 "
                 f"loss 2.{90 - s}" for s in range(12)]
        if last_line and rank == 0:
            lines.append(f"2026-11-29 10:00:13,000 INFO [train] {last_line}")
        (folder / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
    return folder


def analyzed(folder: Path, gone_at: dict[int, float], step: float = 2.0):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([str(folder)], LoadOptions())
    for rank, gone in gone_at.items():
        rank_ev = evidence.rank(rank)
        rank_ev.pid = 4000 + rank
        rank_ev.proc += [ProcessState(4000 + rank, gone - step, "unknown", 30.0),
                         ProcessState(4000 + rank, gone, "gone")]
    return analyze(evidence)[0]


def test_ranks_that_went_between_the_same_two_checks_are_no_healthy_job(tmp_path: Path) -> None:
    # GIVEN logs that show training moving and end with no error and no word of finishing, and
    # every rank's process gone at the same check
    folder = logs(tmp_path / "logs")
    # WHEN analyzed with what watch saw
    verdict = analyzed(folder, dict.fromkeys(range(4), T0 + 20))
    # THEN the verdict is inconclusive, not healthy, and says why
    assert verdict.status is Status.INCONCLUSIVE, verdict.evidence_gaps
    gap = next(g for g in verdict.evidence_gaps if "between the same two looks" in g)
    assert "ranks 0-3" in gap and "killed from outside" in gap and "training moving" in gap


def test_a_rank_gone_a_check_before_the_others_died_first(tmp_path: Path) -> None:
    # GIVEN the same logs, and rank 2 gone at a check where ranks 0, 1 and 3 still ran
    folder = logs(tmp_path / "logs")
    verdict = analyzed(folder, {0: T0 + 22, 1: T0 + 22, 2: T0 + 20, 3: T0 + 22})
    # THEN rank 2 died first, citing its process state
    root = verdict.findings[0]
    assert (root.kind.value, root.culprit_ranks) == ("rank_died", [2]), root.summary
    assert "process exited while ranks 0,1,3 still ran" in root.summary
    assert any(item.source == "proc" and item.rank == 2 and "gone" in item.detail
               for item in root.evidence), root.evidence


def test_a_job_whose_logs_say_it_finished_ended_healthy(tmp_path: Path) -> None:
    # GIVEN logs in which the trainer says it finished, and every rank gone at one check
    folder = logs(tmp_path / "logs", last_line="Training completed. Do not forget to share "
                                              "your model on huggingface.co/models =)")
    verdict = analyzed(folder, dict.fromkeys(range(4), T0 + 20))
    # THEN healthy, from the logs' own word
    assert verdict.status is Status.HEALTHY, verdict.evidence_gaps
    assert any("rule run-finished" in g for g in verdict.evidence_gaps)
    assert not verdict.findings


def test_without_process_states_the_moving_logs_stay_healthy(tmp_path: Path) -> None:
    # GIVEN the same moving logs and nothing else (a paste: nobody saw the job end)
    folder = logs(tmp_path / "logs")
    verdict = analyzed(folder, {})
    # THEN logs-advance still reads them as a job running when the logs were taken
    assert verdict.status is Status.HEALTHY
    assert any("rule logs-advance" in g for g in verdict.evidence_gaps)


def test_watch_leaves_a_bundle_that_gives_the_same_verdict_again(tmp_path: Path) -> None:
    # GIVEN the rank logs watch followed and what its checks saw: rank 2 gone first
    folder = logs(tmp_path / "logs")
    job = JobProcesses([], [RankProcess(pid=4000 + r, rank=r, local_rank=r, world_size=4,
                                        local_world_size=4, group_rank=0, run_id=None,
                                        master_addr=None, master_port=None, env={},
                                        cmdline=["python", "train.py"], workers=[],
                                        create_time=0.0) for r in range(4)], "test", "host")
    tails = [LogTail(str(folder / f"rank{r}.log"), r, f"rank{r}.stdout.log") for r in range(4)]
    states = {r: [ProcessState(4000 + r, T0 + (18 if r == 2 else 20), "unknown", 30.0),
                  ProcessState(4000 + r, T0 + (20 if r == 2 else 22), "gone")] for r in range(4)}
    # WHEN the leftovers are analyzed, and the bundle they left is analyzed again
    out = tmp_path / "out"
    out.mkdir()
    first = _analyze_leftovers(job, tails, states, OutputOptions(write_html=False), str(out))
    written = json.loads((out / "verdict.json").read_text())
    rendered = tmp_path / "again.json"
    assert main(["report", str(out / "bundle"), "--format", "json", "-o", str(rendered)]) \
        == first.exit_code
    again = json.loads(rendered.read_text())
    # THEN both name rank 2, from its process state kept in the bundle
    assert (first.verdict.findings[0].kind.value, first.verdict.findings[0].culprit_ranks) == \
        ("rank_died", [2])
    assert written["findings"][0]["culprit_ranks"] == [2] == again["findings"][0]["culprit_ranks"]
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    assert {f["kind"] for f in manifest["ranks"]["2"]["files"]} == {"log", "proc"}


def test_ended_together_is_no_rank_dying_first_over_every_order_of_exits() -> None:
    # GIVEN every way three ranks can be last seen alive and first seen gone over four checks
    # (some never seen gone at a time, one never seen alive)
    import itertools

    from hangscope.analysis.rank_state import RankStackState, died_first, ended_together

    times = (None, 1.0, 2.0, 3.0)
    for looks in itertools.product(itertools.product(times, times), repeat=3):
        stacks = {r: RankStackState(r, None, (), last_status="gone", gone_at=gone, seen_until=seen)
                  for r, (seen, gone) in enumerate(looks)}
        # THEN the job ended together exactly where no rank died first (died_first's own words)
        assert ended_together(stacks) == (not any(died_first(stacks, r) for r in stacks)), looks


def test_a_quiet_rank_seen_gone_after_the_others_is_no_suspect() -> None:
    # GIVEN what watch left of a DDP job whose rank 1 was SIGKILLed (a CI run under load): rank
    # 3's log stopped at the same step as rank 1's, with no error, but /proc saw rank 3 alive
    # after ranks 0-2 were gone (it waited on rank 1 silently, then was torn down)
    bundle = Path(__file__).resolve().parent.parent / "fixtures" / "bundles" / \
        "watch_quiet_rank_outlived"
    evidence, _ = load_paths([str(bundle)], LoadOptions())
    verdict, _ = analyze(evidence)
    # THEN the rank whose log stopped and that went first is named, not the one that outlived it
    first = verdict.findings[0]
    assert (first.kind.value, first.culprit_ranks) == ("rank_died", [1])
