"""Rules from blind batch 53's first look, on wordings other than the cases they were written for,
each with input that must not trip it: a training script's own last word that it is through; set-up
warnings that every rank went on past to one step together; DDP's gradient-layout warning, which
names no disagreement between ranks."""

from __future__ import annotations

from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of, write_paste

from hangscope.sources.logs.finish import scan_finish
from hangscope.sources.logs.loader import scan_log_file

_SETUP_WARNING = ("[W1202 09:00:01.000000000 socket.cpp:755] [c10d] The client socket cannot be "
                  "initialized to connect to [node01]:29500 (errno: 97 - Address family not "
                  "supported by protocol)\n")


def _training(ranks: int, last_step: int) -> str:
    lines = [f"[rank {r}] step {s} | loss {2.5 - s / 1000:.3f}"
             for s in range(100, last_step + 1, 100) for r in range(ranks)]
    return "\n".join(lines) + "\n"


# --- a script's own "Training complete" -----------------------------------------------------

def test_a_scripts_own_word_that_training_finished_is_a_finished_run(tmp_path: Path) -> None:
    for n, last in enumerate(("Training complete! Final step: 400",
                              "Epoch 4/4 done. Training finished.",
                              "2026-12-02 09:10:11 | INFO | train.py:88 | Training finished, exiting",
                              "=========== Finished Training ===========")):
        # GIVEN a run's rank-prefixed steps, then the script's last word in its own wording
        text = _training(2, 400) + last + "\n"
        path = write_paste(tmp_path / str(n), text)
        # THEN the scan reads the end of the run, and the verdict is healthy by it
        assert [e.fields["how"] for e in scan_finish(str(path))] == ["script"], last
        verdict = verdict_of(tmp_path / f"v{n}", text)
        assert verdict.status.value == "healthy", last
        assert any("run-finished" in gap for gap in verdict.evidence_gaps), last


def test_one_ranks_or_a_hedged_finish_is_no_end_of_the_run(tmp_path: Path) -> None:
    for n, last in enumerate(("Training completed for rank 1. Waiting for the others",
                              "[MAIN] Training completed or interrupted",
                              "epoch 3 training complete, starting eval",
                              "Epoch 5: Training complete. Starting validation",
                              "[Epoch 5] Training finished",
                              "Training finished with errors: see above")):
        path = write_paste(tmp_path / str(n), _training(2, 300) + last + "\n")
        # THEN no run_finished of the script's kind
        assert not [e for e in scan_finish(str(path)) if e.fields.get("how") == "script"], last


def test_a_finish_word_followed_by_a_timeout_is_no_healthy_run(tmp_path: Path) -> None:
    # GIVEN rank 0's "Training complete" and, after it, rank 1's watchdog timeout at the exit
    # barrier (the finish does not outweigh a failure after it)
    text = (_training(2, 200) + "Training complete!\n"
            "[rank1]:[E1202 09:30:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=812, OpType=BARRIER, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600083 milliseconds before timing out.\n")
    verdict = verdict_of(tmp_path / "a", text)
    # THEN not healthy
    assert verdict.status.value != "healthy"


# --- warnings every rank went on past, to one step together ----------------------------------

def test_setup_warnings_before_every_rank_reached_one_step_are_outlived(tmp_path: Path) -> None:
    # GIVEN c10d's IPv6 fallback warnings at set-up, then each of four ranks' one line at step
    # 500 (no line of any rank moves: the paste keeps only the last)
    text = _SETUP_WARNING * 4 + "".join(f"[rank {r}] step 500 | loss 1.234\n" for r in range(4))
    verdict = verdict_of(tmp_path / "a", text)
    # THEN healthy: the ranks stand at one step together after the warnings
    assert verdict.status.value == "healthy"
    assert any("ranks-in-step" in gap for gap in verdict.evidence_gaps)


def test_setup_warnings_after_the_ranks_last_step_are_not_outlived(tmp_path: Path) -> None:
    # GIVEN the same step lines, then the set-up warnings again (a re-init after the last step)
    text = "".join(f"[rank {r}] step 500 | loss 1.234\n" for r in range(4)) + _SETUP_WARNING * 4
    verdict = verdict_of(tmp_path / "a", text)
    # THEN not healthy: nothing shows the job got past them
    assert verdict.status.value != "healthy"


# --- DDP's "Grad strides do not match bucket view strides" -----------------------------------

def test_ddps_grad_strides_warning_is_no_mismatch(tmp_path: Path) -> None:
    # GIVEN both ranks' reducer warning of a gradient layout, then their training lines
    text = "".join(
        f"[rank{r}]:[W1202 09:00:0{r}.000000000 reducer.cpp:327] Warning: Grad strides do not "
        "match bucket view strides. This may indicate grad was not created according to the "
        "gradient layout contract, or that the param's strides changed since DDP was "
        "constructed.  This is not an error, but may impair performance.\n"
        "grad.sizes() = [64, 1, 3, 3], strides() = [9, 1, 3, 1]\n"
        "bucket_view.sizes() = [64, 1, 3, 3], strides() = [9, 9, 3, 1] (function operator())\n"
        for r in range(2))
    path = write_paste(tmp_path / "a", text)
    # THEN no mismatch cue is read into it, and no collective mismatch
    assert not [e for e in scan_log_file(str(path), None)
                if e.kind == "cue" and e.fields.get("cue") == "mismatch-words"]
    verdict = verdict_of(tmp_path / "b", text)
    assert verdict.root is None or verdict.root.kind.value != "collective_mismatch"


def test_ranks_whose_shapes_do_not_match_still_read_as_a_mismatch(tmp_path: Path) -> None:
    # GIVEN a rank's own words that the shapes of its all_gather do not match the others'
    text = ("[rank 2] RuntimeError: tensor shapes do not match in all_gather across ranks: "
            "rank 2 has [8, 1000], rank 0 has [8, 1024]\n")
    verdict = verdict_of(tmp_path / "a", text)
    # THEN the mismatch words still count
    found = kind_and_culprits(verdict)
    assert found is not None and found[0] == "collective_mismatch"


# --- a monitored barrier whose absent rank closed its connection -------------------------------

def _barrier_peer(rank: int, exception: str) -> str:
    return (f"[rank{rank}]: RuntimeError: Rank {rank} successfully reached monitoredBarrier, but "
            "received errors while waiting for send/recv from rank 0. Please check rank 0 logs "
            f"for faulty rank.\n[rank{rank}]:  Original exception: \n[rank{rank}]: {exception}\n")


def test_a_barrier_whose_absent_rank_closed_the_connection_names_its_death(tmp_path: Path) -> None:
    # GIVEN ranks 1-3 at a monitored barrier, each told the connection to rank 0 closed (or
    # was reset) while they waited
    text = "".join(_barrier_peer(r, f"[../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
                                    f"Connection {how} by peer [10.0.0.{r}]:2269{r}")
                   for r, how in ((1, "closed"), (2, "reset"), (3, "closed")))
    verdict = verdict_of(tmp_path / "a", text)
    # THEN rank 0 died: its process went away, it is not merely elsewhere
    assert kind_and_culprits(verdict) == ("rank_died", [0])


def test_a_barrier_that_timed_out_on_its_absent_rank_still_names_a_missing_rank(
        tmp_path: Path) -> None:
    # GIVEN the same reports whose exception is a timeout waiting for rank 0
    text = "".join(_barrier_peer(r, "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81]"
                                    " Timed out waiting 1800000ms for recv operation to complete")
                   for r in (1, 2, 3))
    verdict = verdict_of(tmp_path / "a", text)
    # THEN rank 0 is missing (alive elsewhere, for all the reports say)
    assert kind_and_culprits(verdict) == ("missing_rank", [0])
