"""hangscope.analysis.stacks: classification of real stacks from real blocked processes (dumped
with the real py-spy through hangscope.collect.pyspy); hangscope.analysis.stacktree: the
STAT-style prefix tree."""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hangscope.analysis.stacks import (  # noqa: E402
    ThreadActivity,
    classify_thread,
    is_library,
    main_thread,
    module_path,
)
from hangscope.analysis.stacktree import (  # noqa: E402
    format_tree,
    frame_key,
    group_by_stack,
    merge_prefix_tree,
    stack_key,
)
from hangscope.collect.pyspy import DumpResult, dump_once  # noqa: E402
from hangscope.model import Frame, StackSample, ThreadStack  # noqa: E402
from hangscope.sources.pyspy import load_pyspy_file, parse_pyspy_json  # noqa: E402

from fixtures.stacks.spawn import blocked_process, dump_until, gloo_ranks  # noqa: E402

REC = ROOT / "fixtures" / "stacks" / "recorded"
needs_pyspy = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")


def _main_activity(result: DumpResult) -> ThreadActivity | None:
    if result.sample is None:
        return None
    thread = main_thread(result.sample)
    return classify_thread(thread) if thread is not None else None


# the native op on an interpreter without symbols for its own C code (Debian's python3): py-spy
# shows libc's recv straight under the job's frame, not the socket module's sock_recv
_UNSYMBOLISED = {"sock_recv": "recv"}


def _wait_for_kind(pid: int, kind: str, native: bool) -> ThreadActivity:
    """The handshake file is written just before the blocking call: dump until it is inside."""
    result = dump_until(pid, lambda r: getattr(_main_activity(r), "kind", None) == kind,
                        native=native)
    assert result.ok, result.detail
    activity = _main_activity(result)
    assert activity is not None
    return activity


# ------------------------------------------------------------------------------------------------
# Recorded samples (no process needed)


class TestRecorded:
    def test_gloo_ranks(self) -> None:
        r0 = parse_pyspy_json((REC / "gloo-rank0.json").read_bytes(), None, None, None)
        r1 = parse_pyspy_json((REC / "gloo-rank1.json").read_bytes(), None, None, None)
        a0, a1 = (classify_thread(main_thread(s)) for s in (r0, r1))  # type: ignore[arg-type]
        assert (a0.kind, a0.op) == ("collective", "all_reduce")
        assert (a1.kind, a1.op) == ("p2p", "recv")
        assert a0.user_frame is not None and a0.user_frame.name == "main"
        assert a0.user_frame.filename.endswith("dist_blocked.py")
        assert a0.describe().startswith("collective all_reduce at all_reduce "
                                        "(torch/distributed/distributed_c10d.py:")

    def test_torchrun_launcher_is_elastic_agent(self) -> None:
        (_, sample), = load_pyspy_file(str(REC / "gloo-launcher.txt"))
        activity = classify_thread(main_thread(sample))  # type: ignore[arg-type]
        assert (activity.kind, activity.op) == ("init", "elastic_agent")
        assert activity.user_frame is None  # torchrun's own frames are all library frames

    def test_native_text_lock(self) -> None:
        (_, sample), = load_pyspy_file(str(REC / "lock-native.txt"))
        activities = {t.name: classify_thread(t) for t in sample.threads}
        assert (activities["MainThread"].kind, activities["MainThread"].op) == ("lock",
                                                                                "lock.acquire")
        assert activities["holder"].op == "threading.Event.wait"

    def test_without_native_a_c_level_wait_is_idle_at_user_code(self) -> None:
        (_, sample), = load_pyspy_file(str(REC / "lock.txt"))
        activity = classify_thread(main_thread(sample))  # type: ignore[arg-type]
        assert activity.kind == "idle" and activity.user_frame is not None
        assert activity.user_frame.name == "mode_rlock"
        assert "--native" in activity.describe()


# ------------------------------------------------------------------------------------------------
# Live: one process per way of blocking


@needs_pyspy
@pytest.mark.parametrize("mode, native, kind, op", [
    ("lock", True, "lock", "lock.acquire"),
    ("rlock", True, "lock", "lock.acquire"),
    ("condition", False, "lock", "threading.Condition.wait"),
    ("event", False, "lock", "threading.Event.wait"),
    ("queue", False, "lock", "queue.Queue.get"),
    ("join", False, "lock", "threading.Thread.join"),
    ("mp_queue", False, "lock", "multiprocessing.queues.Queue.get"),
    ("future", False, "lock", "concurrent.futures._base.Future.result"),
    ("sleep", True, "sleep", "time.sleep"),
    ("socket", True, "io", "sock_recv"),
    ("pipe_read", True, "io", "read"),
    ("compute", False, "compute", None),
    ("sleep", False, "idle", None),
], ids=lambda v: str(v))
def test_blocked_main_thread(mode: str, native: bool, kind: str, op: str | None,
                             tmp_path: Path) -> None:
    # GIVEN a process whose main thread blocks in one known way
    with blocked_process(mode, tmp_path) as proc:
        # WHEN its stack is dumped and classified
        activity = _wait_for_kind(proc.pid, kind, native)
    # THEN
    assert (activity.kind, activity.op) in {(kind, op), (kind, _UNSYMBOLISED.get(op))}
    assert activity.user_frame is not None and activity.user_frame.name == f"mode_{mode}"
    assert activity.thread_name == "MainThread"


@needs_pyspy
def test_dataloader_with_a_blocked_worker(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # GIVEN a DataLoader whose only worker blocks inside __getitem__
    with blocked_process("dataloader", tmp_path) as proc:
        worker_ready = tmp_path / "dataloader.ready.worker"
        end = time.monotonic() + 30
        while not worker_ready.exists() and time.monotonic() < end:
            time.sleep(0.02)
        worker_pid = int(worker_ready.read_text())
        # WHEN
        main = _wait_for_kind(proc.pid, "dataloader", False)
        worker = _wait_for_kind(worker_pid, "lock", False)
    # THEN the main process waits on the DataLoader, the worker in the dataset's own code
    assert main.op == "_try_get_data"
    assert main.user_frame is not None and main.user_frame.name == "mode_dataloader"
    assert worker.op == "threading.Event.wait"
    assert worker.user_frame is not None and worker.user_frame.name == "forever"


@pytest.fixture(scope="module")
def gloo_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[int, int]]]:
    """Three real gloo jobs at once (~7 s to start on 2 cores), all killed at the end:
    ``a``: rank 0 all_reduce, rank 1 recv, rank 2 async all_reduce + Work.wait();
    ``b``: rank 0 barrier, rank 1 isend(...).wait() that nobody receives;
    ``init``: rank 0 of 2 in init_process_group, rank 1 never started (TCPStore waits)."""
    pytest.importorskip("torch.distributed")
    if shutil.which("py-spy") is None:
        pytest.skip("py-spy not installed")
    workdir = tmp_path_factory.mktemp("gloo")
    with contextlib.ExitStack() as stack:
        jobs = {
            "a": stack.enter_context(gloo_ranks(["all_reduce", "recv", "all_reduce_wait"],
                                                workdir)),
            "b": stack.enter_context(gloo_ranks(["barrier", "send_wait"], workdir)),
            "init": stack.enter_context(gloo_ranks(["init"], workdir, world=2, start=[0])),
        }
        yield jobs


@pytest.mark.live
@pytest.mark.parametrize("job, rank, native, kind, op", [
    ("a", 0, False, "collective", "all_reduce"),
    ("a", 1, False, "p2p", "recv"),
    ("a", 2, True, "collective", "wait"),
    ("a", 2, False, "idle", None),
    ("b", 0, False, "collective", "barrier"),
    ("b", 1, True, "p2p", "wait"),
    ("init", 0, False, "init", "init_process_group"),
    ("init", 0, True, "init", "init_process_group"),
], ids=lambda v: str(v))
def test_gloo_rank(gloo_jobs: dict[str, dict[int, int]], job: str, rank: int, native: bool,
                   kind: str, op: str | None) -> None:
    activity = _wait_for_kind(gloo_jobs[job][rank], kind, native)
    assert (activity.kind, activity.op) == (kind, op)
    assert activity.user_frame is not None and activity.user_frame.name == "main"


@pytest.mark.live
def test_gloo_init_native_frames_show_the_store(gloo_jobs: dict[str, dict[int, int]]) -> None:
    result = dump_once(gloo_jobs["init"][0], native=True)
    assert result.sample is not None
    names = [f.name for f in main_thread(result.sample).frames]  # type: ignore[union-attr]
    assert any("c10d::TCPStore::waitForWorkers" in name for name in names)


@pytest.mark.live
def test_gloo_prefix_tree(gloo_jobs: dict[str, dict[int, int]]) -> None:
    # GIVEN one real sample per rank of job "a"
    stacks = {}
    for rank, pid in gloo_jobs["a"].items():
        result = dump_until(pid, lambda r: r.ok)
        stacks[rank] = main_thread(result.sample).frames  # type: ignore[arg-type, union-attr]
    # WHEN
    root = merge_prefix_tree(stacks)
    # THEN all ranks share <module>, and split at main: its line differs per rank (job frames
    # keep their line in the key), each branch then going into its own torch call
    (module,) = root.children.values()
    assert module.frame is not None and module.frame.name == "<module>"
    assert module.ranges == [[0, 2]]
    mains = {node.frame.line: node for node in module.children.values()}  # type: ignore[union-attr]
    assert {line: node.ranks() for line, node in mains.items()} == {48: [0], 56: [1], 50: [2]}
    leaf = [node for _, node in mains[48].walk()][-1]
    assert leaf.frame is not None and leaf.frame.name == "all_reduce"
    lines = list(format_tree(root))
    assert lines[0].startswith("[0-2] <module> (")


# ------------------------------------------------------------------------------------------------
# Synthetic frames: only for what cannot run here (a GPU) and for scale


def _f(name: str, filename: str, line: int | None = None, native: bool = False) -> Frame:
    return Frame(name, filename, line, native)


SITE = "/opt/venv/lib/python3.11/site-packages/"


def test_cuda_synchronize() -> None:
    # torch.cuda.synchronize as torch 2.13 lays it out (no GPU here to record it)
    thread = ThreadStack(1, (_f("synchronize", SITE + "torch/cuda/__init__.py", 1085),
                             _f("step", "/job/train.py", 40)), "MainThread", True, False)
    activity = classify_thread(thread)
    assert (activity.kind, activity.op) == ("cuda_sync", "torch.cuda.synchronize")
    native = ThreadStack(1, (_f("cudaStreamSynchronize", "/usr/lib/libcudart.so.12", None, True),
                             _f("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so", None,
                                True),
                             _f("step", "/job/train.py", 41)), "MainThread", True, False)
    assert classify_thread(native).kind == "cuda_sync"


def test_object_collective_names_the_outer_call() -> None:
    c10d = SITE + "torch/distributed/distributed_c10d.py"
    thread = ThreadStack(1, (_f("all_gather", c10d, 3900), _f("all_gather_object", c10d, 3100),
                             _f("sync", "/job/train.py", 9)))
    assert classify_thread(thread).op == "all_gather_object"


def test_init_store_based_barrier_inside_new_group() -> None:
    c10d = "torch/distributed/distributed_c10d.py"
    thread = ThreadStack(1, (_f("_store_based_barrier", c10d, 4800), _f("new_group", c10d, 5000),
                             _f("setup", "train.py", 3)))
    assert (classify_thread(thread).kind, classify_thread(thread).op) == ("init", "new_group")


def test_paths_and_library_predicates() -> None:
    assert module_path(SITE + "torch/cuda/__init__.py") == "torch/cuda/__init__.py"
    assert module_path("/usr/lib/python3.11/threading.py") == "threading.py"
    assert module_path("/home/me/lib/python3.11/site-packages/x/y.py") == "x/y.py"
    assert is_library(_f("get", "multiprocessing/queues.py", 3))
    assert is_library(_f("x", "torch/distributed/run.py", 3))
    assert not is_library(_f("main", "train.py", 3))
    assert not is_library(_f("main", "/work/job/train.py", 3))


def test_main_thread_fallbacks() -> None:
    a, b = ThreadStack(7, (), "worker"), ThreadStack(5, (), None)
    assert main_thread(StackSample(5, 0.0, (a, b))) is b  # tid == pid
    assert main_thread(StackSample(9, 0.0, (a, b))) is a  # first listed
    named = ThreadStack(8, (), "MainThread")
    assert main_thread(StackSample(9, 0.0, (a, named))) is named
    assert main_thread(StackSample(9, 0.0, ())) is None


def test_stack_key_ignores_library_lines_and_addresses() -> None:
    c10d = "torch/distributed/distributed_c10d.py"
    one = (_f("0x7f01", "/lib/libc.so.6", None, True), _f("all_reduce", SITE + c10d, 3252),
           _f("main", "/job/train.py", 48))
    two = (_f("0x7f99", "/lib/libc.so.6", None, True), _f("all_reduce", "/other/site-packages/"
                                                          + c10d, 3260),
           _f("main", "/job/train.py", 48))
    other_line = (_f("all_reduce", c10d, 3252), _f("main", "/job/train.py", 50))
    assert stack_key(one) == stack_key(two) != stack_key(other_line)
    assert frame_key(one[0]) is None
    groups = group_by_stack({0: one, 1: two, 2: other_line})
    assert [ranks for _, ranks in groups] == [[0, 1], [2]]


def test_prefix_tree_4096_ranks_is_compact_and_fast() -> None:
    # GIVEN 4096 ranks in all_reduce, except rank 17 stuck in recv
    c10d = SITE + "torch/distributed/distributed_c10d.py"
    top = (_f("train", "/job/train.py", 30), _f("<module>", "/job/train.py", 99))
    waiting = (_f("all_reduce", c10d, 3252), _f("step", "/job/train.py", 48), *top)
    stuck = (_f("recv", c10d, 2799), _f("step", "/job/train.py", 52), *top)
    stacks = {rank: stuck if rank == 17 else waiting for rank in range(4096)}
    # WHEN
    start = time.perf_counter()
    root = merge_prefix_tree(stacks)
    elapsed = time.perf_counter() - start
    # THEN ranges, not 4096-entry lists, and the divergence is where rank 17 leaves
    assert elapsed < 1.0
    assert root.ranges == [[0, 4095]]
    train = next(iter(next(iter(root.children.values())).children.values()))
    assert train.count() == 4096
    branches = {node.frame.line: node for node in train.children.values()}  # type: ignore[union-attr]
    assert branches[48].ranges == [[0, 16], [18, 4095]] and branches[52].ranges == [[17, 17]]
    assert branches[48].rank_text() == "0-16,18-4095"
    assert root.to_dict()["ranks"] == [(0, 4095)]


# ------------------------------------------------------------------------------------------------
# Native frames as gdb prints them (innermost first), and library wrappers of collectives

LIBTORCH = "/opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"


def _native(*names: str) -> ThreadStack:
    return ThreadStack(1, tuple(_f(name, LIBTORCH, None, True) for name in names))


@pytest.mark.parametrize("names, kind, op", [
    # communicator creation under a collective is an init wait, not the collective
    (("pthread_tryjoin_np", "ncclGroupEnd", "c10d::ProcessGroupNCCL::getNCCLComm",
      "c10d::ProcessGroupNCCL::collective"), "init", "nccl_comm_init"),
    (("ncclCommInitRankConfig", "c10d::ProcessGroupNCCL::ProcessGroupNCCL"), "init",
     "nccl_comm_init"),
    (("__libc_recv", "c10d::tcputil::recvBytes<unsigned char>", "c10d::TCPStore::doGet",
      "c10d::TCPStore::get"), "init", "store.get"),
    # a grouped launch that never returns: p2p connection setup with a peer
    (("usleep", "groupLaunch", "ncclGroupEndInternal", "pncclGroupEnd",
      "c10d::ProcessGroupNCCL::groupEnd", "c10d::ProcessGroupNCCL::endCoalescing"), "p2p",
     "coalesced"),
    (("__lll_lock_wait", "__GI___pthread_mutex_lock", "std::mutex::lock"), "lock", "mutex"),
    (("__futex_abstimed_wait_common64", "c10::SomeQueue::pop"), "lock", "mutex"),
    (("__lll_lock_wait", "__GI___pthread_mutex_lock", "__kmp_lock_suspend_mx",
      "__kmp_set_num_threads"), "lock", "mutex"),
    (("pthread_cond_timedwait", "take_gil", "PyEval_RestoreThread"), "lock", "GIL"),
    (("pthread_cond_wait", "drop_gil"), "lock", "GIL"),
    (("__internal_atexit", "__GI___cxa_atexit"), "lock", "atexit lock"),
])
def test_native_waits(names: tuple[str, ...], kind: str, op: str) -> None:
    activity = classify_thread(_native(*names))
    assert (activity.kind, activity.op) == (kind, op)


def test_sampler_iteration_is_a_dataloader_wait() -> None:
    # GIVEN faulthandler's view of a DataLoader asking its (user-wrapped) sampler for an index
    data = SITE + "torch/utils/data/"
    thread = ThreadStack(1, (_f("__iter__", SITE + "model_hub/_data.py", 82),
                             _f("__iter__", data + "sampler.py", 229),
                             _f("_next_index", data + "dataloader.py", 512),
                             _f("_try_put_index", data + "dataloader.py", 1209),
                             _f("train", "/job/train.py", 30)))
    activity = classify_thread(thread)
    assert (activity.kind, activity.op) == ("dataloader", "Sampler.__iter__")
    assert activity.user_frame is not None and activity.user_frame.name == "train"
    alone = ThreadStack(1, (_f("_next_index", data + "dataloader.py", 512),))
    assert classify_thread(alone).op == "_next_index"


def test_another_librarys_data_iterator_blocked_on_its_queue_is_a_dataloader_wait() -> None:
    # GIVEN py-spy's view (Python < 3.11: bare function names) of a main thread whose batches come
    # from a library's own background-thread iterator (a BufferedIterator over a queue.Queue)
    thread = ThreadStack(1, (_f("wait", "threading.py", 302), _f("get", "queue.py", 170),
                             _f("__next__", "mylib/data/iterators.py", 648),
                             _f("__iter__", "mylib/logging/progress_bar.py", 256),
                             _f("train", "/job/train.py", 274)), "MainThread", False, False)
    # THEN the queue wait is the data iterator's: its producer delivers nothing
    activity = classify_thread(thread)
    assert (activity.kind, activity.op) == ("dataloader", "__next__ via queue.get")
    # and the same queue wait under no data iterator stays a queue wait
    plain = ThreadStack(1, (_f("wait", "threading.py", 302), _f("get", "queue.py", 170),
                            _f("__next__", "/job/results.py", 12),
                            _f("train", "/job/train.py", 274)), "MainThread", False, False)
    assert (classify_thread(plain).kind, classify_thread(plain).op) == ("lock", "queue.get")
    # and a process forked under the iterator (a worker) that waits in its own code is no data wait
    # of its parent's: the fork keeps the parent's frames below its own
    worker = ThreadStack(1, (_f("wait", "threading.py", 302), _f("forever", "/job/ds.py", 9),
                             _f("_bootstrap", "multiprocessing/process.py", 314),
                             _f("__next__", "mylib/data/iterators.py", 648)), "MainThread",
                         False, False)
    assert classify_thread(worker).kind == "lock"
    # and a collective the data iterator calls is that collective (a data-parallel broadcast)
    c10d = "torch/distributed/distributed_c10d.py"
    inside = ThreadStack(1, (_f("broadcast", c10d, 2400),
                             _f("__next__", "mylib/data/iterators.py", 648),
                             _f("train", "/job/train.py", 274)))
    assert classify_thread(inside).kind == "collective"


def test_a_scripts_own_loader_class_blocked_on_its_queue_is_a_dataloader_wait() -> None:
    # GIVEN py-spy's view (Python 3.11+: qualified names) of a main thread waiting for batches
    # from a loader class the training script defines itself (its prefetch thread died: blind
    # live jobs 41's prefetch_thread_corrupt_record)
    def stack(owner: str) -> ThreadStack:
        return ThreadStack(1, (_f("Condition.wait", "threading.py", 327),
                               _f("Queue.get", "queue.py", 171),
                               _f(f"{owner}.__iter__", "/job/train.py", 105),
                               _f("main", "/job/train.py", 240)), "MainThread", False, False)
    # THEN the class's name says it is the data pipeline: a dataloader wait
    for owner in ("PrefetchLoader", "ShardDataset", "AsyncBatcher"):
        activity = classify_thread(stack(owner))
        assert activity.kind == "dataloader", owner
    # AND an iterator of some other class over a queue stays a queue wait
    for owner in ("MetricsStream", "EventLog", "LoaderStats"):
        assert classify_thread(stack(owner)).kind == "lock", owner


def test_library_wrappers_name_the_collective() -> None:
    # GIVEN DeepSpeed's wrappers (py-spy short paths), once with and once without the c10d frame
    c10d = "torch/distributed/distributed_c10d.py"
    wrapped = ThreadStack(1, (_f("reduce_scatter_tensor", c10d, 4450),
                              _f("reduce_scatter_tensor", "deepspeed/comm/comm.py", 302),
                              _f("reduce_scatter_fn", "deepspeed/comm/comm.py", 270),
                              _f("step", "train.py", 9)))
    bare = ThreadStack(1, (_f("all_gather_coalesced",
                              "deepspeed/runtime/zero/partition_parameters.py", 1254),
                           _f("fetch_sub_module", "deepspeed/runtime/zero/x.py", 386)))
    other = ThreadStack(1, (_f("save_checkpoint", "deepspeed/runtime/engine.py", 3000),))
    assert (classify_thread(wrapped).kind, classify_thread(wrapped).op) == (
        "collective", "reduce_scatter_tensor")
    assert (classify_thread(bare).kind, classify_thread(bare).op) == (
        "collective", "all_gather_coalesced")
    assert classify_thread(other).kind != "collective"


def test_ddp_constructor_is_init() -> None:
    thread = ThreadStack(1, (_f("_sync_module_states", SITE + "torch/distributed/utils.py", 300),
                             _f("__init__", SITE + "torch/nn/parallel/distributed.py", 800),
                             _f("main", "/job/train.py", 20)))
    activity = classify_thread(thread)
    assert (activity.kind, activity.op) == ("init", "DistributedDataParallel.__init__")
