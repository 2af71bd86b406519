"""hangscope.sources.pyspy on real recorded py-spy output (fixtures/stacks/recorded) and junk."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hangscope.bundle import BundleWriter, load_bundle  # noqa: E402
from hangscope.collect.pyspy import DumpResult, bundle_name, bundle_record  # noqa: E402
from hangscope.errors import BadInputError  # noqa: E402
from hangscope.model import JobEvidence  # noqa: E402
from hangscope.sources.pyspy import (  # noqa: E402
    load_pyspy_file,
    parse_pyspy_json,
    parse_pyspy_text,
    parse_pyspy_text_by_rank,
    sniff_pyspy,
)

REC = ROOT / "fixtures" / "stacks" / "recorded"


def _names(sample: object) -> dict[str | None, list[str]]:
    return {t.name: [f.name for f in t.frames] for t in sample.threads}  # type: ignore[attr-defined]


class TestJson:
    def test_real_lock_dump(self) -> None:
        # GIVEN py-spy --json of a process: main thread blocked on an RLock, "holder" parked
        sample = parse_pyspy_json((REC / "lock.json").read_bytes(), None, 12.5, "lock.json")
        # THEN
        assert sample.taken_at == 12.5 and sample.path == "lock.json"
        threads = {t.name: t for t in sample.threads}
        assert set(threads) == {"MainThread", "holder"}
        main = threads["MainThread"]
        assert main.is_main and main.thread_id == sample.pid  # pid taken from the dump
        assert main.active is False and main.owns_gil is False
        assert [f.name for f in main.frames] == ["mode_rlock", "<module>"]
        assert main.frames[0].filename.endswith("fixtures/stacks/programs/blocked.py")
        assert main.frames[0].line is not None and not main.frames[0].native
        assert threads["holder"].frames[0].name == "Condition.wait"

    def test_native_frames_are_flagged(self) -> None:
        sample = parse_pyspy_json((REC / "lock-native.json").read_bytes(), 7, None, None)
        assert sample.pid == 7 and sample.taken_at == 0.0
        main = next(t for t in sample.threads if t.name == "MainThread")
        native = [f for f in main.frames if f.native]
        assert any(f.name == "PyThread_acquire_lock_timed" for f in native)
        assert all(f.line is None for f in native)
        assert not any(f.native for f in main.frames if f.name == "mode_rlock")

    def test_frames_are_interned(self) -> None:
        data = (REC / "lock.json").read_bytes()
        one, two = parse_pyspy_json(data, None, None, None), parse_pyspy_json(data, None, None,
                                                                                None)
        assert one.threads[0].frames[0] is two.threads[0].frames[0]

    def test_concatenated_json_dumps(self) -> None:
        found = load_pyspy_file(str(REC / "lock-twice.json"))
        assert len(found) == 2 and all(rank is None for rank, _ in found)
        assert _names(found[0][1]) == _names(found[1][1])

    @pytest.mark.parametrize("doc, expect", [
        (b"[]", 0),  # a process with no Python threads is still a sample
        (json.dumps([{"thread_id": 1, "frames": [], "thread_name": 5, "active": "yes"},
                     {"thread_id": "x", "frames": []}, 3]).encode(), 1),
        (json.dumps([{"os_thread_id": 2, "frames": [{"name": 1}, "x",
                                                     {"name": "f", "filename": "a.py",
                                                      "line": True}]}]).encode(), 1),
    ], ids=["empty", "bad-threads-skipped", "bad-frames-skipped"])
    def test_wrong_types_are_skipped(self, doc: bytes, expect: int) -> None:
        sample = parse_pyspy_json(doc, 1, None, "x.json")
        assert len(sample.threads) == expect
        for thread in sample.threads:
            assert all(isinstance(f.name, str) for f in thread.frames)

    @pytest.mark.parametrize("data", [
        b"\x00\xff\xfe binary junk \x80",
        b"{\"a\": 1}",
        b"[1, 2, 3]",
        b"[" * 200_000,
        b"[{\"thread_id\": 1, \"frames\": 5}]",
        b"\"" + b"x" * 2_000_000,
    ], ids=["binary", "object", "numbers", "deep", "frames-not-list", "huge-string"])
    def test_hostile_input_is_one_line(self, data: bytes) -> None:
        with pytest.raises(BadInputError) as info:
            parse_pyspy_json(data, None, None, "evil.json")
        assert str(info.value).startswith("evil.json: ") and "\n" not in str(info.value)
        assert len(str(info.value)) < 300


class TestText:
    def test_text_matches_json_of_the_same_process(self) -> None:
        text = parse_pyspy_text((REC / "lock.txt").read_text(), str(REC / "lock.txt"))
        js = parse_pyspy_json((REC / "lock.json").read_bytes(), None, None, None)
        assert len(text) == 1
        assert text[0].pid == js.pid
        assert _names(text[0]) == _names(js)
        text_main = next(t for t in text[0].threads if t.is_main)
        assert text_main.name == "MainThread" and text_main.thread_id == js.pid
        # py-spy shortens file names in text: the stdlib's lose their prefix
        holder = next(t for t in text[0].threads if t.name == "holder")
        assert holder.frames[0].filename == "threading.py"
        assert text[0].taken_at > 0  # the file's mtime

    def test_locals_blocks_are_skipped(self) -> None:
        plain = parse_pyspy_text((REC / "lock.txt").read_text(), "a")
        with_locals = parse_pyspy_text((REC / "lock-locals.txt").read_text(), "b")
        assert _names(plain[0]) == _names(with_locals[0])

    def test_native_text(self) -> None:
        sample = parse_pyspy_text((REC / "lock-native.txt").read_text(), "n")[0]
        main = next(t for t in sample.threads if t.is_main)
        by_name = {f.name: f for f in main.frames}
        assert by_name["PyThread_acquire_lock_timed"].native
        assert by_name["PyThread_acquire_lock_timed"].line is None
        assert not by_name["mode_rlock"].native

    def test_native_frame_with_debug_line(self) -> None:
        text = ("Process 5: python x.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
                'Thread 5 (idle): "MainThread"\n    recv (libc.so.6)\n'
                "    sock_call_ex (socketmodule.c:921)\n    <module> (torchrun:8)\n")
        frames = parse_pyspy_text(text, "s")[0].threads[0].frames
        assert [(f.name, f.native, f.line) for f in frames] == [
            ("recv", True, None), ("sock_call_ex", True, 921), ("<module>", False, 8)]

    def test_hex_thread_ids_and_gil_flags(self) -> None:
        text = ("Process 1234: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n"
                'Thread 0x7F0A (active+gil): "MainThread"\n'
                "    all_reduce (torch/distributed/distributed_c10d.py:2501)\n"
                'Thread 0x7F0B (idle): "Thread-1"\n    run (threading.py:975)\n')
        sample = parse_pyspy_text(text, "t", taken_at=3.0)[0]
        main, other = sample.threads
        assert (main.thread_id, main.active, main.owns_gil, main.is_main) == (0x7F0A, True,
                                                                              True, True)
        assert (other.active, other.owns_gil, other.is_main) == (False, False, False)
        assert sample.pid == 1234 and sample.taken_at == 3.0

    def test_several_dumps_in_one_file(self) -> None:
        samples = parse_pyspy_text((REC / "lock-twice.txt").read_text(), "twice")
        assert len(samples) == 2 and _names(samples[0]) == _names(samples[1])

    def test_tee_prefixed_interleaved_ranks(self) -> None:
        # GIVEN both ranks of a real gloo job, saved through torchrun's --tee ([rankN]: prefix)
        found = parse_pyspy_text_by_rank((REC / "gloo-tee.txt").read_text(), "tee")
        by_rank = dict(found)
        assert set(by_rank) == {0, 1}
        for rank, op in ((0, "all_reduce"), (1, "recv")):
            alone = parse_pyspy_text((REC / f"gloo-rank{rank}.txt").read_text(), "x")[0]
            assert by_rank[rank].pid == alone.pid
            assert _names(by_rank[rank]) == _names(alone)
            assert by_rank[rank].threads[0].frames[0].name == op

    def test_prefix_with_space(self) -> None:
        text = "".join(f"[rank3]: {line}\n" for line in
                       (REC / "gloo-rank0.txt").read_text().splitlines())
        (rank, sample), = parse_pyspy_text_by_rank(text, "sp")
        assert rank == 3 and sample.threads[0].frames[0].name == "all_reduce"

    def test_hand_edited_text_without_thread_ids(self) -> None:
        # GIVEN py-spy text as pasted into an issue: ids removed, frames elided and summarised
        text = ('Thread (idle): "MainThread"\n'
                "    get (queue.py:180)\n"
                "    _try_get_data (torch/utils/data/dataloader.py:1310)\n"
                "    ...\n"
                'Thread (idle): "Thread-3 (_pin_memory_loop)"\n'
                "    select (selectors.py:415)\n"
                "    _poll \u2192 poll \u2192 get\n")
        # WHEN
        assert sniff_pyspy(text.encode()) == "pyspy-text"
        (sample,) = parse_pyspy_text(text, "edited", taken_at=1.0)
        # THEN both threads, numbered in order, the main one marked; the non-frames skipped
        main, pin = sample.threads
        assert (main.thread_id, main.is_main, main.active) == (1, True, False)
        assert [f.name for f in main.frames] == ["get", "_try_get_data"]
        assert (pin.thread_id, pin.is_main, [f.name for f in pin.frames]) == (2, False, ["select"])
        assert sample.pid == 0  # no Process line and no OS id: the pid is unknown

    def test_two_dumps_without_process_lines_are_two_processes(self) -> None:
        # GIVEN two ranks' MainThreads pasted one after the other, the Process lines cut off
        text = ('Thread 33550 (active): "MainThread"\n'
                "    all_reduce (torch/distributed/distributed_c10d.py:2924)\n"
                "    step (train.py:12)\n"
                "```\n\n5 processes in:\n```\n"
                'Thread 33549 (active): "MainThread"\n'
                "    reduce_scatter_tensor (torch/distributed/distributed_c10d.py:4450)\n"
                'Thread 33600 (idle): "Thread-1"\n'
                "    wait (threading.py:320)\n")
        # WHEN
        first, second = parse_pyspy_text(text, "two", taken_at=1.0)
        # THEN two processes, each with its main thread's OS id (= its pid on Linux) as pid
        assert (first.pid, [t.name for t in first.threads]) == (33550, ["MainThread"])
        assert (second.pid, [t.name for t in second.threads]) == (33549, ["MainThread",
                                                                          "Thread-1"])
        assert second.threads[0].is_main and not second.threads[1].is_main

    @pytest.mark.parametrize("text", ["", "garbage\n" * 10, "x" * 1_000_000,
                                      "\x00\x01\x02 Thread zz (idle)"])
    def test_hostile_text_is_one_line(self, text: str) -> None:
        with pytest.raises(BadInputError, match="^junk.txt: "):
            parse_pyspy_text(text, "junk.txt")

    def test_huge_frame_line_is_cut_not_fatal(self) -> None:
        text = ('Process 9: p\nPython v3.11.7 (/p)\n\nThread 9 (idle): "MainThread"\n'
                f"    {'f' * 200_000} (a.py:1)\n    g (a.py:2)\n")
        sample = parse_pyspy_text(text, "h")[0]
        assert [f.name for f in sample.threads[0].frames] == ["g"]


class TestSniff:
    @pytest.mark.parametrize("name, kind", [
        ("lock.json", "pyspy-json"), ("lock-native.json", "pyspy-json"),
        ("lock-twice.json", "pyspy-json"), ("lock.txt", "pyspy-text"),
        ("lock-locals.txt", "pyspy-text"), ("lock-native.txt", "pyspy-text"),
        ("gloo-tee.txt", "pyspy-text"), ("gloo-launcher.txt", "pyspy-text"),
        ("errors/not_python.stderr", None)])
    def test_recorded(self, name: str, kind: str | None) -> None:
        assert sniff_pyspy((REC / name).read_bytes()[:4096]) == kind

    @pytest.mark.parametrize("head", [b"", b"\x80\x04\x95 pickle", b'{"version": "2.10"}',
                                      b"[rank0]: hello\n", b"[1, 2]", b"Thread safety notes\n",
                                      # an empty list tag before a log line (Determined's logs)
                                      b"[] [rank=0] RuntimeError: CUDA out of memory.\n"])
    def test_not_pyspy(self, head: bytes) -> None:
        assert sniff_pyspy(head) is None

    def test_an_empty_dump_is_pyspy(self) -> None:
        assert sniff_pyspy(b"[]\n") == "pyspy-json"

    def test_bundle_record(self) -> None:
        record = bundle_record(_result(), worker=False, rank=0)
        assert sniff_pyspy(record[:4096]) == "pyspy-json"

    def test_unknown_file_is_bad_input(self, tmp_path: Path) -> None:
        path = tmp_path / "x.bin"
        path.write_bytes(b"\x7fELF" + bytes(range(256)) * 40)
        with pytest.raises(BadInputError, match="not a py-spy dump"):
            load_pyspy_file(str(path))


def _result(status: str = "ok", pid: int | None = None) -> DumpResult:
    raw = (REC / "lock.json").read_bytes()
    sample = parse_pyspy_json(raw, None, 100.0, None)
    if status != "ok":
        return DumpResult(pid or sample.pid, 100.0, status, "py-spy did not finish")  # type: ignore[arg-type]
    return DumpResult(sample.pid, 100.0, "ok", "", raw, sample, 0.02)


class TestBundle:
    def test_record_keeps_pyspy_json_verbatim(self) -> None:
        result = _result()
        record = bundle_record(result)
        assert result.raw.strip() in record
        doc = json.loads(record)
        assert doc["pid"] == result.pid and doc["taken_at"] == 100.0 and doc["worker"] is False
        assert bundle_name(result, 2) == f"stacks-{result.pid}-2.json"

    def test_round_trip_rank_worker_and_failure(self, tmp_path: Path) -> None:
        # GIVEN a bundle with a rank dump, a DataLoader worker dump and a timed-out dump
        import hangscope.sources.pyspy  # noqa: F401  (registers the "pyspy" kind)

        ok = _result()
        writer = BundleWriter(str(tmp_path / "b"))
        writer.add_file(0, "pyspy", bundle_name(ok, 0), bundle_record(ok))
        worker = DumpResult(4242, 101.0, "ok", "", ok.raw, None)
        writer.add_file(0, "pyspy", "stacks-4242-0.json", bundle_record(worker, True, 0))
        writer.add_file(1, "pyspy", "stacks-77-0.json", bundle_record(_result("timeout", 77)))
        writer.add_file(1, "pyspy", "junk.json", b"\x00junk")
        writer.close()
        # WHEN
        evidence, problems = JobEvidence(), []
        load_bundle(str(tmp_path / "b"), evidence, problems)
        # THEN
        rank0 = evidence.rank(0)
        assert [s.pid for s in rank0.samples] == [ok.pid] and rank0.samples[0].taken_at == 100.0
        assert list(rank0.worker_samples) == [4242] and rank0.worker_pids == [4242]
        assert rank0.worker_samples[4242][0].taken_at == 101.0
        assert evidence.rank(1).samples == []
        assert any("py-spy timeout for pid 77" in p for p in problems)
        assert any(p.endswith("junk.json: unreadable py-spy record (Expecting value: line 1 "
                              "column 1 (char 0))") or "junk.json" in p for p in problems)
        assert all("\n" not in p for p in problems)

    def test_job_level_record_uses_its_own_rank(self, tmp_path: Path) -> None:
        import hangscope.sources.pyspy  # noqa: F401

        writer = BundleWriter(str(tmp_path / "b"))
        writer.add_job_file("pyspy", "stacks-a.json", bundle_record(_result(), rank=3))
        writer.add_job_file("pyspy", "stacks-b.json", bundle_record(_result()))
        writer.close()
        evidence, problems = JobEvidence(), []
        load_bundle(str(tmp_path / "b"), evidence, problems)
        assert len(evidence.rank(3).samples) == 1
        assert len(problems) == 1 and "belong to no rank" in problems[0]

    def test_load_file_reports_record_rank(self, tmp_path: Path) -> None:
        path = tmp_path / "r.json"
        path.write_bytes(bundle_record(_result(), worker=True, rank=5))
        (rank, sample), = load_pyspy_file(str(path))
        assert rank == 5 and sample.taken_at == 100.0


def test_a_dump_pasted_with_its_thread_line_shifted_is_read(tmp_path: Path) -> None:
    # GIVEN a py-spy text dump whose Thread line a paste shifted by one blank (frames as usual),
    # and the same relayed by docker compose
    dump = (' Thread 30560 (active): "MainThread"\n'
            "      irecv (torch/distributed/distributed_c10d.py:2536)\n"
            "      batch_isend_irecv (torch/distributed/distributed_c10d.py:2854)\n")
    relayed = "".join(f"trainer-1  | {line}\n" for line in dump.splitlines())
    for name, text in (("shifted.txt", dump), ("compose.txt", relayed)):
        path = tmp_path / name
        path.write_text(text)
        # THEN one thread of two frames, the process's pid from its main thread
        [(rank, sample)] = load_pyspy_file(str(path))
        assert rank is None and sample.pid == 30560
        assert [f.name for f in sample.threads[0].frames] == ["irecv", "batch_isend_irecv"]


def test_a_dump_whose_indentation_was_lost_is_read_frame_by_frame(tmp_path: Path) -> None:
    # GIVEN a py-spy text dump pasted flush left (a chat or a rendered README lost its indents),
    # a line of prose among its frames
    text = ('Process 4242: python train.py\n'
            'Thread 4242 (idle): "MainThread"\n'
            "wait (threading.py:320)\n"
            "get (queue.py:171)\n"
            "_try_get_data (torch/utils/data/dataloader.py:1133)\n"
            "pthread_cond_wait (libc.so.6)\n"
            "it hangs here for hours (see the log above)\n")
    [sample] = parse_pyspy_text(text, "paste.txt", 0.0)
    # THEN its frames are the thread's, the native one too, and the prose is none of them
    assert [f.name for f in sample.threads[0].frames] == \
        ["wait", "get", "_try_get_data", "pthread_cond_wait"]
    assert sample.threads[0].frames[-1].native
