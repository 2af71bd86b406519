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
