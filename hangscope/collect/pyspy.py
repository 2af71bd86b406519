"""Live Python stacks with the real py-spy: one ``py-spy dump --json --pid N`` per process.

Why one process per pid: ``--json`` ignores ``--subprocesses``, and one child per pid lets a slow,
forbidden or vanished rank fail on its own while the others are still dumped. py-spy pauses the
target for the dump (~20 ms, a few hundred ms on a busy host) unless ``nonblocking``. Each dump
runs under a hard deadline: a py-spy that overruns it is killed with its process group (SIGKILL),
and after any dump that did not end cleanly the target's state is checked and, if py-spy left it
stopped, resumed with SIGCONT (:mod:`hangscope.collect.stopped`); that is the only signal we ever
send a target, and never to one that was stopped before the dump.

Failures are classified in layers, most trustworthy first: py-spy's exit status, then whether the
process still exists (psutil), then whether we may trace it at all (opening ``/proc/PID/mem``
needs the same ptrace access as py-spy: EACCES/EPERM means permission denied), and only then
py-spy's stderr text, in :func:`classify_stderr`.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

import psutil

from hangscope.collect import procstate, stopped
from hangscope.collect.permissions import explain_failure
from hangscope.cores import usable_cores
from hangscope.errors import BadInputError, CollectError, UsageError
from hangscope.model import StackSample
from hangscope.sources.pyspy import parse_pyspy_json
from hangscope.sources.pyspy_locals import sanitize_dump

DumpStatus = Literal["ok", "permission_denied", "process_gone", "timeout", "failed"]
MAX_OUTPUT = 64 << 20
SAMPLE_JITTER = 0.1  # of the interval, either way (see sample_many)
_CHILD_ENV = {"RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}


class PySpyMissing(CollectError):
    help_text = ("Install it into the same environment (`pip install py-spy`) or put the "
                 "py-spy binary on PATH.")


@dataclass(frozen=True, slots=True)
class DumpResult:
    """One attempt to dump one process. ``raw`` is py-spy's JSON exactly as printed (what the
    bundle stores); ``sample`` is set only when ``status == "ok"``."""

    pid: int
    taken_at: float
    status: DumpStatus
    detail: str = ""
    raw: bytes = b""
    sample: StackSample | None = None
    seconds: float = 0.0
    # Set when a dump that did not end cleanly left the target stopped (and we resumed it), or
    # found it stopped: one line for the evidence gaps. Also appended to ``detail``.
    target_note: str = ""
    # the target's main thread's voluntary context switches while py-spy held it: a dump
    # interrupts a thread blocked in a futex (2 switches measured here), which analysis must not
    # read as the thread waking by itself (``rank_state``)
    switches_during: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def find_pyspy() -> str:
    """The py-spy executable: PATH first, then next to ``sys.executable`` (a venv's bin/).

    A pyenv shim on PATH is a shell script that costs ~100 ms per call; when the real binary sits
    next to the interpreter we use that instead."""
    found = shutil.which("py-spy")
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "py-spy")
    beside_ok = os.path.isfile(beside) and os.access(beside, os.X_OK)
    if found and (os.sep + "shims" + os.sep) in found and beside_ok:
        return beside
    if found:
        return found
    if beside_ok:
        return beside
    raise PySpyMissing("py-spy not found on PATH or next to " + sys.executable)


def dump_once(pid: int, *, timeout: float = 5.0, native: bool = False,
              nonblocking: bool = False, pyspy: str | None = None,
              with_locals: bool = True) -> DumpResult:
    """Dump every Python thread of ``pid`` once. Never raises for a failed dump: the failure is
    the result's ``status`` and one-line ``detail``. ``pyspy`` overrides :func:`find_pyspy`.
    ``with_locals``: ``--locals``, of which only the p2p peers are kept (``sanitize_dump``: the
    rest is dropped before the raw dump is kept anywhere); never with ``nonblocking``.
    ``timeout`` is a hard deadline: py-spy's process group is SIGKILLed at it. Raises UsageError
    for ``native`` with ``nonblocking`` (py-spy refuses the pair)."""
    _check_options(native, nonblocking)
    taken_at, start = time.time(), time.monotonic()
    if not _alive(pid):
        return DumpResult(pid, taken_at, "process_gone", f"pid {pid} does not exist")
    argv = [pyspy or find_pyspy(), "dump", "--json", "--pid", str(pid)]
    argv += ["--native"] if native else []
    argv += ["--nonblocking"] if nonblocking else []
    # a non-blocking dump reads memory that changes under it: locals would add torn reads
    with_locals = with_locals and not nonblocking
    argv += ["--locals"] if with_locals else []
    state_before = stopped.proc_state(pid)
    switches_before = procstate.read_voluntary_switches(pid)
    try:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True,
                                 env={**os.environ, **_CHILD_ENV})
    except OSError as exc:
        return DumpResult(pid, taken_at, "failed", f"cannot run py-spy: {exc.strerror or exc}")
    killed = False
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed, gone = True, _kill_child(child)
        result = DumpResult(pid, taken_at, "timeout",
                            f"py-spy did not finish within {timeout:g}s (killed it)",
                            seconds=time.monotonic() - start)
        why = f"a py-spy killed at its {timeout:g}s deadline"
        return _after_unclean(result, state_before, why, child.pid, gone)
    finally:
        if not killed and child.poll() is None:  # KeyboardInterrupt...: never leave it
            if _kill_child(child):
                stopped.resume_if_left_stopped(pid, state_before, "an interrupted py-spy")
    seconds = time.monotonic() - start
    if child.returncode == 0:
        try:
            out = _without_secrets(out) if with_locals else out
            sample = parse_pyspy_json(out[:MAX_OUTPUT], pid, taken_at, None)
        except BadInputError as exc:
            return DumpResult(pid, taken_at, "failed", f"unusable py-spy output ({exc.reason})",
                              raw=out, seconds=seconds)
        switches_after = procstate.read_voluntary_switches(pid)
        during = None if switches_before is None or switches_after is None \
            else max(0, switches_after - switches_before)
        if sample is not None:
            sample = dataclasses.replace(sample, switches_during=during)
        return DumpResult(pid, taken_at, "ok", "", out, sample, seconds, switches_during=during)
    status, detail = classify_failure(pid, child.returncode, err.decode("utf-8", "replace"))
    result = DumpResult(pid, taken_at, status, detail, seconds=seconds)
    why = (f"a py-spy killed by {_signal_name(-child.returncode)}" if child.returncode < 0
           else f"a py-spy that failed (exit status {child.returncode})")
    return _after_unclean(result, state_before, why, child.pid, True)


def _without_secrets(out: bytes) -> bytes:
    """py-spy's JSON with every local but the p2p peers dropped (unparsable output is left for
    the parser to refuse; nothing of it is kept)."""
    try:
        doc = json.loads(out[:MAX_OUTPUT])
    except (ValueError, UnicodeDecodeError, RecursionError):
        return b""
    return json.dumps(sanitize_dump(doc), separators=(",", ":")).encode()


def _after_unclean(result: DumpResult, state_before: str | None, why: str, pyspy_pid: int,
                   pyspy_gone: bool) -> DumpResult:
    """The target's state checked after a dump that did not end cleanly (see ``stopped``)."""
    if pyspy_gone:
        note = stopped.resume_if_left_stopped(result.pid, state_before, why)
    else:
        note = (f"py-spy pid {pyspy_pid} survived SIGKILL (stuck in the kernel); pid "
                f"{result.pid} stays stopped until it exits")
    if not note:
        return result
    return dataclasses.replace(result, detail=f"{result.detail}; {note}", target_note=note)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _check_options(native: bool, nonblocking: bool) -> None:
    if native and nonblocking:
        raise UsageError("py-spy cannot take native stacks without pausing the process: "
                         "choose native or nonblocking, not both")


def _kill_child(child: subprocess.Popen[bytes]) -> bool:
    """SIGKILL our own py-spy child's process group (its session holds nothing else) and reap
    it. False when it is still there after 5 s (stuck in the kernel: it cannot die)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        child.kill()
    try:
        child.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        return False
    return True


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (a zombie has no Python left to dump)."""
    try:
        status: str = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return bool(psutil.pid_exists(pid))
    return bool(status != psutil.STATUS_ZOMBIE)


def trace_access_errno(pid: int) -> int:
    """0 when we may ptrace-read ``pid``, else the errno of opening ``/proc/PID/mem`` (which the
    kernel checks with PTRACE_MODE_ATTACH, as for py-spy). Reads nothing, signals nothing."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError as exc:
        return exc.errno or errno.EIO
    os.close(fd)
    return 0


def classify_failure(pid: int, returncode: int, stderr: str) -> tuple[DumpStatus, str]:
    """Why a py-spy run with a non-zero exit failed: process state and access first, text last."""
    detail = summarize_stderr(stderr) or f"py-spy exited with status {returncode}"
    if returncode < 0:
        return "failed", f"py-spy killed by signal {-returncode} ({_signal_name(-returncode)})"
    if not _alive(pid):
        return "process_gone", f"pid {pid} exited during the dump"
    access = trace_access_errno(pid)
    if access in (errno.EACCES, errno.EPERM):
        problem = explain_failure(pid, access)
        return "permission_denied", (f"not allowed to trace pid {pid} "
                                     f"({os.strerror(access)}): {problem.cause}; "
                                     f"fix: {problem.fix}")
    if access in (errno.ENOENT, errno.ESRCH):
        return "process_gone", f"pid {pid} exited during the dump"
    return classify_stderr(stderr), detail


def classify_stderr(stderr: str) -> DumpStatus:
    """Last resort: py-spy 0.4's messages (``Permission Denied: Try running again with elevated
    permissions``, ``... (os error 13)``, ``No such process (os error 3)``). Used only when the
    process exists and our own access probe did not answer, e.g. py-spy ran as another user."""
    text = stderr.lower()
    if "permission denied" in text or "os error 13)" in text or "operation not permitted" in text \
            or "os error 1)" in text:
        return "permission_denied"
    if "no such process" in text or "os error 3)" in text:
        return "process_gone"
    return "failed"


def summarize_stderr(stderr: str) -> str:
    """py-spy's error as one line: the ``Error:`` line plus its deepest cause, no backtrace."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    keep: list[str] = []
    for line in lines:
        if line.startswith(("Stack backtrace:", "stack backtrace:", "note:")):
            break
        if line.startswith("Caused by:"):
            continue
        line = re.sub(r"^\d+:\s+", "", line)
        keep.append(line.removeprefix("Error: "))
    if not keep:
        return ""
    text = keep[0] if len(keep) == 1 else f"{keep[0]} ({keep[-1]})"
    return " ".join(text.split())[:300]


def sample_many(pids: Iterable[int], *, samples: int = 3, interval: float = 1.0,
                timeout: float = 5.0, native: bool = False, nonblocking: bool = False,
                max_workers: int | None = None, pyspy: str | None = None,
                more: Callable[[dict[int, list[DumpResult]]], bool] | None = None,
                max_samples: int = 0) -> dict[int, list[DumpResult]]:
    """``samples`` rounds about ``interval`` seconds apart, then more rounds, up to
    ``max_samples``, while ``more(results so far)`` says they are worth it. Each round dumps
    every pid still worth dumping, one py-spy per usable core at a time (a dump is CPU-bound:
    more at once only time-slice, and starve the analysis that runs beside them). A pid that is
    gone or forbids tracing is not tried again; a timeout is (a process in D state may come
    back). One pid's failure never stops the others.

    Rounds are ``interval`` apart give or take ``SAMPLE_JITTER`` of it: a training loop whose step
    period divides the interval would otherwise be caught at the same point of its step every
    time, and a straggler's compute could read as waiting, or the reverse."""
    order = list(dict.fromkeys(pids))
    results: dict[int, list[DumpResult]] = {pid: [] for pid in order}
    if not order or samples < 1:
        return results
    _check_options(native, nonblocking)
    binary = pyspy or find_pyspy()
    workers = max(1, min(32, len(order), max_workers or usable_cores()))
    active = list(order)
    rng = random.Random()
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="py-spy") as pool:
        index = 0
        while index < samples or (more is not None and index < max_samples and more(results)):
            jitter = rng.uniform(-SAMPLE_JITTER, SAMPLE_JITTER) * interval if index else 0.0
            delay = start + index * interval + jitter - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            round_results = list(pool.map(
                lambda pid: _dump_guarded(pid, timeout=timeout, native=native,
                                          nonblocking=nonblocking, pyspy=binary), active))
            for result in round_results:
                results[result.pid].append(result)
            active = [r.pid for r in round_results
                      if r.status not in ("process_gone", "permission_denied")]
            if not active:
                break
            index += 1
    return results


def _dump_guarded(pid: int, **options: Any) -> DumpResult:
    """dump_once, with any unexpected error turned into this pid's failure, not everyone's."""
    try:
        return dump_once(pid, **options)
    except Exception as exc:  # noqa: BLE001 - one pid must not stop the round
        return DumpResult(pid, time.time(), "failed", f"{type(exc).__name__}: {exc}"[:300])


# The bundle record that ``sources.pyspy.load_pyspy_record`` reads back:
# {"pid": N, "taken_at": T, "worker": bool, "worker_of": rank?, "switches_during": N?,
#  "dump": [...]}


def bundle_name(result: DumpResult, index: int) -> str:
    """The file name a record gets inside ``ranks/<rank>/``."""
    return f"stacks-{result.pid}-{index}.json"


def bundle_record(result: DumpResult, worker: bool = False, rank: int | None = None) -> bytes:
    """One collected dump as a bundle file. py-spy's JSON goes in verbatim; a failed dump keeps
    its status and detail (a timeout is evidence too) with ``"dump": null``."""
    head: dict[str, Any] = {"pid": result.pid, "taken_at": result.taken_at,
                            "status": result.status, "detail": result.detail,
                            "worker": worker}
    if rank is not None:
        head["worker_of" if worker else "rank"] = rank
    if result.switches_during is not None:
        head["switches_during"] = result.switches_during
    raw = result.raw.strip() if result.status == "ok" and result.raw.strip() else b"null"
    body = json.dumps(head, sort_keys=True)[:-1].encode()
    return body + b', "dump": ' + raw + b"}\n"
