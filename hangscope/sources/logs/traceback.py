# ruff: noqa: E501
"""Python tracebacks (CPython 3.8-3.13 ``traceback`` module output), with or without per-line
prefixes (``[rank1]: `` added by torch >= 2.2 workers, ``[default1]:`` by torchrun ``--tee``).

::

    [rank1]: Traceback (most recent call last):
    [rank1]:   File "/work/train.py", line 98, in forward_step
    [rank1]:     raise torch.OutOfMemoryError(
    [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. ...

A block becomes ONE ``traceback`` event at the line of its ``Traceback (most recent call last):``.
Lines of other streams (another prefix: interleaved ranks under ``--tee``) are skipped, not ended on.
Chained exceptions ("During handling of the above exception, another exception occurred:" / "The
above exception was the direct cause of the following exception:") continue the block; the event
reports the LAST exception (the one that killed the process) and ``chained`` counts the earlier ones.

fields: exc_type, exc_message (first line, clipped), last_frame ("file:line"), last_function,
frames (count), chained, first_exc_type (when chained), queue_feeder (set where the block starts
in a multiprocessing queue's feeder thread: ``Queue._feed`` prints its own failure and drops the
object, so a DataLoader worker's batch is lost and its rank waits for it forever).

A block cut before its exception line (the paste ends, or the next record starts) gives no
``traceback`` event: what killed the process is not there. One such block is still evidence
(rule ``dataloader-wait-frames``): frames through the DataLoader's wait for its workers
(``torch/utils/data/dataloader.py``, ``_try_get_data`` / ``_get_data``, which block in
``self._data_queue.get(timeout=...)``; ``_shutdown_workers``, which joins workers that must exit)
say the process was stopped while it waited for a batch, or for a worker to exit.
A paste that begins inside a traceback (its header cut off) and reaches its exception is read
the same (rule ``headless-traceback``, ``headless`` set), from its first frame on line 1 or 2.
It gives a ``dataloader_wait`` event at that frame's line (fields last_frame, last_function,
frames). A block (cut or whole) through a main-process-first block (``main_process_first``,
``torch_distributed_zero_first``: the main process runs it while the others wait in a barrier)
says so in ``main_first``; a cut one gives a ``collective_wait`` event at its head (fields
main_first, frames)::

    Traceback (most recent call last):
      File ".../site-packages/torch/utils/data/dataloader.py", line 761, in _try_get_data
        data = self._data_queue.get(timeout=timeout)
      File ".../multiprocessing/queues.py", line 108, in get
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from hangscope.model import LogEvent
from hangscope.sources.logs.base import Follow, Handler
from hangscope.sources.logs.common import SPAWN_HEADER, Context, Line, make_event

MAX_BLOCK_LINES = 2000
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?$')
# a frame whose indentation was lost on the way (a README or a web page rendered the paste): its
# source line and carets stand flush left too, one source line per frame
_FLAT_FRAME = re.compile(r'^File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*))?$')
_CARETS = re.compile(r"^\s*[~^]+\s*$")
# The last line's type: ``...Error`` and the like, or a module's lowercase ``error`` class
# (``zlib.error``, ``struct.error``, ``socket.error``).
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure|Warning|"
                  r"Timeout|Fault|Signal|Abort|Iteration|[A-Z]\w*|\.error))(?::\s?(?P<msg>.*))?$")
# the DataLoader's wait for a batch from its workers' queue
_LOADER_FILE = "torch/utils/data/dataloader.py"
# (and _shutdown_workers, which joins its workers at the end of an epoch: a worker that never
# exits holds it there)
_LOADER_WAITS = frozenset({"_try_get_data", "_get_data", "_shutdown_workers"})
# a multiprocessing queue's feeder thread (``Queue._feed``), which pickles what ``put`` was given
# and writes it to the pipe: where that raises, it prints the traceback from its own frame down
# and drops the object; the process lives on, and whoever waits for the object waits forever
_QUEUES_FILE = "multiprocessing/queues.py"
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# blocks the main process runs first while every other rank waits in a barrier (transformers'
# TrainingArguments.main_process_first, its torch_distributed_zero_first, accelerate's
# main_process_first / local_main_process_first, YOLO's torch_distributed_zero_first)
MAIN_FIRST = frozenset({"main_process_first", "local_main_process_first",
                        "torch_distributed_zero_first", "distributed_zero_first"})
_MAIN_FIRST_CALL = re.compile(r"\bwith\b.*?\b(" + "|".join(sorted(MAIN_FIRST)) + r")\(")


def traceback_block(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    body = line.body
    at = body.find("Traceback (most recent call last):")
    indent = len(body) - len(body.lstrip())
    if at < 0:
        return []
    if at != indent:
        # after a progress bar's last drawing, with no newline between them (a bar another
        # process's output cut mid-drawing ends anywhere: then the next line must be a frame)
        if not body[:at].rstrip().endswith("]") and not _frame_follows(line, follow):
            return []
        indent = 0
    if line.line_no == 1:  # its first frame is this block's, not a headless one's
        first = next(iter(follow.lines()), None)
        if first is not None and first.line_no == 2 and _FRAME.match(first.body) is not None:
            follow.consume(2)
    return _block(line, ctx, follow, indent)


def _frame_follows(line: Line, follow: Follow) -> bool:
    """Whether the next line of ``line``'s stream is a traceback's frame."""
    for nxt in follow.lines():
        if nxt.key == line.key and nxt.body.strip():
            return _FRAME.match(nxt.body) is not None
    return False


# a paste that begins inside a traceback: its first frame on one of these lines (the line above
# it, if any, is the cut-off source line of a frame before)
HEADLESS_WITHIN = 2


def headless_traceback(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """Rule ``headless-traceback``: a paste that starts inside a traceback (its header and first
    frames cut off, as a search excerpt or a copied tail leaves it) and runs to its exception is
    read as the traceback it is; cut at both ends it says too little and is left alone, but for
    frames inside a main-process-first block that run to the paste's end: where a rank waits
    says enough without its exception (broken off by another record, it may be that record's)."""
    if line.line_no > HEADLESS_WITHIN or _FRAME.match(line.body) is None:
        return []
    whole = Follow(lambda: itertools.chain([line], follow.lines()))
    events = [e for e in _block(line, ctx, whole, 0)
              if e.kind == "traceback" or e.fields.get("to_end")]
    follow.consumed |= whole.consumed
    for event in events:
        event.fields["headless"] = 1
    return events


def _block(line: Line, ctx: Context, follow: Follow, indent: int) -> list[LogEvent]:
    """The frames and exception of the block that starts after ``line``."""
    frames = 0
    last_file, last_line, last_func = "", 0, ""
    exc_type, exc_msg = "", ""
    chained = 0
    first_exc = ""
    seen = 0
    chained_starts: list[int] = []
    state = "frames"
    waits_at: tuple[Line, str, str] | None = None
    main_first: tuple[Line, str] | None = None
    to_end = True  # the block ran to the end of the paste (no other record broke it off)
    flat, source_lines = False, 0  # frames flush left; source lines read since the last frame
    feeder = False  # the block starts in a multiprocessing queue's feeder thread
    for nxt in follow.lines():
        seen += 1
        if seen > MAX_BLOCK_LINES:
            to_end = False  # cut by the cap, not by the paste's end
            break
        if nxt.key != line.key:
            continue
        text = nxt.body[indent:] if nxt.body[:indent].isspace() else nxt.body
        if state == "after_exc":
            if not text.strip():
                continue
            if text.startswith(_CHAIN):
                chained += 1
                first_exc = first_exc or exc_type
                state = "await_tb"
                continue
            break
        if state == "await_tb":
            if not text.strip():
                continue
            if text.startswith("Traceback (most recent call last):"):
                chained_starts.append(nxt.line_no)
                state = "frames"
                continue
            break
        fm = _FRAME.match(text)
        if fm is None and (frames == 0 or flat) and (fm := _FLAT_FRAME.match(text)):
            flat = True
        if fm:
            frames += 1
            source_lines = 0
            last_file, last_line = fm.group("file"), int(fm.group("line"))
            last_func = (fm.group("func") or "").strip()
            if frames == 1 and not chained_starts:
                feeder = last_func == "_feed" and last_file.replace("\\", "/").endswith(
                    _QUEUES_FILE)
            if last_func in MAIN_FIRST and main_first is None:
                main_first = (nxt, last_func)
            if waits_at is None and last_func in _LOADER_WAITS \
                    and last_file.replace("\\", "/").endswith(_LOADER_FILE):
                waits_at = (nxt, f"{last_file}:{last_line}", last_func)
            continue
        if flat and text.strip() and (_CARETS.match(text) or not source_lines
                                      and not _EXC.match(text)):
            source_lines += 1
            continue  # a flush-left frame's source line, or its carets
        if text.startswith((" ", "\t")) or not text.strip():
            if main_first is None and (mf := _MAIN_FIRST_CALL.search(text)):
                main_first = (nxt, mf.group(1))  # "with training_args.main_process_first(...):"
            continue  # source line, caret line, "..." or a blank
        if text.startswith("Traceback (most recent call last):"):
            continue
        em = _EXC.match(text.strip("*`")) if text[:1] in "*`" else _EXC.match(text)
        if em:
            exc_type, exc_msg = em.group("type"), (em.group("msg") or "").strip()
            state = "after_exc"
            continue
        to_end = False
        break
    if not exc_type:
        if main_first is not None:
            return _main_first_wait(line, main_first[1], ctx, frames, to_end)
        return [] if waits_at is None else _loader_wait(*waits_at, ctx, frames)
    for number in chained_starts:  # one event per block; exception lines keep their own triggers
        follow.consume(number)
    fields: dict[str, str | int | float] = {
        "exc_type": exc_type, "exc_message": exc_msg[:500], "frames": frames, "chained": chained}
    if last_file:
        fields["last_frame"] = f"{last_file}:{last_line}"
        fields["last_function"] = last_func
    if first_exc:
        fields["first_exc_type"] = first_exc
    if main_first is not None:
        fields["main_first"] = main_first[1]
    if feeder:
        fields["queue_feeder"] = 1
    return [make_event("traceback", line, ctx, "error", fields)]


def _main_first_wait(head: Line, function: str, ctx: Context, frames: int,
                     to_end: bool) -> list[LogEvent]:
    """Rule ``main-process-first`` (``analysis/detectors/main_first.py``): a traceback, cut before
    its exception, through a block the main process runs first while the others wait.
    ``to_end``: the paste ended inside it (rather than another record breaking it off)."""
    fields: dict[str, str | int | float] = {"frames": frames, "main_first": function}
    if to_end:
        fields["to_end"] = 1
    message = (f"a traceback, cut before its exception, runs through {function}: the rank waits "
               "in that block's barrier for the main process")
    return [make_event("collective_wait", head, ctx, "warning", fields, message=message)]


def _loader_wait(frame: Line, where: str, function: str, ctx: Context,
                 frames: int) -> list[LogEvent]:
    """Rule ``dataloader-wait-frames`` (module docstring): a cut traceback through the DataLoader's
    wait for its workers."""
    fields: dict[str, str | int | float] = {"frames": frames, "last_frame": where,
                                            "rule": "dataloader-wait-frames"}
    what = "its workers to exit" if function == "_shutdown_workers" else "a batch from its workers"
    message = (f"a traceback, cut before its exception, runs through the DataLoader's wait for "
               f"{what} ({where})")
    return [make_event("dataloader_wait", frame, ctx, "warning", fields, message=message)]


_THREAD = re.compile(r"Exception in thread (?P<name>.+?)(?: \(\d+\))?:\s*$")


def thread_exception(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``threading.excepthook``: ``Exception in thread uploader:`` then the traceback. The thread
    died, not the process: the event carries ``thread`` so that no one reads it as the rank's
    death."""
    m = _THREAD.search(line.body)
    if not m:
        return []
    events = _traceback_under(line, ctx, follow, over_blanks=False)
    for event in events:
        event.fields["thread"] = m.group("name")[:120]
    return events


def spawned_exception(line: Line, ctx: Context, follow: Follow) -> list[LogEvent]:
    """``torch.multiprocessing.spawn``'s parent re-raises a child's exception under ``-- Process
    N terminated with the following error:``: the traceback below is process N's (the rank of
    a one-node job; ``launcher``, as good as that process's own prefix), wherever it is pasted
    without one."""
    m = SPAWN_HEADER.search(line.body)
    if not m:
        return []
    named = int(m.group(1))
    out = []
    for event in _traceback_under(line, ctx, follow, over_blanks=True):
        if event.rank is None or event.fields.get("rank_source") in (None, "", "path"):
            event.fields["rank_source"] = "launcher"
            event = dataclasses.replace(event, rank=named)
        out.append(event)
    return out


def _traceback_under(line: Line, ctx: Context, follow: Follow,
                     over_blanks: bool) -> list[LogEvent]:
    """The traceback that opens on the next line of ``line``'s stream (or the next non-blank
    one), read as its block; nothing where that line opens none."""
    for index, nxt in enumerate(follow.lines()):
        if nxt.key != line.key or (over_blanks and not nxt.body.strip()):
            continue
        if not nxt.body.lstrip().startswith("Traceback (most recent call last):"):
            return []
        rest = Follow(lambda: itertools.islice(follow.lines(), index + 1, None))
        events = traceback_block(nxt, ctx, rest)
        follow.consumed |= rest.consumed
        follow.consume(nxt.line_no)
        return events
    return []


HANDLERS: list[tuple[bytes, Handler]] = [
    (b"Exception in thread ", thread_exception),
    (b"terminated with the following error", spawned_exception),
    (b"Traceback (most recent call last):", traceback_block),
    (b'File "', headless_traceback),
]
