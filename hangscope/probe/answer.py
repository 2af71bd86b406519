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
    if "threads" in want:
        header["threads"] = _threads(skip_ident, notes)
    if "cuda" in want:
        header["cuda"] = _cuda(notes)
    if "dataloader" in want:
        header["dataloader"] = _dataloaders(notes)
    header["notes"] = notes
    header["time"] = {"wall": time.time(), "monotonic": time.monotonic(),
                      "installed_wall": installed_wall,
                      "build_ms": round((time.perf_counter() - started) * 1000, 3)}
    return header, fr


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


def _threads(skip_ident: int | None, notes: list[str]) -> list[dict[str, Any]]:
    frames = sys._current_frames()
    known = {t.ident: t for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    out: list[dict[str, Any]] = []
    for ident, frame in list(frames.items())[:MAX_THREADS]:
        if ident == skip_ident:
            continue
        thread = known.get(ident)
        stack = _stack(frame)
        out.append({
            "ident": ident, "native_id": getattr(thread, "native_id", None),
            "name": thread.name if thread is not None else None,
            "daemon": thread.daemon if thread is not None else None,
            "is_main": ident == main_ident, "frames": stack,
            "waits_on": _wait_of(frame, known),
        })
    if len(frames) > MAX_THREADS:
        notes.append(f"{len(frames)} threads: only the first {MAX_THREADS} sent")
    del frames
    return out


def _stack(frame: types.FrameType | None) -> list[dict[str, Any]]:
    stack: list[dict[str, Any]] = []
    while frame is not None and len(stack) < MAX_FRAMES:
        code = frame.f_code
        stack.append({"name": getattr(code, "co_qualname", code.co_name),
                      "filename": code.co_filename, "line": frame.f_lineno})
        frame = frame.f_back
    return stack


def _wait_of(frame: types.FrameType, threads: dict[int | None, threading.Thread]
             ) -> dict[str, Any] | None:
    """What the thread blocks on, where its stack says: the outermost threading/queue object of
    the innermost stdlib frames (a Queue over its Condition, an Event over its Condition), or a
    lock that the innermost user line acquires (``with lock:``, ``lock.acquire()``) and that is
    held. Returns None when the stack does not say."""
    found: Any = None
    current: types.FrameType | None = frame
    depth = 0
    while current is not None and depth < 8:
        if os.path.basename(current.f_code.co_filename) not in _STDLIB_WAITS:
            break
        me = current.f_locals.get("self")
        if isinstance(me, threading.Thread):
            if current.f_code.co_name in ("join", "_wait_for_tstate_lock"):
                found = me
        elif me is not None:
            found = me
        current = current.f_back
        depth += 1
    if found is not None:
        return _describe(found, threads)
    user = current if depth else frame
    if user is None:
        return None
    text = linecache.getline(user.f_code.co_filename, user.f_lineno).strip()
    if "acquire(" not in text and not text.startswith(("with ", "async with ")):
        return None
    for value in _nearby_values(user):
        if _is_lock(value) and _is_held(value):
            return _describe(value, threads)
    return None


def _nearby_values(frame: types.FrameType) -> list[Any]:
    values = list(frame.f_locals.values())
    me = frame.f_locals.get("self")
    attrs = getattr(me, "__dict__", None)
    if isinstance(attrs, dict):
        values.extend(attrs.values())
    module = frame.f_globals
    values.extend(v for v in list(module.values())[:500] if _is_lock(v))
    return values


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def _is_lock(value: Any) -> bool:
    return isinstance(value, _LOCK_TYPES) or type(value).__name__ == "_RLock"


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


def _dataloaders(notes: list[str]) -> list[dict[str, Any]]:
    """Live DataLoader iterators. First from the threads' frames (free: a rank stalled on data
    sits in the iterator's ``__next__``, whose ``self`` is it); else as the objects that refer to
    their classes, ``gc.get_referrers`` walking the heap once in C (tens of ms for a few hundred
    thousand objects; no list of every object is built)."""
    module = sys.modules.get("torch.utils.data.dataloader")
    base = getattr(module, "_BaseDataLoaderIter", None)
    if not isinstance(base, type):
        return []
    classes: list[type] = [base]
    for cls in classes:
        classes.extend(cls.__subclasses__())
    loader = getattr(module, "DataLoader", None)
    found = _iterators_in_frames(base, loader if isinstance(loader, type) else base)
    if not found:
        found = [obj for obj in gc.get_referrers(*classes) if type(obj) in classes]
    out: list[dict[str, Any]] = []
    for obj in found[:MAX_LOADERS]:
        try:
            out.append(_describe_loader(obj))
        except Exception as exc:  # noqa: BLE001
            notes.append(f"a DataLoader iterator could not be read: {exc}"[:300])
    return out


def _iterators_in_frames(base: type, loader: type) -> list[Any]:
    """Iterators in the frames' locals, and those that DataLoaders in them keep (persistent
    workers). Only isinstance and instance dicts: no attribute of a user object is evaluated."""
    found: dict[int, Any] = {}
    for frame in sys._current_frames().values():
        current: types.FrameType | None = frame
        while current is not None:
            for value in current.f_locals.values():
                if isinstance(value, loader) and isinstance(getattr(value, "__dict__", None),
                                                            dict):
                    value = value.__dict__.get("_iterator")
                if isinstance(value, base):
                    found.setdefault(id(value), value)
            current = current.f_back
    return list(found.values())


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
