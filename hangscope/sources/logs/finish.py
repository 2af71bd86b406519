# ruff: noqa: E501  (the docstring quotes raw log lines verbatim)
"""Lines that say a training run finished: the loop's own words, or its last epoch completed.

Read from the log's tail (``tail.TAIL_BYTES``). ``run_finished`` events (fields ``how``: the
wording matched) for::

    Training completed. Do not forget to share your model on huggingface.co/models =)   # HF Trainer
    `Trainer.fit` stopped: `max_epochs=10` reached.                                   # Lightning
    [after training is done] datetime: 2024-01-02 10:00:00                            # Megatron-LM
    2022-07-29 22:52:33 | INFO | fairseq_cli.train | done training in 162.1 seconds   # fairseq
    [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.
                                                                                      # torchelastic
    Training complete! Final step: 263082                                             # a script's own
    Epoch 10/10                                                                       # Keras, and the
    70/70 [==============================] - 7s 99ms/step - loss: 0.0863              # like: the last
                                                                                      # epoch's bar full

The last form needs both: an ``Epoch N/N`` line (the declared last epoch) and, after it, a bar
at its total (``M/M [``). So does a program's bare word that it is through, right after its
progress bar reached its total::

    Running repro: 100%|##########| 100000/100000 [24:02<00:00, 69.34it/s]            # tqdm, then
    Completed successfully                                                            # the script
 A job's own per-rank prints count when every rank of a contiguous
``0..N`` (N >= 1) says it succeeded or finished, each naming its rank in the text or its prefix::

    [MPI Rank 5] runCount: 10000 Success                                              # a user's
    rank 3 finished successfully                                                       # benchmark
    Process 31 - Training time: 10.09 seconds                                         # a summary

NCCL's teardown of a communicator by every one of its ranks (``ncclCommDestroy``)::

    TARS:829508:829627 [1] NCCL INFO comm 0x3ab1b680 rank 1 nranks 2 cudaDev 1 busId d000 - Destroy COMPLETE

or its abort by every one (``Abort COMPLETE``, ``how`` ``nccl_aborted``): torch's process group
aborts its communicators when a process exits without destroying them, and so does its watchdog
after a timeout or an error, so ``log_health`` reads it as an end only where no log shows a
failure at all.

DeepSpeed's launcher, which logs each worker that exits 0 and stops the rest at the first that
does not (``exits with return code = N``): every worker its launchers started (``num_local_procs=N``, one
line per node's launcher) exiting 0, or, where the log does not say how many, two or more whose exits are the log's last
lines::

    [2023-04-18 03:45:33,424] [INFO] [launch.py:460:main] Process 10393 exits successfully.

and torch's exit-time warning of a process group never destroyed (torch >= 2.4, printed by a
process leaving its program normally)::

    [rank0]:[W515 07:06:42.829549331 ProcessGroupNCCL.cpp:1117] WARNING: process group has NOT been destroyed before it is being destructed.
    [rank0]:[W616 21:29:33.762196891 ProcessGroupNCCL.cpp:1496] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources.
 ``analysis/log_health.py`` (rule ``run-finished``) reads the event as
a healthy run where no rank logged a failure.
"""

from __future__ import annotations

import re

from hangscope.model import LogEvent
from hangscope.sources.logs.common import Line, make_event
from hangscope.sources.logs.nccl_debug import COMM_END
from hangscope.sources.logs.tail import LogicalTail, logical_tail, tail_candidates

_CANDIDATE = re.compile(rb"(?i)complete|stopped|training is done|done training|successfully finished|epoch|\[=|"
                        rb"exits (?:successfully|with return code)|num_local_procs=|"
                        rb"success|succeeded|finished|NOT been destroyed|was not called before program exit|(?:training|total|run) (?:time|duration)|"
                        rb"(?:Destroy|Abort) COMPLETE|\d/\d+ \[")
# a rank's own line that it is through: "[MPI Rank 5] runCount: 10000 Success"; never a negated
# one ("not finished", "didn't finish", "unsuccessful")
_RANK_NAMED = re.compile(r"(?i)\brank[\s:=#]*(?P<rank>\d+)\b")
_RANK_DONE = re.compile(r"(?i)(?<![\w'])(?<!not )(?<!never )(?:success(?:ful(?:ly)?)?|succeeded|finished|completed)\b"
                        r"(?! with (?:errors?|failures?))"
                        # a rank's end-of-run summary: "Process 31 - Training time: 10.09 seconds"
                        r"|\b(?:training|total|run) (?:time|duration)\s*[:=]\s*\d")
_FAILED_WORDS = re.compile(r"(?i)\b(?:fail\w*|error|exception|timed? ?out|abort\w*|killed|unsuccessful)\b")
_SAID = (
    ("hf_trainer", re.compile(r"\bTraining completed\. Do not forget to share your model")),
    ("lightning", re.compile(r"`Trainer\.fit` stopped: `max_(?:epochs|steps)=\d+` reached")),
    ("megatron", re.compile(r"\[after training is done\]")),
    ("elastic", re.compile(r"worker group successfully finished")),
    ("fairseq", re.compile(r"\bdone training in \d+(?:\.\d+)? seconds")),
    # a training script's own last word, as a sentence of its own ("Training complete! Final
    # step: 1000", "[INFO] [train.py:535] Training finished, exiting ...", "*** Finished
    # Training ***"); never one rank's ("Training completed for rank 6"), a hedge ("Training
    # completed or interrupted") or one epoch's ("Epoch 5: Training complete. Validating")
    ("script", re.compile(r"(?i)^(?!.*\b(?:epoch|iteration|stage|phase|round)\b[^.!;]{0,40}"
                          r"\b(?:training|train run) (?:is )?(?:complete|finished|done|ended))"
                          r".*?(?:^|[]|:>*#=.!;-]\s*)(?:(?:training|train run) (?:is )?"
                          r"(?:complete[ds]?|finished|done|ended)|(?:finished|done|completed) "
                          r"training)\b(?![^.!;]*\b(?:or|for rank|on rank|with errors?)\b)")),
    # torch >= 2.4, ProcessGroupNCCL's destructor at interpreter exit without
    # destroy_process_group(): printed by a process that left its program normally
    # (torch 2.4's words; 2.5's "... before we destruct ProcessGroupNCCL"; 2.6 on:
    # "destroy_process_group() was not called before program exit")
    ("pg_destructed_at_exit", re.compile(r"process group has NOT been destroyed before (?:it is being destructed|we destruct)|"
                                         r"destroy_process_group\(\) was not called before program exit")),
)
# a progress bar at its total (tqdm: "Running repro: 100%|####| 100000/100000 [24:02<00:00, ...]")
# and, on the very next line, the program's word that it is through: "Completed successfully"
_BAR_AT_TOTAL = re.compile(r"(?<![\d/])(?P<n>\d+)/(?P=n) \[\d+:\d+(?::\d+)?<")
_DONE_ALONE = re.compile(r"(?i)^(?:[a-z][\w\- ]{0,40} )?(?:completed|finished|done)(?: successfully)?[.!]?$")
_DS_EXITED = re.compile(r"\bProcess (?P<pid>\d+) exits (?:(?P<ok>successfully)|with return code)")
_DS_LOCAL = re.compile(r"\bnum_local_procs=(?P<n>\d+)")
_LAST_EPOCH = re.compile(r"^Epoch (?P<n>\d+)/(?P=n)\s*$")
_FULL_BAR = re.compile(r"^(?P<n>\d+)/(?P=n) \[=+\]")


def scan_finish(path: str, rank_hint: int | None = None,
                tail: LogicalTail | None = None) -> list[LogEvent]:
    tail = tail or logical_tail(path, rank_hint)
    read = tail_candidates(path, rank_hint, _CANDIDATE, tail)
    if read is None or tail is None:
        return []
    ctx, lines = read
    said = tail.last_said(1)
    log_end = tail.line_no(said[0]) if said else 0
    events = []
    last_epoch = False
    bar_at_total = -1  # line number of the latest bar at its total
    done: dict[int, Line] = {}
    destroyed: dict[int, dict[int, Line]] = {}  # nranks -> rank in the communicator -> its line
    aborted: dict[int, dict[int, Line]] = {}  # the same, for "Abort COMPLETE"
    exited: dict[int, Line] = {}  # DeepSpeed's launcher: pid -> its "exits successfully" line
    failed_exit = False
    local_procs = 0
    for line in lines:
        body = line.body.strip()
        if (ds := _DS_EXITED.search(body)) is not None:
            failed_exit = failed_exit or ds.group("ok") is None
            exited[int(ds.group("pid"))] = line
            continue
        if (procs := _DS_LOCAL.search(body)) is not None:
            local_procs += int(procs.group("n"))  # each node's launcher says its own
        # NCCL's own word that a communicator was torn down in order (an abort is no such word)
        if (comm := COMM_END.search(body)) is not None:
            ended = destroyed if comm.group("how") == "Destroy" else aborted
            ended.setdefault(int(comm.group("n")), {})[int(comm.group("rank"))] = line
            continue
        if _RANK_DONE.search(body) and not _FAILED_WORDS.search(body):
            named = _RANK_NAMED.search(body)
            rank = int(named.group("rank")) if named else line.rank
            if rank is not None:
                done[rank] = line
        how = next((name for name, pattern in _SAID if pattern.search(body)), None)
        if _BAR_AT_TOTAL.search(body):
            bar_at_total = line.line_no
            continue
        if how is None and bar_at_total == line.line_no - 1 and _DONE_ALONE.match(body):
            how = "bar_then_done"
        if how is None and _LAST_EPOCH.match(body):
            last_epoch = True
            continue
        if how is None and last_epoch and _FULL_BAR.match(body):
            how, last_epoch = "last_epoch", False
        if how is not None:
            events.append(make_event("run_finished", line, ctx, "info", {"how": how}))
    if not events and exited and not failed_exit and _launcher_done(exited, local_procs, log_end):
        last = max(exited.values(), key=lambda item: item.line_no)
        events.append(make_event("run_finished", last, ctx, "info",
                                 {"how": "launcher_exits", "workers": len(exited)}))
    for how, ended in (("nccl_destroyed", destroyed), ("nccl_aborted", aborted)):
        whole = [ranks for n, ranks in ended.items() if n >= 2 and sorted(ranks) == list(range(n))]
        if not events and whole:
            # every member of a communicator destroyed it in order: the job tore NCCL down
            # itself; or aborted it, as torch's process group does at a process's exit when the
            # program never destroyed it (and as its watchdog does after a timeout or an
            # error: log_health reads an abort as an end only where no log shows one)
            ranks = max(whole, key=len)
            last = max(ranks.values(), key=lambda item: item.line_no)
            events.append(make_event("run_finished", last, ctx, "info",
                                     {"how": how, "ranks": ",".join(map(str, sorted(ranks)))}))
    if not events and len(done) >= 2:
        # 0..N all said so; else the ranks that did, which counts only where they are every
        # rank the logs show (log_health.logs_finished checks)
        every = sorted(done) == list(range(len(done)))
        last = max(done.values(), key=lambda item: item.line_no)
        events.append(make_event("run_finished", last, ctx, "info",
                                 {"how": "every_rank" if every else "ranks_seen",
                                  "ranks": ",".join(map(str, sorted(done)))}))
    return events[-1:]


def _launcher_done(exited: dict[int, Line], local_procs: int, log_end: int) -> bool:
    """Every worker the launcher started exited 0: as many as ``num_local_procs`` where the log
    says it, else two or more whose exits end the log (a worker that exits early while the rest
    wait in a collective shows later lines, or fewer exits than workers)."""
    if local_procs:
        return len(exited) == local_procs
    return len(exited) >= 2 and max(line.line_no for line in exited.values()) >= log_end
