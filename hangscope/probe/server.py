"""The probe's listener: one daemon thread per process, one Unix socket derived from the pid.

Costs nothing until asked: the thread sleeps in ``poll`` on the socket. An answer is built only for
a peer of our uid or root (``SO_PEERCRED``), one connection at a time, each read and write bounded
by ``ANSWER_TIMEOUT_S``. Because the thread waits in C with the GIL released, it answers while the
main thread is blocked in a collective (gloo and NCCL waits release the GIL); when some thread
holds the GIL in C code, nothing Python can answer and the client says so after its timeout.

Never in the way of the job:

- after ``fork`` (DataLoader workers) the child closes its copy of the socket, gives SIGTERM back
  to what it was, and has no probe; the parent's socket stays;
- the socket is removed at exit (``atexit``) and on SIGTERM. A SIGTERM handler in Python only
  runs when the main thread gets back to Python, which a rank blocked in a collective never does;
  so, when SIGTERM was left at its default (as in every torchrun worker), a wake-up fd lets the
  probe thread see the signal, remove the socket and die by SIGTERM as the default would have. A
  handler the program installs, before or after the probe, keeps working: ours calls the one it
  replaced, and steps aside when the program replaces it;
- a failure prints one line to stderr (``hangscope probe: ...``) and the program goes on.
"""

from __future__ import annotations

import atexit
import os
import select
import signal
import socket
import stat
import struct
import sys
import threading
import time
from types import FrameType

from hangscope.probe import wire

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing (and collections under it) is not loaded in every process probed
    from typing import Any

ANSWER_TIMEOUT_S = 10.0
MAX_WARNINGS = 5
_PEERCRED = struct.Struct("3i")
_STOP = b"\0"  # not a signal number: written by uninstall() to wake the thread


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.path: str | None = None
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.wake: tuple[int, int] | None = None  # (read, write) self-pipe
        self.wakeup_fd_ours = False
        self.prev_term: Any = None
        self.installed_wall = 0.0
        self.warnings = 0
        self.hooks = False


_state = _State()


def install(path: str | None = None) -> str | None:
    """Start the probe in this process (idempotent); returns its socket path, or None when it
    could not start (one line on stderr says why)."""
    try:
        return _install(path)
    except Exception as exc:  # noqa: BLE001 - the probe must never break the program
        _warn(f"not started: {type(exc).__name__}: {exc}")
        return None


def installed_path() -> str | None:
    """This process's socket path while its probe runs, else None."""
    return _state.path if _state.pid == os.getpid() else None


def uninstall() -> None:
    """Stop the thread, remove the socket, give SIGTERM and the wake-up fd back."""
    with _state.lock:
        if _state.pid != os.getpid():
            return
        thread, wake = _state.thread, _state.wake
        _remove_socket()
        if wake is not None:
            try:
                os.write(wake[1], _STOP)
            except OSError:
                pass
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout=2.0)
    if threading.current_thread() is threading.main_thread():
        _restore_signals()
    if wake is not None and not _state.wakeup_fd_ours:
        for fd in wake:
            _close_fd(fd)
        _state.wake = None


def _install(path: str | None) -> str:
    with _state.lock:
        if _state.pid == os.getpid() and _state.thread is not None and _state.thread.is_alive():
            return str(_state.path)
        path = path or wire.socket_path(os.getpid())
        directory = os.path.dirname(path)
        _secure_dir(directory)
        _sweep_stale(directory)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            sock.bind(path)
            os.chmod(path, 0o600)  # the folder is 0700 already: no window for others
            sock.listen(8)
        except BaseException:
            sock.close()
            raise
        if _state.wake is None:
            read_fd, write_fd = os.pipe()
            os.set_blocking(read_fd, False)
            os.set_blocking(write_fd, False)
            _state.wake = (read_fd, write_fd)
        _state.sock, _state.path, _state.pid = sock, path, os.getpid()
        _state.installed_wall = time.time()
        if not _state.hooks:
            atexit.register(_at_exit)
            os.register_at_fork(after_in_child=_after_fork_child)
            _state.hooks = True
        if threading.current_thread() is threading.main_thread():
            _hook_sigterm()
        _state.thread = threading.Thread(target=_serve, args=(sock, _state.wake[0]),
                                         name="hangscope-probe", daemon=True)
        _state.thread.start()
        return path


def _secure_dir(directory: str) -> None:
    """Our own folder of mode 0700, or an error: never a folder someone else could swap."""
    try:
        os.makedirs(directory, mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise RuntimeError(f"{directory} is not a folder")
    if st.st_uid != os.getuid():
        raise RuntimeError(f"{directory} belongs to uid {st.st_uid}, not to us")
    if st.st_mode & 0o077:
        os.chmod(directory, 0o700)


def _sweep_stale(directory: str) -> None:
    """Remove sockets of our dead processes (one SIGKILLed leaves its socket behind)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        stem = name[:-5] if name.endswith(".sock") else ""
        if stem.isdigit() and int(stem) != os.getpid() and not _alive(int(stem)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _serve(sock: socket.socket, wake_fd: int) -> None:
    me = threading.get_ident()
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    poller.register(wake_fd, select.POLLIN)
    while True:
        try:
            ready = poller.poll()
        except OSError:
            return
        for fd, _ in ready:
            if fd == wake_fd:
                if _on_wake(wake_fd):
                    return
                continue
            try:
                conn, _ = sock.accept()
            except OSError:
                return  # closed by uninstall()
            try:
                _handle(conn, me)
            except Exception as exc:  # noqa: BLE001 - one bad client must not stop the probe
                _warn(f"request failed: {type(exc).__name__}: {exc}")
            finally:
                conn.close()


def _handle(conn: socket.socket, me: int) -> None:
    pid, uid, _ = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   _PEERCRED.size))
    if uid not in (os.getuid(), 0):
        _warn(f"refused a connection from uid {uid} (pid {pid})")
        return
    import json  # only when asked: the program may not use json at all

    from hangscope.probe import answer

    conn.settimeout(ANSWER_TIMEOUT_S)
    request = json.loads(wire.recv_frame(conn, wire.MAX_REQUEST,
                                         time.monotonic() + ANSWER_TIMEOUT_S))
    conn.settimeout(ANSWER_TIMEOUT_S)  # each send of the answer
    asked = request.get("want") if isinstance(request, dict) else None
    want = tuple(w for w in (asked if isinstance(asked, list) else wire.WANT_ALL)
                 if w in wire.WANT_ALL)
    header, fr = answer.build(want, me, _state.installed_wall, wire.MAX_FR)
    data = json.dumps(header, default=repr).encode()
    while len(data) > wire.MAX_HEADER and header.get("threads"):
        header["threads"] = header["threads"][: len(header["threads"]) // 2]
        header["notes"].append("thread list cut to fit the answer size limit")
        data = json.dumps(header, default=repr).encode()
    wire.send_frame(conn, data)
    wire.send_frame(conn, fr)


# ---------------------------------------------------------------------------------------------
# exit, SIGTERM, fork


def _hook_sigterm() -> None:
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm or current in (signal.SIG_IGN, None):
        return  # ignored (nothing to clean up then) or set outside Python: leave it alone
    _state.prev_term = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    if _state.wake is None or current is not signal.SIG_DFL:
        return  # a Python handler of the program's runs on the main thread anyway
    try:
        old = signal.set_wakeup_fd(_state.wake[1], warn_on_full_buffer=False)
    except (ValueError, OSError):
        return
    if old != -1:  # the program (asyncio) uses it: keep theirs
        signal.set_wakeup_fd(old)
        return
    _state.wakeup_fd_ours = True


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Main-thread SIGTERM: remove the socket unless the program's own handler takes over."""
    prev = _state.prev_term
    if callable(prev):
        prev(signum, frame)  # the program's handler; if it exits, atexit removes the socket
        return
    _at_exit()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _on_wake(wake_fd: int) -> bool:
    """Drain the wake-up pipe; True when the thread should stop. On a SIGTERM whose default
    action our handler stands in for, remove the socket and die as the default would."""
    try:
        got = os.read(wake_fd, 512)
    except BlockingIOError:
        return False
    except OSError:
        return True
    if _STOP in got:
        return True
    if (bytes([signal.SIGTERM]) in got and signal.getsignal(signal.SIGTERM) is _on_sigterm
            and _state.prev_term is signal.SIG_DFL and _state.pid == os.getpid()):
        _at_exit()
        _die_by_default_sigterm()
    return False


def _die_by_default_sigterm() -> None:
    """From a non-main thread: put SIGTERM back to its default at the C level and re-raise it,
    so that the exit status is "killed by SIGTERM", as torchrun expects."""
    import ctypes  # torch imports it anyway; only reached on SIGTERM

    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal(int(signal.SIGTERM), 0)  # SIG_DFL
    os.kill(os.getpid(), signal.SIGTERM)


def _at_exit() -> None:
    if _state.pid == os.getpid():
        _remove_socket()


def _remove_socket() -> None:
    path, sock = _state.path, _state.sock
    _state.path, _state.sock, _state.pid = None, None, None
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass
    if path is not None:
        try:
            os.unlink(path)
        except OSError:
            pass


def _restore_signals() -> None:
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, _state.prev_term
                      if _state.prev_term is not None else signal.SIG_DFL)
    if _state.wakeup_fd_ours and _state.wake is not None:
        try:
            current = signal.set_wakeup_fd(-1)
            if current != _state.wake[1]:
                signal.set_wakeup_fd(current)  # not ours any more
        except ValueError:
            return
        _state.wakeup_fd_ours = False


def _after_fork_child() -> None:
    """The child of a fork has no probe thread: drop the copied socket (never the parent's
    file), SIGTERM's stand-in handler and the wake-up pipe, which the parent still reads."""
    try:
        if _state.sock is not None:
            _state.sock.close()
        _state.sock, _state.path, _state.pid, _state.thread = None, None, None, None
        _state.lock = threading.Lock()
        _restore_signals()
        if _state.wake is not None:
            for fd in _state.wake:
                _close_fd(fd)
            _state.wake = None
    except Exception as exc:  # noqa: BLE001
        _warn(f"after fork: {type(exc).__name__}: {exc}")


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _warn(message: str) -> None:
    if _state.warnings >= MAX_WARNINGS:
        return
    _state.warnings += 1
    try:
        sys.stderr.write(f"hangscope probe (pid {os.getpid()}): {message}\n"[:500])
        sys.stderr.flush()
    except Exception:  # noqa: BLE001, S110 - stderr may be closed
        pass
