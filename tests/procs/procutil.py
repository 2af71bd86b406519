"""Start helper processes for tests and always stop them, with a ready-file handshake.

Every process starts in its own session, so killing its process group also kills whatever it
forked or spawned (multiprocessing children stay in the group). ``torchrun_job`` also kills each
rank's group, because torchrun starts every worker in a new session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent


def wait_for_files(paths: Sequence[Path], timeout: float, proc: subprocess.Popen[Any],
                   output: Path | None = None) -> None:
    """Poll until every path exists; fail early (with the output tail) if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = output.read_text(errors="replace")[-3000:] if output and output.exists() else ""
            state = f"exited rc={proc.returncode}" if proc.returncode is not None else "timed out"
            missing = [p.name for p in paths if not p.exists()]
            raise RuntimeError(f"{proc.args!r} {state} before writing {missing}\n{tail}")
        time.sleep(0.02)


def kill_groups(pids: Sequence[int], popen: subprocess.Popen[Any] | None = None) -> None:
    """SIGKILL the process group of each pid (never our own), then the pids, then reap."""
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(pid))
    groups: list[int] = []
    for pid in pids:
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group not in groups and group != os.getpgrp() and group > 1:
                groups.append(group)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=10)
    _wait_dead(procs, timeout=10)


def _wait_dead(procs: Sequence[psutil.Process], timeout: float) -> None:
    """Until each process is gone or a zombie (killed; its reaper may be slow): poll, no sleep."""
    deadline = time.monotonic() + timeout
    left = list({p.pid: p for p in procs}.values())
    while left and time.monotonic() < deadline:
        alive = []
        for proc in left:
            with contextlib.suppress(psutil.Error):
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        left = alive
        if left:
            time.sleep(0.01)
    if left:
        raise RuntimeError(f"processes {[p.pid for p in left]} survived SIGKILL")


@dataclass
class Started:
    popen: subprocess.Popen[bytes]
    ready: dict[str, Any]

    @property
    def pid(self) -> int:
        return self.popen.pid


@contextlib.contextmanager
def started(args: Sequence[str], ready: Path, *, env: Mapping[str, str] | None = None,
            clear_env: bool = False, timeout: float = 10.0, stdout: Any = subprocess.DEVNULL,
            cwd: str | Path | None = None) -> Iterator[Started]:
    """Run ``python ARGS`` in a new session until it writes ``ready`` (JSON); always stop it."""
    ready.unlink(missing_ok=True)  # a stale handshake would let us run ahead of the process
    base = {"PATH": os.environ.get("PATH", "")} if clear_env else dict(os.environ)
    base.update(env or {})
    popen = subprocess.Popen([sys.executable, *args], env=base, stdin=subprocess.DEVNULL,
                             stdout=stdout, stderr=subprocess.STDOUT if stdout is not None
                             else None, start_new_session=True, cwd=cwd)
    known = [popen.pid]
    try:
        wait_for_files([ready], timeout, popen)
        data = json.loads(ready.read_text())
        known.extend(data.get("children", []))
        yield Started(popen, data)
    finally:
        with contextlib.suppress(psutil.Error):
            known.extend(p.pid for p in psutil.Process(popen.pid).children(recursive=True))
        kill_groups(known, popen)


def family_args(ready: Path, mode: str = "none", n: int = 0) -> list[str]:
    return [str(HERE / "family.py"), str(ready), mode, str(n)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class TorchrunJob:
    popen: subprocess.Popen[bytes]
    output: Path
    log_dir: Path
    ready: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid


@contextlib.contextmanager
def torchrun_job(work: Path, *, nproc: int = 2, workers: int = 0, timeout: float = 40.0,
                 env: Mapping[str, str] | None = None) -> Iterator[TorchrunJob]:
    """A real gloo job under ``python -m torch.distributed.run`` (tests/procs/gloo_hang.py):
    rank 0 blocks in all_reduce, the others never join. Yields once every rank is ready."""
    ready_dir = work / "ready"
    ready_dir.mkdir(parents=True, exist_ok=True)
    log_dir = work / "tr-logs"
    output = work / "launcher.out"
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-addr", "127.0.0.1", "--master-port", str(port), "--log-dir", str(log_dir),
           "--redirects", "3", "--tee", "3", str(HERE / "gloo_hang.py"), str(ready_dir),
           str(workers)]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(output, "wb") as out:
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=full_env, start_new_session=True,
                                 cwd=work)
    job = TorchrunJob(popen, output, log_dir)
    known: set[int] = {popen.pid}
    try:
        files = [ready_dir / f"rank{r}" for r in range(nproc)]
        deadline = time.monotonic() + timeout
        while not all(f.exists() for f in files):
            with contextlib.suppress(psutil.Error):  # remember every descendant for teardown
                known.update(p.pid for p in psutil.Process(popen.pid).children(recursive=True))
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"torchrun job did not get ready (rc={popen.poll()})\n"
                                   + output.read_text(errors="replace")[-3000:])
            time.sleep(0.05)
        for r in range(nproc):
            job.ready[r] = json.loads((ready_dir / f"rank{r}").read_text())
            known.add(job.ready[r]["pid"])
            known.update(job.ready[r]["workers"])
        yield job
    finally:
        with contextlib.suppress(psutil.Error):
            known.update(p.pid for p in psutil.Process(popen.pid).children(recursive=True))
        kill_groups([popen.pid, *sorted(known - {popen.pid})], popen)
