"""Analyze an ``attach`` bundle in a forked process that gets ready while the parent collects.

On a small job, importing the analysis and the report (networkx and jinja2 among them) and
compiling the report's template cost more CPU than all the py-spy dumps together, and one
Python process runs that work on one core however many threads it starts. A child forked
before collection does it on another core while the parent finds the job and drives py-spy.
Once the bundle is complete the parent sends the child its orders (bundle, output folder,
options); the child analyzes the bundle exactly as ``hangscope analyze OUT/bundle`` would,
writes verdict.json and report.html, and sends back what the command prints.

(Forking even earlier, before the CLI is imported, was measured: no faster. From the fork on,
both cores are busy, py-spy on one and the child's imports on the other.)

The fork is only a speed-up, never a second way to get an answer: it is not tried where the
process already runs threads (a forked child keeps only the calling thread, and a lock another
thread held stays locked in it forever), and when the child dies or its answer cannot be read
the parent analyzes the bundle itself.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hangscope.cores import can_fork
from hangscope.errors import HangscopeError

if TYPE_CHECKING:
    from hangscope.analysis.verdict import Verdict
    from hangscope.options import LoadOptions, OutputOptions

# Given by the caller, so that this module does not import the pipeline that uses it.
Prepare = Callable[[], None]
Analyze = Callable[[str, str, "LoadOptions", "OutputOptions"], "Answer"]


@dataclass(slots=True)
class Answer:
    """What the child found: enough for the command to print and exit, nothing to re-render."""

    verdict: Verdict
    files: list[str]
    input_problems: list[str]


class ChildError(HangscopeError):
    """A user-facing error the child raised (a corrupt bundle...), re-raised in the parent."""

    def __init__(self, message: str, exit_code: int, help_text: str) -> None:
        super().__init__(message)
        # per instance, as the child's error had them
        self.exit_code = exit_code  # type: ignore[misc]
        self.help_text = help_text  # type: ignore[misc]


class ChildCrash(RuntimeError):
    """A bug in the analysis, met in the child; its message is the child's traceback."""


Orders = tuple[str, str, "LoadOptions", "OutputOptions"]  # bundle, out, load, output
Outcome = tuple[Literal["ok"], Answer] | tuple[Literal["error"], tuple[str, int, str]] | \
    tuple[Literal["crash"], str]


class AnalyzerProcess:
    """The parent's handle on the child: ``finish`` once the bundle is complete, else ``cancel``."""

    def __init__(self, pid: int, orders_fd: int, answer_fd: int) -> None:
        self.pid = pid
        self._orders_fd: int | None = orders_fd
        self._answer_fd: int | None = answer_fd

    @classmethod
    def start(cls, prepare: Prepare, analyze: Analyze) -> AnalyzerProcess | None:
        """Fork the child, or None where forking is not safe here (see the module docstring).

        The child runs ``prepare()`` now and ``analyze(bundle, out, load, output)`` on orders."""
        if not can_fork():
            return None
        orders_read, orders_write = os.pipe()
        answer_read, answer_write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            for fd in (orders_read, orders_write, answer_read, answer_write):
                os.close(fd)
            return None
        if pid == 0:  # the child: never returns into the caller's stack
            code = 0
            try:
                os.close(orders_write)
                os.close(answer_read)
                _serve(orders_read, answer_write, prepare, analyze)
            except BaseException:  # noqa: BLE001 - the parent sees no answer and falls back
                code = 1
            finally:
                os._exit(code)
        os.close(orders_read)
        os.close(answer_write)
        return cls(pid, orders_write, answer_read)

    def finish(self, bundle_dir: str, out: str, load: LoadOptions,
               output: OutputOptions) -> Answer | None:
        """Send the child its orders now that the bundle is complete, and wait for its answer.

        Returns None when the child gave no usable answer: the caller analyzes in-process.
        Raises what the child raised for bad input (ChildError) or for a bug (ChildCrash)."""
        if self._orders_fd is None or self._answer_fd is None:
            return None
        orders: Orders = (bundle_dir, out, load, output)
        try:
            _write_all(self._orders_fd, pickle.dumps(orders, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # the child is gone already: no answer will come
            pass
        os.close(self._orders_fd)
        self._orders_fd = None
        answer_fd, self._answer_fd = self._answer_fd, None
        try:
            data = _read_all(answer_fd)
        finally:
            os.close(answer_fd)
        self._reap(kill=False)
        try:
            outcome: Outcome = pickle.loads(data)  # noqa: S301 - our own child, through our pipe
        except Exception:  # noqa: BLE001 - no answer (empty when the child died): fall back
            return None
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "error":
            message, exit_code, help_text = outcome[1]
            raise ChildError(message, exit_code, help_text)
        raise ChildCrash(outcome[1])

    def cancel(self) -> None:
        """Stop the child if it is still there. It writes nothing before its orders, so a
        failed collection (or Ctrl-C) needs no more than a SIGKILL to our own child."""
        for fd in (self._orders_fd, self._answer_fd):
            if fd is not None:
                os.close(fd)
        self._orders_fd = self._answer_fd = None
        self._reap(kill=True)

    def _reap(self, kill: bool) -> None:
        pid, self.pid = self.pid, 0
        if pid <= 0:
            return
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _serve(orders_fd: int, answer_fd: int, prepare: Prepare, analyze: Analyze) -> None:
    """The child's whole life: get ready, wait for the parent's orders, analyze, answer."""
    prepare()
    gc.freeze()  # a short life: never scan the imported modules' objects in a collection
    data = _read_all(orders_fd)
    if not data:
        return  # the parent cancelled
    bundle_dir, out, load, output = pickle.loads(data)  # noqa: S301 - from our own parent
    outcome: Outcome
    try:
        outcome = ("ok", analyze(bundle_dir, out, load, output))
    except HangscopeError as exc:
        outcome = ("error", (str(exc), int(exc.exit_code), exc.help_text))
    except Exception:  # noqa: BLE001 - a bug: the parent reports it as an internal error
        outcome = ("crash", traceback.format_exc())
    _write_all(answer_fd, pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
    os.close(answer_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["AnalyzerProcess", "Answer", "ChildCrash", "ChildError"]
