"""Python tracebacks: [rankN]: prefixes, chained exceptions, interleaved ranks."""

from __future__ import annotations

from _logs_helpers import of_kind, scan

from hangscope.sources.logs import scan_log


def test_rank_prefixed_oom_traceback_recorded() -> None:
    events = scan("recorded_cuda_oom_rank_prefix.log")
    tb = of_kind(events, "traceback")[0]
    assert (tb.line_no, tb.rank, tb.fields["rank_source"]) == (1, 1, "prefix")
    assert tb.fields["exc_type"] == "torch.OutOfMemoryError"
    assert tb.fields["exc_message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert tb.fields["last_frame"].endswith("fixtures/logs/record_logs.py:98")
    assert tb.fields["last_function"] == "forward_step" and tb.fields["frames"] == 4
    assert tb.fields["local_rank"] == 1


def test_chained_traceback_is_one_event() -> None:
    events = scan("recorded_dataloader_worker_killed.log")
    tbs = of_kind(events, "traceback")
    assert len(tbs) == 2  # the worker's (chained) and the launcher's
    worker = tbs[0]
    assert worker.line_no == 1 and worker.fields["chained"] == 1
    assert worker.fields["first_exc_type"] == "EOFError"
    assert worker.fields["exc_type"] == "RuntimeError"
    assert worker.fields["exc_message"].startswith("DataLoader worker (pid ")


def test_interleaved_ranks_tracebacks() -> None:
    lines = []
    for i in range(3):
        for r in (0, 1):
            if i == 0:
                lines.append(f"[rank{r}]: Traceback (most recent call last):")
            lines.append(f'[rank{r}]:   File "/w/train.py", line {10 * r + i + 1}, in f{i}')
            lines.append(f"[rank{r}]:     step{i}()")
    lines.append("[rank1]: ValueError: bad batch")
    lines.append("[rank0]: KeyError: 'x'")
    events = scan_log("mixed.log", data=("\n".join(lines) + "\n").encode())
    got = sorted((e.rank, e.line_no, e.fields["exc_type"], e.fields["last_frame"]) for e in events)
    assert got == [(0, 1, "KeyError", "/w/train.py:3"), (1, 4, "ValueError", "/w/train.py:13")]


def test_traceback_without_exception_line_is_ignored() -> None:
    data = b"Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n"
    assert scan_log("t.log", data=data) == []


def _object_collective_failure(rank: int, last: str, exc: str) -> str:
    return "".join(f"[rank{rank}]: {line}\n" for line in [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 88, in <module>',
        "    dist.all_gather_object(outputs, local)",
        '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", '
        "line 2443, in all_gather_object",
        "    object_list[i] = _tensor_to_object(tensor, tensor_size, group)",
        '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", '
        f"line 2128, in {last}",
        "    return _unpickler(io.BytesIO(buf)).load()",
        exc,
    ])


WATCHDOG_ALLGATHER = (
    "[rank0]:[E1103 10:12:44.118273649 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=212, OpType=ALLGATHER, NumelIn=1, NumelOut=4, "
    "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n")


def test_an_object_collective_that_delivered_nothing_is_no_ranks_own_death(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from _logs_helpers import root_of

    # GIVEN rank 2's all_gather_object failing to unpickle what the aborted collective gave it,
    # beside rank 0's watchdog timing out in that all-gather
    text = WATCHDOG_ALLGATHER + _object_collective_failure(
        2, "_tensor_to_object", "_pickle.UnpicklingError: invalid load key, '\\x00'.")
    root = root_of(tmp_path, text)
    # THEN rank 2 did not die of its own: the collective failed, and the ranks wait in it
    assert not (root.kind.value == "rank_died" and root.culprit_ranks == [2]), root.summary
    assert root.kind.value in ("missing_rank", "collective_mismatch")


def test_an_eof_error_in_the_users_own_code_is_still_a_death(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from _logs_helpers import root_of

    text = WATCHDOG_ALLGATHER + _object_collective_failure(
        2, "load_shard", "EOFError: Ran out of input")
    root = root_of(tmp_path, text)
    assert root.kind.value == "rank_died" and root.culprit_ranks == [2], root.summary
