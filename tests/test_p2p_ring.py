"""p2p peers from the frames: pipeline cycles of any length, from stacks with locals and NCCL FR.

gloo's flight recorder records no send/recv, so a pipeline whose stages all wait on irecv from
their predecessor is seen only in the stacks: the peer comes from py-spy's ``--locals`` (only the
peers are kept) and the source line that made the Work. Live tests run real gloo jobs and real
py-spy and stop the jobs by their process groups (``running_job``'s ``finally``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from live_jobs import attach_quietly, bundle_verdict_moved_away, copy_of_jobs

from hangscope.analysis.engine import analyze
from hangscope.analysis.p2p_frames import p2p_wait
from hangscope.errors import ExitCode
from hangscope.model import Frame, FrameLocal, ThreadStack
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.pyspy import parse_pyspy_text
from hangscope.sources.pyspy_locals import sanitize_dump

from frdumps import history, make_dump, make_entry, write_dumps

JOBS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "jobs"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
RING_EDGES = ("rank 0 waits to receive from rank 2", "rank 2 waits to receive from rank 1",
              "rank 1 waits to receive from rank 0")


def _verdict(paths: list[Path]):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    return analyze(evidence)[0]


# -------------------------------------------------------------------------------------------
# Which locals are kept


def test_only_peer_ints_and_work_names_survive_sanitizing() -> None:
    # GIVEN a py-spy --json --locals dump whose frames hold secrets beside the peers
    doc = [{"pid": 7, "thread_id": 7, "os_thread_id": 7, "thread_name": "MainThread",
            "active": False, "owns_gil": False, "frames": [
                {"name": "recv", "filename": C10D, "line": 2400, "locals": [
                    {"name": "src", "arg": True, "repr": "2"},
                    {"name": "tag", "arg": True, "repr": "0"},
                    {"name": "tensor", "arg": True, "repr": "<Tensor at 0x7f00>"}]},
                {"name": "step", "filename": "/job/train.py", "line": 9, "locals": [
                    {"name": "api_token", "arg": False, "repr": "\"hf_abcdef\""},
                    {"name": "prev_rank", "arg": False, "repr": "1"},
                    {"name": "pin", "arg": False, "repr": "4321"},
                    {"name": "req", "arg": False,
                     "repr": "<torch._C._distributed_c10d.Work at 0x7f01>"}]}]}]
    # WHEN sanitized as the collector does before storing it
    kept = sanitize_dump(json.loads(json.dumps(doc)))
    # THEN only the p2p arguments (peer, tag), the peer-named int and the Work's name are left
    frames = kept[0]["frames"]
    assert frames[0]["locals"] == [{"name": "src", "arg": True, "repr": "2"},
                                   {"name": "tag", "arg": True, "repr": "0"}]
    assert frames[1]["locals"] == [{"name": "prev_rank", "arg": False, "repr": "1"},
                                   {"name": "req", "arg": False, "repr": "<Work>"}]
    assert "hf_abcdef" not in json.dumps(kept) and "4321" not in json.dumps(kept)


# -------------------------------------------------------------------------------------------
# The peer of one thread


def _thread(frames: list[Frame], kept: list[FrameLocal]) -> ThreadStack:
    return ThreadStack(1, tuple(frames), "MainThread", True, False, False, tuple(kept))


def test_blocking_recv_takes_its_src_argument() -> None:
    thread = _thread([Frame("recv", C10D, 2400), Frame("step", "/job/train.py", 9)],
                     [FrameLocal(0, "src", 3)])
    wait = p2p_wait(thread, {})
    assert wait is not None and (wait.op, wait.peer, wait.call) == ("recv", 3, "recv")


def test_a_work_wait_takes_the_peer_from_the_call_that_made_it() -> None:
    # GIVEN a thread stopped at `req.wait()`, the Work made two lines above with src=left + 0
    lines = {"/job/pipe.py": {40: "    req = dist.irecv(buf, src=(left + 0) % 4)",
                              41: "    log('posted')", 42: "    req.wait()"}}
    thread = _thread([Frame("stage", "/job/pipe.py", 42)], [FrameLocal(0, "left", 3)])
    wait = p2p_wait(thread, lines)
    assert wait is not None and (wait.op, wait.peer) == ("recv", 3), wait
    assert "src=(left + 0) % 4" in wait.how


def test_a_send_wait_on_one_line_is_a_send() -> None:
    lines = {"/job/pipe.py": {7: "    dist.isend(out, 2).wait()"}}
    wait = p2p_wait(_thread([Frame("stage", "/job/pipe.py", 7)], []), lines)
    assert wait is not None and (wait.op, wait.peer) == ("send", 2)


def test_without_the_source_the_work_and_local_names_decide() -> None:
    thread = _thread([Frame("stage", "/gone/pipe.py", 42)],
                     [FrameLocal(0, "prev_stage", 1), FrameLocal(0, "next_stage", 3),
                      FrameLocal(0, "recv_req", None)])
    wait = p2p_wait(thread, {})
    assert wait is not None and (wait.op, wait.peer) == ("recv", 1)
    assert "guess" in wait.how


def test_a_queue_wait_with_an_old_work_in_scope_is_not_p2p() -> None:
    thread = _thread([Frame("Queue.get", "/usr/lib/python3.11/queue.py", 171),
                      Frame("feed", "/gone/pipe.py", 36)],
                     [FrameLocal(1, "send_req", None), FrameLocal(1, "dst", 0)])
    assert p2p_wait(thread, {}) is None


# -------------------------------------------------------------------------------------------
# Pasted stacks with locals: cycles of any length, and chains that are not cycles


def _paste(peers: dict[int, int | None], path: Path) -> Path:
    """py-spy text dumps (with --locals) of ranks at `req.wait()` on an irecv from ``peers[r]``,
    or (None) computing in the job's own code, each line prefixed ``[rankN]:``."""
    out = []
    for rank, peer in peers.items():
        head = [f"Process {100 + rank}: python pipe.py", "Python v3.11.7 (/usr/bin/python3)", ""]
        if peer is None:
            body = [f'Thread {100 + rank} (active+gil): "MainThread"',
                    "    forward (/gone/pipe.py:20)", "        Arguments:",
                    f"            rank: {rank}"]
        else:
            body = [f'Thread {100 + rank} (idle): "MainThread"',
                    "    exchange (/gone/pipe.py:31)", "        Arguments:",
                    f"            rank: {rank}", "            secret: 'x'", "        Locals:",
                    f"            src_rank: {peer}",
                    "            recv_req: <torch._C._distributed_c10d.Work at 0x7f01>"]
        out += [f"[rank{rank}]: {line}" for line in head + body]
    path.write_text("\n".join(out) + "\n")
    return path


def test_a_pasted_ring_of_four_is_one_p2p_cycle(tmp_path) -> None:
    # GIVEN four ranks each waiting on irecv from the next one around a ring
    paste = _paste({0: 1, 1: 2, 2: 3, 3: 0}, tmp_path / "stacks.txt")
    # WHEN analyzed
    root = _verdict([paste]).findings[0]
    # THEN one p2p_deadlock of all four, walked in order
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [0, 1, 2, 3]), root.summary
    assert "0 -> 1 -> 2 -> 3 -> 0" in root.summary
    assert root.measures == {"cycle": "0 -> 1 -> 2 -> 3 -> 0",
                             "p2p_edges": "0 recv from 1; 1 recv from 2; 2 recv from 3; "
                                          "3 recv from 0"}
    assert {e.rank for e in root.evidence} == {0, 1, 2, 3}
    assert all(e.where == "/gone/pipe.py:31" for e in root.evidence)


def test_a_chain_that_ends_in_a_busy_rank_is_not_a_cycle(tmp_path) -> None:
    # GIVEN ranks 0 and 1 at one line waiting on irecv (0 from 1, 1 from 2), rank 2 computing
    paste = _paste({0: 1, 1: 2, 2: None}, tmp_path / "stacks.txt")
    # WHEN analyzed
    verdict = _verdict([paste])
    # THEN no p2p cycle is claimed (ranks 0 and 1 at the same line are not waiting on each
    # other), and rank 2, which they wait for, is not among the waiting ones
    assert all(f.kind.value != "p2p_deadlock" for f in verdict.findings), \
        [f.summary for f in verdict.findings]


def test_a_pasted_ring_of_blocking_sends_says_receive_first(tmp_path) -> None:
    # GIVEN three ranks each blocked in dist.send to the next (dst in the send frame's locals)
    lines = []
    for rank in range(3):
        lines += [f"[rank{rank}]: Process {200 + rank}: python pipe.py",
                  f'[rank{rank}]: Thread {200 + rank} (idle): "MainThread"',
                  f"[rank{rank}]:     send (torch/distributed/distributed_c10d.py:2360)",
                  f"[rank{rank}]:         Arguments:",
                  f"[rank{rank}]:             tensor: <Tensor at 0x7f01>",
                  f"[rank{rank}]:             dst: {(rank + 1) % 3}",
                  f"[rank{rank}]:     forward_stage (/gone/pipe.py:12)"]
    paste = tmp_path / "stacks.txt"
    paste.write_text("\n".join(lines) + "\n")
    # WHEN analyzed
    root = _verdict([paste]).findings[0]
    # THEN a p2p cycle of three sends, with the fix that fits it
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [0, 1, 2]), root.summary
    assert root.measures["p2p_edges"] == "0 send to 1; 1 send to 2; 2 send to 0"
    assert "receive before it sends" in root.summary
    assert all(e.where == "/gone/pipe.py:12" for e in root.evidence)


def _blocked(rank: int, op: str, peer: int, tag: int | None) -> list[str]:
    """A rank's pasted py-spy dump blocked in dist.send/recv with its peer (and tag) read."""
    arg = "dst" if op == "send" else "src"
    tagged = [f"[rank{rank}]:             tag: {tag}"] if tag is not None else []
    return [f"[rank{rank}]: Process {300 + rank}: python pipe.py",
            f'[rank{rank}]: Thread {300 + rank} (idle): "MainThread"',
            f"[rank{rank}]:     {op} (torch/distributed/distributed_c10d.py:2799)",
            f"[rank{rank}]:         Arguments:",
            f"[rank{rank}]:             tensor: <Tensor at 0x7f01>",
            f"[rank{rank}]:             {arg}: {peer}", *tagged,
            f"[rank{rank}]:     run_stage (/gone/pipe.py:149)"]


def test_a_send_and_a_receive_that_face_each_other_with_other_tags_deadlock(tmp_path) -> None:
    # GIVEN a pipeline's stages 0-2 each receiving micro-batch 3's gradient (tag 1003) from the
    # next, and the last stage sending micro-batch 2's (tag 1002): it skipped one
    lines = _blocked(0, "recv", 1, 1003) + _blocked(1, "recv", 2, 1003) + \
        _blocked(2, "recv", 3, 1003) + _blocked(3, "send", 2, 1002)
    paste = tmp_path / "stacks.txt"
    paste.write_text("\n".join(lines) + "\n")
    # WHEN analyzed
    root = _verdict([paste]).findings[0]
    # THEN ranks 2 and 3 wait on each other, and rank 3, whose tag no other waiting rank holds,
    # is the one out of step
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [3]), root.summary
    assert "(tag 1003)" in root.summary and "(tag 1002)" in root.summary
    # AND with the same tag on both sides the pair is one transfer in flight: no cycle
    lines = _blocked(2, "recv", 3, 1003) + _blocked(3, "send", 2, 1003)
    paste.write_text("\n".join(lines) + "\n")
    assert all(f.kind.value != "p2p_deadlock" for f in _verdict([paste]).findings)
    # AND with no other rank to count, the pair is named and neither is blamed
    lines = _blocked(2, "recv", 3, 1003) + _blocked(3, "send", 2, 1002)
    paste.write_text("\n".join(lines) + "\n")
    root = _verdict([paste]).findings[0]
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [2, 3]), root.summary


def test_a_facing_pair_without_tags_deadlocks_only_when_both_stayed_still() -> None:
    # GIVEN rank 2 in recv from 3 and rank 3 in send to 2, no tags read (py-spy's text, older
    # bundles), as live samples leave them
    from hangscope.analysis.p2p_frames import P2pWait
    from hangscope.analysis.rank_state import RankStackState
    from hangscope.analysis.waitgraph import _unmatched

    def state(rank: int, op: str, peer: int, progress: str, samples: int) -> RankStackState:
        return RankStackState(rank, None, (), progress=progress, samples=samples,  # type: ignore[arg-type]
                              p2p=P2pWait(op, peer, op, None, "test"))
    # THEN still over three samples each, they cannot be one transfer
    assert _unmatched(state(2, "recv", 3, "stuck", 3), state(3, "send", 2, "stuck", 3))
    # AND one sample, or one side moving, is a transfer that may be in flight
    assert not _unmatched(state(2, "recv", 3, "stuck", 1), state(3, "send", 2, "stuck", 1))
    assert not _unmatched(state(2, "recv", 3, "stuck", 3), state(3, "send", 2, "moving", 3))


def test_other_tags_are_no_mismatch_where_the_backend_is_nccl() -> None:
    # GIVEN a facing pair with other tags in one sample each: gloo pairs by tag, NCCL has none
    from types import SimpleNamespace

    from hangscope.analysis.p2p_frames import P2pWait
    from hangscope.analysis.rank_state import RankStackState
    from hangscope.analysis.waitgraph import _unmatched, pairs_by_tag

    def state(rank: int, op: str, peer: int, tag: int,
              frames: tuple[Frame, ...] = ()) -> RankStackState:
        return RankStackState(rank, None, frames, samples=1,
                              p2p=P2pWait(op, peer, op, None, "test", tag))
    recv, send = state(2, "recv", 3, 1003), state(3, "send", 2, 1002)
    assert _unmatched(recv, send, by_tag=True)
    assert not _unmatched(recv, send, by_tag=False)
    # THEN an NCCL flight-recorder dump, or a native ProcessGroupNCCL frame, says NCCL
    gloo = SimpleNamespace(backends={"gloo"})
    assert pairs_by_tag(gloo, {2: recv, 3: send})  # type: ignore[arg-type]
    assert not pairs_by_tag(SimpleNamespace(backends={"nccl"}), {2: recv})  # type: ignore[arg-type]
    native = Frame("c10d::ProcessGroupNCCL::recv", "libtorch_cuda.so", 0, native=True)
    assert not pairs_by_tag(gloo, {2: state(2, "recv", 3, 1003, (native,))})  # type: ignore[arg-type]


def test_pasted_locals_keep_only_peers() -> None:
    text = textwrap.dedent("""\
        Thread 5 (idle): "MainThread"
            exchange (/gone/pipe.py:31)
                Arguments:
                    secret: 'hunter2'
                    dst: 4
                Locals:
                    batch: <Tensor at 0x1>
        """)
    sample = parse_pyspy_text(text, "paste.txt", 0.0)[0]
    assert sample.threads[0].locals == (FrameLocal(0, "dst", 4),)


# -------------------------------------------------------------------------------------------
# NCCL flight-recorder p2p entries: a ring of three


def test_nccl_recv_ring_of_three_is_a_p2p_cycle(tmp_path) -> None:
    # GIVEN NCCL dumps where rank r is blocked in recv from rank (r + 2) % 3
    dumps = {r: make_dump(history(3) + [make_entry(3, "recv", peer=f"{r}<-{(r + 2) % 3}",
                                                   p2p_seq=1, state="started")], 3)
             for r in range(3)}
    paths = write_dumps(str(tmp_path / "fr"), dumps)
    # WHEN analyzed
    root = _verdict([Path(p) for p in paths]).findings[0]
    # THEN a p2p_deadlock of the three ranks, citing each rank's pending recv
    assert (root.kind.value, root.culprit_ranks) == ("p2p_deadlock", [0, 1, 2]), root.summary
    for rank, peer in ((0, 2), (1, 0), (2, 1)):
        assert f"rank {rank} blocked in recv from rank {peer}" in root.summary


# -------------------------------------------------------------------------------------------
# Live: real gloo jobs, real py-spy

from fixtures.jobrunner import SCENARIOS, running_job  # noqa: E402


def _settled(pids: list[int], deadline_s: float = 30.0) -> None:
    """Wait until every rank stops gaining CPU time (all inside their waits)."""
    import psutil

    procs = [psutil.Process(p) for p in pids]
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        before = [sum(p.cpu_times()[:2]) for p in procs]
        time.sleep(0.5)
        if all(sum(p.cpu_times()[:2]) - b < 0.03 for p, b in zip(procs, before, strict=True)):
            return
    raise AssertionError("the ranks never settled")


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_live_pipeline_ring_is_a_p2p_cycle_of_three(tmp_path) -> None:
    # GIVEN the three-stage pipeline whose eval pass lets no stage send first, run from a copy
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    truth = SCENARIOS["pipeline_ring"]
    out = tmp_path / "out"
    with running_job("pipeline_ring", ready_dir=tmp_path / "ready", jobs_dir=jobs) as job:
        _settled(list(job.rank_pids.values()))
        # WHEN attached live with default options
        code, verdict = attach_quietly(job.pgid, out)
    root = verdict["findings"][0]
    # THEN p2p_deadlock of ranks 0-2 with the ring's edges, each rank's frame cited
    assert code == ExitCode.HANG_FOUND
    assert (root["kind"], root["culprit_ranks"]) == (truth.kind, truth.culprit_ranks), \
        root["summary"]
    for edge in RING_EDGES:
        assert edge in root["summary"], root["summary"]
    assert root["measures"]["cycle"] == "0 -> 2 -> 1 -> 0"
    cited = {item["rank"]: item["where"] for item in root["evidence"]}
    assert set(cited) == {0, 1, 2}
    assert all(where.endswith("pipeline_ring.py:30") for where in cited.values()), cited
    assert not any(f["kind"] == "python_deadlock" for f in verdict["findings"])
    # AND the bundle keeps no local but the peers (the tensors' reprs are gone)
    stored = "".join(p.read_text() for p in (out / "bundle").rglob("stacks-*.json"))
    assert '"prev_stage"' in stored and "Tensor at" not in stored
    # AND the bundle alone, with the job's scripts moved away, says the same
    again = bundle_verdict_moved_away(out, jobs).findings[0]
    assert (again.kind.value, again.culprit_ranks) == (root["kind"], root["culprit_ranks"])
    for edge in RING_EDGES:
        assert edge in again.summary, again.summary


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_live_one_sided_p2p_wait_is_not_a_cycle(tmp_path) -> None:
    # GIVEN two stages: rank 0 waits on irecv from rank 1, which is stuck in Queue.get
    jobs = copy_of_jobs(tmp_path, JOBS_DIR)
    out = tmp_path / "out"
    with running_job("p2p_one_sided", ready_dir=tmp_path / "ready", jobs_dir=jobs) as job:
        _settled(list(job.rank_pids.values()))
        # WHEN attached live
        code, verdict = attach_quietly(job.pgid, out)
    # THEN rank 1 is the culprit, rank 0 waits, and no p2p cycle is claimed
    root = verdict["findings"][0]
    assert code == ExitCode.HANG_FOUND
    assert (root["culprit_ranks"], root["waiting_ranks"]) == ([1], [0]), root["summary"]
    assert not any(f["kind"] == "p2p_deadlock" for f in verdict["findings"])
    # AND the same from the bundle with the scripts moved away
    again = bundle_verdict_moved_away(out, jobs)
    assert again.findings[0].culprit_ranks == [1]
    assert not any(f.kind.value == "p2p_deadlock" for f in again.findings)


@pytest.mark.live
@pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")
def test_collected_dump_drops_every_local_but_the_peers(tmp_path) -> None:
    # GIVEN a process blocked in the job's own code with a secret and a peer in its locals
    script = tmp_path / "holder.py"
    script.write_text("import time\n\ndef stage():\n    api_key = 'sk-live-123'\n"
                      "    next_rank = 3\n    time.sleep(120)\n\nstage()\n")
    child = subprocess.Popen([sys.executable, str(script)], start_new_session=True)
    try:
        time.sleep(1.0)
        from hangscope.collect.pyspy import dump_once

        # WHEN dumped the way attach does
        result = dump_once(child.pid, timeout=10)
    finally:
        child.kill()
        child.wait(timeout=10)
    # THEN the raw dump kept for the bundle has the peer and not the secret
    assert result.ok, result.detail
    assert b"sk-live-123" not in result.raw and b"next_rank" in result.raw
    main = next(t for t in result.sample.threads if t.is_main)
    assert FrameLocal(0, "next_rank", 3) in main.locals
