"""A rank killed from outside, with no launcher log: its own log stops while the others report that
they lost a peer. Progress lines (steps, iterations, epochs, tqdm bars) in any common wording, the
tail scan that finds them, and the verdict on the recording of a real gloo job
(``killed_mid_training``: rank 1 SIGKILLed mid-training, only the ranks' own logs kept)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.log_progress import quiet_ranks
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import tail
from hangscope.sources.logs.progress import parse_progress, scan_progress

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded"
CLOSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
          "by peer [10.0.0.7]:43211")


def _load(paths):
    evidence, _ = load_paths([str(p) for p in paths], LoadOptions())
    return evidence


def _verdict(paths):
    verdict, _ = analyze(_load(paths))
    return verdict


@pytest.mark.parametrize("text, unit, step, total, epoch", [
    ("2024-05-01 12:00:00,123 INFO step 12/100 loss=1.0", "step", 12, 100, None),
    ("global_step=41 lr=0.1", "step", 41, None, None),
    ("[Rank 0] step=100, skipped=0, lr=[0.0001]", "step", 100, None, None),
    (" iteration      100/   10000 | consumed samples: 3200", "iter", 100, 10000, None),
    ("Epoch [3/10], Step [41/600], Loss: 0.2", "step", 41, 600, 3.0),
    ("Train Epoch: 1 [12800/60000 (21%)]\tLoss: 0.2", "sample", 12800, 60000, 1.0),
    ("Epoch 0:  45%|████▌     | 45/100 [00:10<00:12,  4.50it/s, loss=0.3]", "bar", 45, 100, 0.0),
    ("{'loss': 2.1, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.45}", "epoch", None,
     None, 0.45),
    ("| epoch 001 | loss 4.2 | num_updates 100", "update", 100, None, 1.0),
    ("10\timages/sec: 47.3 +/- 0.7 (jitter = 0.9)\t8.981", "step", 10, None, None),
    # metric loggers (DeiT/MAE/DETR and torchvision's references; mmcv; mmengine)
    ("Epoch: [3]  [ 120/1251]  eta: 0:10:02  lr: 0.000500  loss: 6.1 (6.3)  time: 0.41", "batch",
     120, 1251, 3.0),
    ("Test:  [ 40/196]  eta: 0:00:31  loss: 1.2 (1.1)  acc1: 77.3", "batch", 40, 196, None),
    ("Epoch [1][50/1000]\tlr: 1.000e-02, eta: 1 day, 2:03:04, time: 0.512", "batch", 50, 1000,
     1.0),
    ("Epoch(train)  [1][  50/1000]  base_lr: 1.0e-02 lr: 1.0e-02  eta: 2:01:00", "batch", 50,
     1000, None),
], ids=["iso-step", "global_step", "deepspeed", "megatron", "epoch-step", "mnist", "lightning",
        "hf-trainer", "fairseq", "tf_cnn_benchmarks", "metric-logger", "metric-logger-test",
        "mmcv", "mmengine"])
def test_progress_lines_in_common_wordings(text, unit, step, total, epoch) -> None:
    found = parse_progress(text)
    assert found is not None
    assert (found.unit, found.step, found.total, found.epoch) == (unit, step, total, epoch)


@pytest.mark.parametrize("text", ["warm-up done (4 steps)", "max_steps: 1000", "--max-step 1000",
                                  "step_time 12ms", 'File "train.py", line 45, in train_step',
                                  "Setting step to 0", "WorkNCCL(SeqNum=5, OpType=ALLREDUCE)",
                                  "iterator 5", "batch size 32",
                                  "[ 40/196] of the tokens (no eta)"])
def test_words_that_are_not_progress(text) -> None:
    assert parse_progress(text) is None


def test_a_redrawn_bar_counts_by_its_last_drawing_and_keeps_its_prefix(tmp_path) -> None:
    # GIVEN a launcher log where rank 2's tqdm bar is redrawn with carriage returns
    log = tmp_path / "launcher.log"
    bars = "\r".join(f"Epoch 1: {n}%|##   | {n}/100 [00:0{n % 10}<00:10, 9.1it/s]"
                     for n in (10, 11, 12))
    log.write_bytes(f"[default2]:{bars}\n[default2]:\n".encode())
    # WHEN scanning it
    events = scan_progress(str(log))
    # THEN the last drawing is the progress, under rank 2's local rank
    found = [e for e in events if e.kind == "progress"]
    assert len(found) == 1
    assert (found[0].fields["step"], found[0].fields["epoch"], found[0].fields["local_rank"]) == \
        (12, 1.0, 2)


def test_continuations_and_launcher_lines_are_no_rank_stream(tmp_path) -> None:
    # GIVEN a launcher's log: rank-prefixed lines, a report block continued on indented lines
    # (which names "[7]"), and the launcher's own unprefixed lines
    log = tmp_path / "launcher.log"
    log.write_text("[rank0]:step 5 loss 0.1\n"
                   "[rank0]:Timeout at collective: ALLREDUCE, #315\n"
                   "             [7] finished ALLREDUCE\n"
                   "[rank1]:step 5 loss 0.2\n"
                   "torch.distributed.elastic.multiprocessing.api: failed (exitcode: 1)\n")
    # WHEN scanning it
    events = scan_progress(str(log))
    # THEN only ranks 0 and 1 have streams, each ending at its own last line
    assert sorted((e.kind, e.rank, e.line_no) for e in events) == [
        ("log_end", 0, 2), ("log_end", 1, 4), ("progress", 0, 1), ("progress", 1, 4)]


def test_a_rank_file_is_one_stream_with_or_without_prefixes(tmp_path) -> None:
    log = tmp_path / "rank2.stderr.log"
    log.write_text("[rank2]: warning: something\nstep 7 loss 0.3\n")
    events = scan_progress(str(log))
    assert sorted((e.kind, e.rank, e.line_no) for e in events) == [
        ("log_end", 2, 2), ("progress", 2, 2)]


def test_the_tail_keeps_the_files_line_numbers(tmp_path, monkeypatch) -> None:
    # GIVEN a log longer than the tail that is read
    monkeypatch.setattr(tail, "TAIL_BYTES", 4096)
    log = tmp_path / "rank3.log"
    log.write_text("".join(f"step {n} loss 0.5 padding padding padding\n" for n in range(1, 2001)))
    # WHEN scanning it
    events = {e.kind: e for e in scan_progress(str(log))}
    # THEN the last step is found at its real line, with the rank its name gives
    assert events["progress"].fields["step"] == 2000
    assert (events["progress"].line_no, events["progress"].rank) == (2000, 3)
    assert events["log_end"].line_no == 2000


def _rank_logs(tmp_path, wording, quiet_after: int, steps: int, report: str) -> Path:
    """Three per-rank logs: rank 1's stops after ``quiet_after`` steps, ranks 0 and 2 go on to
    ``steps`` and end with ``report``."""
    folder = tmp_path / "logs"
    folder.mkdir()
    for rank in range(3):
        last = quiet_after if rank == 1 else steps
        lines = [wording(n) for n in range(1, last + 1)]
        if rank != 1:
            lines += ["Traceback (most recent call last):",
                      '  File "train.py", line 80, in train', "    loss.backward()", report]
        (folder / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
    return folder


WORDINGS = {
    "iso-step": lambda n: f"2024-05-01 12:00:{n:02d},000 INFO step {n}/500 loss 0.{n:02d}",
    "bare-iter": lambda n: f"iter {n} | loss 0.{n:02d} | 31.2 ms",
    "epoch-step": lambda n: f"Epoch [1/3], Step [{n}/500], Loss: 0.{n:02d}",
}


@pytest.mark.parametrize("wording", WORDINGS, ids=list(WORDINGS))
def test_the_rank_whose_log_stops_is_named(tmp_path, wording) -> None:
    # GIVEN rank 1's log stops at step 20; ranks 0 and 2 reach step 21 and lose their peer
    folder = _rank_logs(tmp_path, WORDINGS[wording], 20, 21, CLOSED)
    # WHEN analyzing only those logs
    verdict = _verdict([folder])
    # THEN rank 1 died, the others wait for it, and the summary says how sure and how to confirm
    root = verdict.root
    assert verdict.status is Status.CRASHED
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (Kind.RANK_DIED, [1], [0, 2])
    assert "its last progress line is behind theirs" in root.summary
    assert "killed from outside" in root.summary and "dmesg" in root.summary
    assert "launcher's log" in root.summary and "exit code" in root.summary
    assert 0.65 <= root.confidence <= 0.75
    cited = {(item.rank, item.where) for item in root.evidence}
    assert (1, f"{folder / 'rank1.log'}:20") in cited


def test_timeouts_alone_cannot_tell_dead_from_hung(tmp_path) -> None:
    # GIVEN the others report a timeout, not a closed connection
    timeout = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
               "Timed out waiting 1800000ms for recv operation to complete")
    folder = _rank_logs(tmp_path, WORDINGS["iso-step"], 20, 21, timeout)
    root = _verdict([folder]).root
    # THEN rank 1 is named as missing, and the summary gives both explanations
    assert (root.kind, root.culprit_ranks) == (Kind.MISSING_RANK, [1])
    assert "or hangs" in root.summary and root.confidence <= 0.65


def test_no_reading_when_nobody_reported_or_a_rank_failed_on_its_own() -> None:
    # a job stopped from outside: every log just ends; a rank's own OOM: that explains it
    for scenario in ("missing_rank", "rank_oom", "healthy_training"):
        assert quiet_ranks(_load([RECORDED / scenario / "logs"])) is None, scenario


def test_recorded_sigkill_without_launcher_log_names_the_killed_rank() -> None:
    # GIVEN only the ranks' own logs of the real job (rank 1 SIGKILLed at a random step)
    folder = RECORDED / "killed_mid_training" / "logs"
    assert not (folder / "torchrun.log").exists()
    verdict = _verdict([folder])
    # THEN rank 1 died, with a confidence that says it is inferred, and what would confirm it
    root = verdict.root
    assert verdict.status is Status.CRASHED
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (Kind.RANK_DIED, [1], [0, 2, 3])
    assert 0.6 <= root.confidence <= 0.75
    assert "rank 1's log stops" in root.summary and "no traceback" in root.summary
    assert "dmesg" in root.summary and "exit code" in root.summary
    assert any(item.rank == 1 and "rank1.stdout.log:" in item.where for item in root.evidence)
    roles = {tuple(c.ranks): c.role for c in verdict.rank_classes}
    assert roles[(1,)] == "culprit"
    assert all(role == "waiting" for ranks, role in roles.items() if 1 not in ranks)


def test_recorded_sigkill_fixture_without_its_launcher_log() -> None:
    # GIVEN rank_sigkill's rank logs without torchrun.log: no progress lines at all
    folder = RECORDED / "rank_sigkill" / "logs"
    verdict = _verdict(sorted(folder.glob("rank*.log")))
    # THEN rank 3, whose log ends with no error, is still named, with less confidence
    root = verdict.root
    assert (root.kind, root.culprit_ranks) == (Kind.RANK_DIED, [3])
    assert root.confidence < 0.7


def test_idle_dumps_and_advancing_logs_are_a_healthy_postmortem() -> None:
    # GIVEN what a healthy gloo job left behind: every rank's FR dump with nothing pending, and
    # logs whose steps advance with no error
    evidence = [RECORDED / "healthy_training" / "fr" / "pickle",
                RECORDED / "healthy_training" / "logs"]
    verdict = _verdict(evidence)
    # THEN healthy, with the one thing gloo's dumps cannot show said
    assert (verdict.status, verdict.findings) == (Status.HEALTHY, [])
    assert any("point-to-point" in gap for gap in verdict.evidence_gaps)
    # and the same dumps without the logs stay inconclusive: nothing says it was training
    assert _verdict(evidence[:1]).status is Status.INCONCLUSIVE
