"""Stacks from tools other than py-spy, as people paste them: gdb and faulthandler.

gdb (``thread apply all bt``, ``bt`` after ``thread N``; frames innermost first)::

    Thread 3 (Thread 0x7f55 (LWP 8124) "python"):
    [Switching to thread 18 (Thread 0x7ff43bce1700 (LWP 291928))]
    #0  0x00007ff4585a6709 in pthread_cond_timedwait@@GLIBC_2.3.2 () from /lib/.../libpthread.so.0
    #1  __GI___cxa_atexit (func=...) at ./stdlib/cxa_atexit.c:70

gdb's ``py-bt`` and ``faulthandler`` (``dump_traceback``, ``dump_traceback_later``, a fatal signal),
innermost first::

    Thread 0x00007f34546e3240 (most recent call first):
      File "/opt/.../dataloader.py", line 1209 in _try_put_index
    Traceback (most recent call first):
      Waiting for the GIL
      File "/opt/.../rpc/api.py", line 719, in _invoke_rpc

Each thread becomes a :class:`ThreadStack` of native (gdb) or Python frames; a ``Waiting for the
GIL`` line becomes a native ``take_gil`` frame, which is what it means. Any prefix before the
markers (timestamps, ``[rank=0] ||``) is skipped; a ``[rank=N]``/``[rankN]`` in it names the rank.
The first thread of a paste is its main thread unless one is named ``MainThread`` or ``Current
thread``: faulthandler and gdb both list the thread that was running first.
"""

from __future__ import annotations

import re

from hangscope.errors import BadInputError
from hangscope.model import Frame, StackSample, ThreadStack
from hangscope.sources.pyspy import intern_frame

MAX_BYTES = 32 << 20

_GDB_THREAD = re.compile(r"(?:^|\[Switching to )[Tt]hread (\d+) \(Thread (0x[0-9a-f]+)"
                         r"(?: \(LWP (\d+)\))?\)?(?: \"([^\"]*)\")?")
_GDB_FRAME = re.compile(r"^#(\d+)\s+(?:0x[0-9a-f]+ in )?(?P<rest>.+)$")
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-f]+)(?: \[([^\]]*)\])? "
                        r"\(most recent call first\):")
_PYBT_HEAD = re.compile(r"Traceback \(most recent call first\):")
_PY_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')
_RANK = re.compile(r"\[rank[=: ]?(\d+)\]", re.I)


def sniff_stack_paste(head: bytes) -> bool:
    """True when the first bytes hold a gdb backtrace or a faulthandler/py-bt dump."""
    text = head[:65536].decode("utf-8", "replace")
    if _FH_THREAD.search(text) or _PYBT_HEAD.search(text):
        return True
    frames = re.findall(r"(?m)^#\d+\s+(?:0x[0-9a-f]+ in )?\S", text)
    return len(frames) >= 3


def _gdb_name(rest: str) -> tuple[str, str, int | None]:
    """(function, file, line) of a gdb frame line after its number and address."""
    where = ""
    line: int | None = None
    at = re.search(r" at ([^\s:]+):(\d+)\s*$", rest)
    if at:
        where, line = at.group(1), int(at.group(2))
        rest = rest[:at.start()]
    lib = re.search(r" from (\S+)\s*$", rest)
    if lib:
        where = where or lib.group(1)
        rest = rest[:lib.start()]
    lead = ""
    if rest.startswith("(anonymous namespace)::"):
        lead, rest = "(anonymous namespace)::", rest[len("(anonymous namespace)::"):]
    name = re.split(r"\s?\(", rest, maxsplit=1)[0].strip()
    return lead + name, where, line


def parse_stack_paste(text: str, path: str, taken_at: float = 0.0
                      ) -> list[tuple[int | None, StackSample]]:
    """Every thread of a gdb or faulthandler paste, as one sample per rank seen (None: none)."""
    if len(text) > MAX_BYTES:
        raise BadInputError(path, f"stack paste larger than {MAX_BYTES >> 20} MiB")
    threads: dict[int | None, list[tuple[int, str | None, bool, list[Frame]]]] = {}
    current: list[Frame] | None = None
    rank: int | None = None
    seen_ids: set[tuple[int | None, int]] = set()
    for raw in text.splitlines():
        line = raw.rstrip()
        gdb = _GDB_THREAD.search(line)
        fh = _FH_THREAD.search(line)
        if fh or gdb or _PYBT_HEAD.search(line):
            prefix_rank = _RANK.search(line[:120])
            rank = int(prefix_rank.group(1)) if prefix_rank else rank
            if fh:
                ident = int(fh.group(2), 16)
            elif gdb:
                ident = int(gdb.group(3) or gdb.group(1))
            else:
                ident = len(threads.get(rank, [])) + 1
            if (rank, ident) in seen_ids and not fh:
                # gdb prints a thread's header again for "bt" after "thread N": same thread
                current = next(t[3] for t in threads[rank] if t[0] == ident)
                current.clear()
                continue
            seen_ids.add((rank, ident))
            name = (gdb.group(4) if gdb else None) or None
            is_current = bool(fh and fh.group(1) == "Current thread")
            current = []
            threads.setdefault(rank, []).append((ident, name, is_current, current))
            continue
        if current is None:
            continue
        if "Waiting for the GIL" in line:
            current.append(intern_frame("take_gil", "python (Waiting for the GIL)", None, True))
            continue
        py = _PY_FRAME.search(line)
        if py:
            current.append(intern_frame(py.group("func"), py.group("file"),
                                        int(py.group("line")[:9]), False))
            continue
        frame = _GDB_FRAME.match(line.strip())
        if frame:
            name, where, line_no = _gdb_name(frame.group("rest"))
            current.append(intern_frame(name, where, line_no, True))
    out: list[tuple[int | None, StackSample]] = []
    for who, items in threads.items():
        stacks = [ThreadStack(ident, tuple(frames), name, False, None, None)
                  for ident, name, _, frames in items if frames]
        if not stacks:
            continue
        main = next((i for i, (_, name, cur, _) in enumerate(items) if name == "MainThread"),
                    next((i for i, (_, _, cur, _) in enumerate(items) if cur), 0))
        main_id = items[main][0]
        stacks = [ThreadStack(t.thread_id, t.frames, t.name, t.thread_id == main_id, None, None)
                  for t in stacks]
        out.append((who, StackSample(pid=0, taken_at=taken_at, threads=tuple(stacks),
                                     source="gdb/faulthandler", path=path)))
    if not out:
        raise BadInputError(path, "no gdb or faulthandler thread stack found in this text")
    return out
