"""Cheap stack samples for ``watch``: one ``py-spy dump --json --nonblocking`` per rank, all
started at once, each under a hard deadline, and every child tracked by pid so the caller can kill
what is left at any moment (a signal, a deadline).

``--nonblocking`` reads the rank's memory without pausing it: a rank is never stopped, at the
price of a stack that may be torn when the rank runs (a torn sample only ever looks like a
change, i.e. like progress; a hung rank does not move, so its samples are whole). Only the main
thread's frames are kept: they are what a hang freezes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable

from hangscope.collect.pyspy import find_pyspy
from hangscope.errors import BadInputError
from hangscope.sources.pyspy import parse_pyspy_json

MAX_OUTPUT = 8 << 20
_CHILD_ENV = {"RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}

# The main thread's frames, innermost first: (function, file, line)
Signature = tuple[tuple[str, str, int | None], ...]


class Sampler:
    """Starts and reaps non-blocking py-spy children; ``kill_all`` leaves none behind."""

    def __init__(self, pyspy: str | None = None) -> None:
        self._pyspy = pyspy
        self.children: dict[int, subprocess.Popen[bytes]] = {}  # rank pid -> py-spy child
        self.failures: dict[int, str] = {}  # rank pid -> last failure, one line

    def sample(self, pids: Iterable[int], timeout: float) -> dict[int, Signature]:
        """One non-blocking dump of every pid, in parallel; the main thread of each that
        answered within ``timeout`` seconds. Children still running then are killed."""
        exe = self._pyspy or find_pyspy()
        self._pyspy = exe
        for pid in pids:
            argv = [exe, "dump", "--json", "--nonblocking", "--pid", str(pid)]
            try:
                self.children[pid] = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL, start_new_session=True,
                    env={**os.environ, **_CHILD_ENV})
            except OSError as exc:
                self.failures[pid] = f"cannot run py-spy: {exc.strerror or exc}"
        deadline = time.monotonic() + timeout
        got: dict[int, Signature] = {}
        try:
            for pid, child in list(self.children.items()):
                try:
                    out, _ = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.failures[pid] = f"py-spy did not answer within {timeout:g}s"
                    continue
                finally:
                    if child.poll() is not None:
                        del self.children[pid]
                signature = _main_signature(out, pid) if child.returncode == 0 else None
                if signature is None:
                    self.failures[pid] = f"py-spy exit status {child.returncode}"
                else:
                    got[pid] = signature
                    self.failures.pop(pid, None)
        finally:
            self.kill_all()
        return got

    def kill_all(self) -> None:
        """SIGKILL every py-spy child still running (each leads its own session) and reap it."""
        for pid, child in list(self.children.items()):
            if child.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.communicate(timeout=5)
            self.children.pop(pid, None)


def _main_signature(out: bytes, pid: int) -> Signature | None:
    if len(out) > MAX_OUTPUT:
        return None
    try:
        sample = parse_pyspy_json(out, pid, time.time(), None)
    except BadInputError:
        return None
    threads = [t for t in sample.threads if t.is_main] or list(sample.threads[:1])
    if not threads:
        return None
    return tuple((f.name, f.filename, f.line) for f in threads[0].frames)
