"""hangscope.sources.stack_pastes on gdb and py-bt pastes as users trim them, and the findings that a
paste of waiting threads alone supports (the others it waits for are not in it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hangscope.analysis.engine import analyze
from hangscope.analysis.verdict import Verdict
from hangscope.errors import BadInputError
from hangscope.options import LoadOptions
from hangscope.sources.load import load_paths
from hangscope.sources.stack_pastes import parse_stack_paste, sniff_stack_paste

LIB = "/opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cpu.so"

BARE_BT = f"""(gdb) bt
#0  __lll_lock_wait (futex=futex@entry=0x7f76f1ed2598, private=0x0) at lowlevellock.c:52
#1  0x00007f799c183c42 in __GI___pthread_mutex_lock (mutex=0x7f76f1ed2598) at \
../nptl/pthread_mutex_lock.c:80
#2  0x00007f790845de98 in std::mutex::lock (this=0x7f76f1ed2598) at bits/std_mutex.h:100
#3  0x00007f79088a4eac in void c10::ivalue::Future::markCompleted(c10::IValue) () from {LIB}
"""

WRAPPED = """(gdb) bt
#0  __internal_atexit (listp=0x7fab466f6838 <__exit_funcs>, d=0x7fab43f9bf00, arg=0x7fab4430fd60,
    func=0x7fab32724da0 <std::unique_ptr<caffe2::PThreadPool>::~unique_ptr()>) at \
./stdlib/cxa_atexit.c:41
#1  __GI___cxa_atexit (func=0x7fab32724da0, arg=0x7fab4430fd60,
    d=0x7fab43f9bf00) at ./stdlib/cxa_atexit.c:70
"""

PYBT_EXCERPT = """  Waiting for the GIL
  <built-in method _invoke_rpc_python_udf of PyCapsule object at remote 0x7f910957bea0>
  File "/opt/lib/python3.9/site-packages/torch/distributed/rpc/api.py", line 719, in _invoke_rpc
    fut = _invoke_rpc_python_udf(
  File "/job/train.py", line 31, in step
    rpc_async(to, fn)
"""


def _names(text: str) -> list[list[str]]:
    (_, sample), = parse_stack_paste(text, "p.txt")
    return [[frame.name for frame in thread.frames] for thread in sample.threads]


class TestParse:
    def test_bare_frame_list_is_one_implicit_thread(self) -> None:
        # GIVEN gdb's "bt" with no "Thread N" header, one frame wrapped by the forum
        # WHEN
        (rank, sample), = parse_stack_paste(BARE_BT, "bt.txt")
        # THEN one thread of a process of unknown rank, its main thread
        assert rank is None and len(sample.threads) == 1
        thread = sample.threads[0]
        assert thread.is_main
        assert [f.name for f in thread.frames] == [
            "__lll_lock_wait", "__GI___pthread_mutex_lock", "std::mutex::lock",
            "c10::ivalue::Future::markCompleted"]
        assert all(f.native for f in thread.frames)
        assert (thread.frames[1].filename, thread.frames[1].line) == (
            "../nptl/pthread_mutex_lock.c", 80)
        assert thread.frames[3].filename == LIB

    def test_wrapped_frame_lines_are_joined(self) -> None:
        # GIVEN frames gdb wrapped onto indented lines (the source position on the last one)
        (_, sample), = parse_stack_paste(WRAPPED, "w.txt")
        frames = sample.threads[0].frames
        # THEN each is one frame, with the position from its continuation line
        assert [(f.name, f.filename, f.line) for f in frames] == [
            ("__internal_atexit", "./stdlib/cxa_atexit.c", 41),
            ("__GI___cxa_atexit", "./stdlib/cxa_atexit.c", 70)]

    def test_a_second_frame_zero_starts_another_thread(self) -> None:
        two = BARE_BT + "#0  0x00007f01 in epoll_wait () from /lib/libc.so.6\n" \
                        "#1  0x00007f02 in c10d::TCPStore::doWait () from /x/libtorch_cpu.so\n"
        assert [names[0] for names in _names(two)] == ["__lll_lock_wait", "epoll_wait"]

    def test_switching_thread_then_bt_lists_that_thread_once(self) -> None:
        text = ("(gdb) t 18\n[Switching to thread 18 (Thread 0x7ff43bce1700 (LWP 291928))]\n"
                "#0  0x00007ff4 in pthread_cond_timedwait@@GLIBC_2.3.2 () from /lib/libpthread.so.0\n"
                "(gdb) bt\n"
                "#0  0x00007ff4 in pthread_cond_timedwait@@GLIBC_2.3.2 () from /lib/libpthread.so.0\n"
                "#1  0x000000000061a802 in PyEval_AcquireThread ()\n")
        assert _names(text) == [["pthread_cond_timedwait@@GLIBC_2.3.2", "PyEval_AcquireThread"]]

    def test_function_names_lose_return_types_keep_namespaces(self) -> None:
        text = ("#0  0x1 in std::vector<unsigned char, std::allocator<unsigned char> > "
                "c10d::tcputil::recvVector<unsigned char>(int) () from /x.so\n"
                "#1  0x2 in (anonymous namespace)::concrete_decref_fn(c10::impl::PyInterpreter "
                "const*, _object*) () from /x.so\n"
                "#2  0x3 in operator new(unsigned long) () from /x.so   [390/7275]\n")
        assert _names(text) == [["c10d::tcputil::recvVector<unsigned char>",
                                 "(anonymous namespace)::concrete_decref_fn", "operator new"]]

    def test_pybt_excerpt_without_its_header(self) -> None:
        # GIVEN py-bt output cut after its "Traceback (most recent call first):" line
        (_, sample), = parse_stack_paste(PYBT_EXCERPT, "pybt.txt")
        frames = sample.threads[0].frames
        # THEN one thread: the GIL wait, the built-in method, then the Python frames
        assert [(f.name, f.native) for f in frames] == [
            ("take_gil", True), ("_invoke_rpc_python_udf", True), ("_invoke_rpc", False),
            ("step", False)]

    def test_an_exception_traceback_is_no_stack_paste(self) -> None:
        text = ('Traceback (most recent call last):\n  File "/job/train.py", line 3, in <module>'
                '\n    main()\nRuntimeError: boom\n')
        assert not sniff_stack_paste(text.encode())
        with pytest.raises(BadInputError, match="^tb.log: "):
            parse_stack_paste(text, "tb.log")


class TestSniff:
    @pytest.mark.parametrize("text", [BARE_BT, WRAPPED, PYBT_EXCERPT])
    def test_excerpts(self, text: str) -> None:
        assert sniff_stack_paste(text.encode())

    @pytest.mark.parametrize("text", [
        "#0 first item\n#1 second item\n",  # a numbered list, no gdb marks
        "# Training\n#1 epoch done\n",
        "Waiting for the GIL is slow\n"])
    def test_not_a_paste(self, text: str) -> None:
        assert not sniff_stack_paste(text.encode())


# ------------------------------------------------------------------------------------------------
# What a paste of waiting threads alone supports


def _analyze(tmp_path: Path, text: str) -> Verdict:
    path = tmp_path / "paste.txt"
    path.write_text(text)
    evidence, _ = load_paths([str(path)], LoadOptions())
    verdict, _ = analyze(evidence)
    return verdict


@pytest.mark.parametrize("frames, kind, op, confidence", [
    (("__libc_recv (fd=98) at recv.c:28", f"c10d::tcputil::recvBytes<unsigned char>(int) () "
      f"from {LIB}", f"c10d::TCPStore::doGet(std::string const&) () from {LIB}"),
     "init_hang", "store.doGet", 0.4),
    (("pthread_tryjoin_np (threadid=1) at pthread_tryjoin.c:26", "ncclGroupEnd () at group.cc:176",
      f"c10d::ProcessGroupNCCL::getNCCLComm(std::string const&) () from {LIB}"),
     "init_hang", "nccl_comm_init", 0.4),
    (("usleep () from /lib64/libc.so.6", f"groupLaunch(ncclAsyncJob*) () from {LIB}",
      f"ncclGroupEndInternal() () from {LIB}",
      f"c10d::ProcessGroupNCCL::endCoalescing() () from {LIB}"),
     "p2p_deadlock", "coalesced", 0.35),
])
def test_lone_waiter_names_the_wait_and_no_culprit(tmp_path: Path, frames: tuple[str, ...],
                                                    kind: str, op: str,
                                                    confidence: float) -> None:
    # GIVEN one process's bare gdb backtrace, waiting on ranks that are not in the paste
    text = "(gdb) bt\n" + "".join(f"#{i}  0x00007f00 in {f}\n" for i, f in enumerate(frames))
    # WHEN
    verdict = _analyze(tmp_path, text)
    # THEN the kind of wait, no culprit, low confidence, and what to fetch
    assert verdict.root is not None
    root = verdict.root
    assert (root.kind.value, root.culprit_ranks, root.confidence) == (kind, [], confidence)
    assert root.collective is not None and root.collective.op == op
    assert "fetch" in root.summary and "unknown" in root.summary
    assert all(item.where for item in root.evidence)


CUDA_LIB = "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so"


@pytest.mark.parametrize("call, kind, op", [
    ("c10d::ProcessGroupNCCL::recv(std::vector<at::Tensor, std::allocator<at::Tensor> >&, int, int)",
     "p2p_deadlock", "recv"),
    ("c10d::ProcessGroupGloo::allreduce(std::vector<at::Tensor, std::allocator<at::Tensor> >&, "
     "c10d::AllreduceOptions const&)", "missing_rank", "all_reduce"),
])
def test_an_excerpt_from_the_middle_of_a_backtrace_names_the_backend_call(
        tmp_path: Path, call: str, kind: str, op: str) -> None:
    # GIVEN two frames cut from the middle of gdb's backtrace (the excerpt starts on the wrapped
    # tail of frame 8), the innermost a backend's own entry point
    text = (f"    () from {CUDA_LIB}\n"
            f"#9  0x00007f67aa04d7ca in {call} ()\n   from {CUDA_LIB}\n"
            "#10 0x00007f6804fedcb5 in c10d::ops::(anonymous namespace)::recv_CUDA(c10::ArrayRef"
            "<at::Tensor>, long, long) () from /usr/local/lib/python3.12/dist-packages/torch/lib/"
            "libtorch_cpu.so\n")
    assert sniff_stack_paste(text.encode())
    verdict = _analyze(tmp_path, text)
    # THEN the process waits in that op; who it waits for is not in the paste
    root = verdict.root
    assert root is not None and (root.kind.value, root.culprit_ranks) == (kind, [])
    assert root.collective is not None and root.collective.op == op


def test_two_numbered_lines_out_of_order_are_no_backtrace() -> None:
    # a log's numbered list is not gdb's: frames in a row, with gdb's marks, are
    assert not sniff_stack_paste(b"#3  0x1f in step one\n#7  0x2f in step two\n")


def test_lone_collective_from_pyspy_is_missing_rank_without_culprit(tmp_path: Path) -> None:
    text = ('Thread 3293 (active): "MainThread"\n'
            "    all_gather_coalesced (deepspeed/runtime/zero/partition_parameters.py:1254)\n"
            "    fetch_sub_module (deepspeed/runtime/zero/partitioned_param_coordinator.py:386)\n"
            "    forward (model.py:40)\n")
    verdict = _analyze(tmp_path, text)
    assert verdict.root is not None
    assert (verdict.root.kind.value, verdict.root.culprit_ranks) == ("missing_rank", [])
    assert "all_gather_coalesced" in verdict.root.summary


def test_two_processes_in_different_collectives_are_a_mismatch(tmp_path: Path) -> None:
    text = ('Thread 33550 (active): "MainThread"\n'
            "    all_reduce (torch/distributed/distributed_c10d.py:2924)\n"
            "    step (train.py:12)\n"
            'Thread 33549 (active): "MainThread"\n'
            "    reduce_scatter_tensor (torch/distributed/distributed_c10d.py:4450)\n"
            "    step (train.py:15)\n")
    verdict = _analyze(tmp_path, text)
    assert verdict.root is not None and verdict.root.kind.value == "collective_mismatch"
    assert sorted(verdict.ranks_seen) == [0, 1]


def test_a_wait_on_a_work_no_frame_names_is_no_different_collective(tmp_path: Path) -> None:
    # GIVEN three processes: two in all_reduce, one waiting on a Work its native frames do not
    # name (DDP's forward broadcasting buffers: c10d::Work::wait under the Python forward)
    text = ('Thread 33550 (idle): "MainThread"\n'
            "    all_reduce (torch/distributed/distributed_c10d.py:2924)\n"
            "    step (train.py:12)\n"
            'Thread 33549 (idle): "MainThread"\n'
            "    all_reduce (torch/distributed/distributed_c10d.py:2924)\n"
            "    step (train.py:12)\n"
            'Thread 33548 (idle): "MainThread"\n'
            f"    c10d::Work::wait ({LIB})\n"
            "    forward (torch/nn/parallel/distributed.py:1640)\n"
            "    step (train.py:9)\n")
    verdict = _analyze(tmp_path, text)
    # THEN no collective mismatch: the wait may be any collective
    assert all(f.kind.value != "collective_mismatch" for f in verdict.findings), verdict.findings


def test_lone_gil_waiter_says_the_holder_is_not_in_the_paste(tmp_path: Path) -> None:
    # GIVEN py-bt of one thread waiting for the GIL, and no other thread
    verdict = _analyze(tmp_path, PYBT_EXCERPT)
    # THEN python_deadlock, with lower confidence and the gap said in the finding
    root = verdict.root
    assert root is not None and root.kind.value == "python_deadlock"
    assert root.confidence == 0.4
    assert "holds the GIL is not in the evidence" in root.summary


def test_gil_waiter_beside_the_thread_that_runs_is_not_lowered(tmp_path: Path) -> None:
    text = ("Thread 1 (Thread 0x7f01 (LWP 11)):\n"
            "#0  0x00007f in take_gil () from /usr/lib/libpython3.10.so\n"
            "#1  0x00007f in PyEval_RestoreThread () from /usr/lib/libpython3.10.so\n"
            "Thread 2 (Thread 0x7f02 (LWP 12)):\n"
            "#0  0x00007f in __lll_lock_wait () from /lib/libc.so.6\n"
            "#1  0x00007f in __GI___pthread_mutex_lock () from /lib/libc.so.6\n"
            f"#2  0x00007f in c10::cuda::CUDACachingAllocator::malloc () from {LIB}\n")
    root = _analyze(tmp_path, text).root
    assert root is not None and root.kind.value == "python_deadlock"
    assert root.confidence == 0.7 and "not in the evidence" not in root.summary
    assert "'12'" in root.summary  # the other blocked thread, by its LWP


def test_lock_inherited_across_fork_is_said(tmp_path: Path) -> None:
    root = _analyze(tmp_path, WRAPPED).root
    assert root is not None and root.kind.value == "python_deadlock"
    assert "not fork-safe" in root.summary and "spawn" in root.summary
    plain = _analyze(tmp_path, BARE_BT).root
    assert plain is not None and "fork" not in plain.summary


def test_a_rank_elsewhere_leaves_the_wait_to_the_graph(tmp_path: Path) -> None:
    # GIVEN one process in all_reduce and one in recv: the first waits on the second
    text = ('Thread 200 (idle): "MainThread"\n'
            "    all_reduce (torch/distributed/distributed_c10d.py:3252)\n"
            "    main (train.py:48)\n"
            'Thread 300 (idle): "MainThread"\n'
            "    recv (torch/distributed/distributed_c10d.py:2799)\n"
            "    main (train.py:56)\n")
    verdict = _analyze(tmp_path, text)
    # THEN the culprit is the rank in recv, and no finding claims the others are out of view
    assert [(f.kind.value, f.culprit_ranks) for f in verdict.findings] == [("missing_rank", [1])]


FATAL = """Fatal Python error: Segmentation fault

Thread 0x00007f33c8bff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f33db9c0b80 (most recent call first):
  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
  File "/app/data.py", line 85 in __getitem__
  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 785 in _next_data
  File "/app/train.py", line 174 in worker

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_the_threads_of_a_process_as_it_dies_are_no_stack_sample(tmp_path: Path) -> None:
    # GIVEN faulthandler's report of a segfault: the thread that crashed was in a DataLoader
    # fetch, where a live process would wait for a batch
    assert parse_stack_paste(FATAL, "crash.txt") == []
    # WHEN a log holding it is analyzed
    verdict = _analyze(tmp_path, "[launcher] starting 4 workers\n" + FATAL)
    # THEN a death, not a DataLoader stall of a live rank
    assert verdict.root is not None and verdict.root.kind.value == "rank_died", verdict.root


def test_a_live_dump_before_a_crash_report_is_kept(tmp_path: Path) -> None:
    # GIVEN dump_traceback_later's dump of a waiting process, then another process's crash
    live = ("Thread 0x00007f0000000001 (most recent call first):\n"
            '  File "/usr/lib/python3.11/threading.py", line 331 in wait\n'
            '  File "/app/train.py", line 40 in main\n\n')
    samples = parse_stack_paste(live + FATAL, "both.txt")
    # THEN only the live one's thread is a sample
    assert len(samples) == 1
    (_, sample), = samples
    assert [t.frames[0].name for t in sample.threads] == ["wait"]
