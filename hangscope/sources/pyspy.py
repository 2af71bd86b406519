"""Loaders for saved py-spy stack dumps: ``py-spy dump --json``, plain ``py-spy dump`` text, and the
bundle's ``pyspy`` record that wraps one JSON dump.

``py-spy dump --json`` (0.4.3, checked here) prints one JSON list, one object per Python thread, in
no particular order (the main thread is not always first)::

    [{"pid": 9654, "thread_id": 140236553942720, "thread_name": "MainThread",
      "os_thread_id": 9654, "active": false, "owns_gil": false, "process_info": null,
      "frames": [  # innermost first
        {"name": "Thread.join", "filename": "/usr/lib/python3.11/threading.py",
         "module": null, "short_filename": "threading.py", "line": 1119,
         "locals": null | [{"name": "self", "addr": 1, "arg": true, "repr": "<Thread ...>"}],
         "is_entry": false, "is_shim_entry": false}]}]

With ``--native``, native frames have ``module`` set to the shared object and ``line`` 0. A thread
blocked in a C call (``lock.acquire()``, ``time.sleep``, ``sock.recv``) shows *no* frame for that
call without ``--native``: only the Python frame that made it.

Plain ``py-spy dump`` text (filenames shortened; thread ids are OS thread ids in decimal, or
py-spy's hex thread id when it has no OS id)::

    Process 1234: python train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 1234 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:3252)
            Arguments:
                tensor: <Tensor at 0x7f...>
        recv (libc.so.6)                     <- native frame, no line
        sock_call_ex (socketmodule.c:921)    <- native frame with debug info
    Thread 0x7F0A (active+gil): "Thread-1"

Files may hold several dumps one after another, and lines may carry a ``[rank3]:`` prefix when they
went through a launcher's tee (the ranks' lines may then interleave).

Pasted into an issue, the text is often trimmed or edited: the ``Process`` lines cut off (a
second ``MainThread`` then starts the next process's dump: a process has one; with no ``Process``
line the main thread's OS id, which on Linux is the pid, stands for the pid), thread ids removed
(``Thread (idle): "MainThread"``: numbered in order), frames elided (``...``) or summarised
(``_poll → poll → get``; lines that are not frames are skipped).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from hangscope.errors import BadInputError
from hangscope.model import Frame, FrameLocal, JobEvidence, StackSample, ThreadStack
from hangscope.sources.logs.normalize import logical_bytes
from hangscope.sources.pyspy_locals import frame_local, keep_local, locals_from_json

MAX_BYTES = 64 << 20  # a dump with locals of 1000 threads is a few MB
MAX_LINE = 64 << 10  # longer text lines are cut before matching
RECORD_KIND = "pyspy"

# ---------------------------------------------------------------------------------------------
# Interning: identical frames across threads, samples and ranks share one object.

_FRAMES: dict[tuple[str, str, int | None, bool], Frame] = {}
_MAX_INTERNED = 500_000


def intern_frame(name: str, filename: str, line: int | None, native: bool) -> Frame:
    key = (name, filename, line, native)
    found = _FRAMES.get(key)
    if found is None:
        if len(_FRAMES) >= _MAX_INTERNED:
            _FRAMES.clear()
        found = _FRAMES.setdefault(key, Frame(name, filename, line, native))
    return found


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------
# JSON


def parse_pyspy_json(data: bytes, pid: int | None = None, taken_at: float | None = None,
                     path: str | None = None) -> StackSample:
    """One ``py-spy dump --json`` list -> a StackSample. ``pid`` defaults to the dump's own
    ``pid`` field; ``taken_at`` to 0.0 (unknown). Malformed threads are skipped; a dump with
    nothing usable raises BadInputError."""
    where = path or "<py-spy json>"
    if len(data) > MAX_BYTES:
        raise BadInputError(where, f"py-spy dump larger than {MAX_BYTES >> 20} MiB")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputError(where, f"not py-spy JSON ({_one_line(exc)})") from None
    return sample_from_json(doc, pid, taken_at, where, path)


def sample_from_json(doc: Any, pid: int | None, taken_at: float | None, where: str,
                     path: str | None) -> StackSample:
    """An already decoded py-spy JSON list -> StackSample (see :func:`parse_pyspy_json`)."""
    if not isinstance(doc, list):
        raise BadInputError(where, "py-spy JSON must be a list of threads")
    threads: list[ThreadStack] = []
    for item in doc:
        if not isinstance(item, dict):
            continue
        if pid is None and _is_int(item.get("pid")):
            pid = item["pid"]
        thread = _thread_from_json(item)
        if thread is not None:
            threads.append(thread)
    if doc and not threads:
        raise BadInputError(where, "no usable thread in the py-spy JSON")
    pid = pid if pid is not None else 0
    return StackSample(pid=pid, taken_at=float(taken_at or 0.0),
                       threads=_mark_main(threads, pid), path=path)


def _thread_from_json(item: dict[str, Any]) -> ThreadStack | None:
    os_tid, tid = item.get("os_thread_id"), item.get("thread_id")
    thread_id = os_tid if _is_int(os_tid) else tid if _is_int(tid) else None
    raw_frames = item.get("frames")
    if thread_id is None or not isinstance(raw_frames, list):
        return None
    frames: list[Frame] = []
    kept: list[FrameLocal] = []
    for raw in raw_frames:
        if not isinstance(raw, dict):
            continue
        name, filename = raw.get("name"), raw.get("filename")
        if not isinstance(name, str) or not isinstance(filename, str):
            continue
        native = isinstance(raw.get("module"), str)
        line = raw.get("line")
        line = line if _is_int(line) and not (native and line == 0) else None
        kept.extend(locals_from_json(len(frames), raw))
        frames.append(intern_frame(name[:1000], filename[:4000], line, native))
    name = item.get("thread_name")
    return ThreadStack(thread_id=thread_id, frames=tuple(frames),
                       name=name[:200] if isinstance(name, str) else None,
                       active=item["active"] if isinstance(item.get("active"), bool) else None,
                       owns_gil=item["owns_gil"] if isinstance(item.get("owns_gil"), bool)
                       else None, locals=tuple(kept))


def _mark_main(threads: list[ThreadStack], pid: int) -> tuple[ThreadStack, ...]:
    """On Linux the main thread's OS id is the pid; else trust the name "MainThread"."""
    main = next((t for t in threads if pid and t.thread_id == pid), None)
    if main is None:
        main = next((t for t in threads if t.name == "MainThread"), None)
    return tuple(ThreadStack(t.thread_id, t.frames, t.name, t is main, t.active, t.owns_gil,
                             t.locals)
                 if (t is main) != t.is_main else t for t in threads)


def iter_json_values(text: str) -> Iterator[Any]:
    """Every JSON value of a file holding one or several concatenated values."""
    decoder = json.JSONDecoder()
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            return
        value, pos = decoder.raw_decode(text, pos)
        yield value


# ---------------------------------------------------------------------------------------------
# Text

_PREFIX = re.compile(r"^\[(?:rank)?(\d{1,7})\]:")
_PROCESS = re.compile(r"^Process (\d+):")
_THREAD = re.compile(r'^Thread (?:(0x[0-9A-Fa-f]+|\d+) )?\(([a-z+]*)\)(?::\s*"(.*)")?\s*$')
_FRAME = re.compile(r"^(.+) \(([^()]*)\)$")
# a frame whose indentation a paste lost (a chat, a README rendering): only the plain form, one
# word and a file:line or a library, tells it from a line of prose ending in parentheses
_FLAT_FRAME = re.compile(r"^([^\s()]+) \(([^()\s]*(?::\d+|\.so[.\d]*))\)$")
_NATIVE_EXT = (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".rs", ".S", ".s")


def parse_pyspy_text(text: str, path: str, taken_at: float | None = None) -> list[StackSample]:
    """Every dump in a ``py-spy dump`` text file (see the module docstring)."""
    return [sample for _rank, sample in parse_pyspy_text_by_rank(text, path, taken_at)]


def parse_pyspy_text_by_rank(text: str, path: str, taken_at: float | None = None
                             ) -> list[tuple[int | None, StackSample]]:
    """Like :func:`parse_pyspy_text`, with the rank from a ``[rankN]:`` line prefix (else None).
    ``taken_at`` defaults to the file's mtime, the best a text dump offers."""
    if len(text) > MAX_BYTES:
        raise BadInputError(path, f"py-spy dump larger than {MAX_BYTES >> 20} MiB")
    if taken_at is None:
        try:
            taken_at = os.path.getmtime(path)
        except OSError:
            taken_at = 0.0
    streams: dict[int | None, list[str]] = {}
    for raw_line in text.splitlines():
        line = raw_line[:MAX_LINE].rstrip("\r")
        match = _PREFIX.match(line)
        rank = int(match.group(1)) if match else None
        if match:
            line = line[match.end():]
            line = line[1:] if line.startswith(" ") and line[1:2] != " " else line
        streams.setdefault(rank, []).append(line)
    out: list[tuple[int | None, StackSample]] = []
    for rank, lines in streams.items():
        out.extend((rank, sample) for sample in _parse_stream(lines, path, taken_at))
    if not out:
        raise BadInputError(path, "no py-spy thread dump found in this text")
    return out


def _parse_stream(lines: list[str], path: str, taken_at: float) -> list[StackSample]:
    samples: list[StackSample] = []
    pid: int | None = None
    threads: list[tuple[int, str | None, bool | None, bool | None, list[Frame]]] = []
    locals_indent: int | None = None
    kept: list[list[FrameLocal]] = []  # per thread of ``threads``: its kept locals
    # the dump's own left edge: its first Process/Thread line's indentation (0 as py-spy prints
    # it; a paste may shift it, " Thread 30560 (active)" over frames indented as usual)
    edge: int | None = None

    def flush() -> None:
        if pid is not None or threads:
            samples.append(_text_sample(pid, threads, taken_at, path, kept))

    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if locals_indent is not None:
            if stripped and indent > locals_indent:
                _text_local(stripped, threads, kept)  # "name: repr" under Arguments:/Locals:
                continue
            locals_indent = None
        if not stripped:
            continue
        process = _PROCESS.match(stripped)
        thread = _THREAD.match(stripped)
        if edge is None and (process or thread):
            edge = indent
        if process and indent == edge:
            flush()
            pid, threads, kept = int(process.group(1)), [], []
            continue
        if thread and indent == edge:
            ident, status, name = thread.groups()
            if name == "MainThread" and any(t[1] == "MainThread" for t in threads):
                flush()  # a second process's dump whose "Process" line was not pasted
                pid, threads, kept = None, [], []
            words = set(status.split("+"))
            active = True if "active" in words else False if "idle" in words else None
            number = int(ident, 0) if ident else _unused_id(threads)
            if pid is None and name == "MainThread" and ident and ident.isdigit():
                pid = number  # no "Process" line: on Linux the main thread's OS id is the pid
            threads.append((number, name, active, "gil" in words, []))
            kept.append([])
            continue
        if stripped in ("Arguments:", "Locals:"):
            locals_indent = indent
            continue
        frame = _FRAME.match(stripped) if indent != edge else _FLAT_FRAME.match(stripped)
        if frame and edge is not None and indent >= edge and threads:
            threads[-1][4].append(_text_frame(frame.group(1), frame.group(2)))
    flush()
    return samples


def _unused_id(threads: list[tuple[int, str | None, bool | None, bool | None, list[Frame]]]
               ) -> int:
    """A number for a thread whose id was edited out: its place in the dump."""
    taken = {t[0] for t in threads}
    ident = len(threads) + 1
    while ident in taken:
        ident += 1
    return ident


def _text_frame(name: str, location: str) -> Frame:
    filename, sep, line_text = location.rpartition(":")
    if not sep or not line_text.isdigit():
        return intern_frame(name, location, None, True)  # "recv (libc.so.6)"
    native = filename.endswith(_NATIVE_EXT) or ".so" in os.path.basename(filename)
    return intern_frame(name, filename, int(line_text[:12]), native)


def _text_local(line: str,
                threads: list[tuple[int, str | None, bool | None, bool | None, list[Frame]]],
                kept: list[list[FrameLocal]]) -> None:
    """One ``name: repr`` line under the last frame's Arguments:/Locals:, if keep_local keeps it."""
    name, sep, text = line.partition(": ")
    frames = threads[-1][4] if threads else []
    if not sep or not frames or not name.isidentifier():
        return
    frame = frames[-1]
    value = keep_local(frame.name, frame.filename, name, text)
    if value is not None:
        kept[-1].append(frame_local(len(frames) - 1, name, value))


def _text_sample(pid: int | None,
                 threads: list[tuple[int, str | None, bool | None, bool | None, list[Frame]]],
                 taken_at: float, path: str, kept: list[list[FrameLocal]]) -> StackSample:
    pid = pid or 0
    stacks = [ThreadStack(ident, tuple(frames), name, False, active, gil, tuple(found))
              for (ident, name, active, gil, frames), found in zip(threads, kept)]
    return StackSample(pid=pid, taken_at=taken_at, threads=_mark_main(stacks, pid), path=path)


# ---------------------------------------------------------------------------------------------
# Sniffing and whole files


def sniff_pyspy(head: bytes) -> str | None:
    """"pyspy-json" / "pyspy-text" / None from the first bytes (4 KiB) of a file."""
    text = head[:4096].decode("utf-8", "replace").lstrip("\ufeff \t\r\n")
    match = _PREFIX.match(text)
    if match:
        text = text[match.end():].lstrip()
    # an empty dump is "[]" and nothing else: "[] [rank=0] RuntimeError: ..." is a log line
    if text.startswith("[") and re.match(r'\[\s*(\]\s*$|\{\s*"(pid|thread_id|thread_name|'
                                        r'os_thread_id|frames|active|owns_gil)")', text):
        return "pyspy-json"
    if text.startswith("{") and re.search(r'"dump"\s*:\s*(\[|null)', text) and '"pid"' in text:
        return "pyspy-json"
    for line in text.splitlines()[:40]:
        line = _PREFIX.sub("", line).strip()
        if _THREAD.match(line) or (_PROCESS.match(line) and "Python v" in text):
            return "pyspy-text"
    return None


def load_pyspy_file(path: str) -> list[tuple[int | None, StackSample]]:
    """Every stack sample in a saved py-spy file of any supported shape, with the rank when the
    file says (``[rankN]:`` prefix or a record's ``rank``/``worker_of``)."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise BadInputError(path, f"larger than {MAX_BYTES >> 20} MiB")
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise BadInputError(path, f"cannot read ({exc.strerror or exc})") from None
    kind = sniff_pyspy(data[:4096])
    if kind != "pyspy-json":
        # a text dump indented, behind a tool's head (pytest, kubectl), or hard-wrapped
        data = logical_bytes(data)
        kind = sniff_pyspy(data[:4096])
    if kind == "pyspy-text":
        return parse_pyspy_text_by_rank(data.decode("utf-8", "replace"), path)
    if kind != "pyspy-json":
        raise BadInputError(path, "not a py-spy dump (JSON or text)")
    try:
        values = list(iter_json_values(data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputError(path, f"not py-spy JSON ({_one_line(exc)})") from None
    out: list[tuple[int | None, StackSample]] = []
    for value in values:
        if isinstance(value, dict):
            record = _record_sample(value, path)
            if record is not None:
                out.append((record[0], record[2]))
        else:
            out.append((None, sample_from_json(value, None, None, path, path)))
    if not out:
        raise BadInputError(path, "no py-spy stack sample in this file")
    return out


# ---------------------------------------------------------------------------------------------
# The bundle record: {"pid": N, "taken_at": T, "worker": bool, "worker_of": rank?,
# "switches_during": N?, "dump": [...]}


def _record_sample(doc: dict[str, Any], path: str) -> tuple[int | None, bool, StackSample] | None:
    """(rank or None, is_worker, sample) of a record; None for a recorded failure."""
    pid = doc.get("pid")
    if not _is_int(pid):
        raise BadInputError(path, "py-spy record without an integer 'pid'")
    taken_at = doc.get("taken_at")
    taken = float(taken_at) if isinstance(taken_at, (int, float)) and not isinstance(
        taken_at, bool) else None
    if doc.get("dump") is None:
        return None
    worker_of = doc.get("worker_of")
    worker = doc.get("worker") is True or _is_int(worker_of)
    rank = worker_of if _is_int(worker_of) else doc.get("rank")
    sample = sample_from_json(doc.get("dump"), pid, taken, path, path)
    during = doc.get("switches_during")
    if isinstance(during, int) and not isinstance(during, bool) and during >= 0:
        sample = dataclasses.replace(sample, switches_during=during)
    return (rank if _is_int(rank) else None), worker, sample


def load_pyspy_record(path: str, rank: int | None, evidence: JobEvidence,
                      problems: list[str]) -> None:
    """Bundle loader: one record -> ``rank.samples`` or ``rank.worker_samples[pid]``. A job-level
    file (``rank`` None) is attributed by its own ``rank``/``worker_of``, else reported."""
    try:
        if os.path.getsize(path) > MAX_BYTES:
            raise BadInputError(path, f"larger than {MAX_BYTES >> 20} MiB")
        with open(path, "rb") as handle:
            doc = json.loads(handle.read())
        if not isinstance(doc, dict):
            raise BadInputError(path, "py-spy record is not a JSON object")
        found = _record_sample(doc, path)
    except BadInputError as exc:
        problems.append(str(exc))
        return
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        problems.append(f"{path}: unreadable py-spy record ({_one_line(exc)})")
        return
    if found is None:
        status = str(doc.get("status", "failed"))[:40]
        detail = " ".join(str(doc.get("detail", "")).split())[:300]
        problems.append(f"{path}: py-spy {status} for pid {doc.get('pid')}: {detail}".rstrip(": "))
        return
    record_rank, worker, sample = found
    if rank is None:
        if record_rank is None:
            problems.append(f"{path}: py-spy stacks of pid {sample.pid} belong to no rank; "
                            "not used")
            return
        rank = record_rank
    elif record_rank is not None and record_rank != rank:
        problems.append(f"{path}: record says rank {record_rank}, bundle says {rank}; "
                        f"using {rank}")
    rank_ev = evidence.rank(rank)
    if worker:
        rank_ev.worker_samples.setdefault(sample.pid, []).append(sample)
        if sample.pid not in rank_ev.worker_pids:
            rank_ev.worker_pids.append(sample.pid)
    else:
        rank_ev.samples.append(sample)
        if rank_ev.pid is None:
            rank_ev.pid = sample.pid


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__
