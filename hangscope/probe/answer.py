"""What the probe answers, built only when asked, from what the process has already imported.

The header (JSON)::

    {"protocol": 1, "pid": 1234, "ppid": 1200,
     "time": {"wall": 1795456933.1, "monotonic": 8123.4, "installed_wall": 1795456900.0,
              "build_ms": 3.2},
     "fr": {"bytes": 51234, "entries": null, "note": ""},
     "threads": [{"ident": 1399, "native_id": 1234, "name": "MainThread", "daemon": false,
                  "is_main": true,
                  "frames": [{"name": "all_reduce", "filename": ".../distributed_c10d.py",
                              "line": 2950}],          # innermost first, like py-spy
                  "waits_on": {"kind": "queue", "type": "Queue", "id": "0x7f..",
                               "detail": "qsize 0"} | null}],
     "cuda": null | {"devices": [{"index": 0, "allocated": 1, "reserved": 2, ...}]},
     "dataloader": [{"type": "_MultiProcessingDataLoaderIter", "num_workers": 2,
                     "worker_pids": [1240, 1241], "worker_exitcodes": [null, null],
                     "outstanding": {"7": 1}, "rcvd_idx": 6, "send_idx": 10,
                     "num_yielded": 6}],
     "notes": ["one line per thing that could not be told"]}

Nothing here imports torch or any other package: torch's modules are taken from ``sys.modules``
when the program imported them itself. The probe's own thread is left out of ``threads``.
"""

from __future__ import annotations

import gc
import linecache
import os
import re
import sys
import threading
import time
import types
from typing import Any

MAX_FRAMES = 128  # per thread, innermost kept
MAX_THREADS = 2000
MAX_LOADERS = 16
MAX_OUTSTANDING = 256
HOLD_SWITCH_S = 0.05  # the switch interval while the frames are walked (a walk takes about 1 ms)
_STDLIB_WAITS = {"threading.py", "queue.py"}
_OWNER = re.compile(r"owner=(\d+)")
_NO_ENTRIES = re.compile(rb'"entries"\s*:\s*\[\s*\]')


def build(want: tuple[str, ...], skip_ident: int | None, installed_wall: float,
          fr_limit: int) -> tuple[dict[str, Any], bytes]:
    """The header and the FR trace bytes (empty when there is none or it was not wanted)."""
    started = time.perf_counter()
    notes: list[str] = []
    # no argv, environment or frame locals: they may hold secrets, and a bundle travels
    header: dict[str, Any] = {"protocol": 1, "pid": os.getpid(), "ppid": os.getppid()}
    fr = b""
    if "fr" in want:
        fr, header["fr"] = _fr_trace(fr_limit, notes)
    walk = None
    if "threads" in want or "dataloader" in want:
        walk = _walk_frames(skip_ident, _loader_types() if "dataloader" in want else None, notes)
    if "threads" in want:
        header["threads"] = _threads(walk, notes) if walk is not None else []
    if "cuda" in want:
        header["cuda"] = _cuda(notes)
    if "dataloader" in want:
        header["dataloader"] = _dataloaders(walk, notes)
    header["notes"] = notes
    header["time"] = {"wall": time.time(), "monotonic": time.monotonic(),
                      "installed_wall": installed_wall,
                      "build_ms": round((time.perf_counter() - started) * 1000, 3)}
    return header, fr


def _walk_frames(skip_ident: int | None, loader_types: tuple[type, type] | None,
                 notes: list[str]) -> _Frames | None:
    gil = getattr(sys, "_is_gil_enabled", None)
    if callable(gil) and not gil():
        notes.append("free-threaded interpreter without the GIL: other threads' frames cannot be "
                     "read safely from inside the process; not read (py-spy reads them)")
        return None
    return _Frames(skip_ident, loader_types)


def _fr_trace(limit: int, notes: list[str]) -> tuple[bytes, dict[str, Any]]:
    c10d = sys.modules.get("torch._C._distributed_c10d")
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is None:
        notes.append("torch.distributed is not imported (or has no _dump_fr_trace_json): "
                     "no flight-recorder trace")
        return b"", {"bytes": 0, "note": "unavailable"}
    try:
        data = bytes(dump(True, False))  # every collective, completed ones too
    except Exception as exc:  # noqa: BLE001 - torch may refuse (no process group yet)
        notes.append(f"flight-recorder trace failed: {type(exc).__name__}: {exc}"[:300])
        return b"", {"bytes": 0, "note": "failed"}
    if len(data) > limit:
        notes.append(f"flight-recorder trace of {len(data)} bytes is over the {limit}-byte "
                     "limit: not sent")
        return b"", {"bytes": len(data), "note": "too large"}
    if _NO_ENTRIES.search(data[:1 << 16]) or b'"entries"' not in data[:1 << 20]:
        buffer = os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get(
            "TORCH_NCCL_TRACE_BUFFER_SIZE", "unset"))
        notes.append(f"the flight recorder holds no entries (TORCH_FR_BUFFER_SIZE={buffer}; or "
                     "no collective was issued yet)")
    return data, {"bytes": len(data), "note": ""}


class _Frames:
    """Every thread's stack, read in one hold of the GIL.

    Another thread's frames are safe to read only while that thread is parked: frames handed out
    by ``sys._current_frames()`` go stale once it runs on (a generator frame that has since
    yielded points back into stack memory its caller reuses; read then, ``f_code`` came back as
    an ``int``, one answer in a thousand under load). So the walk runs with the switch interval
    raised, the collector off and nothing that blocks, after one hand-over of the GIL that makes
    threads already waiting for it wait again under the raised interval. What needs file reads or
    locks (source lines, queue sizes) is done after, from what the walk kept."""

    def __init__(self, skip_ident: int | None, loader_types: tuple[type, type] | None) -> None:
        self.threads: list[tuple[int, list[dict[str, Any]], Any, Any]] = []
        self.loaders: dict[int, Any] = {}
        self.total = 0
        interval, collecting = sys.getswitchinterval(), gc.isenabled()
        gc.disable()
        try:
            sys.setswitchinterval(max(interval, HOLD_SWITCH_S))
            time.sleep(0)
            self._walk(skip_ident, loader_types)
        finally:
            sys.setswitchinterval(interval)
            if collecting:
                gc.enable()

    def _walk(self, skip_ident: int | None, loader_types: tuple[type, type] | None) -> None:
        frames = sys._current_frames()
        self.total = len(frames)
        for ident, frame in list(frames.items())[:MAX_THREADS]:
            if ident == skip_ident:
                continue
            self.threads.append((ident, _stack(frame), *_wait_candidates(frame)))
            if loader_types is not None:
                _iterators_in(frame, *loader_types, self.loaders)


def _threads(walk: _Frames, notes: list[str]) -> list[dict[str, Any]]:
    known = {t.ident: t for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    out: list[dict[str, Any]] = []
    for ident, stack, waited, user in walk.threads:
        thread = known.get(ident)
        out.append({
            "ident": ident, "native_id": getattr(thread, "native_id", None),
            "name": thread.name if thread is not None else None,
            "daemon": thread.daemon if thread is not None else None,
            "is_main": ident == main_ident, "frames": stack,
            "waits_on": _wait_of(waited, user, known),
        })
    if walk.total > MAX_THREADS:
        notes.append(f"{walk.total} threads: only the first {MAX_THREADS} sent")
    return out


def _stack(frame: types.FrameType | None) -> list[dict[str, Any]]:
    stack: list[dict[str, Any]] = []
    while frame is not None and len(stack) < MAX_FRAMES:
        code = frame.f_code
        if not isinstance(code, types.CodeType):  # never seen with the walk held; never trusted
            break
        line = frame.f_lineno
        stack.append({"name": getattr(code, "co_qualname", code.co_name),
                      "filename": code.co_filename,
                      "line": line if isinstance(line, int) else None})
        frame = frame.f_back
    return stack


def _wait_candidates(frame: types.FrameType) -> tuple[Any, Any]:
    """(the outermost threading/queue object of the innermost stdlib frames, or None;
    (filename, line, held locks near the innermost user line), or None). Read in the walk; only
    type checks and C calls, so no user code runs and the GIL is not let go."""
    found: Any = None
    current: types.FrameType | None = frame
    depth = 0
    while current is not None and depth < 8:
        if os.path.basename(current.f_code.co_filename) not in _STDLIB_WAITS:
            break
        me = current.f_locals.get("self")
        if issubclass(type(me), threading.Thread):
            if current.f_code.co_name in ("join", "_wait_for_tstate_lock"):
                found = me
        elif me is not None:
            found = me
        current = current.f_back
        depth += 1
    if found is not None:
        return found, None
    user = current if depth else frame
    if user is None:
        return None, None
    held = [v for v in _nearby_values(user) if _is_lock(v) and _is_held(v)]
    return None, (user.f_code.co_filename, user.f_lineno, held) if held else None


def _wait_of(waited: Any, user: Any, threads: dict[int | None, threading.Thread]
             ) -> dict[str, Any] | None:
    """What the thread blocks on, where its stack says: a Queue over its Condition, an Event
    over its Condition, or a held lock that the innermost user line acquires (``with lock:``,
    ``lock.acquire()``). None when the stack does not say."""
    if waited is not None:
        return _describe(waited, threads)
    if user is None:
        return None
    filename, line, held = user
    text = linecache.getline(filename, line).strip() if isinstance(line, int) else ""
    if "acquire(" not in text and not text.startswith(("with ", "async with ")):
        return None
    return _describe(held[0], threads)


def _nearby_values(frame: types.FrameType) -> list[Any]:
    values = list(frame.f_locals.values())
    attrs = _instance_dict(frame.f_locals.get("self"))
    if attrs is not None:
        values.extend(attrs.values())
    module = frame.f_globals
    values.extend(v for v in list(module.values())[:500] if _is_lock(v))
    return values


def _instance_dict(obj: Any) -> dict[str, Any] | None:
    """``obj``'s own attributes, read without running any code of its class (the walk holds the
    GIL): ``getattr`` would call a ``__getattribute__`` or a ``__dict__`` property the class
    defines. None unless ``__dict__`` is the interpreter's own slot on every class in the way."""
    if obj is None:
        return None
    for klass in type.__getattribute__(type(obj), "__mro__"):
        own = type.__getattribute__(klass, "__dict__")
        if "__dict__" in own:
            if type(own["__dict__"]) is not types.GetSetDescriptorType:
                return None  # a property or other user descriptor: its code would run
            attrs = object.__getattribute__(obj, "__dict__")
            return attrs if type(attrs) is dict else None
    return None  # __slots__ only, or a builtin without instance attributes


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _is_lock(value: Any) -> bool:
    kind = type(value)  # never isinstance: it may ask a user object for its __class__
    return kind in _LOCK_TYPES or kind.__name__ == "_RLock"


def _is_held(lock: Any) -> bool:
    locked = getattr(lock, "locked", None)
    if callable(locked):
        return bool(locked())
    return repr(lock).startswith("<locked")


def _describe(obj: Any, threads: dict[int | None, threading.Thread]) -> dict[str, Any]:
    name = type(obj).__name__
    kind = {"Condition": "condition", "Event": "event", "Semaphore": "semaphore",
            "BoundedSemaphore": "semaphore", "Barrier": "barrier", "Thread": "thread_join",
            "lock": "lock", "RLock": "rlock", "_RLock": "rlock"}.get(name)
    if kind is None:
        kind = "queue" if hasattr(obj, "qsize") else "object"
    info: dict[str, Any] = {"kind": kind, "type": name, "id": hex(id(obj))}
    detail = ""
    try:
        if kind == "queue":
            detail = f"qsize {obj.qsize()}, maxsize {getattr(obj, 'maxsize', '?')}"
        elif kind == "event":
            detail = f"set {obj.is_set()}"
        elif kind == "thread_join":
            detail = f"joins thread {obj.name!r} (ident {obj.ident})"
        elif kind in ("lock", "rlock"):
            owner = _OWNER.search(repr(obj))
            if owner:
                holder = threads.get(int(owner.group(1)))
                info["owner_ident"] = int(owner.group(1))
                detail = f"held by thread {holder.name if holder else owner.group(1)!r}"
            else:
                detail = "held (a plain Lock does not record its holder)"
        elif kind == "condition":
            detail = f"over {type(getattr(obj, '_lock', None)).__name__}"
    except Exception as exc:  # noqa: BLE001 - a user subclass may raise anything
        detail = f"({type(exc).__name__})"
    info["detail"] = detail
    return info


def _cuda(notes: list[str]) -> dict[str, Any] | None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        devices = []
        for index in range(cuda.device_count()):
            stats = cuda.memory_stats(index)
            devices.append({"index": index,
                            "allocated": stats.get("allocated_bytes.all.current"),
                            "reserved": stats.get("reserved_bytes.all.current"),
                            "peak_allocated": stats.get("allocated_bytes.all.peak"),
                            "alloc_retries": stats.get("num_alloc_retries"),
                            "ooms": stats.get("num_ooms")})
        return {"devices": devices}
    except Exception as exc:  # noqa: BLE001 - a broken device must not break the answer
        notes.append(f"torch.cuda memory statistics failed: {type(exc).__name__}: {exc}"[:300])
        return None


def _loader_types() -> tuple[type, type] | None:
    """(torch's DataLoader iterator base, DataLoader), when the program imported them."""
    module = sys.modules.get("torch.utils.data.dataloader")
    base = getattr(module, "_BaseDataLoaderIter", None)
    loader = getattr(module, "DataLoader", None)
    if not isinstance(base, type):
        return None
    return base, loader if isinstance(loader, type) else base


def _dataloaders(walk: _Frames | None, notes: list[str]) -> list[dict[str, Any]]:
    """Live DataLoader iterators. First from the threads' frames (free: a rank stalled on data
    sits in the iterator's ``__next__``, whose ``self`` is it); else as the objects that refer to
    their classes, ``gc.get_referrers`` walking the heap once in C (tens of ms for a few hundred
    thousand objects; no list of every object is built)."""
    types_ = _loader_types()
    if types_ is None:
        return []
    classes: list[type] = [types_[0]]
    for cls in classes:
        classes.extend(cls.__subclasses__())
    found = list(walk.loaders.values()) if walk is not None else []
    if not found:
        found = [obj for obj in gc.get_referrers(*classes) if type(obj) in classes]
    out: list[dict[str, Any]] = []
    for obj in found[:MAX_LOADERS]:
        try:
            out.append(_describe_loader(obj))
        except Exception as exc:  # noqa: BLE001
            notes.append(f"a DataLoader iterator could not be read: {exc}"[:300])
    return out


def _iterators_in(frame: types.FrameType, base: type, loader: type,
                  found: dict[int, Any]) -> None:
    """Iterators in one thread's frames' locals, and those that DataLoaders in them keep
    (persistent workers). Type checks and instance dicts only: no user code runs."""
    current: types.FrameType | None = frame
    while current is not None:
        for value in current.f_locals.values():
            if issubclass(type(value), loader):
                attrs = _instance_dict(value)  # a subclass may define attribute access
                value = attrs.get("_iterator") if attrs is not None else None
            if issubclass(type(value), base):
                found.setdefault(id(value), value)
        current = current.f_back


def _describe_loader(it: Any) -> dict[str, Any]:
    workers = list(getattr(it, "_workers", []) or [])
    task_info = dict(getattr(it, "_task_info", {}) or {})
    outstanding = {str(idx): info[0] for idx, info in sorted(task_info.items())
                   if isinstance(info, tuple) and len(info) == 1}
    return {
        "type": type(it).__name__,
        "num_workers": getattr(it, "_num_workers", 0),
        "worker_pids": [getattr(w, "pid", None) for w in workers],
        # the exit code torch already saw: asking the child would reap it under torch's feet
        "worker_exitcodes": [getattr(getattr(w, "_popen", None), "returncode", None)
                             for w in workers],
        "workers_status": list(getattr(it, "_workers_status", []) or []),
        "outstanding": dict(list(outstanding.items())[:MAX_OUTSTANDING]),
        "rcvd_idx": getattr(it, "_rcvd_idx", None),
        "send_idx": getattr(it, "_send_idx", None),
        "num_yielded": getattr(it, "_num_yielded", None),
        "timeout": getattr(it, "_timeout", None),
        "persistent_workers": getattr(it, "_persistent_workers", None),
    }
