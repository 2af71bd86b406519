"""Rules written after blind batch 28's first look, each in the general form the software's own
output allows (none is a corpus log): the tracebacks Ctrl-C prints are a stack sample of where a
hung process waited, not a death; NCCL's ``Destroy COMPLETE`` from every rank of a communicator
is a job that tore NCCL down itself; c10d's old store ``connect() timed out`` and NCCL's
``Invalid rank requested`` are set-up failures; the exception under torch.multiprocessing.spawn's
``-- Process N terminated with the following error:`` is process N's; screen-row padding at an
uncommon width is a wrap; a repeated metric line whose counter rises is training that moved; NCCL's socket transport on the
loopback beside a real interface is a set-up that cannot reach other hosts."""

from __future__ import annotations

import textwrap
from pathlib import Path

from _logs_helpers import kind_and_culprits, verdict_of

from hangscope.sources import interrupt_stacks
from hangscope.sources.logs.normalize import normalize

_LIB = "/usr/lib/python3.10"
_TORCH = "/usr/lib/python3/site-packages/torch"

_DATALOADER_CTRL_C = f"""^CTraceback (most recent call last):
  File "train.py", line 120, in <module>
    main()
  File "train.py", line 98, in main
    for step, batch in enumerate(loader):
  File "{_TORCH}/utils/data/dataloader.py", line 633, in __next__
    data = self._next_data()
  File "{_TORCH}/utils/data/dataloader.py", line 1328, in _next_data
    idx, data = self._get_data()
  File "{_TORCH}/utils/data/dataloader.py", line 1294, in _get_data
    success, data = self._try_get_data()
  File "{_TORCH}/utils/data/dataloader.py", line 1132, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
  File "{_LIB}/multiprocessing/queues.py", line 113, in get
    if not self._poll(timeout):
KeyboardInterrupt
"""

_JOIN_CTRL_C = f"""^CProcess tracker_service:
Traceback (most recent call last):
  File "{_LIB}/multiprocessing/process.py", line 315, in _bootstrap
    self.run()
  File "{_LIB}/multiprocessing/process.py", line 108, in run
    self._target(*self._args, **self._kwargs)
  File "/opt/tracker/service.py", line 40, in serve
    writer.join()
  File "{_LIB}/threading.py", line 1096, in join
    self._wait_for_tstate_lock()
  File "{_LIB}/threading.py", line 1116, in _wait_for_tstate_lock
    if lock.acquire(block, timeout):
KeyboardInterrupt
"""


def test_a_ctrl_c_traceback_in_a_dataloader_wait_is_a_stall(tmp_path: Path) -> None:
    # GIVEN what Ctrl-C printed for a process blocked on its DataLoader's next batch
    # THEN it is read as a stack of that wait, not as the process dying of an exception
    assert kind_and_culprits(verdict_of(tmp_path, _DATALOADER_CTRL_C))[0] == "dataloader_stall"


def test_a_ctrl_c_traceback_in_a_thread_join_is_a_python_wait(tmp_path: Path) -> None:
    assert kind_and_culprits(verdict_of(tmp_path, _JOIN_CTRL_C))[0] == "python_deadlock"


def test_a_ctrl_c_after_a_log_that_says_what_failed_stays_a_log() -> None:
    # a long log whose lines say what failed, then the user's Ctrl-C: not a stack paste
    log = [f"[rank0]: step {i} loss 1.{i}" for i in range(40)]
    log += ["[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
    text = "\n".join(log) + "\n" + _DATALOADER_CTRL_C
    assert not interrupt_stacks.sniff(text)
    # and a traceback that is no interrupt (an exception's) is no stack either
    plain = _DATALOADER_CTRL_C.replace("^C", "").replace("KeyboardInterrupt",
                                                         "ValueError: bad sample")
    assert not interrupt_stacks.sniff(plain)


def test_a_ctrl_c_after_set_up_prints_that_name_no_failure_is_read(tmp_path: Path) -> None:
    # GIVEN a program's own set-up prints (more lines than the traceback), the user's words, and
    # what Ctrl-C printed for its wait on the DataLoader
    prints = [f"config.{name} = {value}" for name, value in
              (("lr", 0.001), ("batch_size", 16), ("workers", 16), ("epochs", 50),
               ("img_size", 384), ("seed", 1234), ("optim", "SGD"), ("decay", 0.0001),
               ("fc_dim", 512), ("num_gpus", 2), ("eval_epoch", 1), ("disp_iter", 20),
               ("arch", "resnet34"), ("crop", 384), ("flip", 1), ("segm_depth", 150),
               ("ckpt", "./ckpt"), ("beta1", 0.9), ("momentum", 0.9), ("lr_step", 20))]
    prints += ["1 Epoch = 631 iters", "Evaluating at 0 epochs...", "",
               "and then stuck for hours. When I ctrl+c it says:", ""]
    text = "\n".join(prints) + "\n" + _DATALOADER_CTRL_C
    # THEN the traceback is still a stack sample: the prints beside it name no failure
    assert interrupt_stacks.sniff(text)
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "dataloader_stall"


def _destroyed(ranks: list[int], nranks: int) -> str:
    lines = [f"node1:4100{r}:4100{r} [{r}] NCCL INFO AllReduce: opCount 7 sendbuff 0x7f00 recvbuff "
             f"0x7f00 count 1 datatype 7 op 0 root 0 comm 0x2bc1f84{r} [nranks={nranks}] stream "
             "(nil)" for r in range(nranks)]
    lines += [f"node1:4100{r}:4110{r} [{r}] NCCL INFO comm 0x2bc1f84{r} rank {r} nranks {nranks} "
              f"cudaDev {r} busId {r}000 - Destroy COMPLETE" for r in ranks]
    return "\n".join(lines) + "\n"


def test_every_rank_destroying_its_communicator_is_a_finished_run(tmp_path: Path) -> None:
    assert verdict_of(tmp_path / "all", _destroyed([0, 1, 2, 3], 4)).status.value == "healthy"
    # one rank's teardown alone says nothing of the others
    assert verdict_of(tmp_path / "one", _destroyed([0], 4)).status.value != "healthy"


def test_set_up_failures_in_older_and_nccl_words_are_init(tmp_path: Path) -> None:
    rdzv = ('  File "/opt/py37/site-packages/torch/distributed/elastic/rendezvous/'
            'static_tcp_rendezvous.py", line 61, in next_rendezvous\n'
            "    multi_tenant=True,\n"
            "RuntimeError: connect() timed out. Original timeout was 900000 ms.\n")
    assert kind_and_culprits(verdict_of(tmp_path / "a", rdzv))[0] == "init_hang"
    nccl = ("worker-1:25:25 [0] NCCL INFO NET/Socket : Using [0]eth0:10.240.1.123<0>\n"
            "worker-1:25:25 [0] init.cc:981 NCCL WARN Invalid rank requested : 2/2\n")
    assert kind_and_culprits(verdict_of(tmp_path / "b", nccl))[0] == "init_hang"


def test_the_exception_under_a_spawn_header_is_that_process(tmp_path: Path) -> None:
    text = ("-- Process 3 terminated with the following error:\n"
            "Traceback (most recent call last):\n"
            f'  File "{_TORCH}/multiprocessing/spawn.py", line 69, in _wrap\n'
            "    fn(i, *args)\n"
            '  File "train_net.py", line 190, in train_loop\n'
            "    self.run_step()\n"
            "FloatingPointError: Loss became infinite or NaN at iteration=137!\n")
    assert kind_and_culprits(verdict_of(tmp_path, text)) == ("rank_died", [3])


def test_screen_padding_at_an_uncommon_width_is_a_wrap_and_a_table_is_not() -> None:
    # GIVEN two traceback lines cut at 97 columns inside a word, each row's rest padded blank
    def padded(line: str) -> str:
        return line[:97] + " " * 40 + line[97:]
    frames = [f'  File "{_TORCH}/utils/data/dataloader.py", line 45, in _worker_loop_for_the_pool',
              f'  File "{_TORCH}/multiprocessing/reductions.py", line 117, in reduce_storage_ab']
    fixed = normalize("\n".join(padded(f) for f in frames).encode() + b"\n")
    # THEN the pieces are joined as the original lines
    assert fixed is not None and fixed.data.decode().splitlines() == frames
    # a table's aligned columns are no padding (only the indentation common to its rows goes)
    table = "\n".join(f"{n:>12}{n // 4:>14}     float     sum      -1    17.08" for n in (8, 16, 32))
    result = normalize(table.encode())
    assert result is None or result.data.decode().splitlines() == \
        textwrap.dedent(table).splitlines()


def _metric_lines(counts: list[int], clock: list[str]) -> str:
    return "".join(f"INFO - 05/01/24 {t} - 0:{i:02d}:00 - {n:>6} - 512.3 samples/s - "
                   f"loss: 2.3{i} - lr: 1.0000e-04\n"
                   for i, (n, t) in enumerate(zip(counts, clock)))


def test_a_repeated_metric_line_counting_up_is_training_that_moved(tmp_path: Path) -> None:
    # GIVEN a logger's own wording (no "step", no bar): its count goes 200 -> 210 -> 220
    clock = ["10:00:00", "10:01:00", "10:02:00"]
    moving = verdict_of(tmp_path / "up", _metric_lines([200, 210, 220], clock))
    assert moving.status.value == "healthy"
    # the same line with its count standing still: only the clock rose, which proves nothing
    standing = verdict_of(tmp_path / "same", _metric_lines([200, 200, 200], clock))
    assert standing.status.value != "healthy"
    # a repeated line of no training metric (a wait's retry count) is no progress
    waits = "".join(f"INFO - 05/01/24 10:0{i}:00 - waiting for rank 1, attempt {i}\n"
                    for i in range(1, 4))
    assert verdict_of(tmp_path / "wait", waits).status.value != "healthy"


def test_nccl_on_the_loopback_beside_a_real_interface_is_a_set_up_fault(tmp_path: Path) -> None:
    head = "master-0:1:1 [0] NCCL INFO "
    both = head + "NET/Socket : Using [0]lo:127.0.0.1<0> [1]eth0:192.168.4.230<0>\n"
    assert kind_and_culprits(verdict_of(tmp_path / "new", both))[0] == "init_hang"
    # NCCL < 2.4: one line per interface, of one process
    old = (head + "NET : Using interface lo:127.0.0.1<0>\n"
           + head + "NET : Using interface eth1:9.73.128.149<0>\n"
           + head + "NET/Socket : 2 interfaces found\n")
    assert kind_and_culprits(verdict_of(tmp_path / "old", old))[0] == "init_hang"
    # lo alone is a one-host job's own choice: no fault
    alone = (head + "NET/Socket : Using [0]lo:127.0.0.1<0>\n"
             + head + "comm 0x55d0 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n")
    assert verdict_of(tmp_path / "alone", alone).root is None


def test_ctrl_c_tracebacks_interleaved_with_the_workers_headers_are_still_read(
        tmp_path: Path) -> None:
    # GIVEN Ctrl-C on a job with DataLoader workers: each worker prints "Process Process-N:",
    # and those lines land inside the main process's traceback
    main = _DATALOADER_CTRL_C.splitlines()[1:-1]
    mixed = ["^CProcess Process-3:", "Process Process-4:", "Traceback (most recent call last):"]
    for at, line in enumerate(main):
        mixed.append(line)
        if at in (1, 4):
            mixed.append(f"Process Process-{at + 5}:")
    text = "\n".join(mixed) + "\n"
    # THEN the main process's frames are read whole, as a wait for the DataLoader
    traces = interrupt_stacks.interrupted_traces(text.splitlines())
    assert traces and traces[0].name is None and traces[0].frames[0][0] == "get"
    assert kind_and_culprits(verdict_of(tmp_path, text))[0] == "dataloader_stall"


def test_signal_handlers_own_words_are_a_death(tmp_path: Path) -> None:
    # UCX's (HPC-X's) handler, and a crash handler's banner: the process died on a signal
    ucx = ("[worker-0:4242:0:4242] Caught signal 7 (Bus error: nonexistent physical address)\n"
           "==== backtrace (tid:   4242) ====\n"
           " 0  /opt/hpcx/ucx/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7dbfbfb08654]\n")
    assert kind_and_culprits(verdict_of(tmp_path / "ucx", ucx))[0] == "rank_died"
    banner = ("!!!!!!! Segfault encountered !!!!!!!\n"
              '  File "<unknown>", line 0, in cuMemCreate\n'
              '  File "misc/cudawrap.cc", line 92, in ncclCuMemHostEnable()\n')
    assert kind_and_culprits(verdict_of(tmp_path / "banner", banner))[0] == "rank_died"
