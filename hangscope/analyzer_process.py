"""Analyze an ``attach`` bundle in a forked process that gets ready while the parent collects.

On a small job, importing the analysis and the report (networkx and jinja2 among them) and
compiling the report's template cost more CPU than all the py-spy dumps together, and one
Python process runs that work on one core however many threads it starts. A child forked
before collection does it on another core while the parent finds the job and drives py-spy.
Once the bundle is complete the child analyzes it, exactly as ``hangscope analyze OUT/bundle``
would, writes verdict.json and report.html, and sends back what the command prints.

The fork is only a speed-up, never a second way to get an answer: it is not tried where the
process already runs threads (a forked child keeps only the calling thread, and a lock another
thread held stays locked in it forever), and when the child dies or its answer cannot be read
the parent analyzes the bundle itself.
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import signal
import threading
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hangscope.errors import HangscopeError
from hangscope.options import LoadOptions, OutputOptions

if TYPE_CHECKING:
    from hangscope.analysis.verdict import Verdict

log = logging.getLogger(__name__)

GO = b"go"


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


Outcome = tuple[Literal["ok"], Answer] | tuple[Literal["error"], tuple[str, int, str]] | \
    tuple[Literal["crash"], str]


class AnalyzerProcess:
    """The parent's handle on the child: ``finish`` once the bundle is complete, else ``cancel``."""

    def __init__(self, pid: int, go_fd: int, answer_fd: int) -> None:
        self.pid = pid
        self._go_fd: int | None = go_fd
        self._answer_fd: int | None = answer_fd

    @classmethod
    def start(cls, bundle_dir: str, out: str, load: LoadOptions,
              output: OutputOptions) -> AnalyzerProcess | None:
        """Fork the child, or None where forking is not safe here (see the module docstring)."""
        if not hasattr(os, "fork") or threading.active_count() > 1:
            return None
        go_read, go_write = os.pipe()
        answer_read, answer_write = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in (go_read, go_write, answer_read, answer_write):
                os.close(fd)
            log.debug("analysis stays in this process: fork failed (%s)", exc)
            return None
        if pid == 0:  # the child: never returns into the caller's stack
            code = 0
            try:
                os.close(go_write)
                os.close(answer_read)
                _serve(go_read, answer_write, bundle_dir, out, load, output)
            except BaseException:  # noqa: BLE001 - the parent sees no answer and falls back
                code = 1
            finally:
                os._exit(code)
        os.close(go_read)
        os.close(answer_write)
        return cls(pid, go_write, answer_read)

    def finish(self) -> Answer | None:
        """Tell the child the bundle is complete and wait for its answer.

        Returns None when the child gave no usable answer: the caller analyzes in-process.
        Raises what the child raised for bad input (ChildError) or for a bug (ChildCrash)."""
        if self._go_fd is None or self._answer_fd is None:
            return None
        try:
            os.write(self._go_fd, GO)
        except OSError:  # the child is gone already
            pass
        os.close(self._go_fd)
        self._go_fd = None
        answer_fd, self._answer_fd = self._answer_fd, None
        try:
            data = _read_all(answer_fd)
        finally:
            os.close(answer_fd)
        self._reap(kill=False)
        try:
            outcome: Outcome = pickle.loads(data)  # noqa: S301 - our own child, through our pipe
        except Exception as exc:  # noqa: BLE001 - no answer: fall back
            log.debug("analysis child gave no answer (%s); analyzing here", exc)
            return None
        if outcome[0] == "ok":
            return outcome[1]
        if outcome[0] == "error":
            message, exit_code, help_text = outcome[1]
            raise ChildError(message, exit_code, help_text)
        raise ChildCrash(outcome[1])

    def cancel(self) -> None:
        """Stop the child if it is still there. It has written nothing before its go, so the
        collection's failure (or Ctrl-C) needs no more than a SIGKILL to our own child."""
        self._close_fds()
        self._reap(kill=True)

    def _close_fds(self) -> None:
        for fd in (self._go_fd, self._answer_fd):
            if fd is not None:
                os.close(fd)
        self._go_fd = self._answer_fd = None

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


def _serve(go_fd: int, answer_fd: int, bundle_dir: str, out: str, load: LoadOptions,
           output: OutputOptions) -> None:
    """The child's whole life: get ready, wait for the parent's go, analyze, answer."""
    from hangscope import pipeline

    pipeline.prepare_analysis(output.write_html)
    gc.freeze()  # a short life: never scan the imported modules' objects in a collection
    if _read_all(go_fd) != GO:
        return  # the parent cancelled: its collection failed
    os.close(go_fd)
    outcome: Outcome
    try:
        summary = pipeline.analyze_bundle(bundle_dir, load, output, out).summary()
        outcome = ("ok", Answer(summary.verdict, summary.files, summary.input_problems))
    except HangscopeError as exc:
        outcome = ("error", (str(exc), int(exc.exit_code), exc.help_text))
    except Exception:  # noqa: BLE001 - a bug: the parent reports it as an internal error
        outcome = ("crash", traceback.format_exc())
    data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(data)
    while view:
        view = view[os.write(answer_fd, view):]
    os.close(answer_fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


__all__ = ["AnalyzerProcess", "Answer", "ChildCrash", "ChildError"]
