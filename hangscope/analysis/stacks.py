"""What a thread is doing, read from its frames; and how frames and stacks compare across ranks.

Classification is a list of named predicates over frames (like pystack's and memray's frame
tools), applied in two tiers:

1. **API tier** (any frame of the stack, outermost match wins, so ``all_gather_object`` beats
   the ``all_gather`` it calls): ``dataloader`` > ``init`` > ``collective``/``p2p`` >
   ``cuda_sync``. These are the calls a hang analysis reasons about, whatever they block in.
2. **Wait tier** (only the run of library frames inside the job's innermost own frame; the
   outermost match in that run wins, so ``queue.Queue.get`` beats the ``Condition.wait`` under
   it): ``lock``, ``sleep``, ``io``.

Otherwise a thread is ``compute`` when py-spy saw it active and ``idle`` when not.

Known limits, from real py-spy 0.4 dumps: a thread blocked in a C call made directly from the
job's code (``lock.acquire()``, ``time.sleep``, ``sock.recv``, ``work.wait()``) has no frame for
that call unless the dump was taken with ``--native``; it then classifies as ``idle`` at the
job's own frame. With ``--native`` the native frames (``lock_PyThread_acquire_lock``,
``time_sleep``, ``sock_recv``, ``c10d::Work::wait``, ``c10d::TCPStore::waitForWorkers``) decide.
An interpreter built without symbols for its own C code (Debian's ``python3``) shows only the
libc call under the job's frame: ``PyThread_acquire_lock_timed``, ``clock_nanosleep``
(``time.sleep`` when a Python frame called it), ``recv``/``read``.
Filenames may be full paths (JSON) or py-spy's shortened ones (``torch/distributed/...``,
``threading.py``); predicates match both. Stacks of native frames only (gdb) classify by name
(``analysis.frames``): ``getNCCLComm``/``ncclCommInit*`` and ``TCPStore`` are init waits, a
grouped NCCL launch that does not return (``ncclGroupEnd``, ``endCoalescing``) a p2p wait, and
``take_gil``, ``pthread_mutex_lock``, futex and atexit-lock waits are lock waits.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from hangscope.analysis.frames import (
    is_library_frame,
    is_nccl_comm_init,
    is_nccl_group_launch,
    mpi_call,
    native_lock,
)
from hangscope.model import Frame, StackSample, ThreadStack

Kind = Literal["collective", "p2p", "init", "dataloader", "lock", "cuda_sync", "sleep", "io",
               "compute", "idle"]
KINDS: tuple[Kind, ...] = ("collective", "p2p", "init", "dataloader", "lock", "cuda_sync",
                           "sleep", "io", "compute", "idle")

# --------------------------------------------------------------------------------------------------
# Where a frame's code lives, whatever the path style

_SITE_PREFIX = re.compile(r"^.*/(?:site-packages|dist-packages)/")
_STDLIB_PREFIX = re.compile(r"^.*?/lib/python3\.\d+/")
_KNOWN_PACKAGES = frozenset({
    "torch", "torchvision", "torchaudio", "numpy", "triton", "transformers", "accelerate",
    "deepspeed", "lightning", "pytorch_lightning", "datasets", "apex", "tqdm", "psutil",
    "safetensors", "huggingface_hub", "fsspec", "torchrun"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


@functools.lru_cache(maxsize=8192)  # called per frame per check; a job has few distinct files
def module_path(filename: str) -> str:
    """``/x/site-packages/torch/cuda/__init__.py`` and ``torch/cuda/__init__.py`` both give
    ``torch/cuda/__init__.py``; ``/usr/lib/python3.11/threading.py`` gives ``threading.py``."""
    stripped = _SITE_PREFIX.sub("", filename, count=1)
    return stripped if stripped != filename else _STDLIB_PREFIX.sub("", filename, count=1)


def is_library(frame: Frame) -> bool:
    """Not the job's own code: native, installed packages, stdlib, also in py-spy's short form."""
    if is_library_frame(frame):
        return True
    if frame.filename.startswith("/") or not frame.filename:
        return False
    top = frame.filename.split("/", 1)[0].removesuffix(".py")
    return top in _STDLIB or top in _KNOWN_PACKAGES


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (frames are innermost first)."""
    return next((f for f in frames if not is_library(f)), None)


def _func(frame: Frame) -> str:
    """Function name without its class: ``Thread.join`` -> ``join``."""
    return frame.name.rsplit(".", 1)[-1]


def _in(frame: Frame, *paths: str) -> bool:
    return not frame.native and module_path(frame.filename) in paths


def _under(frame: Frame, *prefixes: str) -> bool:
    return not frame.native and module_path(frame.filename).startswith(prefixes)


# --------------------------------------------------------------------------------------------------
# API tier predicates: each returns (kind, op) or None

_C10D = ("torch/distributed/distributed_c10d.py",)
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list",
                     "recv_object_list"})
COLLECTIVE_OPS = frozenset({
    "all_reduce", "all_reduce_coalesced", "reduce", "all_gather", "all_gather_object",
    "all_gather_into_tensor", "all_gather_coalesced", "all_gather_single", "_all_gather_base",
    "gather", "gather_object", "scatter", "scatter_object_list", "broadcast",
    "broadcast_object_list", "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "barrier", "monitored_barrier"})
INIT_OPS = frozenset({"init_process_group", "new_group", "new_subgroups",
                      "new_subgroups_by_enumeration", "_new_group_with_tag", "_store_based_barrier",
                      "split_group", "init_device_mesh"})
_DATALOADER_FUNCS = frozenset({"_next_data", "_get_data", "_try_get_data", "__next__",
                               "_shutdown_workers", "_pin_memory_loop", "_next_index",
                               "_try_put_index"})
# Libraries that wrap torch.distributed under the same op names (deepspeed.comm.all_reduce,
# ZeRO-3's all_gather_coalesced, Lightning's strategy.barrier, accelerate's gather): a frame of
# theirs named like a collective is that collective, also when the c10d call under it is not
# in the stack (py-spy shows no frame for the C call it blocks in).
_WRAPPER_PACKAGES = ("deepspeed/", "megatron/", "fairscale/", "colossalai/", "apex/",
                     "accelerate/", "lightning/", "pytorch_lightning/", "lightning_fabric/")
_CUDA_SYNC_NATIVE = re.compile(r"cuda(Device|Stream|Event)Synchronize|cudaMemcpy(?!Async)|"
                               r"_local_scalar_dense|cuStreamSynchronize|cuEventSynchronize")


def is_dataloader_wait(frame: Frame) -> str | None:
    """The main process (or pin-memory thread) waiting for batches from DataLoader workers, or
    for the next index from its sampler (``_next_index``, a ``Sampler.__iter__``)."""
    if _in(frame, "torch/utils/data/dataloader.py", "torch/utils/data/_utils/pin_memory.py") \
            and _func(frame) in _DATALOADER_FUNCS:
        return _func(frame)
    if _in(frame, "torch/utils/data/sampler.py", "torch/utils/data/distributed.py") \
            and _func(frame) == "__iter__":
        return "Sampler.__iter__"
    return None


# Another library's data pipeline (fairseq's BufferedIterator, a streaming dataset, webdataset):
# the iterator protocol in a module of a data package or named for one. Read only where the thread
# blocks in a queue, lock or sleep under it (``classify_thread``): its own batches are late.
_DATA_MODULE = re.compile(r"(?:^|/)(?:data|datasets?|dataloaders?|loaders?|input_pipeline)/|"
                          r"(?:iterators?|data_?loader|datasets?|data_?pipe\w*)\.py$")
_DATA_ITER_FUNCS = frozenset({"__next__", "__iter__", "_next_data", "next_batch", "get_batch"})


# ... or a class named for one, wherever its module is (a training script's own
# ``PrefetchLoader.__iter__``, ``ShardDataset.__next__``; py-spy names the class on Python 3.11+)
_DATA_CLASS = re.compile(r"(?:Loader|Prefetch(?:er)?|Dataset|DataPipe|Batcher|Feeder)$")


def is_data_iterator(frame: Frame) -> bool:
    """A frame of a data pipeline's iterator outside torch's DataLoader (whose own frames
    ``is_dataloader_wait`` reads)."""
    if frame.native or _func(frame) not in _DATA_ITER_FUNCS or _under(frame, "torch/utils/data/"):
        return False
    owner = frame.name.rsplit(".", 1)[0] if "." in frame.name else ""
    return _DATA_MODULE.search(frame.filename.replace("\\", "/")) is not None \
        or _DATA_CLASS.search(owner.rsplit(".", 1)[-1]) is not None


def _in_child_process(frames: Sequence[Frame]) -> bool:
    """A process multiprocessing started (a DataLoader worker): forked, it still shows the
    frames of the parent that started it, the data iterator's among them."""
    return any(_in(f, "multiprocessing/process.py") and _func(f) == "_bootstrap" for f in frames)


def is_init_wait(frame: Frame) -> str | None:
    """Process-group setup, rendezvous, the c10d store, and torchrun's elastic agent."""
    if _in(frame, *_C10D, "torch/distributed/device_mesh.py") and frame.name in INIT_OPS:
        return frame.name
    if _in(frame, "torch/distributed/rendezvous.py"):
        return "rendezvous"
    if _under(frame, "torch/distributed/elastic/rendezvous/"):
        return "rendezvous"
    if _under(frame, "torch/distributed/elastic/agent/", "torch/distributed/launcher/"):
        return "elastic_agent"
    if _in(frame, "torch/nn/parallel/distributed.py") and _func(frame) == "__init__":
        # DDP's constructor: verifies shapes and broadcasts rank 0's parameters to every rank
        return "DistributedDataParallel.__init__"
    if frame.native:
        if re.search(r"c10d::(TCPStore|PrefixStore|FileStore|HashStore|Store)\b", frame.name):
            return "store." + _native_method(frame.name)
        if is_nccl_comm_init(frame.name):
            # the communicator is created lazily by the first collective, and every rank of
            # the group must take part
            return "nccl_comm_init"
    return None



# a backend's entry points, as native stacks name them: c10d::ProcessGroupNCCL::recv(std::vector..)
_C10D_NATIVE_CALL = re.compile(r"c10d::ProcessGroup(?:NCCL|Gloo|MPI|UCC)?::(\w+)(?:\(|$)")
_NATIVE_OPS = {
    "send": "send", "recv": "recv", "recvanysource": "recv", "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced", "reduce": "reduce", "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor", "allgather_into_tensor_coalesced":
    "all_gather_into_tensor", "gather": "gather", "scatter": "scatter", "broadcast": "broadcast",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter_tensor",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all_single", "barrier": "barrier",
}


def is_c10d_op(frame: Frame) -> tuple[Kind, str] | None:
    """A torch.distributed collective or p2p call, or (native frames) the wait on its Work."""
    if _in(frame, *_C10D):
        if frame.name in COLLECTIVE_OPS:
            return "collective", frame.name
        if frame.name in P2P_OPS:
            return "p2p", frame.name
        return None
    if _in(frame, "torch/distributed/_functional_collectives.py") and "wait" in frame.name:
        return "collective", "wait_tensor"
    if _under(frame, *_WRAPPER_PACKAGES):
        if _func(frame) in COLLECTIVE_OPS:
            return "collective", _func(frame)
        if _func(frame) in P2P_OPS:
            return "p2p", _func(frame)
        return None
    if frame.native:
        if "c10d::" in frame.name:
            if re.search(r"(Send|Recv)Work::wait", frame.name):
                return "p2p", "wait"
            if (call := _C10D_NATIVE_CALL.search(frame.name)) is not None:
                # inside the backend's own entry point (gdb: "c10d::ProcessGroupNCCL::recv(...)")
                op = _NATIVE_OPS.get(call.group(1).lower())
                if op is not None:
                    return ("p2p" if op in P2P_OPS else "collective"), op
            if "c10d::Reducer::finalize_backward" in frame.name:
                # DDP's backward ends waiting for its gradient buckets' all_reduce
                return "collective", "all_reduce"
            if re.search(r"Work\w*::wait\b", frame.name):
                return "collective", "wait"
        if is_nccl_group_launch(frame.name):
            return "p2p", "coalesced" if "Coalescing" in frame.name else "ncclGroupEnd"
        if (mpi := mpi_call(frame.name)) is not None:
            return ("p2p" if mpi[0] else "collective"), mpi[1]
    return None



def is_cuda_sync(frame: Frame) -> str | None:
    """Host waiting for the GPU: torch.cuda.synchronize, Event/Stream.synchronize, and (native
    frames) the CUDA runtime calls behind ``.item()`` / ``.cpu()``. Best effort."""
    if _in(frame, "torch/cuda/__init__.py") and frame.name == "synchronize":
        return "torch.cuda.synchronize"
    if _in(frame, "torch/cuda/streams.py") and _func(frame) in ("synchronize", "wait",
                                                                 "query"):
        return frame.name
    if frame.native and _CUDA_SYNC_NATIVE.search(frame.name):
        return frame.name.split("(")[0]
    return None


# --------------------------------------------------------------------------------------------------
# Wait tier predicates

_LOCK_FUNCS = {
    "threading.py": {"Condition.wait", "Condition.wait_for", "Event.wait", "Thread.join",
                     "Thread._wait_for_tstate_lock", "Semaphore.acquire", "Barrier.wait",
                     "_RLock.acquire"},
    "queue.py": {"Queue.get", "Queue.put", "Queue.join"},
    "multiprocessing/queues.py": {"Queue.get", "Queue.put", "SimpleQueue.get",
                                  "JoinableQueue.join"},
    "multiprocessing/connection.py": {"_ConnectionBase.recv", "_ConnectionBase.recv_bytes",
                                      "_ConnectionBase.poll", "wait"},
    "multiprocessing/synchronize.py": {"SemLock.acquire", "Condition.wait", "Event.wait"},
    "multiprocessing/pool.py": {"ApplyResult.get", "ApplyResult.wait", "Pool.join"},
    "multiprocessing/process.py": {"BaseProcess.join"},
    "concurrent/futures/_base.py": {"Future.result", "Future.exception", "wait", "as_completed"},
    "asyncio/base_events.py": {"BaseEventLoop.run_until_complete"},
}
# py-spy before Python 3.11 names a frame by its function alone ("wait", "get"): the same waits
_LOCK_BARE = {path: {name.rsplit(".", 1)[-1] for name in names}
              for path, names in _LOCK_FUNCS.items()}
_LOCK_NATIVE = frozenset({"lock_PyThread_acquire_lock", "rlock_acquire",
                          "PyThread_acquire_lock_timed", "_multiprocessing_SemLock_acquire_impl",
                          "semlock_acquire", "pthread_join"})
_SLEEP_NATIVE = frozenset({"time_sleep", "pysleep"})
# libc's sleep: on an interpreter whose own C code has no symbols (Debian's python3) py-spy shows
# it straight under the Python frame that called time.sleep, with no time_sleep between
_LIBC_SLEEP = frozenset({"clock_nanosleep", "__clock_nanosleep", "nanosleep", "__nanosleep"})
_IO_FILES = frozenset({"socket.py", "ssl.py", "selectors.py", "subprocess.py", "http/client.py",
                       "urllib/request.py", "_pyio.py", "io.py"})
_IO_NATIVE = re.compile(r"^(sock_\w+|_io_\w+|os_read\w*|select_\w+|read|readv|pread64|recv|"
                        r"recvfrom|recvmsg|accept4?|connect|poll|ppoll|select|epoll_wait|"
                        r"__libc_recv|__libc_read|__poll)$")



def is_lock_wait(frame: Frame) -> str | None:
    """Python-level synchronisation: locks, conditions, events, queues, joins, futures, pipes."""
    if frame.native:
        lock = native_lock(frame.name)
        if lock is not None:
            return lock
        return "lock.acquire" if frame.name in _LOCK_NATIVE else None
    path = module_path(frame.filename)
    names = _LOCK_FUNCS.get(path)
    if names and (frame.name in names or frame.name in _LOCK_BARE[path]):
        base = module_path(frame.filename).removesuffix(".py").replace("/", ".")
        return f"{base}.{frame.name}"
    return None


def is_sleep(frame: Frame) -> str | None:
    """``time.sleep`` (visible only as a native frame; asyncio.sleep as a Python one)."""
    if frame.native and frame.name in _SLEEP_NATIVE:
        return "time.sleep"
    if _in(frame, "asyncio/tasks.py") and frame.name == "sleep":
        return "asyncio.sleep"
    return None


def is_io_wait(frame: Frame) -> str | None:
    """Reads and writes on files, pipes and sockets."""
    if frame.native:
        return frame.name if _IO_NATIVE.match(frame.name) else None
    if module_path(frame.filename) in _IO_FILES:
        return f"{module_path(frame.filename).removesuffix('.py')}.{frame.name}"
    return None


WAIT_PREDICATES: tuple[tuple[Kind, Callable[[Frame], str | None]], ...] = (
    ("lock", is_lock_wait), ("sleep", is_sleep), ("io", is_io_wait))


def _native_method(name: str) -> str:
    """``c10d::TCPStore::waitForWorkers(...)`` -> ``waitForWorkers``."""
    return name.split("(")[0].rsplit("::", 1)[-1]


# --------------------------------------------------------------------------------------------------
# Classification


@dataclass(frozen=True, slots=True)
class ThreadActivity:
    """What one thread is doing. ``frame`` decided it; ``user_frame`` is where the job's own code
    is (what a person edits)."""

    kind: Kind
    op: str | None
    frame: Frame | None
    user_frame: Frame | None
    thread_id: int = 0
    thread_name: str | None = None
    active: bool | None = None

    def describe(self) -> str:
        """One line, e.g. ``collective all_reduce at torch/.../distributed_c10d.py:3252, from
        train.py:48``."""
        what = f"{self.kind} {self.op}" if self.op else self.kind
        parts = [what]
        if self.frame is not None and self.frame is not self.user_frame:
            parts.append(f"at {short_where(self.frame)}")
        if self.user_frame is not None:
            parts.append(f"{'from' if len(parts) > 1 else 'at'} {short_where(self.user_frame)}")
        text = " ".join(parts[:2]) + (", " + parts[2] if len(parts) > 2 else "")
        return text + self._idle_note()

    def place(self) -> str:
        """Where it is, without what it does: ``at f (file:line), from g (file:line)``, for a
        sentence that already says what (``blocked on lock.acquire``)."""
        text = self.describe().removesuffix(self._idle_note())
        what = f"{self.kind} {self.op}" if self.op else str(self.kind)
        return text[len(what):].lstrip() if text.startswith(what) else text

    def _idle_note(self) -> str:
        if self.kind == "idle" and self.user_frame is not None:
            return " (blocked in a C call; a --native dump shows which)"
        return ""


def short_where(frame: Frame) -> str:
    """``all_reduce (torch/distributed/distributed_c10d.py:3252)``: a frame cited in one line."""
    path = module_path(frame.filename) if is_library(frame) else frame.filename
    return f"{frame.name} ({path}:{frame.line})" if frame.line is not None else \
        f"{frame.name} ({path})"


# (predicate, outermost?): the API entry names a c10d call best (all_gather_object, not the
# all_gather inside it); for the DataLoader the innermost frame (_try_get_data) says more.
API_PREDICATES: tuple[tuple[Callable[[Frame], tuple[Kind, str] | None], bool], ...] = (
    (lambda f: ("dataloader", op) if (op := is_dataloader_wait(f)) else None, False),
    (lambda f: ("init", op) if (op := is_init_wait(f)) else None, True),
    (is_c10d_op, True),
    (lambda f: ("cuda_sync", op) if (op := is_cuda_sync(f)) else None, True),
)


def classify_thread(thread: ThreadStack) -> ThreadActivity:
    """Name what ``thread`` is doing (see the module docstring for the rules and their order)."""
    frames = thread.frames
    mine = user_frame(frames)

    def make(kind: Kind, op: str | None, frame: Frame | None) -> ThreadActivity:
        return ThreadActivity(kind, op, frame, mine, thread.thread_id, thread.name,
                              thread.active)

    for predicate, outermost in API_PREDICATES:
        found: tuple[Kind, str, Frame] | None = None
        for frame in frames:  # innermost first: the last match is the outermost
            hit = predicate(frame)
            if hit is not None:
                found = (hit[0], hit[1], frame)
                if not outermost:
                    break
        if found is not None:
            return make(*found)
    best: tuple[Kind, str, Frame] | None = None
    for i, frame in enumerate(frames):
        if not is_library(frame):
            break
        if frame.native and frame.name in _LIBC_SLEEP:
            # time.sleep when a Python frame called it (no symbols for the interpreter's C
            # code); from C or C++ (a torch thread's sleep_for) only the libc call is known
            caller = frames[i + 1] if i + 1 < len(frames) else None
            best = ("sleep", "time.sleep" if caller is not None and not caller.native
                    else frame.name, frame)
            continue
        for kind, wait_predicate in WAIT_PREDICATES:
            op = wait_predicate(frame)
            if op is not None:
                best = (kind, op, frame)
                break
    if best is not None:
        if best[0] in ("lock", "sleep") and not _in_child_process(frames) and (data := next(
                (f for f in frames if is_data_iterator(f)), None)) is not None:
            return make("dataloader", f"{data.name} via {best[1]}", data)
        return make(*best)
    if thread.active:
        return make("compute", None, frames[0] if frames else None)
    return make("idle", None, mine or (frames[0] if frames else None))


def main_thread(sample: StackSample) -> ThreadStack | None:
    """The process's main thread: flagged by the loader, else named "MainThread", else the one
    whose id is the pid (Linux), else the first listed."""
    threads = sample.threads
    tests: tuple[Callable[[ThreadStack], bool], ...] = (
        lambda t: t.is_main, lambda t: t.name == "MainThread",
        lambda t: t.thread_id == sample.pid)
    for test in tests:
        found = next((t for t in threads if test(t)), None)
        if found is not None:
            return found
    return threads[0] if threads else None

