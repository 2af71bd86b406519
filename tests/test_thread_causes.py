"""A helper thread's death is not the rank's death: the rank lives on and waits, and the dead
thread is cited as the cause of that wait. On the recorded ``prefetch_thread_died`` job and on a
built log."""

from __future__ import annotations

from pathlib import Path

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Kind, Status
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.logs import scan_log

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded" / "prefetch_thread_died"


def _verdict(*parts: str):  # type: ignore[no-untyped-def]
    evidence, _ = load_paths([str(RECORDED / part) for part in parts], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


def _thread_items(finding) -> list[str]:  # type: ignore[no-untyped-def]
    return [item.where for item in finding.evidence if item.detail.startswith("thread died")]


def test_with_stacks_the_dataloader_wait_and_the_dead_thread_are_named() -> None:
    verdict = _verdict("logs", "stacks", "fr/pickle")
    root = verdict.findings[0]
    assert verdict.status is Status.HANG
    assert (root.kind, root.culprit_ranks, root.waiting_ranks) == (
        Kind.DATALOADER_STALL, [2], [0, 1, 3])
    assert "thread 'prefetch' of rank 2 died earlier (zlib.error: Error -5" in root.summary
    # cited once, from the rank's own log, though the launcher's tee copied it too
    assert len(_thread_items(root)) == 1 and _thread_items(root)[0].endswith("rank2.stderr.log:2")
    assert not any(f.kind is Kind.RANK_DIED for f in verdict.findings)


def test_without_stacks_the_missing_rank_cites_its_dead_thread() -> None:
    verdict = _verdict("logs", "fr/pickle")
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.MISSING_RANK, [2])
    assert "thread 'prefetch' of rank 2 died earlier" in root.summary
    assert not any(f.kind is Kind.RANK_DIED for f in verdict.findings)


def test_a_lowercase_exception_class_ends_a_thread_traceback(tmp_path: Path) -> None:
    log = tmp_path / "rank5.log"
    log.write_text(
        "Exception in thread uploader (9):\n"
        "Traceback (most recent call last):\n"
        '  File "/job/upload.py", line 12, in run\n'
        "    sock.sendall(chunk)\n"
        "socket.error: [Errno 32] Broken pipe\n"
        "[rank5] step 10\n")
    (event,) = scan_log(str(log))
    assert (event.kind, event.fields["thread"], event.fields["exc_type"]) == (
        "traceback", "uploader", "socket.error")


def test_a_launcher_copy_without_the_thread_header_is_still_the_threads_death(
        tmp_path: Path) -> None:
    # GIVEN the launcher's tee of rank 2's output lost the "Exception in thread" header (cut,
    # or the header and the traceback interleaved apart), while the rank's own stderr has it
    logs = tmp_path / "logs"
    logs.mkdir()
    for part in (RECORDED / "logs").iterdir():
        text = part.read_text()
        if part.name == "torchrun.log":
            text = "".join(line for line in text.splitlines(keepends=True)
                           if "Exception in thread" not in line)
        (logs / part.name).write_text(text)
    evidence, _ = load_paths([str(logs), str(RECORDED / "stacks"), str(RECORDED / "fr/pickle")],
                             LoadOptions())
    verdict, _ = analyze(evidence)
    # THEN the header-less copy is the same thread's death: no rank_died, the wait is the finding
    root = verdict.findings[0]
    assert (root.kind, root.culprit_ranks) == (Kind.DATALOADER_STALL, [2]), root.summary
    assert "thread 'prefetch' of rank 2 died earlier" in root.summary
    assert not any(f.kind is Kind.RANK_DIED for f in verdict.findings)
