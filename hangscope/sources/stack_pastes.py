"""Stacks from tools other than py-spy, as people paste them: gdb and faulthandler.

gdb (``thread apply all bt``, ``bt`` after ``thread N``; frames innermost first; gdb wraps a long
frame onto indented lines, which are joined back)::

    Thread 3 (Thread 0x7f55 (LWP 8124) "python"):
    [Switching to thread 18 (Thread 0x7ff43bce1700 (LWP 291928))]
    #0  0x00007ff4585a6709 in pthread_cond_timedwait@@GLIBC_2.3.2 () from /lib/.../libpthread.so.0
    #1  __GI___cxa_atexit (func=...,
        d=0x7fab43f9bf00) at ./stdlib/cxa_atexit.c:70

A bare frame list with no ``Thread N`` header (``(gdb) bt`` of the current thread, or an excerpt)
is one implicit thread; a ``#0`` after frames starts the next one, unless it repeats the frame the
current thread already starts with (``thread N`` prints frame #0, then ``bt`` lists it again).

gdb's ``py-bt`` and ``faulthandler`` (``dump_traceback``, ``dump_traceback_later``, a fatal signal),
innermost first::

    Thread 0x00007f34546e3240 (most recent call first):
      File "/opt/.../dataloader.py", line 1209 in _try_put_index
    Traceback (most recent call first):
      Waiting for the GIL
      <built-in method _invoke_rpc_python_udf of PyCapsule object at remote 0x7f910957bea0>
      File "/opt/.../rpc/api.py", line 719, in _invoke_rpc

Each thread becomes a :class:`ThreadStack` of native (gdb) or Python frames; a ``Waiting for the
GIL`` line becomes a native ``take_gil`` frame, which is what it means, and a py-bt ``<built-in
method NAME ...>`` line a native frame NAME. A py-bt excerpt that starts at ``Waiting for the GIL``
or a ``<built-in method`` line (its header cut off) is one implicit thread too; Python frames with
no header are not (an exception's traceback lists the same lines outermost first). Any prefix
before the markers (timestamps, ``[rank=0] ||``) is skipped; a ``[rank=N]``/``[rankN]`` in it
names the rank. The first thread of a paste is its main thread unless one is named ``MainThread``
or ``Current thread``: faulthandler and gdb both list the thread that was running first.
The threads faulthandler lists after ``Fatal Python error: ...`` are those of a process as it
dies (a segfault, an abort): where it crashed, not where it waits; they are not kept as a stack
sample (the log reader reads the death).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hangscope.errors import BadInputError
from hangscope.model import Frame, StackSample, ThreadStack
from hangscope.sources import interrupt_stacks
from hangscope.sources.pyspy import intern_frame

MAX_BYTES = 32 << 20

_GDB_THREAD = re.compile(r"(?:^|\[Switching to )[Tt]hread (\d+) \(Thread (0x[0-9a-f]+)"
                         r"(?: \(LWP (\d+)\))?\)?(?: \"([^\"]*)\")?")
_GDB_FRAME = re.compile(r"^#(?P<num>\d+)\s+(?:0x[0-9a-f]+ in )?(?P<rest>.+)$")
_FH_THREAD = re.compile(r"(Current thread|Thread) (0x[0-9a-f]+)(?: \[([^\]]*)\])? "
                        r"\(most recent call first\):")
_PYBT_HEAD = re.compile(r"Traceback \(most recent call first\):")
_PY_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')
_PYBT_BUILTIN = re.compile(r"<built-in method (?P<name>\w+) of .* object at (?:remote )?0x")
_GIL_WAIT = "Waiting for the GIL"
# faulthandler on a fatal signal, or Py_FatalError: the threads it then lists are the dying
# process's ("Fatal Python error: Segmentation fault", "... Aborted")
_FATAL = re.compile(r"Fatal Python error: ")
_NO_FRAME = "<no Python frame>"
_RANK = re.compile(r"\[rank[=: ]?(\d+)\]", re.I)
# a frame line as gdb prints it: "#3  0x00007f in name (args) from lib" / "#1  name (args) at f:1"
_SNIFF_FRAME = re.compile(r"(?m)^#(\d+)\s+(?:0x[0-9a-fA-F]+ in )?[A-Za-z_~(?]")
_GDB_MARKS = re.compile(r"(?m)^\(gdb\)|^#\d+\s+0x[0-9a-fA-F]+ in |\) at \S+:\d+\s*$| from /\S+$")
_TERMINAL_JUNK = re.compile(r"\s+\[\d+/\d+\]\s*$")  # a pager's "[390/7275]" left on a line


def sniff_stack_paste(head: bytes) -> bool:
    """True when the first bytes hold a gdb backtrace, a faulthandler/py-bt dump, or mostly
    Ctrl-C tracebacks (``interrupt_stacks``)."""
    text = head[:65536].decode("utf-8", "replace")
    if _FH_THREAD.search(text) or _PYBT_HEAD.search(text) or _PYBT_BUILTIN.search(text):
        return True
    if interrupt_stacks.sniff(text):
        return True
    if _GIL_WAIT in text and _PY_FRAME.search(text, text.index(_GIL_WAIT)):
        return True
    numbers = [int(n) for n in _SNIFF_FRAME.findall(text)]
    # three frames; or an excerpt of two in a row (#0 #1, #9 #10) that shows it is gdb's (a
    # prompt, an address, a source position or a library)
    return len(numbers) >= 3 or (any(b == a + 1 for a, b in zip(numbers, numbers[1:]))
                                 and _GDB_MARKS.search(text) is not None)


def _gdb_name(rest: str) -> tuple[str, str, int | None]:
    """(function, file, line) of a gdb frame line after its number and address."""
    rest = _TERMINAL_JUNK.sub("", rest)
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
    return _function_name(rest), where, line


def _function_name(text: str) -> str:
    """The function of ``ret ns::f<T, U>(args) ()``: up to its argument list, without a return
    type (``std::vector<...> c10d::tcputil::recvVector<unsigned char>`` -> the last)."""
    depth = 0
    end = len(text)
    i = 0
    while i < len(text):
        char = text[i]
        if text.startswith("(anonymous namespace)", i):
            i += len("(anonymous namespace)")
            continue
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif char == "(" and depth == 0:
            end = i
            break
        i += 1
    name = text[:end].strip()
    # the last space-separated word outside brackets: "void f" -> "f"
    depth, cut = 0, 0
    for j, char in enumerate(name):
        if char in "<(":
            depth += 1
        elif char in ">)" and depth:
            depth -= 1
        elif char == " " and depth == 0 and not name[:j].endswith("operator"):
            cut = j + 1
    return name[cut:] or name


@dataclass(slots=True)
class _Thread:
    ident: int
    name: str | None
    current: bool  # faulthandler's "Current thread"
    frames: list[Frame] = field(default_factory=list)


@dataclass(slots=True)
class _Paste:
    """The threads read so far, per rank (None: the paste names none)."""

    threads: dict[int | None, list[_Thread]] = field(default_factory=dict)
    rank: int | None = None
    thread: _Thread | None = None
    seen_ids: set[tuple[int | None, int]] = field(default_factory=set)
    gdb_text: str | None = None  # a gdb frame line, until the lines that continue it are read
    # after "Fatal Python error: ...": faulthandler's report of a process as it dies; its
    # threads are where it crashed, not waits of a process that lives on (not kept)
    dying: bool = False
    deaths: int = 0

    def start(self, ident: int, name: str | None = None, current: bool = False) -> None:
        self.thread = _Thread(ident, name, current)
        if not self.dying:
            self.threads.setdefault(self.rank, []).append(self.thread)

    def implicit(self) -> None:
        """A thread with no header of its own: numbered after the rank's threads so far."""
        taken = {t.ident for t in self.threads.get(self.rank, [])}
        ident = len(taken) + 1
        while ident in taken:
            ident += 1
        self.start(ident)

    def flush_gdb(self) -> None:
        if self.gdb_text is None:
            return
        text, self.gdb_text = self.gdb_text, None
        frame = _GDB_FRAME.match(text)
        if frame is None:
            return
        name, where, line_no = _gdb_name(frame.group("rest"))
        new = intern_frame(name, where, line_no, True)
        thread = self.thread
        if thread is None or (frame.group("num") == "0" and thread.frames):
            if thread is not None and thread.frames[0] == new:
                thread.frames.clear()  # the same thread listed again ("thread N", then "bt")
            else:
                self.implicit()
        assert self.thread is not None
        self.thread.frames.append(new)


def parse_stack_paste(text: str, path: str, taken_at: float = 0.0
                      ) -> list[tuple[int | None, StackSample]]:
    """Every thread of a gdb or faulthandler paste, as one sample per rank seen (None: none)."""
    if len(text) > MAX_BYTES:
        raise BadInputError(path, f"stack paste larger than {MAX_BYTES >> 20} MiB")
    paste = _Paste()
    lines = text.splitlines()
    for raw in lines:
        _read_line(paste, raw.rstrip())
    paste.flush_gdb()
    source = "gdb/faulthandler"
    if not any(t.frames for items in paste.threads.values() for t in items):
        source = "ctrl-c traceback"
        _add_interrupted(paste, lines)
    out = [(who, sample) for who, items in paste.threads.items()
           if (sample := _sample(items, path, taken_at, source)) is not None]
    if not out and paste.deaths:
        return []  # only the stacks of processes as they died: the log reader reads the death
    if not out:
        raise BadInputError(path, "no gdb, faulthandler or Ctrl-C thread stack found in this text")
    return out


def _read_line(paste: _Paste, line: str) -> None:
    if paste.gdb_text is not None:
        if line[:1].isspace() and line.strip() and not _is_marker(line):
            paste.gdb_text += " " + line.strip()  # gdb wrapped the frame
            return
        paste.flush_gdb()
    gdb = _GDB_THREAD.search(line)
    fh = _FH_THREAD.search(line)
    if _FATAL.search(line):
        paste.dying, paste.thread = True, None
        paste.deaths += 1
        return
    if paste.dying and line.strip() and not fh and not _PY_FRAME.search(line) \
            and _NO_FRAME not in line:
        paste.dying, paste.thread = False, None  # the report ended ("Extension modules: ...")
    if fh or gdb or _PYBT_HEAD.search(line):
        _header(paste, line, gdb, fh)
        return
    stripped = line.strip()
    if _GDB_FRAME.match(stripped):
        _set_rank(paste, line)
        paste.gdb_text = stripped
        return
    builtin = _PYBT_BUILTIN.search(line)
    if paste.thread is None and (builtin or stripped == _GIL_WAIT):
        _set_rank(paste, line)
        paste.implicit()  # a py-bt excerpt whose header was cut off
    if paste.thread is None:
        return
    frames = paste.thread.frames
    if _GIL_WAIT in line:
        frames.append(intern_frame("take_gil", "python (Waiting for the GIL)", None, True))
    elif builtin:
        frames.append(intern_frame(builtin.group("name"), "python (built-in method)", None, True))
    elif py := _PY_FRAME.search(line):
        frames.append(intern_frame(py.group("func"), py.group("file"),
                                   int(py.group("line")[:9]), False))


def _is_marker(line: str) -> bool:
    return bool(_GDB_FRAME.match(line.strip()) or _GDB_THREAD.search(line)
                or _FH_THREAD.search(line) or _PYBT_HEAD.search(line) or _PY_FRAME.search(line))


def _set_rank(paste: _Paste, line: str) -> None:
    prefix_rank = _RANK.search(line[:120])
    if prefix_rank and paste.thread is None:
        paste.rank = int(prefix_rank.group(1))


def _header(paste: _Paste, line: str, gdb: re.Match[str] | None,
            fh: re.Match[str] | None) -> None:
    prefix_rank = _RANK.search(line[:120])
    paste.rank = int(prefix_rank.group(1)) if prefix_rank else paste.rank
    if fh:
        ident = int(fh.group(2), 16)
    elif gdb:
        ident = int(gdb.group(3) or gdb.group(1))
    else:
        ident = len(paste.threads.get(paste.rank, [])) + 1
    if (paste.rank, ident) in paste.seen_ids and not fh:
        # gdb prints a thread's header again for "bt" after "thread N": same thread
        paste.thread = next(t for t in paste.threads[paste.rank] if t.ident == ident)
        paste.thread.frames.clear()
        return
    paste.seen_ids.add((paste.rank, ident))
    paste.start(ident, (gdb.group(4) if gdb else None) or None,
                bool(fh and fh.group(1) == "Current thread"))


def _add_interrupted(paste: _Paste, lines: list[str]) -> None:
    """The paste's Ctrl-C tracebacks as the threads of one process of no named rank: the main
    process's is named ``MainThread``; a child process's keeps its ``Process NAME``."""
    traces = interrupt_stacks.interrupted_traces(lines)
    main = interrupt_stacks.main_index(traces)
    paste.rank = None
    for index, trace in enumerate(traces):
        paste.start(index + 1, "MainThread" if index == main else trace.name)
        assert paste.thread is not None
        paste.thread.frames.extend(intern_frame(func, where, line, False)
                                   for func, where, line in trace.frames)


def _sample(items: list[_Thread], path: str, taken_at: float,
            source: str = "gdb/faulthandler") -> StackSample | None:
    kept = [t for t in items if t.frames]
    if not kept:
        return None
    main = next((t for t in kept if t.name == "MainThread"),
                next((t for t in kept if t.current), kept[0]))
    stacks = tuple(ThreadStack(t.ident, tuple(t.frames), t.name, t is main, None, None)
                   for t in kept)
    return StackSample(pid=0, taken_at=taken_at, threads=stacks, source=source,
                       path=path)
