"""Hostile and odd input for the log scanner, plus the scanner's own invariants (pre-filter
equivalence, chunk boundaries, rank inference, bundle loader)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from _logs_helpers import FIXTURES

from hangscope.errors import BadInputError
from hangscope.model import JobEvidence
from hangscope.sources.logs import infer_rank_from_path, scan, scan_log, sniff_log
from hangscope.sources.logs.loader import attribute

WATCHDOG = (b"[rank3]:[E1121 11:43:46.127000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
            b"collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4, "
            b"NumelOut=4, Timeout(ms)=600000) ran for 600042 milliseconds before timing out.")


def _fixture_files() -> list[Path]:
    return sorted(p for p in FIXTURES.iterdir() if p.suffix in (".log", ".txt", ".json"))


@pytest.mark.parametrize("path", _fixture_files(), ids=lambda p: p.name)
def test_prefilter_finds_what_a_full_trigger_search_finds(path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # the Aho-Corasick search (where installed), the anchor regex it falls back to, and a plain
    # regex of every trigger give the same events
    fast = scan_log(str(path))
    monkeypatch.setattr(scan, "_TRIGGER_SEARCH", None)
    anchored = scan_log(str(path))
    monkeypatch.setattr(scan, "_PREFILTER", scan._TRIGGERS)
    full = scan_log(str(path))
    assert fast == full
    assert anchored == full
    assert fast, f"{path.name}: no events"


# real logs whose anchored scan already missed a line the trigger search reads when this test was
# written (a41866c): a trigger on a line that holds no anchor of its own
_ANCHOR_GAPS = {"s_pytorch_23363_docker_network_isolation",
                "v_megatron_lm_readme_straggler_detector_healthy"}


def test_the_anchor_fallback_reads_the_real_logs_as_the_trigger_search_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # every trigger a change adds needs an anchor for installs without ahocorasick_rs: the
    # corpus's logs, scanned both ways, give the same events but for the gaps listed
    pytest.importorskip("ahocorasick_rs")
    differ = set()
    for path in sorted((FIXTURES / "real").glob("*.log")):
        fast = scan_log(str(path))
        with monkeypatch.context() as patch:
            patch.setattr(scan, "_TRIGGER_SEARCH", None)
            if scan_log(str(path)) != fast:
                differ.add(path.stem)
    assert differ == _ANCHOR_GAPS


def test_the_trigger_search_is_aho_corasick_where_installed() -> None:
    # a dependency: an install without it would silently scan at a fraction of the speed
    pytest.importorskip("ahocorasick_rs")
    assert scan._TRIGGER_SEARCH is not None


def test_random_bytes_never_raise(tmp_path: Path) -> None:
    rng = random.Random(1234)
    for i in range(20):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20000)))
        if i % 2:
            blob = blob[:5000] + b"\n" + WATCHDOG + b"\n" + blob[5000:]
        path = tmp_path / f"junk{i}.log"
        path.write_bytes(blob)
        events = scan_log(str(path))
        if i % 2:
            assert any(e.kind == "nccl_watchdog_timeout" for e in events)


def test_hundred_megabyte_single_line_is_clipped(tmp_path: Path) -> None:
    path = tmp_path / "rank5.log"
    with open(path, "wb") as out:
        out.write(b"x" * 1000 + b" Traceback " + WATCHDOG)  # triggers inside the long line
        block = b"a" * (1 << 20)
        for _ in range(100):
            out.write(block)
        out.write(b"\n" + WATCHDOG + b"\nlast line CUDA out of memory. Tried to allocate 1.00 GiB\n")
    events = scan_log(str(path))
    kinds = [(e.kind, e.line_no) for e in events]
    assert ("nccl_watchdog_timeout", 1) in kinds  # the head of the long line is still read
    assert ("nccl_watchdog_timeout", 2) in kinds and ("cuda_oom", 3) in kinds
    assert all(len(e.message) <= 1000 for e in events)


def test_long_line_without_newline_at_eof(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(WATCHDOG + b"\n" + b"z" * (3 << 20))
    assert [e.line_no for e in scan_log(str(path))] == [1]


def test_latin1_crlf_and_ansi() -> None:
    data = ("caf\xe9 \x1b[31mERROR\x1b[0m\r\n".encode("latin-1") + WATCHDOG + b"\r\n"
            + b"\x1b[1;31m[rank2]: RuntimeError: DataLoader timed out after 60 seconds\x1b[0m\r\n")
    events = scan_log("x.log", data=data)
    assert [(e.kind, e.line_no, e.rank) for e in events] == [
        ("nccl_watchdog_timeout", 2, 3), ("dataloader_timeout", 3, 2)]
    assert not events[0].message.endswith("\r")
    assert "\x1b" not in events[1].message


def test_interleaved_ranks_one_file() -> None:
    lines = [f"[rank{r}]:step {step} ok".encode() for step in range(50) for r in range(8)]
    lines.insert(123, b"[rank6]: RuntimeError: DataLoader worker (pid 999) is killed by signal: Killed.")
    lines.insert(200, b"[default2]:[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                      b"allocate 64.00 MiB. GPU 2 has a total capacity of 79.15 GiB of which 3.00 "
                      b"MiB is free.")
    events = scan_log("all_ranks.log", data=b"\n".join(lines))
    assert [(e.kind, e.rank, e.line_no) for e in events] == [
        ("dataloader_worker_killed", 6, 124), ("cuda_oom", 2, 201)]
    assert events[1].fields["local_rank"] == 2


def test_chunk_boundaries_do_not_lose_or_split_events(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scan, "CHUNK", 4096)
    monkeypatch.setattr(scan, "LOOKAHEAD", 8192)
    src = FIXTURES / "recorded_elastic_sigkill.log"
    filler = b"".join(b"h:1:2 [0] NCCL INFO Channel %02d/0 : 0[0] -> 1[1] via P2P/IPC\n" % (i % 32)
                      for i in range(300))
    data = filler + src.read_bytes() + filler + WATCHDOG + b"\n"
    path = tmp_path / "chunked.log"
    path.write_bytes(data)
    events = scan_log(str(path))
    monkeypatch.undo()
    assert events == scan_log(str(path))
    assert sum(e.kind == "elastic_child_failed" for e in events) == 3


def test_unreadable_file_raises_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="missing.log"):
        scan_log(str(tmp_path / "missing.log"))
    folder = tmp_path / "dir.log"
    folder.mkdir()
    with pytest.raises(BadInputError):
        scan_log(str(folder))


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert scan_log(str(path)) == []


@pytest.mark.parametrize(("path", "expected"), [
    ("/x/run1/attempt_0/3/stderr.log", (3, True)),
    ("/x/rank3.log", (3, False)),
    ("/x/rank3.stderr.log", (3, False)),
    ("/x/stdout_3.log", (3, False)),
    ("/x/node1_global_rank_12.txt", (12, False)),
    ("/x/local_rank2.log", (2, True)),
    ("/x/rank7/train.log", (7, False)),
    ("/x/torchrun.log", (None, False)),
    ("/x/prank3.log", (None, False)),
])
def test_infer_rank_from_path(path: str, expected: tuple[int | None, bool]) -> None:
    assert infer_rank_from_path(path) == expected


def test_local_rank_path_gives_local_rank_only(tmp_path: Path) -> None:
    path = tmp_path / "run" / "attempt_0" / "1"
    path.mkdir(parents=True)
    (path / "stderr.log").write_bytes(b"RuntimeError: DataLoader timed out after 5 seconds\n")
    (event,) = scan_log(str(path / "stderr.log"))
    assert event.rank is None and event.fields["local_rank"] == 1


def test_sniff() -> None:
    assert sniff_log(WATCHDOG, "whatever.bin")
    assert sniff_log((FIXTURES / "ras_report.json").read_bytes()[:4096], "ras.json")
    assert sniff_log(b"plain text\n", "train.log")
    assert not sniff_log(b"\x80\x04\x95 pickle", "rank0.log")
    assert not sniff_log(b"plain text\n", "notes.md")
    assert not sniff_log(os.urandom(4096), "blob.log") or True  # random data: never raises


def test_loader_attribution() -> None:
    events = scan_log("rank2.log", data=(
        b"[rank5]: RuntimeError: DataLoader timed out after 5 seconds\n"
        b"[E ProcessGroupNCCL.cpp:458] [Rank 4] Watchdog caught collective operation timeout: "
        b"WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=10) ran for 11 milliseconds before "
        b"timing out.\n"
        b"RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.\n"), rank_hint=2)
    evidence = JobEvidence()
    attribute(events, 2, evidence)
    assert [e.kind for e in evidence.rank(5).logs] == ["dataloader_timeout"]
    assert [e.kind for e in evidence.rank(2).logs] == ["dataloader_worker_killed"]
    assert [e.kind for e in evidence.unattributed_logs] == ["nccl_watchdog_timeout"]


def test_bundle_loader_registered(tmp_path: Path) -> None:
    from hangscope.sources.registry import FILE_LOADERS

    assert "log" in FILE_LOADERS
    path = tmp_path / "x.log"
    path.write_bytes(WATCHDOG + b"\n")
    evidence = JobEvidence()
    problems: list[str] = []
    FILE_LOADERS["log"](str(path), 3, evidence, problems)
    FILE_LOADERS["log"](str(tmp_path / "nope.log"), 3, evidence, problems)
    kinds = [e.kind for e in evidence.rank(3).logs]
    assert [k for k in kinds if k not in ("progress", "log_end", "size_line", "cue")] == [
        "nccl_watchdog_timeout"]
    assert kinds.count("log_end") == 1  # where the log ends (sources/logs/progress.py)
    assert len(problems) == 1 and "nope.log" in problems[0]


def test_a_paste_of_progress_bars_is_text(tmp_path: Path) -> None:
    # GIVEN a log of tqdm bars (three UTF-8 bytes per block character), cut as a tracker cuts it
    bar = "Map (num_proc=14):  70%|" + "\u2588" * 300 + "\n"
    log = tmp_path / "log.txt"
    log.write_bytes((bar * 12).encode()[:-2] + b"\n[rank3]: " + WATCHDOG[9:] + b"\n")
    # THEN it is read as a log, and its records are found
    assert scan.is_text(log.read_bytes()[:4096])
    assert any(e.kind == "nccl_watchdog_timeout" for e in scan_log(str(log)))


def test_binary_bytes_above_ascii_are_not_text() -> None:
    assert not scan.is_text(bytes(range(0x80, 0x100)) * 16)
